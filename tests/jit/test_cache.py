"""The cache: one compile then hits, what changes the key, races, kill -9, corrupt entries, read-only roots, JIT off."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fake_cann
import pytest
from jit_helpers import alive, copy_kernels, modified_kernels, no_home, read_result, release_together, wait_for

from ascend_rmsnorm import _version
from ascend_rmsnorm.errors import KernelCompileError, KernelNotCachedError, LibraryLoadError, UnsafeLibraryError
from ascend_rmsnorm.jit import admin, cache, key, layout, library, locks, publish, toolchain, verify
from ascend_rmsnorm.jit import build as build_mod


def test_one_compile_then_hits(jit):
    tc = jit.npu("8.5.0")
    status, entry = cache.ensure_built(tc, "dav-2201")
    assert status == "built" and jit.compiles() == 1
    spec = cache.build_spec(tc, "dav-2201")
    assert entry == jit.cache / "v1" / "8.5.0" / "dav-2201" / spec.key
    assert sorted(p.name for p in entry.iterdir()) == ["build.log", "librmsnorm.so", "manifest.json"]
    assert cache.ensure_built(tc, "dav-2201") == ("hit", entry)
    lib = cache.get_library(tc, "dav-2201")
    assert lib.path == (entry / "librmsnorm.so").resolve()
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert cache.get_library(tc, "dav-2201") is lib  # process memo
    cache.reset()
    assert cache.get_library(tc, "dav-2201").path == lib.path  # a new process would hit the entry
    assert jit.compiles() == 1
    assert list((jit.cache / "v1" / "tmp").iterdir()) == []  # no temp dir left behind


def test_the_process_memo_follows_the_cache_dir(jit, monkeypatch):
    """ASCEND_RMSNORM_CACHE_DIR changed in a running process (a notebook) is honoured by the next call,
    not answered from the library the old root gave."""
    tc = jit.npu("8.5.0")
    lib = cache.get_library(tc, "dav-2201")
    other = jit.tmp / "other-cache"
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(other))
    moved = cache.get_library(tc, "dav-2201")
    assert moved is not lib and moved.path.is_relative_to(other.resolve())
    assert jit.compiles() == 2
    given = jit.tmp / "given-cache"  # the argument, as the variable
    first = cache.get_library(tc, "dav-2201", cache_dir=given)
    assert first.path.is_relative_to(given.resolve())
    assert jit.compiles() == 3
    # other kernel sources, all else the same: their own library, not the memo's (loading stood in for)
    monkeypatch.setattr(cache, "_load_or_build", lambda tc, arch, cache_dir, kernels_dir: (kernels_dir,))
    for kernels in (jit.tmp / "k1", jit.tmp / "k2"):
        assert cache.get_library(tc, "dav-2201", cache_dir=given, kernels_dir=kernels) == (kernels,)


def test_manifest_holds_the_whole_key_input(jit):
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    manifest = json.loads((entry / "manifest.json").read_text())
    key_input = manifest["key_input"]
    assert manifest["key"] == entry.name == cache.build_spec(tc, "dav-2201").key
    assert key_input["cache_format"] == cache.CACHE_FORMAT
    assert key_input["package_version"] == _version.__version__
    kernels = cache.KERNELS_DIR
    shipped = {
        p.relative_to(kernels).as_posix() for p in kernels.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert {"rmsnorm.asc", "emu/kernel_operator.h"} <= set(key_input["sources"]) == shipped
    assert key_input["toolchain"]["compiler"] == str(Path(tc.compiler).resolve())
    assert "CANN 8.5.0" in key_input["toolchain"]["compiler_version"]
    assert key_input["toolchain"]["cann_version"] == "8.5.0"
    assert key_input["toolchain"]["cann_compiler_version_info"] == fake_cann._inner_version("8.5.0")
    assert key_input["arch"] == "dav-2201"
    assert "--npu-arch=dav-2201" in key_input["argv"] and "src/rmsnorm.asc" in key_input["argv"]
    assert key_input["env"] == {}
    assert key_input["host"] == key._host_abi() and key_input["host"]["machine"] == platform.machine()
    so = entry / "librmsnorm.so"
    assert manifest["library"]["size"] == so.stat().st_size
    assert manifest["library"]["sha256"] == key.sha256_file(so)
    assert manifest["built"]["host"] and manifest["built"]["seconds"] >= 0


def test_cann_version_change_gives_a_new_key_and_a_new_build(jit):
    tc85 = jit.npu("8.5.0")
    assert cache.ensure_built(tc85, "dav-2201")[0] == "built"
    toolchain.reset()
    tc90 = jit.npu("9.0.0")
    spec85, spec90 = cache.build_spec(tc85, "dav-2201"), cache.build_spec(tc90, "dav-2201")
    assert spec85.key != spec90.key
    status, entry = cache.ensure_built(tc90, "dav-2201")
    assert status == "built" and entry.parts[-3] == "9.0.0"
    assert jit.compiles() == 2


def test_compiler_version_change_alone_gives_a_new_key(jit):
    before = cache.build_spec(jit.npu("8.5.0"), "dav-2201").key
    fake_cann.make_cann(jit.usr, "8.5.0", extra_version_text=" hotfix-1")  # same path and CANN version
    toolchain.reset()
    after = cache.build_spec(toolchain.get_toolchain("npu"), "dav-2201").key
    assert before != after


def test_kernel_source_change_gives_a_new_key(jit):
    tc = jit.npu("8.5.0")
    status, first = cache.ensure_built(tc, "dav-2201", kernels_dir=copy_kernels(jit.tmp / "same"))
    assert status == "built"
    kernels = modified_kernels(jit.tmp / "changed")
    spec = cache.build_spec(tc, "dav-2201", kernels)
    assert spec.key != first.name
    assert (
        spec.key_input["sources"]["emu/kernel_operator.h"]
        != cache.source_hashes(cache.KERNELS_DIR)["emu/kernel_operator.h"]
    )
    status, second = cache.ensure_built(tc, "dav-2201", kernels_dir=kernels)
    assert status == "built" and second != first and jit.compiles() == 2


def _included_files(kernels: Path) -> set[str]:
    """The kernel's files as the compiler reads them: rmsnorm.asc and every file its quoted includes reach
    (relative to the including file; kernel_operator.h is the emulation's, beside the kernel as emu/)."""
    seen, todo = set(), [kernels / "rmsnorm.asc"]
    while todo:
        path = todo.pop().resolve()
        rel = path.relative_to(kernels.resolve()).as_posix()
        if rel in seen:
            continue
        seen.add(rel)
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M):
            found = path.parent / name
            todo.append(found if found.is_file() else kernels / "emu" / name)
    return seen


def test_every_file_the_kernel_includes_is_in_the_key(jit):
    """The kernel is split over headers (common/, fwd/, bwd/, host/): each one it includes, followed from
    rmsnorm.asc, is a key source, and changing any one of them gives another key."""
    tc = jit.npu("8.5.0")
    base = copy_kernels(jit.tmp / "base")
    key = cache.build_spec(tc, "dav-2201", base)
    included = _included_files(base)
    assert {"rmsnorm.asc", "emu/kernel_operator.h"} < included
    assert len({f.split("/")[0] for f in included if "/" in f} - {"emu"}) >= 4  # the kernel's own header folders
    assert included <= set(key.key_input["sources"])
    for rel in sorted(included):
        changed = copy_kernels(jit.tmp / "changed" / rel.replace("/", "_"))
        (changed / rel).write_text((changed / rel).read_text() + "\n// changed\n")
        assert cache.build_spec(tc, "dav-2201", changed).key != key.key, rel
    (base / "fwd" / "__pycache__").mkdir()  # bytecode is never a kernel source: not hashed, the key stays
    (base / "fwd" / "__pycache__" / "x.cpython.pyc").write_bytes(b"\0")
    assert cache.build_spec(tc, "dav-2201", base).key == key.key


