"""The cache never reports a success it did not have: full disks, read-only caches, killed builds, no temp
dir, non-UTF-8 paths. Real filesystems where a mount namespace allows (``ns_helpers``), injected errors
otherwise (both kinds always where they can run)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import fake_cann
import jit_helpers
import pytest
from jit_helpers import age_entry, alive, wait_for, wait_for_pid
from ns_helpers import LAUNCHER, run_in_mount_ns, unshare_prefix

from ascend_rmsnorm.backends import choice
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.errors import CacheWriteError
from ascend_rmsnorm.jit import admin, build, cache, locks, trust

needs_ns = pytest.mark.skipif(unshare_prefix() is None, reason="no mount namespace here (unshare -m / -rm)")


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir()) if root.exists() else []


# --------------------------------------------------------------------------------------------------- --cache-dir


def test_warm_cache_dir_that_is_a_file_says_so_without_telling_to_use_cache_dir(jit, capsys, tmp_path):
    jit.emu()
    blocker = tmp_path / "i-am-a-file"
    blocker.write_text("x")
    for target in (blocker, blocker / "below"):
        code, out = run(capsys, "warm", "--toolchain", "emu", "--cache-dir", str(target))
        assert code == 1
        assert out[0] == (
            f"failed emu dav-2201 cannot write the kernel cache {target} (--cache-dir): {blocker} is a file, "
            "not a directory; give a directory you can write (it is created if missing)"
        )
    assert jit.compiles() == 0


def test_an_unwritable_cache_from_the_variable_names_the_variable(jit, capsys, tmp_path):
    jit.emu()
    blocker = tmp_path / "f"
    blocker.write_text("x")
    jit.mp.setenv("ASCEND_RMSNORM_CACHE_DIR", str(blocker))
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and f"({cache.ENV_CACHE_DIR}): {blocker} is a file" in out[0]
    assert f"set {cache.ENV_CACHE_DIR} to a directory you can write, or pass --cache-dir" in out[0]


def test_an_unwritable_default_cache_names_neither_the_option_nor_the_variable_as_the_cause(jit, capsys, tmp_path):
    """Neither --cache-dir nor the variable given: the root is platformdirs' (``$XDG_CACHE_HOME/ascend_rmsnorm``
    here), and the advice names both ways to choose another."""
    jit.emu()
    blocker = tmp_path / "f"
    blocker.write_text("x")
    jit.mp.delenv("ASCEND_RMSNORM_CACHE_DIR")
    jit.mp.setenv("XDG_CACHE_HOME", str(blocker))
    assert cache.cache_root() == (blocker / "ascend_rmsnorm", True)
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and len(out) == 1, out
    assert out[0] == (
        f"failed emu dav-2201 cannot write the kernel cache {blocker / 'ascend_rmsnorm'} (the default cache dir): "
        f"{blocker} is a file, not a directory; pass --cache-dir DIR or set {cache.ENV_CACHE_DIR} to a directory "
        "you can write"
    )
    assert jit.compiles() == 0


def test_a_full_disk_error_without_its_free_space_is_told_the_free_space_now(tmp_path):
    """A full disk's error that did not carry the free space at the failure (``free_bytes``) is said with
    the space free now, measured at the path it names."""
    said = cache.describe_os_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x")))
    assert said.startswith(f"no space left on the device ({tmp_path / 'x'}, ") and said.endswith(" free there now)"), (
        said
    )


def test_removing_what_is_not_there_succeeds_and_under_a_file_says_the_file(tmp_path):
    from ascend_rmsnorm.jit import layout

    assert layout.remove_tree(tmp_path / "never-made") is None
    (tmp_path / "f").write_text("x")
    assert layout.remove_tree(tmp_path / "f" / "below") == f"{tmp_path / 'f'} is a file, not a directory"
    assert (tmp_path / "f").read_text() == "x"


def test_warm_with_cache_dir_fills_that_dir_even_when_another_tier_has_the_entry(jit, capsys, tmp_path):
    jit.emu()
    prebuilt = tmp_path / "pre"
    assert run(capsys, "warm", "--toolchain", "emu", "--cache-dir", str(prebuilt))[0] == 0
    jit.mp.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(prebuilt))
    assert run(capsys, "warm", "--toolchain", "emu")[1][0].startswith(f"hit emu dav-2201 {prebuilt}")
    code, out = run(capsys, "warm", "--toolchain", "emu", "--cache-dir", str(tmp_path / "fill-me"))
    assert code == 0 and out[0].startswith(f"built emu dav-2201 {tmp_path / 'fill-me'}")


# --------------------------------------------------------------------------------------------------- full disk


@needs_ns
@pytest.mark.parametrize("size", ["400k", "64k"])
def test_a_full_disk_fails_warm_and_leaves_nothing(jit, tmp_path, size):
    """The issue's measurement: a 400 KB (then 64 KB) filesystem as the cache. Before: `built <private temp
    dir>`, exit 0, a partial tmp dir left; or a raw shutil.Error list. Now: failed, exit 1, nothing left."""
    jit.emu()
    disk = tmp_path / "disk"
    disk.mkdir()
    done = run_in_mount_ns(
        f'mount -t tmpfs -o size={size} tmpfs "$D" || exit 99\n'
        '"$PY" "$CLI" warm --toolchain emu --cache-dir "$D/cache"; echo "rc=$?"\n'
        'echo "--- files"; find "$D" -type f | sort\n',
        env={"D": str(disk)},
    )
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    report, files = out.split("--- files\n")
    lines = report.splitlines()
    assert lines[-1] == "rc=1", out
    assert lines[0].startswith(f"failed emu dav-2201 building ascend-rmsnorm kernels for dav-2201 with {jit.tmp}")
    assert f"into {disk / 'cache'} failed: no space left on the device (" in lines[0]
    assert " free there when it failed)" in lines[0] and "Nothing was published and nothing partial is left" in lines[0]
    assert "private" not in out and "Traceback" not in out and "shutil.Error" not in out
    assert files.split() == []  # not a byte left on the disk but empty directories


@needs_ns
def test_a_cache_on_a_noexec_mount_is_said_so_and_its_good_entry_is_kept(jit, tmp_path):
    """A cache root on a filesystem mounted noexec (some clusters mount /tmp or scratch so): ``warm`` builds
    there but says no process can load from it, and a library call says why it cannot load the entry,
    without quarantining that good entry and compiling it again to fail the same way."""
    jit.emu()
    disk = tmp_path / "disk"
    disk.mkdir()
    load = (
        "from ascend_rmsnorm.jit import cache, toolchain\n"
        "try:\n    cache.get_library(toolchain.get_toolchain('emu'), 'dav-2201')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    done = run_in_mount_ns(
        'mount -t tmpfs -o noexec,size=64m tmpfs "$D" || exit 99\n'
        '"$PY" "$CLI" warm --toolchain emu --cache-dir "$D/cache" 2>&1; echo "rc=$?"\n'
        'ASCEND_RMSNORM_CACHE_DIR="$D/cache" "$PY" -c "$LOAD" 2>&1\n'
        'echo "--- quarantine"; find "$D" -path "*quarantine*" -type f | sort\n',
        env={"D": str(disk), "LOAD": load},
    )
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    report, quarantined = out.split("--- quarantine\n")
    assert "rc=0" in report and report.count("is on a filesystem mounted noexec") == 2, out
    assert "LibraryLoadError" in report and "The library itself is fine" in report, out
    assert quarantined.split() == [] and jit.compiles() == 1, out


@needs_ns
def test_a_prebuilt_tier_on_a_noexec_mount_is_passed_over_for_the_writable_cache(jit, tmp_path):
    """The noexec mount is the prebuilt tier's, not the writable cache's: its good entry is kept and passed
    over, and the library is built in the writable cache and loaded, as before the noexec check (which
    raised, telling to move ASCEND_RMSNORM_CACHE_DIR, which was fine)."""
    jit.emu()
    disk = tmp_path / "disk"
    disk.mkdir()
    load = (
        "from ascend_rmsnorm.jit import cache, toolchain\n"
        "try:\n    print('loaded', cache.get_library(toolchain.get_toolchain('emu'), 'dav-2201').path)\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    done = run_in_mount_ns(
        'mount -t tmpfs -o noexec,mode=755,size=64m tmpfs "$D" || exit 99\n'
        '"$PY" "$CLI" warm --toolchain emu --cache-dir "$D/pre" >/dev/null 2>&1 || exit 98\n'
        'ASCEND_RMSNORM_PREBUILT_DIR="$D/pre" ASCEND_RMSNORM_CACHE_DIR="$W" "$PY" -c "$LOAD" 2>&1\n'
        'echo "--- kept"; find "$D/pre" -name librmsnorm.so | grep -v quarantine | wc -l\n',
        env={"D": str(disk), "W": str(tmp_path / "writable"), "LOAD": load},
    )
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, out + done.stderr.decode(errors="replace")
    report, kept = out.split("--- kept\n")
    assert f"loaded {tmp_path / 'writable'}" in report, out
    assert kept.split() == ["1"] and jit.compiles() == 2, out


def _fail_copies_into(root: Path, monkeypatch, err_no: int = errno.ENOSPC) -> None:
    """Every new file the cache creates under ``root`` (sources, manifest, ...) fails with ``err_no``; the
    writability probe before a build passes, so that the failure comes while building."""
    real = trust.create_file

    def create_file(dir_fd, name, data, mode=0o644, *, shown=None):
        if str(shown).startswith(str(root)) and not name.startswith(".probe-"):
            raise OSError(err_no, os.strerror(err_no), str(shown))
        return real(dir_fd, name, data, mode, shown=shown)

    monkeypatch.setattr(trust, "create_file", create_file)


def test_enospc_copying_sources_is_a_package_error_and_leaves_no_tmp_dir(jit, capsys, monkeypatch):
    jit.emu()
    _fail_copies_into(jit.cache, monkeypatch)
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and out[0].startswith("failed emu dav-2201 building")
    assert "no space left on the device" in out[0] and str(jit.cache / "v1" / "tmp") in out[0]
    assert files_under(jit.cache) == [] and jit.compiles() == 0


@pytest.mark.parametrize(
    ("err_no", "said", "advice"),
    [
        (errno.ENOSPC, "no space left on the device", "Free some space or point ASCEND_RMSNORM_CACHE_DIR"),
        (errno.EDQUOT, "disk quota exceeded", "Free some space or point ASCEND_RMSNORM_CACHE_DIR"),
        (errno.EIO, "Input/output error", "Check that filesystem, or point ASCEND_RMSNORM_CACHE_DIR"),
        (errno.EROFS, "read-only file system", "Point ASCEND_RMSNORM_CACHE_DIR (warm: --cache-dir) at a directory"),
        (errno.EACCES, "permission denied", "Point ASCEND_RMSNORM_CACHE_DIR (warm: --cache-dir) at a directory"),
        (errno.ENOENT, "No such file or directory", "was removed while this build ran"),
    ],
)
def test_a_write_that_fails_mid_build_gets_advice_that_fits_its_error(jit, capsys, monkeypatch, err_no, said, advice):
    """Before: every error writing a build ("Input/output error", a cache remounted read-only or removed while
    the build ran) ended in "Free some space or point ... at another filesystem"; only a full disk or quota
    is helped by free space."""
    jit.emu()
    _fail_copies_into(jit.cache, monkeypatch, err_no)
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and len(out) == 1 and out[0].startswith("failed emu dav-2201 building"), out
    assert f"failed: {said} (" in out[0] and advice in out[0], out
    assert ("Free some space" in out[0]) == (err_no in (errno.ENOSPC, errno.EDQUOT)), out
    assert files_under(jit.cache) == [] and jit.compiles() == 0


def test_a_compiler_that_runs_out_of_disk_is_reported_as_a_full_disk_not_a_compile_error(jit, capsys, tmp_path):
    full = tmp_path / "full-disk-c++"
    full.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo fullcc 1.0; exit 0; fi\n'
        + fake_cann.SH_NO_SEARCH_DIRS
        + 'head -c 1000 /dev/zero > librmsnorm.so\necho "ld: final link failed: No space left on device" >&2\nexit 1\n'
    )
    full.chmod(0o755)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(full))
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and "no space left on the device" in out[0]
    assert "ld: final link failed: No space left on device" in out[0]
    assert files_under(jit.cache) == []  # neither tmp/ nor failed/<key> keeps the partial output


def test_the_library_path_falls_back_to_a_private_dir_then_reports_a_full_disk(jit, monkeypatch, caplog):
    tc = jit.emu()
    _fail_copies_into(jit.cache, monkeypatch)
    lib = cache.get_library(tc, "dav-2201")  # L4: the cache is full, this process builds privately
    assert lib.path.is_relative_to(cache.private_root().resolve())
    cache.reset()
    _fail_copies_into(Path(tempfile.gettempdir()), monkeypatch)  # and now the private dir is full too
    with pytest.raises(CacheWriteError, match="no space left on the device"):
        cache.get_library(tc, "dav-2201")
    # the cache is now known full: the next build goes to the private dir at once, and tries it once
    from ascend_rmsnorm.jit import publish

    tried, real = [], publish.publish_build
    monkeypatch.setattr(publish, "publish_build", lambda spec, root: tried.append(root) or real(spec, root))
    with pytest.raises(CacheWriteError, match="no space left on the device"):
        cache.get_library(tc, "dav-2201")
    assert tried == [cache.private_root()]


def test_auto_on_an_npu_tensor_falls_back_with_one_warning_when_the_disk_is_full(jit, monkeypatch):
    jit.use(jit.cann("8.5.0"))
    jit.mp.setenv("ASCEND_RMSNORM_ARCH", "dav-2201")
    _fail_copies_into(Path("/"), monkeypatch)  # every filesystem is full
    npu_tensor = SimpleNamespace(device=SimpleNamespace(type="npu", index=0), get_device=lambda: 0)
    with pytest.warns(RuntimeWarning, match="torch path.*no space left on the device") as record:
        assert choice.resolve(None, npu_tensor) is torch_backend
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choice.resolve(None, npu_tensor) is torch_backend


# --------------------------------------------------------------------------------------------------- read-only


@needs_ns
def test_clean_on_a_read_only_cache_says_what_it_could_not_remove(jit, tmp_path):
    """Before: `removed ... 1 removed`, exit 0, nothing removed. Now: NOT removed, exit 1, all still there."""
    jit.emu()
    src = tmp_path / "filled"
    assert cli.main(["warm", "--toolchain", "emu", "--cache-dir", str(src)]) == 0
    (entry,) = list((src / "v1" / "emu" / "dav-2201").iterdir())
    age_entry(entry, 0)  # ancient: --older-than 0 wants it gone
    ro = tmp_path / "ro"
    ro.mkdir()
    done = run_in_mount_ns(
        'mount -t tmpfs tmpfs "$R" && cp -a "$S/." "$R/" && mount -o remount,bind,ro "$R" || exit 99\n'
        'for how in --all "--older-than 0"; do "$PY" "$CLI" cache clean $how --cache-dir "$R"; echo "rc=$?"; done\n'
        'echo "--- files"; find "$R" -type f | sort\n',
        env={"R": str(ro), "S": str(src)},
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    report, files = out.split("--- files\n")
    runs = report.split("rc=")
    assert runs[1].startswith("1\n") and runs[2].startswith("1\n"), out
    assert f"NOT removed {ro / 'v1'}: read-only file system" in runs[0]
    assert f"NOT removed {ro / entry.relative_to(src)}: read-only file system" in runs[1]
    assert "0 removed, 1 could not be removed" in out
    assert len(files.split()) == 3  # manifest, library, log: all still there


def test_a_name_made_again_as_it_is_removed_is_reported_still_there(tmp_path, monkeypatch):
    """A peer that makes the name again right after its removal (a racing build dir, say): remove_tree
    looks once more and says so, never that it is gone."""
    from ascend_rmsnorm.jit import layout

    target = tmp_path / "x"
    target.mkdir()
    real = layout.remove_tree_at

    def removed_then_made_again(dir_fd, name):
        real(dir_fd, name)
        os.mkdir(name, dir_fd=dir_fd)

    monkeypatch.setattr(layout, "remove_tree_at", removed_then_made_again)
    assert layout.remove_tree(target, via_trash=False) == "still there after removing it"
    assert target.is_dir()


def test_clean_reports_failures_to_remove_with_injected_errors(jit, capsys, monkeypatch):
    tc = jit.emu()
    _, entry = cache.ensure_built(tc, "dav-2201")

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(args[0]))

    for name in ("rename", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, refuse)
    code, out = run(capsys, "cache", "clean", "--all")
    assert code == 1 and out[0].startswith(f"NOT removed {jit.cache / 'v1'}: read-only file system")
    monkeypatch.undo()
    assert entry.is_dir() and cache.entry_problem(entry) is None


# --------------------------------------------------------------------------------------------------- killed builds


@pytest.mark.parametrize(
    "how", ["kill -9 of the builder", "kill -9 of its process group", "Ctrl-C to its process group"]
)
def test_a_killed_builder_takes_its_compiler_and_the_compilers_children_along(jit, tmp_path, how):
    """Before: SIGKILL of the builder left bisheng running as an orphan. Now the compiler and everything it
    started die with the builder (killed, or interrupted as Ctrl-C does); the leftover tmp dir is swept.

    Before too: SIGKILL of the builder's whole process group, which is how Jupyter restarts or shuts down
    a busy kernel (``jupyter_client``'s ``LocalProvisioner.kill``: ``killpg(SIGKILL)``), killed the
    supervisor along with the builder, and the compiler, in a session of its own, ran on as an orphan.
    Now the supervisor runs in a session of its own as well and outlives its builder long enough to
    take the compiler along."""
    pids = tmp_path / "pids"
    pids.mkdir()
    slow = tmp_path / "slow-c++"
    slow.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo slowcc 1.0; exit 0; fi\n'
        + fake_cann.SH_NO_SEARCH_DIRS
        + f"sleep 300 & echo $! > {pids}/grandchild\necho $$ > {pids}/compiler\nwait\n"
    )
    slow.chmod(0o755)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(slow))
    victim = jit.spawn("ensure_built", "emu", "dav-2201", str(tmp_path / "victim.json"), start_new_session=True)
    try:
        compiler = wait_for_pid(pids / "compiler")  # a complete line and a live process, not just the file
        grandchild = wait_for_pid(pids / "grandchild")
        if how == "kill -9 of the builder":
            os.kill(victim.pid, signal.SIGKILL)  # the builder only, as the OOM killer or a cancelled job would
        elif how.startswith("kill"):
            os.killpg(victim.pid, signal.SIGKILL)  # a Jupyter kernel restart: the kernel's group, all at once
        else:
            os.killpg(victim.pid, signal.SIGINT)  # the terminal's foreground group: the builder
        victim.wait(60)
        wait_for(lambda: not alive(compiler) and not alive(grandchild), 60, "the compiler to die with its builder")
    finally:
        for name in ("compiler", "grandchild"):
            try:
                os.kill(int((pids / name).read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
    leftovers = list((jit.cache / "v1" / "tmp").iterdir())
    if how.startswith("kill"):
        assert admin.stale_temp_dirs(jit.cache) == leftovers and len(leftovers) == 1  # `cache clean` removes it
    else:
        assert leftovers == []  # an interrupted build cleans up after itself


#: Put in front of the supervisor's code: its compiler has just started when Ctrl-C reaches the terminal's
#: foreground process group (the builder's) and the supervisor (a session of its own: sent by hand, as
#: `pkill -INT` would), before the supervisor's next line runs.
_CTRL_C_AS_THE_COMPILER_STARTS = r"""
import os, signal, subprocess
class _CtrlCAtStart(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["COMPILER_PID"], "w") as f:
            f.write(f"{self.pid}\n")
        os.killpg(os.getpgid(os.getppid()), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
subprocess.Popen = _CtrlCAtStart
"""

_INTERRUPTED_BUILDER = """
import sys
import _ascend_rmsnorm_cli
_ascend_rmsnorm_cli.defer_package_init()
from ascend_rmsnorm.jit import build
build._SUPERVISOR = sys.argv[1] + build._SUPERVISOR
try:
    build.run_command(["sleep", "300"], "/")
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_just_as_the_supervisor_starts_the_compiler_still_takes_the_compiler_along(tmp_path):
    """Before: a Ctrl-C that reached the supervisor between its start of the compiler and the line that
    ignores SIGINT ended it with a KeyboardInterrupt, and the compiler (a session of its own) ran on as an
    orphan: about 1 in 20 Ctrl-Cs sent the moment the compiler appeared did that. Now SIGINT is ignored
    before the compiler starts, so the builder's interrupt takes the compiler along as it does later on."""
    pid_file = tmp_path / "compiler"
    builder = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_BUILDER, _CTRL_C_AS_THE_COMPILER_STARTS],
        env={**os.environ, "COMPILER_PID": str(pid_file)},
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    compiler = None
    try:
        compiler = wait_for_pid(pid_file, live=False)  # it may be gone already: its end is what is checked
        _, err = builder.communicate(timeout=60)
        assert builder.returncode == 130, err.decode(errors="replace")  # the builder was interrupted
        wait_for(lambda: not alive(compiler), 60, "the compiler to die with its interrupted builder")
    finally:
        for pid in (compiler, builder.pid):
            try:
                os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
            except (OSError, TypeError):
                pass


def test_a_hangup_of_a_nohup_job_leaves_its_build_running(jit, tmp_path):
    """Before: `nohup python train.py &`, whose terminal hung up (SIGHUP to the job's process group) during
    the first-use compile, had that compile killed by the supervisor, and the call failed with "exit status
    137": the builder ignores SIGHUP, the supervisor took it for its builder's end. Now the supervisor ignores
    SIGHUP as it ignores Ctrl-C: the builder's to handle (one that dies of it closes the supervisor's stdin,
    which still takes the compiler along)."""
    blocked = BlockedCompile(jit, tmp_path)
    out = tmp_path / "nohup.json"
    argv = ["nohup", sys.executable, str(jit_helpers.WORKER), "get_library", "emu", "dav-2201", str(out)]
    builder = subprocess.Popen(argv, env=blocked.env, start_new_session=True, stderr=subprocess.PIPE)
    try:
        compiler = blocked.compiler()
        with open(f"/proc/{compiler}/stat") as f:
            supervisor = int(f.read().rsplit(")", 1)[1].split()[1])
        # ignored, so the hangup below is dropped when sent: nothing races the compile's end
        assert signal.SIGHUP in _ignored(supervisor)
        os.killpg(builder.pid, signal.SIGHUP)
        blocked.finish(builder, out)
    finally:
        blocked.close(builder)


def _ignored(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (SigIgn in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        mask = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def test_a_compiler_killed_by_a_signal_is_a_compile_failure_with_its_status(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    with pytest.raises(Exception, match="exit status 137"):
        build.run_compiler(["/bin/sh", "-c", "kill -9 $$"], work, work / "build.log")


def test_leftovers_older_than_an_hour_are_swept_by_the_next_build_and_by_clean(jit, capsys):
    tc = jit.emu()
    base = jit.cache / "v1"
    old = time.time() - 2 * 3600
    made = {}
    for sub in ("tmp", "quarantine", "trash"):
        for age in ("old", "new"):
            d = base / sub / f"otherhost-1234-{age}"
            d.mkdir(parents=True)
            (d / "junk").write_bytes(b"x" * 100)
            if age == "old":
                os.utime(d, (old, old))
            made[sub, age] = d
    cache.ensure_built(tc, "dav-2201")
    assert [k for k, d in made.items() if d.exists()] == [("tmp", "new"), ("quarantine", "new"), ("trash", "new")]
    for sub in ("tmp", "quarantine"):
        os.utime(made[sub, "new"], (old, old))
    code, out = run(capsys, "cache", "clean", "--older-than", "100")
    assert code == 0
    assert not made["tmp", "new"].exists() and not made["quarantine", "new"].exists()
    assert f"removed {made['tmp', 'new']}" in out and f"removed {made['quarantine', 'new']}" in out
    assert not made["trash", "new"].exists()  # the trash is always emptied by clean


# --------------------------------------------------------------------------------------------------- forks

FORK_WORKER = Path(__file__).parents[1] / "support" / "fork_worker.py"


class BlockedCompile:
    """``_blocking_cxx`` set as this test's compiler: a build run with ``env`` (a subprocess's, with the
    process environment) stops in its compile until ``release``; ``compiler()`` waits for that compile's
    pid. ``finish(proc, out)`` releases it, waits for ``proc`` (a bound, not a wait) and returns the worker's
    JSON result, asserting that the worker loaded the kernels. Call it once the compile runs (opening the
    FIFO waits for its reader), and ``close(proc)`` in a ``finally``."""

    def __init__(self, jit, tmp_path: Path) -> None:
        inner = fake_cann.write_counting_cxx(tmp_path / "cxx")
        jit.mp.setenv("ASCEND_RMSNORM_CXX", str(_blocking_cxx(tmp_path, inner)))
        self.fifo, self.pids = tmp_path / "fifo", tmp_path / "pids"
        os.mkfifo(self.fifo)
        self.env = {**os.environ, "BLOCK_FIFO": str(self.fifo), "BLOCK_PIDS": str(self.pids)}

    def compiler(self) -> int:
        return wait_for_pid(self.pids, 600)

    def release(self) -> None:
        with open(self.fifo, "w") as f:
            f.write("go\n")

    def close(self, proc: subprocess.Popen) -> None:
        """Kill ``proc``'s group (``_kill_group``) and the blocked compiler, which runs in a session of its
        own: the supervisor (in one of its own too) should take it along when ``proc`` dies, but a test that
        failed before ``finish`` must not leave a compiler waiting on the FIFO for ever if it did not."""
        _kill_group(proc)
        lines = jit_helpers.complete_lines(self.pids) if self.pids.exists() else []
        for line in lines:
            if line.strip().isdigit():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line), signal.SIGKILL)

    def finish(self, proc: subprocess.Popen, out: Path) -> dict:
        self.release()
        _, err = proc.communicate(timeout=600)
        result = json.loads(out.read_text())
        assert result.get("error") is None and result["status"] == "loaded", (result, err.decode(errors="replace"))
        return result


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to ``proc``'s process group (a worker started in a session of its own, its children, any
    compiler still there), if it is still there."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _blocking_cxx(directory: Path, inner: Path) -> Path:
    """A C++ compiler that, on a real compile (not discovery's ``--version`` or ``-x c++ -E -v``), writes its
    pid to $BLOCK_PIDS and then waits for a line on the FIFO $BLOCK_FIFO before running ``inner``: a build
    that lasts exactly as long as the test wants."""
    path = directory / "blocking-c++"
    path.write_text(
        '#!/bin/sh\nif [ "$1" != --version ] && [ "$3" != -E ] && [ -n "$BLOCK_FIFO" ]; then\n'
        '  echo $$ > "$BLOCK_PIDS"; read line < "$BLOCK_FIFO"\nfi\n'
        f'exec "{inner}" "$@"\n'
    )
    path.chmod(0o755)
    return path


def test_a_child_forked_while_another_thread_builds_gets_the_kernels(jit, tmp_path):
    """Before: a child forked while a thread was compiling inherited the emu backend's and the cache's
    locks held by a thread it does not have, and its first kernel call hung for ever. Now it gets fresh
    locks, waits for the build's flock like any other process and loads the parent's entry."""
    blocked = BlockedCompile(jit, tmp_path)
    out = tmp_path / "fork.json"
    worker = subprocess.Popen(
        [sys.executable, str(FORK_WORKER), str(out)], env=blocked.env, start_new_session=True, stderr=subprocess.PIPE
    )
    try:
        _, err = worker.communicate(timeout=600)  # a bound, not a wait: before the fix the child never returned
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child hung on a lock its parent's building thread held")
    finally:
        blocked.close(worker)
    assert worker.returncode == 0, err.decode(errors="replace")
    result = json.loads(out.read_text())
    assert result["child_status"] == 0 and result["child"] == result["parent"], result
    assert Path(result["parent"]).is_relative_to(jit.cache)
    assert jit.compiles() == 1  # the child found the parent's entry once the build lock was free


def test_clean_all_while_a_build_runs_keeps_that_build_and_it_publishes(jit, capsys, tmp_path):
    """Before: `cache clean --all` removed a running builder's dir with the rest, and that process's library
    call failed with "No such file or directory ... Free some space" (or, a moment later, took the cache for
    one others can write and went private). Now the build in progress is kept (and said so), everything
    else goes, and the builder publishes a valid entry."""
    tc = jit.npu("8.5.0")
    _, old = cache.ensure_built(tc, "dav-2201")
    blocked = BlockedCompile(jit, tmp_path)
    out = tmp_path / "builder.json"
    builder = jit.spawn("get_library", "emu", "dav-2201", str(out), env=blocked.env, start_new_session=True)
    try:
        blocked.compiler()  # its compiler runs: its build dir is in tmp/
        (running,) = list((jit.cache / "v1" / "tmp").iterdir())
        code, lines = run(capsys, "cache", "clean", "--all")
        result = blocked.finish(builder, out)
    finally:
        blocked.close(builder)
    assert code == 0 and f"removed {old.parent.parent}" in lines
    assert f"kept {running}: a build in progress (its builder still runs)" in lines
    entry = Path(result["entry"])
    assert entry.is_relative_to(jit.cache) and cache.entry_problem(entry) is None
    assert not old.exists() and list((jit.cache / "v1" / "tmp").iterdir()) == []


def test_a_build_whose_dir_looks_an_hour_old_is_not_swept_while_its_builder_runs(jit, capsys, tmp_path):
    """A build dir's age is its mtime against this host's clock: a cache on NFS whose server's clock is behind,
    a clock stepped forward, a compile that took long. Before: the next build's sweep (and `cache clean`)
    took such a dir from under its running builder, whose library call failed with "No such file or
    directory ... Free some space". Now a build dir whose builder still runs (this host and pid namespace)
    is kept whatever its age; a dead builder's goes as before."""
    from ascend_rmsnorm.jit import layout

    blocked = BlockedCompile(jit, tmp_path)
    out = tmp_path / "builder.json"
    builder = jit.spawn("get_library", "emu", "dav-2201", str(out), env=blocked.env, start_new_session=True)
    try:
        blocked.compiler()
        (running,) = list((jit.cache / "v1" / "tmp").iterdir())
        two_hours_ago = time.time() - 7200
        os.utime(running, (two_hours_ago, two_hours_ago))
        assert layout.sweep_leftovers(jit.cache) == [] and admin.stale_temp_dirs(jit.cache) == []
        code, lines = run(capsys, "cache", "clean", "--all")
        assert code == 0 and f"kept {running}: a build in progress (its builder still runs)" in lines, lines
        result = blocked.finish(builder, out)
    finally:
        blocked.close(builder)
    entry = Path(result["entry"])
    assert entry.is_relative_to(jit.cache) and cache.entry_problem(entry) is None


# --------------------------------------------------------------------------------------------------- no temp dir


def test_no_usable_temp_dir_but_a_writable_cache_still_builds(jit, monkeypatch, caplog, tmp_path):
    """Before: FileNotFoundError 'No usable temporary directory' from the lock code."""
    record = tmp_path / "tmpdir-seen"
    wrapper = tmp_path / "cxx-wrapper"
    counting = fake_cann.write_counting_cxx(tmp_path / "cxx")
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" != --version ] && [ "$3" != -E ]; then echo "${{TMPDIR-unset}}" > {record}; fi\n'
        f'exec {counting} "$@"\n'
    )
    wrapper.chmod(0o755)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(wrapper))
    monkeypatch.delenv("ASCEND_RMSNORM_LOCK_DIR")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "no-such-tmp")])
    real_open = locks._open_private_dir
    monkeypatch.setattr(
        locks, "_open_private_dir", lambda p, **kw: (None, "no") if "/dev/shm" in str(p) else real_open(p, **kw)
    )
    with pytest.raises(FileNotFoundError):
        tempfile.gettempdir()
    from ascend_rmsnorm.jit import toolchain

    tc = toolchain.emu_toolchain()
    status, entry = cache.ensure_built(tc, "dav-2201")
    assert status == "built" and entry.is_relative_to(jit.cache)
    seen = Path(record.read_text().strip())
    assert seen.name == ".tmp" and seen.parent.parent == jit.cache / "v1" / "tmp"  # inside the build dir
    assert not (entry / ".tmp").exists()
    assert any("building without a lock" in r.getMessage() for r in caplog.records)
    cache.reset()
    jit.mp.setenv("ASCEND_RMSNORM_CACHE_DIR", str(tmp_path / "a-file" / "x"))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CacheWriteError, match="no usable temporary directory.*set TMPDIR"):
        cache.get_library(tc, "dav-2201")  # neither the cache nor a temp dir: a clear error up front


@needs_ns
def test_a_killed_processs_private_root_is_swept_by_the_next_private_root(tmp_path, monkeypatch):
    """A process killed while building privately (its exit handler never ran) left its temp root; the
    next process that needs one removes it. A live process's root stays, and so does one not of this
    user's shape (mode 755)."""
    from ascend_rmsnorm.jit import layout, process_tag

    ns = process_tag._pid_space()
    if ns is None:
        pytest.skip("no pid namespace to tell a dead process by")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    layout.reset()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    prefix = f"ascend_rmsnorm-{os.getuid()}-{process_tag._host()}"
    gone = tmp_path / f"{prefix}-{dead}.{ns}-gone1234"
    live = tmp_path / f"{prefix}-{os.getpid()}.{ns}-live5678"
    open_one = tmp_path / f"{prefix}-{dead}.{ns}-open9012"
    theirs = tmp_path / f"{prefix}-{dead}.{ns}-them3456"  # this user's name and shape, another uid's dir
    for d, mode in ((gone, 0o700), (live, 0o700), (open_one, 0o755), (theirs, 0o700)):
        d.mkdir()
        d.chmod(mode)
        (d / "librmsnorm.so").write_bytes(b"a library")
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    try:
        made = layout.private_root()
        assert not gone.exists() and live.exists() and open_one.exists()
        assert theirs.exists() == (os.geteuid() == 0)  # as root it is made another user's: kept
        stamp = f"{os.getpid()}.{ns}.{process_tag._start_time(os.getpid())}"
        assert made.parent == tmp_path and made.name.startswith(f"{prefix}-{stamp}-")
    finally:
        layout.reset()


def test_a_private_root_swapped_for_a_link_as_it_is_made_is_refused(tmp_path, monkeypatch):
    """The private root mkdtemp made is opened by the trust walk before it is used: one swapped for a link
    into a directory anyone may write (a race in the temp dir) is refused, never built in."""
    from ascend_rmsnorm.jit import layout

    (tmp_path / "t").mkdir(mode=0o700)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    real = tempfile.mkdtemp

    def swapped(*args, **kwargs):
        made = real(*args, **kwargs)
        os.rmdir(made)
        os.symlink(open_dir, made)
        return made

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "t"))
    monkeypatch.setattr(tempfile, "mkdtemp", swapped)
    layout.reset()
    try:
        with pytest.raises(CacheWriteError, match="not safe for a private build dir"):
            layout.private_root()
    finally:
        layout.reset()


def test_no_temp_dir_anywhere_for_real(jit, tmp_path):
    """Every temp dir candidate read-only (a mount namespace), the cache writable: warm builds."""
    jit.emu()
    keep = [str(jit.cache), str(jit.tmp), os.environ["FAKE_COMPILER_MEMO"]]
    for d in keep:
        Path(d).mkdir(parents=True, exist_ok=True)
    candidates = [d for d in tempfile._candidate_tempdir_list() if os.path.isdir(d)] + ["/dev/shm"]
    script = "".join(f'mount --bind "{d}" "{d}" || exit 99\n' for d in keep)
    script += "".join(f'mount --rbind "{d}" "{d}" && mount -o remount,bind,ro "{d}" || exit 98\n' for d in candidates)
    script += 'cd /tmp && "$PY" "$CLI" warm --toolchain emu; echo "rc=$?"\n'
    env = {"TMPDIR": str(tmp_path / "nonexistent"), "XDG_RUNTIME_DIR": ""}
    env["ASCEND_RMSNORM_LOCK_DIR"] = ""
    done = run_in_mount_ns(script, env=env)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0 and out.splitlines()[-1] == "rc=0", out + err
    assert out.startswith(f"built emu dav-2201 {jit.cache}")
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------------- non-UTF-8


def test_a_non_utf8_cache_path_works_end_to_end(jit, tmp_path):
    """Before: UnicodeEncodeError after compiling. Now the build, the log, the manifest and the printed
    path all carry the path's own bytes."""
    tc = jit.emu()
    raw = os.fsencode(tmp_path) + b"/caf\xe9-cache"
    root = Path(os.fsdecode(raw))
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": os.fsdecode(raw)}
    done = subprocess.run([sys.executable, str(LAUNCHER), "warm", "--toolchain", "emu"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"built emu dav-2201 " + raw + b"/v1/emu/dav-2201/")
    jit.mp.setenv("ASCEND_RMSNORM_CACHE_DIR", os.fsdecode(raw))
    lib = cache.get_library(tc, "dav-2201")
    assert os.fsencode(lib.path).startswith(raw)
    assert (lib.path.parent / "build.log").read_bytes().startswith(b"$ cd ")
    assert cache.ensure_built(tc, "dav-2201")[0] == "hit" and root.is_dir()
    cache.reset()
    kernels_copy = tmp_path / "k"
    from jit_helpers import modified_kernels

    monkey_fail = kernels_copy  # a failed build's log and error carry the path too
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(Exception, match="fake failure number 100"):
        cache.get_library(tc, "dav-2201", kernels_dir=modified_kernels(monkey_fail))
    (failed,) = list((root / "v1" / "failed").iterdir())
    assert b"fake failure number 100" in (failed / "build.log").read_bytes()


@needs_ns
def test_cache_path_on_a_read_only_mount_says_so_before_the_root_is_made(jit, tmp_path):
    """``cache path`` looks without making the root (``writable_error(create=False)``) and must answer as
    the build's walk would: a missing root on a read-only filesystem is not writable for its own reason
    (before: 'Permission denied', from the mode bits), and neither is a root that is a link into one,
    where the walk makes the link's target, not a name beside the link (before: 'writable')."""
    jit.emu()
    base = tmp_path / "base"
    base.mkdir()
    done = run_in_mount_ns(
        'mkdir "$D/ro" && mount -t tmpfs -o ro,size=64k tmpfs "$D/ro" || exit 99\n'
        'ln -s "$D/ro/missing" "$D/link"\n'
        'for root in "$D/ro/cache" "$D/link"; do "$PY" "$CLI" cache path --cache-dir "$root"; done\n'
        '"$PY" "$CLI" warm --toolchain emu --cache-dir "$D/link"\n',
        env={"D": str(base)},
    )
    out = done.stdout.decode(errors="replace")
    assert done.returncode in (0, 1), out + done.stderr.decode(errors="replace")
    lines = [line for line in out.splitlines() if line.startswith("writable ")]
    assert len(lines) == 2, out
    for line, root in zip(lines, (base / "ro" / "cache", base / "link")):
        assert line.startswith(f"writable  {root}  (NOT writable: "), out
        assert "read-only" in line.lower(), out
    assert "failed emu dav-2201" in out and "read-only" in out.split("failed emu dav-2201")[1].lower(), out


_FORK_EXIT = """
import os, sys
import _ascend_rmsnorm_cli
_ascend_rmsnorm_cli.defer_package_init()
from ascend_rmsnorm.jit import layout
root = layout.private_root()
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # a plain fork()ed child: its own private root, and it ends normally (running atexit handlers)
    mine = layout.private_root()
    os.write(w, f"{mine != root} {layout.is_private(mine)} {layout.is_private(root)}\\n".encode())
    sys.exit(0)
os.close(w)
print("the child's own root, private to it, not its parent's:", os.read(r, 100).decode().strip(), flush=True)
os.waitpid(pid, 0)
print("after the child:", root.is_dir(), flush=True)
"""


def test_a_forked_child_ending_normally_leaves_its_parents_private_root(tmp_path):
    """Before: the private root's exit handler ran in every child forked after it was made, so a child that
    ended normally removed its parent's private root, with the libraries and any build in progress in it.
    Now only the process that made it removes it at exit, and a forked child builds in a root of its own
    (its parent's could go at the parent's exit while the child builds there)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", _FORK_EXIT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the child's own root, private to it, not its parent's: True True False",
        "after the child: True",
    ]
    assert [p.name for p in tmp_path.iterdir()] == []  # the child's exit removed its root, the parent's its own


def test_what_a_killed_clean_all_left_beside_the_cache_is_removed_by_the_next_clean(jit, capsys):
    """Before: `cache clean --all` renames <root>/v1 to <root>/.trash-<uuid> and then deletes it; killed (or
    Ctrl-C) in between, that whole old cache stayed there for ever: neither `clean` nor the sweep of every
    build looks outside v1. Now `clean` removes such a dir, and a build's sweep one older than an hour."""
    from ascend_rmsnorm.jit import layout

    left = jit.cache / f".trash-{'ab' * 16}"  # and no v1: it is what was renamed there
    (left / "emu" / "dav-2201" / ("0" * 64)).mkdir(parents=True)
    (left / "emu" / "dav-2201" / ("0" * 64) / "librmsnorm.so").write_bytes(b"an old library")
    other = jit.cache / ".trash-not-ours"  # not a name remove_tree makes: kept
    other.mkdir()
    longer = jit.cache / f".trash-{'ab' * 16}.bak"  # one that only starts like such a name: kept too
    longer.mkdir()
    code, out = run(capsys, "cache", "clean", "--older-than", "100")  # any clean: it is no entry, nor new
    assert code == 0 and f"removed {left}" in out
    assert not left.exists() and other.exists() and longer.exists()
    left.mkdir()
    assert left not in layout.sweep_leftovers(jit.cache) and left.exists()  # new: a clean --all may be at it
    old = time.time() - 2 * 3600
    os.utime(left, (old, old))
    assert left in layout.sweep_leftovers(jit.cache) and not left.exists()
