"""Containers on one node: a user namespace (a rootless container) shows every owner it does not map as the
overflow uid, and a pid namespace may see a ``/proc`` that is not its own. The cases under ``unshare`` run
for real and skip, with the reason, where this host does not allow it; those after them fake the namespace
(``_as_overflow``), so that the rule is checked where ``unshare`` is refused too (an unprivileged CI user)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest


@functools.cache
def _works(*argv: str) -> bool:
    exe = shutil.which("unshare")
    return exe is not None and subprocess.run([exe, *argv, "true"], capture_output=True).returncode == 0


#: Run first in each snippet: the package's submodules without its ``__init__`` (which imports torch).
NO_TORCH = "import _ascend_rmsnorm_cli; _ascend_rmsnorm_cli.defer_package_init()\n"


def _run(argv: list[str], code: str) -> dict:
    argv = [shutil.which("unshare"), *argv, sys.executable, "-c", NO_TORCH + code]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


AS_OVERFLOW = ["-U", "--map-user=65534", "--map-group=65534"]


@pytest.mark.skipif(not _works(*AS_OVERFLOW), reason="no user namespace here (unshare -U --map-user=65534)")
def test_running_as_nobody_in_a_user_namespace_trusts_no_file_of_an_owner_it_does_not_map():
    """Inside the namespace every owner it does not map (the host's root that made "/", any other account)
    is shown as uid 65534, which is also this process's own uid there: taking such a file for one's own
    trusted, and loaded, another account's library. It is trusted only where ASCEND_RMSNORM_TRUSTED_USERS
    names that uid (a choice to trust every owner the namespace does not map), which the refusal offers
    with what it means."""
    code = """if True:
        import json, os
        from ascend_rmsnorm import _env
        from ascend_rmsnorm.jit import _fs, trust
        st = os.stat("/")
        seen = {"uid": os.getuid(), "owner": st.st_uid, "problem": trust.unsafe_reason("/"),
                "lock": _env.private_dir_problem(st), "mine": _fs.mine(st)}
        os.environ["ASCEND_RMSNORM_TRUSTED_USERS"] = "65534"
        seen["named"] = trust.unsafe_reason("/")
        print(json.dumps(seen))
    """
    seen = _run(AS_OVERFLOW, code)
    assert seen["uid"] == seen["owner"] == 65534, seen  # looks like one's own
    problem = seen["problem"]
    assert problem is not None and "belongs to the unmapped uid 65534, not to you" in problem, seen
    assert "if you trust every owner this namespace does not map, set ASCEND_RMSNORM_TRUSTED_USERS=65534" in problem
    assert seen["lock"] is not None and not seen["mine"], seen  # never one's own private dir
    assert seen["named"] is None, seen


PID_NS = next((argv for argv in (["-p", "-f"], ["-U", "-r", "-p", "-f"]) if _works(*argv)), None)


@pytest.mark.skipif(PID_NS is None, reason="no pid namespace here (unshare -p -f)")
def test_a_build_dir_made_in_a_pid_namespace_that_sees_its_parents_proc_names_no_other_process():
    """In a pid namespace of its own that sees its parent's /proc (`unshare -p -f` without --mount-proc),
    this process is pid 1 while /proc/1 is the parent namespace's init: the build dir's name took that
    process's start time for the builder's, so the builder was later judged by another process's life (a
    dead builder's dir kept for as long as that runs, a running one's taken by `cache clean` once that
    pid is given to someone else). Where /proc cannot tell, the name holds no start time."""
    code = """if True:
        import json, os
        from ascend_rmsnorm.jit import process_tag
        with open("/proc/self/stat", "rb") as f:  # /proc/self is this process, whichever /proc it is
            own = f.read().rsplit(b")", 1)[1].split()[19].decode()
        print(json.dumps({"pid": os.getpid(), "tag": process_tag.process_tag(), "own": own}))
    """
    seen = _run(PID_NS, code)
    assert seen["pid"] == 1, seen
    pid, ns, *start = seen["tag"].rsplit("-", 1)[1].split(".")
    assert pid == "1" and ns and start in ([], [seen["own"]]), seen


NO_PROC = ["-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs none /proc && exec "$@"', "sh"]


@pytest.mark.skipif(not _works(*NO_PROC), reason="cannot hide /proc in a mount namespace here (unshare -m)")
def test_without_proc_the_kernel_library_says_so_not_that_it_is_not_cached(tmp_path):
    """A sandbox that mounts no /proc: the cache opens, checks and loads what it checked through
    /proc/self/fd, so an entry that is there looked missing (`KernelNotCachedError`: "build it once with
    warm"), and a build failed as if its directory had been removed under it."""
    code = f"""if True:
        import json, os
        os.environ.update(ASCEND_RMSNORM_JIT="off", ASCEND_RMSNORM_CACHE_DIR={str(tmp_path)!r})
        from ascend_rmsnorm.jit import cache, toolchain
        try:
            cache.get_library(toolchain.emu_toolchain(), "dav-2201")
        except Exception as err:
            print(json.dumps({{"error": type(err).__name__, "text": str(err)}}))
    """
    seen = _run(NO_PROC, code)
    assert seen["error"] == "LibraryLoadError" and "/proc is not mounted" in seen["text"], seen


def test_with_no_home_a_default_cann_root_under_home_is_not_looked_for_below_the_working_directory(
    monkeypatch, tmp_path
):
    """A container's uid with no passwd entry and no HOME: "~/Ascend/cann" stays "~/..." and was looked for
    below the working directory, where a CANN found was used: a relative CANN root, which the variables
    refuse (each rank would take the one below its own working directory)."""
    import fake_cann
    from jit_helpers import no_home

    from ascend_rmsnorm.jit import toolchain

    fake_cann.make_cann(tmp_path / "~" / "Ascend", "8.5.0")
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        monkeypatch.delenv(name, raising=False)
    no_home(monkeypatch)
    monkeypatch.chdir(tmp_path)
    toolchain.reset()
    try:
        assert toolchain.find_cann() is None
    finally:
        toolchain.reset()


def _as_overflow(monkeypatch, uid: int) -> None:
    """Run on as a process inside a user namespace that shows every owner it does not map as ``uid``."""
    from ascend_rmsnorm import _userns
    from ascend_rmsnorm.jit import trust

    monkeypatch.setattr(_userns, "_ambiguous_uid", lambda: uid)
    monkeypatch.setattr(trust, "_trusted_memo", {})


def test_running_as_the_overflow_uid_a_dead_private_root_of_that_uid_is_not_taken_for_ones_own(monkeypatch, tmp_path):
    """The sweep of dead private roots in the temp dir took a directory shown as owned by this process's uid
    for its own: running as the overflow uid, that is any owner the namespace does not map (a shared /tmp),
    whose directory it is never this process's to remove. Outside such a namespace the same dir goes."""
    from ascend_rmsnorm.jit import layout, process_tag

    ns = process_tag._pid_space()
    if ns is None:
        pytest.skip("no pid namespace here to tell a dead process by")
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    prefix = f"ascend_rmsnorm-{os.getuid()}-"
    for overflow in (False, True):  # first as the host's own uid: swept
        if overflow:
            _as_overflow(monkeypatch, os.getuid())
        root = tmp_path / f"{prefix}{process_tag._host()}-{dead}.{ns}-{overflow:d}abcdefg"
        root.mkdir(mode=0o700)
        (root / "librmsnorm.so").write_bytes(b"a library")
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            layout._sweep_dead_private_roots(fd, prefix)
        finally:
            os.close(fd)
        assert root.exists() == overflow, root


@pytest.mark.parametrize(
    "uid_map, overflowuid, ambiguous",
    [
        (b"         0          0 4294967295\n", b"65534\n", None),  # the host's: every uid mapped
        (b"0 0 1000\n1000 1000 4294966295\n", b"65534\n", None),  # every uid, in two ranges
        (b"         0       1000          1\n", b"65533\n", 65533),  # one uid (unshare -r): the kernel's overflow
        (b"0 100000 65536\n", None, 65534),  # no readable overflowuid: the default
        (None, b"65534\n", 65534),  # no readable uid_map: taken to be a namespace (fails closed)
        (b"0 0\n", b"65534\n", 65534),  # a map this cannot read: likewise
    ],
    ids=["host", "two ranges", "one uid", "no overflowuid", "no uid_map", "unreadable map"],
)
def test_the_ambiguous_uid_is_the_overflow_uid_wherever_some_uid_is_not_mapped(
    uid_map, overflowuid, ambiguous, monkeypatch
):
    """What ``_userns`` reads: the uid that stands for every unmapped owner, None where every uid is mapped."""
    import io

    from ascend_rmsnorm import _userns

    files = {"/proc/self/uid_map": uid_map, "/proc/sys/kernel/overflowuid": overflowuid}

    def fake_open(path, mode="r"):
        if files.get(path) is None:
            raise FileNotFoundError(2, "No such file or directory", path)
        return io.BytesIO(files[path])

    monkeypatch.setattr(_userns, "open", fake_open, raising=False)
    _userns._ambiguous_uid.cache_clear()
    try:
        assert _userns._ambiguous_uid() == ambiguous
        assert _userns.unmapped(ambiguous) if ambiguous else not _userns.unmapped(65534)
    finally:
        monkeypatch.undo()
        _userns._ambiguous_uid.cache_clear()


def test_the_overflow_uid_is_never_ones_own_and_trusted_only_where_named(monkeypatch, tmp_path):
    """Running as the uid the namespace shows every unmapped owner as (`unshare -U --map-user=65534`, faked
    here): a file shown as that uid's is not this process's to remove, is no private dir of its own, and
    fails the ownership test, whose fix offers ASCEND_RMSNORM_TRUSTED_USERS=<that uid> with what it means;
    named there it passes the test, and is still not this process's own."""
    from ascend_rmsnorm import _env
    from ascend_rmsnorm.jit import _fs, trust

    me = os.getuid()
    st = os.stat_result((stat.S_IFDIR | 0o700, 1, 1, 1, me, os.getgid(), 0, 0, 0, 0))
    monkeypatch.delenv("ASCEND_RMSNORM_TRUSTED_USERS", raising=False)
    assert _fs.mine(st) and _env.private_dir_problem(st) is None and trust.component_problem(tmp_path, st) is None
    _as_overflow(monkeypatch, me)
    assert not _fs.mine(st)
    assert _env.private_dir_problem(st).startswith(f"owned by uid {me}, which this user namespace shows for every")
    problem = trust.component_problem(tmp_path, st)
    assert problem.startswith(f"{tmp_path} belongs to the unmapped uid {me}, not to you")
    assert problem.endswith(
        f"if you trust every owner this namespace does not map, set ASCEND_RMSNORM_TRUSTED_USERS={me}"
    )
    monkeypatch.setenv("ASCEND_RMSNORM_TRUSTED_USERS", str(me))
    assert trust.component_problem(tmp_path, st) is None
    assert not _fs.mine(st) and _env.private_dir_problem(st) is not None


def test_without_proc_warming_says_so_before_it_builds(jit, monkeypatch):
    """``ensure_built`` (``warm``, ``warmup``) has the check ``get_library`` has (the test under ``unshare -m``
    above): with no /proc/self/fd (faked here) a build could not be opened, checked or published, and
    failed as if its directory had been removed under it; now it says /proc is missing and compiles nothing."""
    from ascend_rmsnorm.errors import CacheWriteError
    from ascend_rmsnorm.jit import cache

    tc = jit.emu()
    isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == "/proc/self/fd" else isdir(p))
    with pytest.raises(CacheWriteError, match=r"^/proc is not mounted here \(no /proc/self/fd\)"):
        cache.ensure_built(tc, "dav-2201")
    assert jit.compiles() == 0