def test_sources_edited_between_the_key_and_the_build_are_never_built_under_that_key(jit):
    """The key hashes the sources as they were read; the build copies them again. An edit in between (a
    checkout, an editor saving) would put other code under this key: refused before compiling, nothing
    published, no build dir left."""
    tc = jit.npu("8.5.0")
    kernels = copy_kernels(jit.tmp / "k")
    spec = cache.build_spec(tc, "dav-2201", kernels)
    main = kernels / "rmsnorm.asc"
    main.write_text(main.read_text() + "\n// edited after the key was made\n")
    assert cache.build_spec(tc, "dav-2201", kernels).key != spec.key  # the same file, edited in place
    with pytest.raises(KernelCompileError, match=f"the kernel sources in {kernels} changed during the build; retry"):
        publish.publish_build(spec, jit.cache)
    assert jit.compiles() == 0 and jit.entries() == []
    assert list((jit.cache / "v1" / "tmp").iterdir()) == []


def test_moving_the_installed_package_keeps_the_key(jit):
    """Two copies of the installed package at different paths compute the same key (in fresh processes)."""
    tc = jit.npu("8.5.0")
    here = cache.build_spec(tc, "dav-2201").key
    assert cache.build_spec(tc, "dav-2201", copy_kernels(jit.tmp / "elsewhere" / "k")).key == here
    keys = []
    for where in ("site-a", "deeper/site-b"):
        dest = jit.tmp / where / "ascend_rmsnorm"
        shutil.copytree(cache.PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
        out = jit.tmp / f"{where.replace('/', '_')}.json"
        env = {"PYTHONPATH": str(dest.parent), "ASCEND_HOME_PATH": os.environ["ASCEND_HOME_PATH"]}
        proc = jit.spawn("key", "npu", "dav-2201", str(out), env=env)
        assert proc.wait(300) == 0, proc.stderr.read()
        result = read_result(out)
        assert result["package"] == str(dest), result  # really ran from the moved copy
        keys.append(result["key"])
    assert keys == [here, here]


def test_many_processes_racing_on_a_cold_key_compile_once(jit):
    tc = jit.npu("8.5.0")
    go = jit.tmp / "go"
    outs = [jit.tmp / f"r{i}.json" for i in range(12)]
    procs = [jit.spawn("get_library", "npu", "dav-2201", str(o), str(go)) for o in outs]
    release_together(procs, [o.with_name(o.name + ".ready") for o in outs], go)
    for p in procs:
        assert p.wait(600) == 0, p.stderr.read()
    results = [read_result(o) for o in outs]
    assert [r.get("error") for r in results] == [None] * 12
    assert {r["entry"] for r in results} == {str(cache.entry_dir(jit.cache, cache.build_spec(tc, "dav-2201")))}
    assert all(r["abi"] == library.ABI_VERSION for r in results)
    assert jit.compiles() == 1
    assert len(jit.entries()) == 1
    assert list((jit.cache / "v1" / "tmp").iterdir()) == []


def test_racing_without_locks_is_still_correct(jit):
    """With flock refused (FAKE_NO_FLOCK), builds may duplicate, but all succeed and one entry is published."""
    jit.npu("8.5.0")
    go = jit.tmp / "go"
    outs = [jit.tmp / f"r{i}.json" for i in range(8)]
    procs = [jit.spawn("get_library", "npu", "dav-2201", str(o), str(go), env={"FAKE_NO_FLOCK": "1"}) for o in outs]
    release_together(procs, [o.with_name(o.name + ".ready") for o in outs], go)
    stderr = [p.communicate(timeout=600)[1].decode() for p in procs]
    results = [read_result(o) for o in outs]
    assert [r.get("error") for r in results] == [None] * 8
    assert len({r["entry"] for r in results}) == 1
    assert len(jit.entries()) == 1 and jit.compiles() >= 1
    # a worker that found the entry already published never needed a lock; the others warned once each
    warned = [s.count("building without a lock") for s in stderr]
    assert set(warned) <= {0, 1} and sum(warned) >= jit.compiles(), stderr


def test_kill_9_mid_compile_leaves_nothing_visible_and_no_stale_lock(jit, caplog):
    tc = jit.npu("8.5.0")
    final = cache.entry_dir(jit.cache, cache.build_spec(tc, "dav-2201"))
    victim = jit.spawn(
        "ensure_built",
        "npu",
        "dav-2201",
        str(jit.tmp / "victim.json"),
        env={"FAKE_COMPILER_SLEEP": "3600"},  # never done before the kill, however loaded the machine
        start_new_session=True,
    )
    try:
        wait_for(lambda: jit.compiles() == 1, 60, "the victim's compile to start")
        assert not final.exists()
        # the holder file is written (by rename) once the lock is held, before the compile starts
        assert (jit.locks / f"{final.name}.lock.holder").read_text().split()[2] == str(victim.pid)
        os.kill(victim.pid, signal.SIGKILL)  # the builder only; its bisheng dies with it (test_cache_failures)
        victim.wait(60)
        assert not final.exists() and jit.entries() == []
        with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
            status, entry = cache.ensure_built(tc, "dav-2201")
    finally:
        try:
            os.killpg(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert (status, entry) == ("built", final)
    assert jit.compiles() == 2
    assert "waiting" not in caplog.text, "the next build waited for the dead builder's lock"
    assert cache.entry_problem(entry) is None
    leftovers = list((jit.cache / "v1" / "tmp").iterdir())
    assert len(leftovers) == 1 and not (leftovers[0] / "manifest.json").exists()
    assert admin.stale_temp_dirs(jit.cache) == leftovers  # its pid is dead: `cache clean` will remove it


@pytest.mark.parametrize("step", ["after-compile", "mid-manifest", "before-rename", "after-rename"])
def test_a_builder_killed_at_each_step_of_publishing_leaves_no_entry_or_a_whole_one(jit, caplog, step):
    """SIGKILL (no handler, no cleanup) at each step from the compiler's return to the rename and after it
    (``kill_worker.py``): before the rename nothing is at the entry's path and the dead builder's dir is a
    leftover `cache clean` takes; after it the entry is whole. Either way the next build neither waits for
    the dead builder's lock nor fails, and what it hands out loads."""
    tc = jit.emu()
    final = cache.entry_dir(jit.cache, cache.build_spec(tc, "dav-2201"))
    worker = Path(__file__).parents[1] / "support" / "kill_worker.py"
    done = subprocess.run([sys.executable, str(worker), step], capture_output=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode(errors="replace")
    tmp = jit.cache / "v1" / "tmp"
    if step == "after-rename":
        assert cache.entry_problem(final) is None and list(tmp.iterdir()) == []
    else:
        assert not os.path.lexists(final) and jit.entries() == []
        (left,) = list(tmp.iterdir())
        assert admin.stale_temp_dirs(jit.cache) == [left]
    with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
        status, entry = cache.ensure_built(tc, "dav-2201")
    assert (status, entry) == ("hit" if step == "after-rename" else "built", final)
    assert "waiting" not in caplog.text
    assert cache.get_library(tc, "dav-2201").path.parent == final


def test_a_write_probe_a_killed_process_left_is_swept_once_an_hour_old(jit):
    """The write probe (``trust.probe_write``) creates a file in ``tmp/`` and unlinks it; a process killed
    in between leaves the file. Before, the sweep and ``cache clean`` took only directories from ``tmp/``,
    so such a file stayed for ever; it goes by its age as a build dir does, and a young one stays."""
    from ascend_rmsnorm.jit import layout

    tmp, quarantined = jit.cache / "v1" / "tmp", jit.cache / "v1" / "quarantine"
    for d in (tmp, quarantined):
        d.mkdir(parents=True, exist_ok=True)
    old_probe, young_probe, old_file = tmp / ".probe-0a", tmp / ".probe-0b", quarantined / "stray"
    for path in (old_probe, young_probe, old_file):
        path.write_bytes(b"probe")
    two_hours_ago = time.time() - 7200
    for path in (old_probe, old_file):
        os.utime(path, (two_hours_ago, two_hours_ago))
    assert admin.stale_temp_dirs(jit.cache) == [old_probe]  # what `cache clean` removes from tmp/
    assert sorted(layout.sweep_leftovers(jit.cache)) == sorted([old_probe, old_file])
    assert not old_probe.exists() and not old_file.exists() and young_probe.exists()


def test_a_build_dir_is_judged_by_its_pid_only_in_the_pid_namespace_that_made_it(jit):
    """Containers share host names and pid numbers: a build dir another pid namespace made (or an old name
    without one) is a leftover only by its age, never because its pid does not run here. Nor is one of the
    same namespace inode on another boot: another node with this host name (the host's own namespace is
    4026531836 on every Linux) or this one before a reboot."""
    from ascend_rmsnorm.jit import process_tag

    host, ns = process_tag._host(), process_tag._pid_space()
    if ns is None:
        pytest.skip("no /proc/self/ns/pid here: every build dir is judged by its age alone")
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has it
    tmp = jit.cache / "v1" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    inode, _, boot = ns.partition("_")
    if not boot:
        pytest.skip("no readable /proc/sys/kernel/random/boot_id here: names hold the namespace's inode alone")
    ours, other, old = f"{host}-{dead}.{ns}-aaaa", f"{host}-{dead}.{int(inode) + 1}_{boot}-bbbb", f"{host}-{dead}-cccc"
    # another host's (a node sharing the cache, this namespace's inode by chance), and a pid no kill() takes
    elsewhere, huge = f"x{host}-{dead}.{ns}-dddd", f"{host}-{2**64}.{ns}-eeee"
    # this host name and namespace inode on another boot, and in a name without the boot id (older names)
    rebooted, unbooted = f"{host}-{dead}.{inode}_{'0' * 12}-ffff", f"{host}-{dead}.{inode}-abab"
    for name in (ours, other, old, elsewhere, huge, rebooted, unbooted):
        (tmp / name).mkdir()
    assert admin.stale_temp_dirs(jit.cache) == [tmp / ours]
    assert process_tag.build_dir_name().startswith(f"{host}-{os.getpid()}.{ns}.{process_tag._start_time(os.getpid())}-")


def test_a_build_dir_whose_pid_a_later_process_was_given_is_a_dead_builders(jit):
    """A build dir's name holds its builder's pid and start time. A pid alone, once the builder died and a
    later (long-lived) process got the number, read as a running builder: its dir was never a leftover,
    by age or by `cache clean`, while that process ran. The start time tells them apart; a name from
    before start times were written goes by the pid alone, as it did."""
    from ascend_rmsnorm.jit import layout, process_tag

    host, ns, me = process_tag._host(), process_tag._pid_space(), os.getpid()
    start = process_tag._start_time(me)
    if ns is None or start is None:
        pytest.skip("no /proc here: every build dir is judged by its age alone")
    tmp = jit.cache / "v1" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    running, reused, unstamped = (
        f"{host}-{me}.{ns}.{start}-aaaa",
        f"{host}-{me}.{ns}.{int(start) + 1}-bbbb",
        f"{host}-{me}.{ns}-cccc",
    )
    for name in (running, reused, unstamped):
        (tmp / name).mkdir()
        two_hours_ago = time.time() - 7200
        os.utime(tmp / name, (two_hours_ago, two_hours_ago))
    assert [process_tag.builder_running(n) for n in (running, reused, unstamped)] == [True, False, True]
    assert admin.stale_temp_dirs(jit.cache) == [tmp / reused]
    assert layout.sweep_leftovers(jit.cache) == [tmp / reused] and not (tmp / reused).exists()


def test_a_held_lock_is_waited_for_with_the_holder_named_then_given_up(jit, caplog, monkeypatch):
    """The wait runs on a clock that moves only by the waits the lock timed out on (each a real, blocking
    try of the held flock), so what it logs and when it gives up do not depend on how busy the machine is:
    by the wall clock, a process descheduled for the whole timeout right after its first try gave up without
    one "still waiting"."""
    import types

    import filelock

    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    jit.locks.mkdir(parents=True, exist_ok=True)
    lock_path = jit.locks / f"{spec.key}.lock"
    (jit.locks / f"{spec.key}.lock.holder").write_text("node7 pid 4242 since a while\n")
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_TIMEOUT", "1.0")
    monkeypatch.setattr(locks, "LOCK_LOG_EVERY_S", 0.25)  # exact in binary: four waits make the 1 s
    now, waits = [0.0], []
    monkeypatch.setattr(locks, "time", types.SimpleNamespace(monotonic=lambda: now[0], strftime=time.strftime))
    real_make = locks._make_filelock

    class TimedLock:
        def __init__(self, path):
            self._lock = real_make(path)

        def acquire(self, timeout=None, **kwargs):
            assert now[0] < 1.5, f"still waiting after {now[0]} s of the 1 s asked for"  # fails, not 600 s
            try:
                return self._lock.acquire(timeout=timeout, **kwargs)
            except filelock.Timeout:
                if timeout is not None:  # a blocking wait that ran out: that much time has passed
                    waits.append(timeout)
                    now[0] += timeout
                raise

        def __getattr__(self, name):
            return getattr(self._lock, name)

    monkeypatch.setattr(locks, "_make_filelock", TimedLock)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
            status, _ = cache.ensure_built(tc, "dav-2201")
    finally:
        os.close(fd)
    assert status == "built"
    assert waits == [0.25] * 4  # waited the 1 s asked for (not the default 600 s), logging every 0.25 s
    said = [r.getMessage() for r in caplog.records]
    assert any("node7 pid 4242" in m and str(lock_path) in m for m in said), said
    assert sum("still waiting" in m for m in said) == 4, said
    assert any(m.startswith("gave up waiting 1 s for the build lock") for m in said), said


def test_a_lock_timeout_of_zero_gives_up_at_once_and_says_so(monkeypatch, caplog, tmp_path):
    """ASCEND_RMSNORM_LOCK_TIMEOUT=0 (valid: seconds >= 0) waits no time for a held lock, and says it gave up."""
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(lock_dir))
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_TIMEOUT", "0")
    fd = os.open(lock_dir / "k.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"), locks.build_lock("k") as held:
            assert held is False
    finally:
        os.close(fd)
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"gave up waiting 0 s for the build lock {lock_dir / 'k.lock'}") for m in said), said


