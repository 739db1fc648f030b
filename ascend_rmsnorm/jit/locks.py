"""Node-local build locks: they only keep the ranks of one node from compiling the same key at once.

Correctness never depends on them (the cache publishes by rename). A lock is ``flock`` on a file that
is never unlinked, in a node-local directory, named by the cache key; the kernel drops it when its
holder dies, so a killed build never blocks anyone. Waits are bounded and logged with the holder's
name; when locks do not work at all we build without them (jit-cache-anchors C2-C4, C7).
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import _env
from .._log import get_logger, warn_once

ENV_LOCK_DIR = _env.LOCK_DIR
ENV_LOCK_TIMEOUT = _env.LOCK_TIMEOUT

LOCK_TIMEOUT_S = _env.LOCK_TIMEOUT_DEFAULT_S
LOCK_LOG_EVERY_S = 30.0

_LOCKLESS_ERRNOS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM, errno.EROFS, errno.EINVAL}

log = get_logger  # called, never at import


def _default_temp_dir() -> Path | None:
    """``tempfile.gettempdir()``, or None when no temp dir is usable (it raises then)."""
    try:
        return Path(tempfile.gettempdir())
    except (OSError, FileNotFoundError):
        return None


def _usable(path: Path, shared_parent: bool) -> bool:
    uid = os.getuid()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if shared_parent and path.stat().st_uid != uid:
            return False  # someone else's directory in a world-writable place
        return os.access(path, os.W_OK | os.X_OK)
    except OSError:
        return False


def lock_dir() -> Path | None:
    """A node-local directory for lock files (never on the shared cache filesystem), or None.

    ``ASCEND_RMSNORM_LOCK_DIR`` first; one that cannot be used gets one warning and the defaults are
    tried: ``$XDG_RUNTIME_DIR/ascend_rmsnorm``, ``/dev/shm/ascend_rmsnorm-<uid>``, ``<temp>/ascend_rmsnorm-<uid>``.
    """
    uid = os.getuid()
    explicit = _env.get(ENV_LOCK_DIR)
    if explicit is not None:
        problem = _env.VARS[ENV_LOCK_DIR].check(explicit)  # type: ignore[misc]
        if problem is None and _usable(explicit, False):
            return explicit
        chosen = _default_lock_dir(uid)
        _env.warn(ENV_LOCK_DIR, problem or "not usable", str(chosen) if chosen else "no lock: builds may duplicate")
        return chosen
    return _default_lock_dir(uid)


def _default_lock_dir(uid: int) -> Path | None:
    candidates: list[tuple[Path, bool]] = []
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if xdg:
        candidates.append((Path(xdg) / "ascend_rmsnorm", False))
    candidates.append((Path("/dev/shm") / f"ascend_rmsnorm-{uid}", True))
    temp = _default_temp_dir()
    if temp is not None:
        candidates.append((temp / f"ascend_rmsnorm-{uid}", True))
    for path, shared_parent in candidates:
        if _usable(path, shared_parent):
            return path
    return None


def lock_timeout() -> float:
    """Seconds to wait for another process's build of the same key (``ASCEND_RMSNORM_LOCK_TIMEOUT``)."""
    return float(_env.get(ENV_LOCK_TIMEOUT))


def _holder_path(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".holder")


def lock_holder(lock_path: Path) -> str:
    """Who said they hold ``lock_path`` (host, pid, since when)."""
    try:
        return _holder_path(lock_path).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def _write_holder(lock_path: Path) -> None:
    text = f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
    tmp = _holder_path(lock_path).with_name(f".{lock_path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, _holder_path(lock_path))
    except OSError:
        pass


def _make_filelock(path: Path):
    import filelock  # deferred: ~40 ms, and only builds need it

    try:  # filelock 4.x: keep the file (never unlinked), and never fall back to stale-prone soft locks
        return filelock.FileLock(str(path), thread_local=False, preserve_lock_file=True, fallback_to_soft=False)
    except TypeError:  # filelock 3.x: flock-based, never unlinks the file on Unix
        return filelock.FileLock(str(path), thread_local=False)


@contextmanager
def build_lock(key: str) -> Iterator[bool]:
    """Hold the node-local build lock of ``key``; yields False when building without it (timeout, no locks)."""
    directory = lock_dir()
    if directory is None:
        warn_once("lockless", "no usable lock directory; building without a lock (safe, may duplicate work)")
        yield False
        return
    import filelock

    path = directory / f"{key}.lock"
    lock = _make_filelock(path)
    timeout = lock_timeout()
    start = time.monotonic()
    acquired = False
    try:
        lock.acquire(blocking=False)
        acquired = True
    except filelock.Timeout:
        log().info("waiting for another build of this kernel: %s holds %s", lock_holder(path), path)
    except (OSError, RuntimeError) as err:
        # Locks only save work, so a lock that cannot be taken never stops a build (C4).
        reason = getattr(err, "strerror", None) or err
        if isinstance(err, OSError) and err.errno in _LOCKLESS_ERRNOS:
            warn_once(
                "lockless",
                "file locks do not work in %s (%s); building without a lock (safe, may duplicate work)",
                directory,
                reason,
            )
        else:
            warn_once(
                "lockless",
                "cannot take the build lock %s (%s); building without a lock (safe, may duplicate work)",
                path,
                reason,
            )
        timeout = -1.0
    while not acquired and timeout >= 0:
        remaining = timeout - (time.monotonic() - start)
        if remaining <= 0:
            log().warning(
                "gave up waiting %.0f s for the build lock %s (held by %s); building without it",
                timeout,
                path,
                lock_holder(path),
            )
            break
        try:
            lock.acquire(timeout=min(LOCK_LOG_EVERY_S, remaining))
            acquired = True
        except filelock.Timeout:
            log().info(
                "still waiting for %s (held by %s, %.0f s so far)", path, lock_holder(path), time.monotonic() - start
            )
        except (OSError, RuntimeError) as err:
            warn_once("lockless", "cannot take the build lock %s (%s); building without a lock", path, err)
            break
    if not acquired:
        yield False
        return
    try:
        _write_holder(path)
        yield True
    finally:
        lock.release()
