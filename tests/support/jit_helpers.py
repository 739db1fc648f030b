"""The ``jit`` fixture's world (an isolated cache, fake CANN roots, a compile counter) and subprocess workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import fake_cann
import pytest

from ascend_rmsnorm.jit import toolchain

WORKER = Path(__file__).with_name("jit_worker.py")


def _clean_path() -> str:
    """PATH without any real bisheng or npu-smi, so only the fakes are found."""
    keep = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and not any(os.path.exists(os.path.join(entry, tool)) for tool in ("bisheng", "npu-smi")):
            keep.append(entry)
    return os.pathsep.join(keep)


@dataclass
class JitWorld:
    tmp: Path
    mp: object
    cache: Path
    locks: Path
    usr: Path  # plays /usr/local/Ascend (its path has a space, to exercise quoting)
    home: Path
    bin: Path
    counter: Path

    @classmethod
    def create(cls, tmp: Path, mp, memo: Path) -> JitWorld:
        world = cls(
            tmp=tmp,
            mp=mp,
            cache=tmp / "cache",
            locks=tmp / "locks",
            usr=tmp / "usr local" / "Ascend",
            home=tmp / "home",
            bin=tmp / "bin",
            counter=tmp / "compiles.log",
        )
        world.home.mkdir()
        world.bin.mkdir()
        for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LOCAL_RANK"):
            mp.delenv(name, raising=False)
        mp.setenv("ASCEND_RMSNORM_CACHE_DIR", str(world.cache))
        mp.setenv("ASCEND_RMSNORM_LOCK_DIR", str(world.locks))
        mp.setenv("FAKE_COMPILER_COUNTER", str(world.counter))
        mp.setenv("FAKE_COMPILER_MEMO", str(memo))
        mp.setenv("HOME", str(world.home))
        mp.setenv("XDG_CACHE_HOME", str(tmp / "xdg-cache"))
        mp.setenv("PATH", str(world.bin) + os.pathsep + _clean_path())
        mp.setattr(
            toolchain,
            "DEFAULT_CANN_ROOTS",
            (str(world.usr / "cann"), str(world.usr / "ascend-toolkit" / "latest"))
            + ("~/Ascend/cann", "~/Ascend/ascend-toolkit/latest"),
        )
        return world

    def compiles(self) -> int:
        return fake_cann.compile_count(self.counter)

    def cann(self, version: str, *, base: Path | None = None, **kwargs) -> fake_cann.FakeCann:
        return fake_cann.make_cann(base or self.usr, version, **kwargs)

    def use(self, fake: fake_cann.FakeCann) -> fake_cann.FakeCann:
        """Point ASCEND_HOME_PATH at ``fake`` as its set_env.sh would."""
        self.mp.setenv("ASCEND_HOME_PATH", str(fake.alias))
        return fake

    def acl(self, fake: fake_cann.FakeCann) -> Path:
        """Build the fake ``libascendcl.so`` and put it in ``fake``'s ``lib64``, where CANN's is; its path."""
        lib = fake_cann.build_fake_libascendcl(self.tmp / "acl")
        (fake.root / "lib64" / "libascendcl.so").symlink_to(lib)
        return lib

    def npu(self, version: str = "8.5.0", **kwargs) -> toolchain.Toolchain:
        self.use(self.cann(version, **kwargs))
        return toolchain.get_toolchain("npu")

    def emu(self) -> toolchain.Toolchain:
        self.mp.setenv("ASCEND_RMSNORM_CXX", str(fake_cann.write_counting_cxx(self.tmp / "cxx")))
        return toolchain.get_toolchain("emu")

    def spawn(self, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
        """Start ``jit_worker.py`` with this world's environment (plus ``env``)."""
        full = dict(os.environ)
        full.update(env or {})
        return subprocess.Popen(
            [sys.executable, str(WORKER), *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen
        )

    def entries(self) -> list[Path]:
        special = ("tmp", "failed", "quarantine", "trash")
        return sorted(p for p in (self.cache / "v1").glob("*/*/*") if p.parts[-3] not in special)


def read_result(path: Path) -> dict:
    return json.loads(path.read_text())


def record_fsyncs(monkeypatch) -> list[os.stat_result]:
    """Each file ``os.fsync`` is called on from now on, as ``fstat`` saw it then: a claim that something
    is synced whole before it is published, checked without a crash."""
    synced: list[os.stat_result] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.fstat(fd))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


#: Another user's uid and gid ("nobody"), which root gives a file or link by chown (no account needed).
NOBODY = 65534
#: For a test that gives something to another user (``NOBODY``): only root may.
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file or link to another user needs root")


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something true, and return that; the timeout is only a
    bound for a test that would otherwise hang (generous: the suite must pass on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is dead, just not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` that a writer has finished (ended by a newline); [] while it has none."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def wait_for_pid(path: Path, timeout: float = 60.0, *, live: bool = True) -> int:
    """The pid another process writes into ``path`` (``echo $$ > path``), once the line is complete and
    (``live``) that process is alive: existence alone may mean an empty file the shell has not written to
    yet. Without ``live`` for a process that may already be gone when the file is read (one whose end the
    test then checks)."""

    def ready():
        lines = complete_lines(path)
        if lines and lines[0].strip().isdigit() and (not live or alive(int(lines[0]))):
            return int(lines[0])
        return None

    return wait_for(ready, timeout, f"a {'live ' if live else ''}pid in {path}")


def release_together(procs, ready_files, go: Path, timeout: float = 120.0) -> None:
    """Start workers waiting on ``go`` at once: touch it when each has written its ready file (or exited,
    which the caller's wait reports), never after a guessed delay."""
    wait_for(
        lambda: all(f.exists() or p.poll() is not None for p, f in zip(procs, ready_files)),
        timeout,
        "every worker to reach the start line",
    )
    go.touch()


def no_home(monkeypatch) -> None:
    """This process as a container's uid with no passwd entry and no ``HOME``: ``~`` expands to nothing."""
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)


def age_entry(entry: Path, unix_time: float) -> None:
    """Make a cache entry's manifest say it was built at ``unix_time`` (what ``cache clean --older-than`` reads)."""
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["built"]["unix_time"] = unix_time
    (entry / "manifest.json").write_text(json.dumps(manifest))


def copy_kernels(dest: Path) -> Path:
    from ascend_rmsnorm.jit import cache

    shutil.copytree(cache.KERNELS_DIR, dest)
    return dest


def modified_kernels(dest: Path) -> Path:
    """A copy of the kernels with one header changed. Always the same change, so the session's compiler memo
    serves every test that needs "another key" after the first (a real kernel compile takes tens of seconds)."""
    copy_kernels(dest)
    header = dest / "emu" / "kernel_operator.h"
    header.write_text(header.read_text() + "\n// a changed header: another key\n")
    return dest