@pytest.mark.parametrize("when", ["before the lock", "while waiting"])
def test_a_lock_dir_removed_or_replaced_goes_lockless_and_locks_nothing_by_its_name(
    monkeypatch, caplog, tmp_path, when
):
    """filelock 4.x opens the lock file by the name of the checked lock dir (it resolves the fd's path). A
    dir removed under a build (a logout, an epilogue clearing /dev/shm) was locked at a new "... (deleted)"
    directory it made, and one replaced under its name (anyone may make the freed name in /dev/shm) at
    the replacement, where its owner could hold the lock. Either way the build now goes lockless."""
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(lock_dir))
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_TIMEOUT", "5")
    real_open, real_holder = locks._open_lock_dir, locks.lock_holder

    def open_then_remove():
        found = real_open()
        shutil.rmtree(lock_dir)
        return found

    def replace_while_waiting(dir_fd, key):  # the waiter's first log line: the dir is swapped now
        if not (tmp_path / "old").exists():
            lock_dir.rename(tmp_path / "old")
            lock_dir.mkdir(mode=0o700)
        return real_holder(dir_fd, key)

    fd = os.open(lock_dir / "k.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held by a peer: the first try fails and the wait begins
        if when == "before the lock":
            monkeypatch.setattr(locks, "_open_lock_dir", open_then_remove)
        else:
            monkeypatch.setattr(locks, "lock_holder", replace_while_waiting)
        with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"), locks.build_lock("k") as held:
            assert held is False
    finally:
        os.close(fd)
    if when == "before the lock":
        assert list(tmp_path.iterdir()) == []  # no "locks (deleted)" made
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["locks", "old"] and list(lock_dir.iterdir()) == []
    said = [r.getMessage() for r in caplog.records]
    assert any(f"the lock directory {lock_dir} was removed or replaced" in m for m in said), said


def test_filesystem_without_locks_goes_lockless_with_one_warning(jit, caplog, monkeypatch):
    tc = jit.npu("8.5.0")

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert cache.ensure_built(tc, "dav-2201")[0] == "built"
        kernels = modified_kernels(jit.tmp / "k2")
        assert cache.ensure_built(tc, "dav-2201", kernels_dir=kernels)[0] == "built"
    warnings = [r.getMessage() for r in caplog.records if "building without a lock" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"file locks do not work in {jit.locks} (No locks available)"), warnings


def test_an_old_filelock_gets_no_4x_options_and_prints_nothing(jit, monkeypatch):
    """filelock 3.x (pyproject allows >= 3.30) lacks preserve_lock_file and fallback_to_soft. Before: the 4.x
    call failed half-way through making the lock (TypeError, then the 3.x call), and the half-made lock's
    __del__ printed an "Exception ignored ... AttributeError" traceback on every build. Now the options are
    given only where the signature has them."""
    import gc

    import filelock

    class OldFileLock:  # filelock 3.12's signature, and a __del__ that needs what __init__ sets, as 3.12's
        def __init__(self, lock_file, timeout=-1, mode=0o644, thread_local=True):
            self._context = (lock_file, thread_local)

        def __del__(self):
            assert self._context

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(filelock, "FileLock", OldFileLock)
    made = locks._make_filelock(jit.tmp / "k.lock")
    gc.collect()
    assert made._context == (str(jit.tmp / "k.lock"), False)
    assert [str(u.exc_value) for u in unraisable] == []

    class NewFileLock:  # 4.x: the lock file is kept (never unlinked) and there is no soft-lock fallback
        def __init__(
            self, lock_file, timeout=-1, *, thread_local=True, fallback_to_soft=True, preserve_lock_file=False
        ):
            self.options = (thread_local, fallback_to_soft, preserve_lock_file)

    monkeypatch.setattr(filelock, "FileLock", NewFileLock)
    assert locks._make_filelock(jit.tmp / "k.lock").options == (False, False, True)


def test_truncated_library_is_quarantined_and_rebuilt_once(jit):
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    so = entry / "librmsnorm.so"
    data = so.read_bytes()
    so.unlink()
    so.write_bytes(data[:1000])
    lib = cache.get_library(tc, "dav-2201")
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert jit.compiles() == 2
    (quarantined,) = (jit.cache / "v1" / "quarantine").iterdir()
    assert quarantined.name.startswith(entry.name)
    assert "librmsnorm.so is 1000 bytes" in (quarantined / "reason.txt").read_text()
    assert cache.entry_problem(entry) is None


def test_an_old_entry_quarantined_by_a_process_killed_before_its_reason_is_kept_an_hour(jit, monkeypatch):
    """The sweep removes quarantined entries an hour old by their mtime. Before: a process killed between
    the move and ``reason.txt`` (whose write freshens the dir) left the entry with the mtime of its build,
    days old, and the next build's sweep removed the evidence at once. The entry is freshened before the
    move, so what the move leaves is an hour's evidence whatever happens after it."""
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    two_hours_ago = time.time() - 7200
    os.utime(entry, (two_hours_ago, two_hours_ago))
    monkeypatch.setattr(verify, "_note_reason", lambda *a, **k: None)  # killed right after the move
    moved = cache.quarantine(entry, "a library that fails to load")
    assert moved is not None and not entry.exists()
    assert layout.sweep_leftovers(jit.cache) == [] and moved.is_dir()


def _replace_library(entry: Path, data: bytes) -> None:
    """Put ``data`` in as the entry's library *with* a matching manifest (as a bad publish would)."""
    so = entry / "librmsnorm.so"
    so.unlink()
    so.write_bytes(data)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["library"].update(size=len(data), sha256=key.sha256_file(so))
    (entry / "manifest.json").write_text(json.dumps(manifest))


def test_garbage_library_that_fails_to_load_is_quarantined_and_rebuilt(jit):
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    _replace_library(entry, b"\x7fELF" + b"garbage" * 100)
    assert cache.entry_problem(entry) is None  # the manifest agrees, so only loading finds out
    lib = cache.get_library(tc, "dav-2201")
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert jit.compiles() == 2
    (quarantined,) = (jit.cache / "v1" / "quarantine").iterdir()
    assert "cannot load kernel library" in (quarantined / "reason.txt").read_text()


def test_a_library_that_fails_to_load_and_then_to_rebuild_reports_both(jit):
    """The one rebuild after a failed load fails too (a compiler broken since): one LibraryLoadError that
    names the entry and its load failure, then the rebuild's error, not the rebuild's error alone."""
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    _replace_library(entry, b"\x7fELF" + b"garbage" * 100)  # passes the lookup, fails the load
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(LibraryLoadError) as info:
        cache.get_library(tc, "dav-2201")
    text = str(info.value)
    assert text.startswith("the kernel library for dav-2201 failed to load and rebuilding it failed too.\n"), text
    assert f"\nfirst ({entry}): cannot load kernel library {entry / 'librmsnorm.so'}" in text, text
    assert "\nrebuild: compiling ascend-rmsnorm kernels for dav-2201 with " in text, text
    assert "fake failure number 100" in text and isinstance(info.value.__cause__, KernelCompileError)
    assert jit.compiles() == 2


@pytest.mark.parametrize("peer", ["moved it and published its rebuild", "moved it, then published"])
def test_a_rank_that_meets_an_entry_a_peer_already_healed_loads_the_peers_build(jit, monkeypatch, peer):
    """Ranks that load the same broken entry at once each try to quarantine it. Before: a rank whose move
    came after a peer's rebuild moved that good entry away and built again; one whose move found the name
    empty took the path for a read-only tier's, passed over the peer's fresh entry there and built again
    (8 ranks: 8 compiles, one after another under the lock). Now a rank moves only the entry that failed it
    and loads the peer's build."""
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    _replace_library(entry, b"\x7fELF" + b"garbage" * 100)
    spec = cache.build_spec(tc, "dav-2201")
    done = []

    def heal_as_a_peer():  # what another rank that failed on the same entry does: move it, build, publish
        assert real_quarantine(entry, "a peer's load failure") is not None
        if peer == "moved it and published its rebuild":
            publish.publish_build(spec, jit.cache)
        done.append(True)

    real_load, real_quarantine = library.load_fd, cache.quarantine

    def load_fd(fd, path):
        try:
            return real_load(fd, path)
        except LibraryLoadError:
            if not done:
                heal_as_a_peer()  # between this rank's failed load and its own quarantine
            raise

    def quarantine(*args, **kwargs):
        moved = real_quarantine(*args, **kwargs)
        if peer == "moved it, then published" and len(done) == 1:
            publish.publish_build(spec, jit.cache)  # after this rank's move, before its lookup
            done.append(True)
        return moved

    monkeypatch.setattr(library, "load_fd", load_fd)
    monkeypatch.setattr(cache, "quarantine", quarantine)
    lib = cache.get_library(tc, "dav-2201")
    now = os.stat(entry / "librmsnorm.so")
    assert lib.identity == (now.st_dev, now.st_ino)  # the peer's build, still in place
    assert jit.compiles() == 2  # the first build and the peer's: none by this rank
    assert len(list((jit.cache / "v1" / "quarantine").iterdir())) == 1


def test_an_entry_that_failed_to_load_and_could_not_be_moved_does_not_hide_a_peers_fresh_one(jit, monkeypatch):
    """An entry that fails to load where it cannot be moved (a read-only mount) is passed over by this
    process from then on; a peer that can move it and publishes its own build at the same path makes a
    new directory there, which this process takes on its next try instead of passing it over too."""
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    garbage = b"\x7fELF" + b"garbage" * 100
    _replace_library(entry, garbage)
    spec = cache.build_spec(tc, "dav-2201")
    real_rename, read_only = os.rename, [True]

    def rename(src, dst, **kwargs):  # this process's view of the cache is read-only
        if read_only[0]:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), src)
        return real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setenv("ASCEND_RMSNORM_JIT", "off")
    with pytest.raises(KernelNotCachedError, match="failed to load"):
        cache.get_library(tc, "dav-2201")
    assert entry in cache._bad_entries and (entry / "librmsnorm.so").read_bytes() == garbage  # kept
    read_only[0] = False  # a peer that can write the cache moves it and publishes its build there
    assert verify.quarantine(entry, "a peer's load failure") is not None
    assert publish.publish_build(spec, jit.cache) == entry
    lib = cache.get_library(tc, "dav-2201")
    now = os.stat(entry / "librmsnorm.so")
    assert lib.identity == (now.st_dev, now.st_ino)  # the peer's build, not passed over
    assert jit.compiles() == 2  # the first build and the peer's


