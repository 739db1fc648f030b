"""Node-local build locks: they only keep the ranks of one node from compiling the same key at once.

Correctness never depends on them (the cache publishes by rename). A lock is ``flock`` on a file that
is never unlinked, in a node-local directory, named by the cache key; the kernel drops it when its
holder dies, so a killed build never blocks anyone. Waits are bounded and logged with the holder's
name; when locks do not work at all we build without them (docs/design.md §5).
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import _env
from .._log import get_logger, warn_once
from . import trust
from .trust import fd_path

ENV_LOCK_DIR = _env.LOCK_DIR
ENV_LOCK_TIMEOUT = _env.LOCK_TIMEOUT

LOCK_LOG_EVERY_S = 30.0

_LOCKLESS_ERRNOS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM, errno.EROFS, errno.EINVAL}

log = get_logger  # called, never at import


def _default_temp_dir() -> Path | None:
    """``tempfile.gettempdir()``, or None when no temp dir is usable (it raises then)."""
    try:
        return Path(tempfile.gettempdir())
    except (OSError, FileNotFoundError):
        return None


class _NotHere(Exception):
    """A default lock dir whose parent is missing or read-only: simply not a candidate on this node."""


def _open_private_dir(path: Path, create: bool = False, parents: bool = False) -> tuple[int | None, str | None]:
    """(fd, None) of ``path`` if it is a directory of this user's that nobody else can write, opened
    without following a link and judged by ``fstat`` of that fd, inside a parent reached by the trust walk
    (no component someone else could swap for a link: ``trust.open_path``); else (None, why not). With
    ``create`` it is made (mode 700) if missing, and with ``parents`` the directories above it too.
    Without ``parents``, a missing or read-only parent raises ``_NotHere``."""
    path = Path(os.path.abspath(path))
    try:
        parent = trust.open_path(path.parent, create=parents, directory=True)
    except trust.Untrusted as err:
        return None, f"under a directory that is not safe: {err.problem}"
    except OSError as err:
        if not parents:
            raise _NotHere from err
        return None, f"under a directory that cannot be reached ({err.strerror or err})"
    try:
        if create:
            try:
                os.mkdir(path.name, 0o700, dir_fd=parent)
            except FileExistsError:
                pass  # judged below, without following it
            except OSError as err:
                if not parents:
                    raise _NotHere from err
                return None, f"a directory that cannot be created ({err.strerror or err})"
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as err:
            # what is there, judged without following it: a link, not a directory, or (EACCES: a mode-700
            # directory someone else made first, which only root could open) someone else's, named
            try:
                problem = _env.private_dir_problem(os.lstat(path.name, dir_fd=parent))
            except OSError:
                problem = None
            if problem is None and err.errno in (errno.ELOOP, errno.ENOTDIR):
                problem = "not a directory"
            return None, problem or f"a directory that cannot be opened ({err.strerror or err})"
    finally:
        os.close(parent)
    problem = _env.private_dir_problem(os.fstat(fd))
    if problem is None and not os.access(fd_path(fd), os.W_OK | os.X_OK):
        problem = "not writable"
    if problem is not None:
        os.close(fd)
        return None, problem
    return fd, None


def _open_lock_dir() -> tuple[Path, int] | None:
    """The lock dir and an fd of it (see ``lock_dir``); lock and holder files are made through the fd."""
    explicit = _env.get(ENV_LOCK_DIR)
    if explicit is not None:
        problem = _env.VARS[ENV_LOCK_DIR].check(explicit)  # type: ignore[misc]  # lstat rules, if it exists
        if problem is None:
            fd, problem = _open_private_dir(explicit, create=True, parents=True)
            if fd is not None:
                return explicit, fd
        chosen = _default_lock_dir(os.getuid())
        instead = str(chosen[0]) if chosen else "no lock: builds may duplicate"
        _env.warn(ENV_LOCK_DIR, problem or "not usable", instead)
        return chosen
    return _default_lock_dir(os.getuid())


def lock_dir() -> Path | None:
    """A node-local directory for lock files (never on the shared cache filesystem), or None.

    It must be a real directory (not a link), owned by you, writable by nobody else; it may sit in a
    sticky world-writable parent such as ``/dev/shm``. ``ASCEND_RMSNORM_LOCK_DIR`` first; one that
    cannot be used gets one warning and the defaults are tried: ``$XDG_RUNTIME_DIR/ascend_rmsnorm`` (an absolute one),
    ``/dev/shm/ascend_rmsnorm-<uid>``, ``<temp>/ascend_rmsnorm-<uid>``; a default that exists but fails
    the rules (someone else's, a link) gets one warning naming it and the next one is tried.
    """
    found = _open_lock_dir()
    if found is None:
        return None
    os.close(found[1])
    return found[0]


def _default_lock_dir(uid: int) -> tuple[Path, int] | None:
    candidates: list[Path] = []
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if os.path.isabs(xdg):  # the XDG spec: a relative one is invalid, ignored (it would follow the cwd)
        candidates.append(Path(xdg) / "ascend_rmsnorm")
    candidates.append(Path("/dev/shm") / f"ascend_rmsnorm-{uid}")
    temp = _default_temp_dir()
    if temp is not None:
        candidates.append(temp / f"ascend_rmsnorm-{uid}")
    for path in candidates:
        try:
            fd, problem = _open_private_dir(path, create=True)
        except _NotHere:
            continue  # no such parent, read-only, ...: simply not a candidate here
        if fd is not None:
            return path, fd
        warn_once(
            f"lock-dir:{path}",
            "not using the lock dir %s: it is %s; trying the next default",
            path,
            problem,
        )
    return None


def lock_timeout() -> float:
    """Seconds to wait for another process's build of the same key (``ASCEND_RMSNORM_LOCK_TIMEOUT``)."""
    return float(_env.get(ENV_LOCK_TIMEOUT))


def _holder_name(key: str) -> str:
    return f"{key}.lock.holder"


def lock_holder(dir_fd: int, key: str) -> str:
    """Who said they hold the lock of ``key`` in the lock dir ``dir_fd`` (host, pid, since when)."""
    try:
        fd = os.open(_holder_name(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return "unknown"
    try:
        return os.read(fd, 4096).decode(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"
    finally:
        os.close(fd)


def _holder_temp_prefix(key: str) -> str:
    return f".{key}.lock."


def _sweep_holder_temps(dir_fd: int, key: str) -> None:
    """Remove the temp files an earlier holder of ``key`` was killed between making and renaming. Only a
    holder of the lock makes them, and the caller holds it now, so every one is a dead writer's."""
    prefix = _holder_temp_prefix(key)
    try:
        names = [n for n in os.listdir(dir_fd) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def _write_holder(dir_fd: int, key: str) -> None:
    """Say who holds the lock: a new file of a random name (``O_CREAT | O_EXCL | O_NOFOLLOW``, as
    ``mkstemp``; a planted name is skipped, never followed) renamed over the holder file. A temp file a
    killed holder left is removed first (the lock dir is the user's own, 0700)."""
    _sweep_holder_temps(dir_fd, key)
    text = f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = f"{_holder_temp_prefix(key)}{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError:
            return
        try:
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
            os.replace(name, _holder_name(key), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass
        return


def _make_filelock(path: Path):
    """filelock 4.x: keep the file (never unlinked), and never fall back to stale-prone soft locks; 3.x
    (flock-based, never unlinks the file on Unix) has neither option. Asked of the signature, not tried:
    a 3.x lock that a bad keyword stops half-way prints an "Exception ignored in __del__" traceback."""
    import inspect

    import filelock  # deferred: ~40 ms, and only builds need it

    options = inspect.signature(filelock.FileLock).parameters
    if "preserve_lock_file" in options and "fallback_to_soft" in options:
        return filelock.FileLock(str(path), thread_local=False, preserve_lock_file=True, fallback_to_soft=False)
    return filelock.FileLock(str(path), thread_local=False)


@contextmanager
def build_lock(key: str) -> Iterator[bool]:
    """Hold the node-local build lock of ``key``; yields False when building without it (timeout, no locks)."""
    found = _open_lock_dir()
    if found is None:
        warn_once("lockless", "no usable lock directory; building without a lock (safe, may duplicate work)")
        yield False
        return
    directory, dir_fd = found
    try:
        with _locked(key, directory, dir_fd) as held:
            yield held
    finally:
        os.close(dir_fd)


_NAME_LOST = "the lock directory %s was removed or replaced; building without a lock"


def _name_lost(dir_fd: int, name: str) -> bool:
    """Whether ``name`` no longer leads to the checked lock dir (removed, or moved and another made there).

    filelock 4.x opens the lock file by a name (it resolves the path it is given) and makes missing parents.
    So the lock is taken at the name the dir had when the lock was made, and that name is checked before
    each try: a lock dir removed or replaced under a waiting build (a logout clearing
    ``/run/user/<uid>``, a job's epilogue clearing ``/dev/shm``) would be locked at a new directory filelock
    makes, or at whatever someone else made under the freed name in ``/dev/shm``, who could hold it there
    and stall our ranks."""
    try:
        held, named = os.fstat(dir_fd), os.lstat(name)
    except OSError:
        return True
    return held.st_nlink == 0 or (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino)


@contextmanager
def _locked(key: str, directory: Path, dir_fd: int) -> Iterator[bool]:
    import filelock

    path = directory / f"{key}.lock"  # for messages; the lock is taken at the checked dir's name (_name_lost)
    name = os.path.realpath(fd_path(dir_fd))  # "... (deleted)" once removed, which _name_lost finds gone
    if _name_lost(dir_fd, name):
        warn_once("lockless", _NAME_LOST, directory)
        yield False
        return
    lock = _make_filelock(Path(name) / path.name)
    timeout = lock_timeout()
    start = time.monotonic()
    acquired = False
    try:
        lock.acquire(blocking=False)
        acquired = True
    except filelock.Timeout:
        log().info("waiting for another build of this kernel: %s holds %s", lock_holder(dir_fd, key), path)
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
                lock_holder(dir_fd, key),
            )
            break
        if _name_lost(dir_fd, name):  # a wait slice locks by the name
            warn_once("lockless", _NAME_LOST, directory)
            break
        try:
            lock.acquire(timeout=min(LOCK_LOG_EVERY_S, remaining))
            acquired = True
        except filelock.Timeout:
            held_by = lock_holder(dir_fd, key)
            log().info("still waiting for %s (held by %s, %.0f s so far)", path, held_by, time.monotonic() - start)
        except (OSError, RuntimeError) as err:
            warn_once("lockless", "cannot take the build lock %s (%s); building without a lock", path, err)
            break
    if not acquired:
        yield False
        return
    try:
        _write_holder(dir_fd, key)
        yield True
    finally:
        lock.release()
