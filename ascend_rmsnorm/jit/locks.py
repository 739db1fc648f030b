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

from .._log import get_logger, warn_once

ENV_LOCK_DIR = "ASCEND_RMSNORM_LOCK_DIR"
ENV_LOCK_TIMEOUT = "ASCEND_RMSNORM_LOCK_TIMEOUT"

LOCK_TIMEOUT_S = 600.0
LOCK_LOG_EVERY_S = 30.0

_LOCKLESS_ERRNOS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM, errno.EROFS, errno.EINVAL}

log = get_logger  # called, never at import


def lock_dir() -> Path | None:
    """A node-local directory for lock files (never on the shared cache filesystem), or None."""
    uid = os.getuid()
    explicit = os.environ.get(ENV_LOCK_DIR, "").strip()
    candidates: list[tuple[Path, bool]] = []
    if explicit:
        candidates.append((Path(explicit), False))
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if xdg:
        candidates.append((Path(xdg) / "ascend_rmsnorm", False))
    candidates.append((Path("/dev/shm") / f"ascend_rmsnorm-{uid}", True))
    candidates.append((Path(tempfile.gettempdir()) / f"ascend_rmsnorm-{uid}", True))
    for path, shared_parent in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            if shared_parent and path.stat().st_uid != uid:
                continue  # someone else's directory in a world-writable place
            if os.access(path, os.W_OK | os.X_OK):
                return path
        except OSError:
            continue
    return None


def lock_timeout() -> float:
    raw = os.environ.get(ENV_LOCK_TIMEOUT, "").strip()
    try:
        return float(raw) if raw else LOCK_TIMEOUT_S
    except ValueError:
        return LOCK_TIMEOUT_S


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