def test_a_build_dir_swapped_during_its_rename_is_undone_into_quarantine_not_published(jit, monkeypatch):
    """Whoever can write tmp/ could put another directory under the build dir's name between the last
    check of that name and the rename: what lands at the key's path is checked to be the directory this
    process built in, and anything else is moved to quarantine and reported, never left as the entry."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    real = os.rename
    swapped = []

    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if dst == spec.key and src != spec.key and not swapped:  # the publishing rename, this once
            real(src, src + ".stolen", src_dir_fd=src_dir_fd, dst_dir_fd=src_dir_fd)
            os.mkdir(src, 0o700, dir_fd=src_dir_fd)  # someone else's directory, by the same name
            swapped.append(src)
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="was replaced while this process was building in it"):
        publish.publish_build(spec, jit.cache)
    assert swapped and not cache.entry_dir(jit.cache, spec).exists()
    (moved,) = (jit.cache / "v1" / "quarantine").iterdir()
    assert moved.name.startswith(spec.key) and not (moved / "librmsnorm.so").exists()


def test_a_stale_entry_a_peer_replaces_while_it_is_judged_is_not_moved(jit, monkeypatch):
    """Publishing over a stale, invalid entry quarantines that very directory only: when a peer's fresh
    build takes the key's name after this process found the old one bad and before it moves it, the
    peer's entry stays and is used, and this process's own build is dropped."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    _, peers = cache.ensure_built(tc, "dav-2201", cache_dir=jit.tmp / "peer-cache")
    final = cache.entry_dir(jit.cache, spec)
    final.mkdir(parents=True)
    (final / "junk").write_text("a stale, broken entry\n")
    real = publish.entry_problem
    judged = []

    def entry_problem(entry, key=None, **kwargs):
        problem = real(entry, key, **kwargs)
        if not judged:  # right after the stale entry was judged: another rank moves it aside (its inode
            judged.append(problem)  # lives on there) and the peer's build lands at the name
            final.rename(jit.tmp / "moved-aside")
            shutil.copytree(peers, final)
        return problem

    monkeypatch.setattr(publish, "entry_problem", entry_problem)
    assert publish.publish_build(spec, jit.cache) == final
    assert judged[0] is not None and verify.entry_problem(final, spec.key) is None
    assert not (jit.cache / "v1" / "quarantine").exists()  # the peer's entry was not moved
    assert (final / "librmsnorm.so").read_bytes() == (peers / "librmsnorm.so").read_bytes()
    assert list((jit.cache / "v1" / "tmp").iterdir()) == []  # this process's build is gone, not left to the sweep


@pytest.mark.parametrize("swap", ["a directory", "a link to the build dir"])
def test_a_build_dir_swapped_before_its_rename_is_neither_renamed_nor_removed(jit, monkeypatch, swap):
    """A swap of the build dir after the build, before the publishing rename, is seen by the name check
    before it (a link to the build dir is not the build dir): nothing is renamed (what is there now is not
    moved into place, nor into quarantine) and nothing is deleted by that name, which is someone else's."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    tmp = jit.cache / "v1" / "tmp"
    real = publish.entry_dir

    def entry_dir(root, spec):  # called once the build is complete, just before the rename
        (name,) = os.listdir(tmp)
        os.rename(tmp / name, tmp.parent / "stolen")
        if swap == "a directory":
            (tmp / name).mkdir(0o700)
            (tmp / name / "theirs").write_text("")
        else:
            (tmp / name).symlink_to(tmp.parent / "stolen")
        return real(root, spec)

    monkeypatch.setattr(publish, "entry_dir", entry_dir)
    with pytest.raises(OSError, match="was replaced while this process was building in it"):
        publish.publish_build(spec, jit.cache)
    (name,) = os.listdir(tmp)
    assert (tmp / name).is_symlink() if swap != "a directory" else os.listdir(tmp / name) == ["theirs"]
    assert not (jit.cache / "v1" / "quarantine").exists() and (tmp.parent / "stolen" / "librmsnorm.so").exists()


@pytest.mark.parametrize("swap", ["a loose directory", "a link to a private one"])
def test_a_build_dir_swapped_as_it_is_made_is_refused_before_anything_is_built_in_it(jit, monkeypatch, swap):
    """The build dir is made 0700 in tmp/ and then opened by name: whoever can write tmp/ (with the opt-out
    set) could put a directory others may write, or a link, under that name in between. What was opened is
    checked to be this user's and private, and is never a link followed, before anything is built in it."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    real = os.mkdir
    swapped = []

    def mkdir(path, mode=0o777, *, dir_fd=None):
        real(path, mode, dir_fd=dir_fd)
        if mode == 0o700 and dir_fd is not None and not swapped:  # the build dir, this once
            os.rmdir(path, dir_fd=dir_fd)
            if swap == "a loose directory":
                real(path, 0o700, dir_fd=dir_fd)
                os.chmod(path, 0o777, dir_fd=dir_fd)  # anyone's to write
            else:
                real(jit.tmp / "elsewhere", 0o700)
                os.symlink(jit.tmp / "elsewhere", path, dir_fd=dir_fd)
            swapped.append(path)

    monkeypatch.setattr(os, "mkdir", mkdir)
    why = "was replaced while this process was building in it" if swap == "a loose directory" else "Not a directory"
    with pytest.raises(OSError, match=why):
        publish.publish_build(spec, jit.cache)
    assert swapped and not cache.entry_dir(jit.cache, spec).exists() and jit.compiles() == 0


def test_library_without_the_abi_symbol_is_rebuilt_and_loaded_under_a_fresh_name(jit, tmp_path):
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    other = tmp_path / "other.so"
    src = tmp_path / "other.c"
    src.write_text("int something_else(void) { return 3; }\n")
    import subprocess

    subprocess.run([fake_cann.REAL_CXX, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(other)], check=True)
    _replace_library(entry, other.read_bytes())
    lib = cache.get_library(tc, "dav-2201")  # the bad one stays mapped: the rebuilt inode must be what runs
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    now = os.stat(entry / "librmsnorm.so")
    assert lib.path == entry / "librmsnorm.so" and lib.identity == (now.st_dev, now.st_ino)
    assert jit.compiles() == 2
    (quarantined,) = (jit.cache / "v1" / "quarantine").iterdir()
    assert "lacks the symbol" in (quarantined / "reason.txt").read_text()


@pytest.mark.parametrize("delta", [1, -1])
def test_a_library_of_another_abi_version_is_refused_before_any_launcher_is_declared(tmp_path, delta):
    """A library built for another ABI (an older or a newer package's) has launchers of other signatures:
    calling one would pass the wrong arguments. It is refused by its number, newer as older."""
    version = library.ABI_VERSION + delta
    src = tmp_path / "other_abi.c"
    src.write_text("".join(f"long {name}(void) {{ return 0; }}\n" for name in library._PROTOTYPES if "abi" not in name)
                   + f"int ascend_rmsnorm_abi_version(void) {{ return {version}; }}\n")  # fmt: skip
    so = tmp_path / "other_abi.so"
    subprocess.run([fake_cann.REAL_CXX, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(so)], check=True)
    with pytest.raises(LibraryLoadError, match=f"has ABI version {version}, this package needs {library.ABI_VERSION}"):
        library.load(so)


def test_a_file_dlopen_refuses_costs_no_fd(tmp_path):
    """The loader keeps a duplicate fd while a library is loaded; one dlopen refused is closed again (a
    process retrying a broken entry would otherwise run out of fds)."""
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF not really")
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(LibraryLoadError, match="cannot load kernel library"):
        library.load(junk)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_second_load_failure_raises_with_both_errors(jit, monkeypatch):
    tc = jit.npu("8.5.0")
    calls = []

    def broken_load(fd, path):
        calls.append(path)
        raise LibraryLoadError(f"failure number {len(calls)} at {path}")

    monkeypatch.setattr(library, "load_fd", broken_load)
    with pytest.raises(LibraryLoadError) as info:
        cache.get_library(tc, "dav-2201")
    text = str(info.value)
    assert "failure number 1" in text and "failure number 2" in text
    assert len(calls) == 2 and jit.compiles() == 2  # rebuilt exactly once, never a loop


def test_read_only_cache_root_falls_back_to_a_private_dir_with_one_warning(jit, caplog, monkeypatch):
    tc = jit.npu("8.5.0")
    blocker = jit.tmp / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(blocker / "cache"))  # nobody, not even root, can create it
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
        kernels = modified_kernels(jit.tmp / "k2")
        cache.get_library(tc, "dav-2201", kernels_dir=kernels)
    private = cache.private_root()
    assert lib.path.is_relative_to(Path(private).resolve())
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    warnings = [r for r in caplog.records if "is not writable" in r.getMessage()]
    assert len(warnings) == 1 and str(private) in warnings[0].getMessage()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions; the ENOTDIR test covers root")
def test_permission_denied_cache_root_falls_back(jit, monkeypatch):
    tc = jit.npu("8.5.0")
    ro = jit.tmp / "ro"
    ro.mkdir(mode=0o555)
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(ro))
    assert cache.get_library(tc, "dav-2201").path.is_relative_to(cache.private_root().resolve())


def test_prebuilt_tier_is_searched_first_and_never_written(jit, monkeypatch):
    tc = jit.npu("8.5.0")
    prebuilt = jit.tmp / "image-layer"
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(prebuilt))
    _, made = cache.ensure_built(tc, "dav-2201")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(jit.cache))
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", f"{jit.tmp / 'missing'}{os.pathsep}{prebuilt}")
    cache.reset()
    assert cache.ensure_built(tc, "dav-2201") == ("hit", made)
    assert cache.get_library(tc, "dav-2201").path == (made / "librmsnorm.so").resolve()
    assert jit.compiles() == 1 and not (jit.cache / "v1" / "8.5.0").exists()


def test_the_process_memo_follows_the_prebuilt_dir(jit, monkeypatch):
    """A prebuilt tier named after the first call is searched by the next one, not hidden by the memo."""
    tc = jit.npu("8.5.0")
    own = cache.get_library(tc, "dav-2201")
    prebuilt = jit.tmp / "image-layer"
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(prebuilt))
    _, made = cache.ensure_built(tc, "dav-2201")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(jit.cache))
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(prebuilt))
    assert cache.get_library(tc, "dav-2201").path == (made / "librmsnorm.so").resolve() != own.path
    assert jit.compiles() == 2


def test_jit_off_with_nothing_cached_names_the_exact_warm_command(jit, monkeypatch):
    tc = jit.npu("8.5.0")
    monkeypatch.setenv("ASCEND_RMSNORM_JIT", "off")
    assert cache.jit_mode() == "off"
    with pytest.raises(KernelNotCachedError) as info:
        cache.get_library(tc, "dav-2201")
    text = str(info.value)
    command = f"ascend-rmsnorm warm --arch dav-2201 --toolchain npu --cache-dir {shlex.quote(str(jit.cache))}"
    assert command in text and jit.compiles() == 0
    from ascend_rmsnorm.cli import main as cli

    assert cli.main(shlex.split(command)[1:]) == 0  # the command it names works (even with JIT off)
    cache.reset()
    assert cache.get_library(tc, "dav-2201")._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert jit.compiles() == 1


def test_jit_mode_values(monkeypatch):
    assert cache.jit_mode() == "import"
    for raw, mode in (("lazy", "lazy"), ("OFF", "off"), ("0", "off"), ("import", "import"), ("bogus", "import")):
        monkeypatch.setenv("ASCEND_RMSNORM_JIT", raw)
        assert cache.jit_mode() == mode


def test_failing_compile_raises_with_command_status_tail_and_log(jit, monkeypatch):
    tc = jit.npu("8.5.0")
    monkeypatch.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(KernelCompileError) as info:
        cache.get_library(tc, "dav-2201")
    text = str(info.value)
    spec = cache.build_spec(tc, "dav-2201")
    failed = jit.cache / "v1" / "failed" / spec.key
    assert shlex.join(spec.argv) in text and "'" in shlex.join(spec.argv)  # the CANN path has a space: quoted
    assert f"command (run in {failed}):" in text
    assert "exit status 3" in text
    assert "fake failure number 100" in text and "fake failure number 41" in text
    assert "fake failure number 40\n" not in text
    assert f"full log: {failed / 'build.log'}" in text
    log = (failed / "build.log").read_text()
    assert "fake failure number 1\n" in log and shlex.join(spec.argv) in log
    assert (failed / "src" / "rmsnorm.asc").exists()  # sources kept beside the log
    assert jit.entries() == []  # a failure is never published
    monkeypatch.delenv("FAKE_COMPILER_FAIL")
    assert cache.ensure_built(tc, "dav-2201")[0] == "built"  # and never cached negatively


def test_a_killed_builders_lock_is_free_though_a_child_it_forked_lives_on(jit):
    """A builder that forked (a DataLoader worker, say) while holding the build lock, then was killed:
    the child must not keep the lock, or every other process waits the whole timeout. filelock closes
    the lock's descriptor in a forked child from 3.30 on (pyproject's floor; 3.29 kept it)."""
    holder = (
        "import os, sys, time\n"
        "from ascend_rmsnorm.jit import locks\n"
        "with locks.build_lock('k') as held:\n"
        "    told, tell = os.pipe()\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        os.write(tell, b'x')\n"  # past its fork handlers: the descriptors it keeps are final
        "        sys.stdin.read(); os._exit(0)\n"  # lives until the test closes its stdin
        "    os.read(told, 1)\n"
        "    print('holding', held, child, flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        word, held, child = proc.stdout.readline().split()
        assert (word, held) == ("holding", "True")
        proc.kill()
        proc.wait()
        jit.mp.setenv("ASCEND_RMSNORM_LOCK_TIMEOUT", "30")  # the bug waits it out and gets no lock
        with locks.build_lock("k") as got:
            assert got is True and alive(int(child))
    finally:
        proc.kill()
        proc.stdin.close()  # the child's stdin: it exits
        proc.wait()


def test_a_holder_file_a_killed_builder_left_half_written_is_swept_by_the_next_holder(jit):
    """A builder killed between making its holder temp file and renaming it left the temp file in the lock
    dir for good (``/dev/shm`` is memory). The next holder of that key removes it; another key's is its
    writer's, who may be alive."""
    with locks.build_lock("k") as held:
        assert held is True
    jit.locks.mkdir(parents=True, exist_ok=True)
    dead = jit.locks / ".k.lock.0123456789abcdef.tmp"
    other = jit.locks / ".kk.lock.0123456789abcdef.tmp"
    not_temp = jit.locks / ".k.lock.0123456789abcdef"  # no temp file's name (no .tmp): not the sweep's
    for path in (dead, other, not_temp):
        path.write_text("node7 pid 4242 since a while\n")
    with locks.build_lock("k") as held:
        assert held is True
        assert not dead.exists() and other.exists() and not_temp.exists()
        assert (jit.locks / "k.lock.holder").read_text().split()[2] == str(os.getpid())
    assert sorted(p.name for p in jit.locks.iterdir() if p.name.endswith(".tmp")) == [other.name]


def test_an_entry_gone_before_its_failed_load_was_looked_at_is_not_quarantined_by_name(jit, monkeypatch):
    """The entry a load failed on was replaced before this process took its identity (a peer healed it):
    nothing is moved by name, so the peer's fresh build there is found and loaded, not quarantined."""
    tc = jit.emu()
    cache.ensure_built(tc, "dav-2201")
    cache.reset()
    real_load = cache.load_entry
    calls = []

    unsafe = []

    def load_entry(entry, key=None):
        calls.append(entry)
        if len(calls) == 1:
            raise LibraryLoadError(f"cannot load kernel library {entry}: replaced under this process")
        if unsafe:
            raise unsafe[0]
        return real_load(entry, key)

    monkeypatch.setattr(cache, "load_entry", load_entry)
    monkeypatch.setattr(cache, "entry_identity", lambda entry: None)  # looked at after it was gone
    lib = cache.get_library(tc, "dav-2201")
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert len(calls) == 2 and calls[0] == calls[1] and jit.compiles() == 1
    assert not (jit.cache / "v1" / "quarantine").exists() or not any((jit.cache / "v1" / "quarantine").iterdir())
    # the second look refuses what is there now (someone else's): that refusal itself comes out, not
    # "failed to load twice"
    cache.reset()
    calls.clear()
    unsafe.append(UnsafeLibraryError("refusing to load the kernel library: it is someone else's"))
    with pytest.raises(UnsafeLibraryError, match="^refusing to load the kernel library: it is someone else's$"):
        cache.get_library(tc, "dav-2201")


def test_a_build_that_failed_while_this_one_waited_for_its_lock_is_not_run_again(jit, monkeypatch):
    """A node's ranks wait on one lock: a peer's failed build of the same key is reported, not repeated
    by each waiter in turn; a failure from before the wait is not (failures are never cached)."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    real_lock = cache.build_lock

    @contextlib.contextmanager
    def lock_held_by_a_failing_peer(key):
        monkeypatch.setenv("FAKE_COMPILER_FAIL", "1")  # the peer's build fails, this one's would not
        with pytest.raises(KernelCompileError):
            publish.publish_build(spec, jit.cache)
        monkeypatch.delenv("FAKE_COMPILER_FAIL")
        with real_lock(key) as held:
            yield held

    monkeypatch.setattr(cache, "build_lock", lock_held_by_a_failing_peer)
    with pytest.raises(KernelCompileError) as info:
        cache.ensure_built(tc, "dav-2201")
    text = str(info.value)
    assert jit.compiles() == 1  # the peer's compile only
    assert "failed while this one waited for it" in text
    assert "fake failure number 100" in text  # the end of the peer's log
    assert f"full log: {jit.cache / 'v1' / 'failed' / spec.key / 'build.log'}" in text
    monkeypatch.setattr(cache, "build_lock", real_lock)
    assert cache.ensure_built(tc, "dav-2201")[0] == "built"  # the old failure does not stop a new build
    assert jit.compiles() == 2


def _peer_failed_with(jit, monkeypatch, spec, status: int, output: str, log=None):
    """``cache.build_lock`` as held by a peer whose compiler gave ``status`` and ``output`` (its build kept in
    failed/<key>); ``log`` may then change what that failure's build.log is."""
    real_lock, real_run = cache.build_lock, build_mod.run_command

    @contextlib.contextmanager
    def lock(key):
        monkeypatch.setattr(build_mod, "run_command", lambda argv, cwd, env=None: (status, output))
        with pytest.raises(KernelCompileError):
            publish.publish_build(spec, jit.cache)
        monkeypatch.setattr(build_mod, "run_command", real_run)  # this process's own compile is real
        if log is not None:
            log(jit.cache / "v1" / "failed" / spec.key / "build.log")
        with real_lock(key) as held:
            yield held

    return lock


def test_a_peer_whose_compiler_was_killed_by_a_signal_does_not_stop_this_build(jit, monkeypatch):
    """A compiler killed by a signal (the OOM killer, a kill; the supervisor's status 128 + N) says nothing
    about the sources: a waiter builds, instead of reporting that failure (and the npu backend remembering
    it for the process: the torch path for the whole job)."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    monkeypatch.setattr(cache, "build_lock", _peer_failed_with(jit, monkeypatch, spec, 137, "Killed\n"))
    assert cache.ensure_built(tc, "dav-2201")[0] == "built" and jit.compiles() == 1


def test_a_peers_failed_log_that_is_a_fifo_does_not_hang_the_waiter(jit, monkeypatch):
    """The peer's log is opened as every file of the cache is, never blocking: a FIFO there is no log (the
    failure is still reported), not a wait for ever while holding the node's build lock."""
    import threading

    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")

    def fifo(log):
        log.unlink()
        os.mkfifo(log)

    monkeypatch.setattr(cache, "build_lock", _peer_failed_with(jit, monkeypatch, spec, 3, "error: bad\n", fifo))
    got = []
    worker = threading.Thread(target=lambda: got.append(_raised(lambda: cache.ensure_built(tc, "dav-2201"))))
    worker.start()
    worker.join(60)
    if worker.is_alive():  # unblock it before failing
        fd = os.open(jit.cache / "v1" / "failed" / spec.key / "build.log", os.O_WRONLY)
        os.close(fd)
        worker.join(60)
        pytest.fail("reading the peer's log (a FIFO) hung")
    assert isinstance(got[0], KernelCompileError) and "failed while this one waited" in str(got[0])


def test_a_peers_huge_log_is_quoted_from_its_end(jit, monkeypatch):
    """A log longer than the part read (4 MiB) is quoted from its end, where the compiler's error is."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    output = "note: noise\n" * ((6 << 20) // 12) + "error: the real cause\n"
    monkeypatch.setattr(cache, "build_lock", _peer_failed_with(jit, monkeypatch, spec, 3, output))
    with pytest.raises(KernelCompileError, match="the real cause"):
        cache.ensure_built(tc, "dav-2201")


def test_the_end_of_a_log_read_from_its_middle_starts_at_a_whole_line(tmp_path):
    log = tmp_path / "build.log"
    log.write_bytes(b"aaaa\nbbbb\ncccc\n")
    fd = os.open(log, os.O_RDONLY)
    try:
        assert cache._read_end(fd, 7) == b"cccc\n"  # from "b\ncccc\n": the cut line is dropped
        assert cache._read_end(fd, 15) == b"aaaa\nbbbb\ncccc\n"  # the whole file: nothing dropped
    finally:
        os.close(fd)


def _raised(fn):
    try:
        fn()
    except BaseException as err:  # noqa: BLE001 - returned to the test
        return err
    return None


@pytest.mark.parametrize(
    "makes,why",
    [
        ("echo junk > librmsnorm.so", "not an ELF file"),
        ("mkdir librmsnorm.so", "not a regular file"),
        ("mkfifo librmsnorm.so", "not a regular file"),  # opened without waiting for a writer
        (f"cp {shlex.quote(os.path.realpath(sys.executable))} librmsnorm.so", "does not export"),  # an ELF
        ("true", "no output library: No such file or directory"),
        ("printf '\\177ELF' > librmsnorm.so", "not a readable shared object: truncated ELF header"),
    ],
    ids=["junk", "a directory", "a fifo", "an ELF without the ABI symbol", "nothing", "an ELF cut short"],
)
def test_compile_that_says_ok_but_makes_no_usable_library_is_not_published(jit, tmp_path, monkeypatch, makes, why):
    liar = tmp_path / "liar"
    liar.write_text(
        f'#!/bin/sh\nif [ "$1" = --version ]; then echo liar 1.0; exit 0; fi\n{fake_cann.SH_NO_SEARCH_DIRS}{makes}\n'
    )
    liar.chmod(0o755)
    monkeypatch.setenv("ASCEND_RMSNORM_CXX", str(liar))
    with pytest.raises(KernelCompileError, match=why):
        cache.ensure_built(toolchain.get_toolchain("emu"), "dav-2201")
    assert jit.entries() == []


def test_a_compile_error_whose_failed_dir_cannot_be_made_keeps_its_log_where_it_ran(jit):
    """The cache's failed/ cannot be made (a file is in the way): the compile error is still the compile
    error, naming the build dir it ran in, whose log and sources stay there for the sweep."""
    tc = jit.emu()
    (jit.cache / "v1").mkdir(parents=True)
    (jit.cache / "v1" / "failed").write_text("in the way")
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(KernelCompileError, match="failed with exit status 3") as info:
        cache.ensure_built(tc, "dav-2201")
    (kept,) = (jit.cache / "v1" / "tmp").iterdir()
    assert f"command (run in {kept}):" in str(info.value)
    assert "fake failure number 100" in (kept / "build.log").read_text()


def test_unsupported_arch_is_refused_before_compiling(jit):
    from ascend_rmsnorm.errors import UnsupportedArchError

    tc = jit.npu("9.0.0")
    with pytest.raises(UnsupportedArchError, match="dav-3510.*supported: dav-2201"):
        cache.get_library(tc, "dav-3510")
    assert jit.compiles() == 0


def test_emu_toolchain_goes_through_the_same_path(jit):
    tc = jit.emu()
    status, entry = cache.ensure_built(tc, "dav-2201")
    assert status == "built" and entry.parts[-3] == "emu" and jit.compiles() == 1
    assert cache.get_library(tc, "dav-2201")._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert cache.ensure_built(tc, "dav-2201")[0] == "hit" and jit.compiles() == 1


def test_log_level_env_and_one_line_per_build(jit, monkeypatch, capfd):
    """With no logging configured by the app, builds say one line when they start and one when done."""
    tc = jit.npu("8.5.0")
    code = (
        "import sys, _ascend_rmsnorm_cli\n"
        "_ascend_rmsnorm_cli.defer_package_init()  # torch-free, as the console script\n"
        "from ascend_rmsnorm.jit import cache, toolchain\n"
        "tc = toolchain.get_toolchain('npu')\n"
        "cache.get_library(tc, 'dav-2201'); cache.reset(); cache.get_library(tc, 'dav-2201')\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines  # a hit is silent
    assert "compiling ascend-rmsnorm kernels for dav-2201" in lines[0] and "ascend-rmsnorm warm" in lines[0]
    assert lines[1].startswith("ascend-rmsnorm: INFO: built") and " s -> " in lines[1]
    env = {**os.environ, "ASCEND_RMSNORM_LOG_LEVEL": "WARNING", "ASCEND_RMSNORM_CACHE_DIR": str(jit.tmp / "c2")}
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert tc.kind == "npu"


def test_a_missing_dependency_is_another_library_than_the_one_loaded(tmp_path):
    """``verify.missing_dependency`` reads dlopen's "X: cannot open shared object file": X is a dependency
    only when it is not the library itself, named by its path (a link to it too) or by the fd name it was
    loaded through."""
    so = tmp_path / "librmsnorm.so"
    so.write_bytes(b"")
    (tmp_path / "alias.so").symlink_to(so)

    def failure(name: str) -> LibraryLoadError:
        err = LibraryLoadError("cannot load")
        err.__cause__ = OSError(f"{name}: cannot open shared object file: No such file or directory")
        return err

    assert verify.missing_dependency(failure("libascendcl.so"), so) == "libascendcl.so"
    for itself in ("/proc/self/fd/12", "/dev/fd/12", str(so), str(tmp_path / "alias.so")):
        assert verify.missing_dependency(failure(itself), so) is None, itself


def _library_needing_a_missing_dependency(tmp_path: Path) -> bytes:
    """An ELF .so that exports the ABI symbol but needs libgone.so, which then disappears."""
    import subprocess

    dep_src, dep = tmp_path / "gone.c", tmp_path / "libgone.so"
    dep_src.write_text("int gone(void) { return 1; }\n")
    subprocess.run([fake_cann.REAL_CXX, "-shared", "-fPIC", "-x", "c", str(dep_src), "-o", str(dep)], check=True)
    src, out = tmp_path / "needs.c", tmp_path / "needs.so"
    src.write_text("int gone(void); int ascend_rmsnorm_abi_version(void) { return gone(); }\n")
    subprocess.run(
        [fake_cann.REAL_CXX, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(out), f"-L{tmp_path}", "-lgone"],
        check=True,
    )
    dep.unlink()
    return out.read_bytes()


def test_missing_runtime_dependency_is_reported_not_quarantined(jit, tmp_path, capsys):
    tc = jit.npu("8.5.0")
    _, entry = cache.ensure_built(tc, "dav-2201")
    _replace_library(entry, _library_needing_a_missing_dependency(tmp_path))
    with pytest.raises(LibraryLoadError, match=r"cannot find libgone\.so.*set_env\.sh"):
        cache.get_library(tc, "dav-2201")
    assert entry.exists() and not (jit.cache / "v1" / "quarantine").exists() and jit.compiles() == 1
    from ascend_rmsnorm.cli import main as cli

    assert cli.main(["cache", "verify"]) == 0
    out = capsys.readouterr().out
    assert f"untested {entry}: hashes match; cannot load-test here, libgone.so is not found" in out
    assert entry.exists()


def test_a_cache_on_a_network_filesystem_is_noted_once(jit, caplog, monkeypatch):
    tc = jit.npu("8.5.0")
    monkeypatch.setattr(publish, "_fs_type", lambda path: "nfs4")
    with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
        cache.ensure_built(tc, "dav-2201")
        cache.ensure_built(tc, "dav-2201", kernels_dir=modified_kernels(jit.tmp / "k2"))
    notes = [r for r in caplog.records if "is on nfs4; build locks are node-local" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO


def test_the_default_cache_root_is_absolute_even_where_platformdirs_gives_a_relative_one(monkeypatch, tmp_path):
    """XDG says a relative XDG_CACHE_HOME is to be ignored; an older platformdirs (the floor is 3) took it as
    given, and without a home "~" stays "~": either would put the cache below whatever directory a job
    starts in."""
    import platformdirs

    from ascend_rmsnorm.jit import layout

    monkeypatch.delenv("ASCEND_RMSNORM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda *a, **k: "relative/ascend_rmsnorm")
    assert layout.cache_root() == (tmp_path / ".cache" / "ascend_rmsnorm", True)
    # no home to expand "~" to (HOME relative here; unset with no passwd entry alike): this uid's dir in the temp dir
    monkeypatch.setenv("HOME", "relative-home")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert layout.cache_root() == (tmp_path / f"ascend_rmsnorm-cache-{os.getuid()}", True)
    # a relative cache_dir given by the caller is made absolute at once: a later chdir does not move it
    monkeypatch.chdir(tmp_path)
    assert layout.cache_root("given") == (tmp_path / "given", False)


def test_the_default_cache_root_without_a_home_is_this_uids_dir_in_the_temp_dir_with_the_real_platformdirs(
    monkeypatch, tmp_path
):
    """A container's uid with no passwd entry and no HOME: a newer platformdirs raises
    RuntimeError ("could not determine the home directory") where an older one gave "~", and the cache
    lookup (`cache path`, every kernel call) failed with it instead of using the temp dir."""
    from ascend_rmsnorm.jit import layout

    for name in ("ASCEND_RMSNORM_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    no_home(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert layout.cache_root() == (tmp_path / f"ascend_rmsnorm-cache-{os.getuid()}", True)


@pytest.mark.parametrize("kind", ["npu", "emu"])
def test_a_first_use_build_names_the_warm_command_that_builds_it(jit, caplog, kind):
    """The 'compiling ...' line of a build at first use says which command precompiles it: plain
    `ascend-rmsnorm warm` builds the npu kernels only (on a CPU host it fails: no arch, no bisheng), so
    an emu build names `warm --toolchain emu`."""
    tc = jit.npu("8.5.0") if kind == "npu" else jit.emu()
    with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
        cache.get_library(tc, "dav-2201")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling")]
    want = "`ascend-rmsnorm warm --toolchain emu`" if kind == "emu" else "`ascend-rmsnorm warm`"
    assert line.endswith(f"; first use only; {want} precompiles"), line


def test_a_manifest_nested_too_deep_to_parse_is_a_bad_entry_not_a_crash(jit, capsys):
    """Before: a manifest.json that is a JSON array nested deeper than Python's recursion limit made
    json.loads raise RecursionError, which no check caught: every lookup of that key, and `cache list` and
    `cache verify`, crashed instead of passing over (and quarantining) the broken entry. Now it is an
    unreadable entry like any other."""
    entry = jit.cache / "v1" / "emu" / "dav-2201" / ("0" * 64)
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    (entry / cache.LIB_NAME).write_bytes(b"\x7fELF")
    problem = cache.entry_problem(entry)
    assert problem is not None and "RecursionError" in problem
    from ascend_rmsnorm.cli import main as cli

    assert cli.main(["cache", "list"]) == 0
    assert cli.main(["cache", "verify"]) == 1  # reported bad and quarantined, not a traceback
    assert not entry.exists() and "bad" in capsys.readouterr().out


def test_the_fake_compilers_memo_tells_the_calibration_kernels_from_the_main_ones(jit):
    """Before: the test compilers' memo (fake_cann, FAKE_COMPILER_MEMO) replaced the source's path by one
    placeholder, so calibrate.asc hit rmsnorm.asc's memoised library and the calibration build was
    rejected ("does not export ascend_rmsnorm_calibrate_version"). Now the source's name is in the memo key."""
    tc = jit.emu()
    assert cache.ensure_built(tc, "dav-2201")[0] == "built"
    status, entry = cache.ensure_built(tc, "dav-2201", kernel="calibrate")
    assert status == "built" and cache.entry_problem(entry) is None


def test_a_file_left_at_an_entrys_path_is_quarantined_and_the_build_published(jit):
    """Before: a non-directory at a key's path (a stray file, a dangling link: nothing this package makes)
    made every build of that key fail with rename's ENOTDIR, reported as "Not a directory (<the build dir>)
    ... Free some space", for ever. Now it is a stale invalid entry like any other: moved to quarantine/,
    and the fresh build takes its place."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    entry = cache.entry_dir(jit.cache, spec)
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"")
    lib = cache.get_library(tc, "dav-2201")
    assert lib.path.parent == entry and cache.entry_problem(entry) is None
    (moved,) = (jit.cache / "v1" / "quarantine").iterdir()
    assert moved.name.startswith(spec.key) and moved.is_file()
    assert list((jit.cache / "v1" / "tmp").iterdir()) == []
