"""Checking an entry before it is used (docs/design.md §5 "Trust"): the manifest against the library,
the fd-checked open that loading goes through, and moving a bad entry aside.

The ownership walk itself is ``trust.py``; this module decides what a checked entry must contain.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from pathlib import Path

from .. import _env
from .._log import get_logger
from ..errors import LibraryLoadError, UnsafeLibraryError
from . import library, trust
from .key import LIB_NAME, canonical_json
from .layout import MANIFEST_NAME, version_base

log = get_logger  # called, never at import


#: A manifest is a few KiB; anything far larger is not one (and is not read whole).
_MANIFEST_LIMIT = 1 << 24


def read_manifest(entry: Path) -> dict | None:
    """The manifest of ``entry`` for listings (None if it is not a readable, regular, small file).

    Opened without following a last link and without blocking, then checked to be a regular file, so a
    FIFO or device planted as manifest.json is simply not a manifest (never a hang)."""
    try:
        data = json.loads(trust.read_regular(Path(entry) / MANIFEST_NAME, _MANIFEST_LIMIT, follow=False))
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested deeper than json.loads goes
        return None
    return data if isinstance(data, dict) else None


def _manifest_problem(manifest: dict, want_key: str, size: int, sha256=None) -> str | None:
    """What is wrong with an entry whose manifest is ``manifest`` and whose library has ``size`` bytes
    (and, when ``sha256`` is given, that digest, a callable computing it)."""
    if manifest.get("key") != want_key:
        return f"manifest key {str(manifest.get('key'))[:12]} != {want_key[:12]}"
    if hashlib.sha256(canonical_json(manifest["key_input"])).hexdigest() != manifest["key"]:
        return "manifest key does not match its key_input"
    lib = manifest["library"]
    if size != lib["size"]:
        return f"{LIB_NAME} is {size} bytes, manifest says {lib['size']}"
    if sha256 is not None and sha256() != lib["sha256"]:
        return f"{LIB_NAME} sha256 differs from the manifest"
    return None


def entry_problem(entry: Path, key: str | None = None, *, full: bool = True) -> str | None:
    """Why ``entry`` is not a usable cache entry (None if it is): ``check_entry``'s problem."""
    return check_entry(entry, key, full=full)[0]


def check_entry(entry: Path, key: str | None = None, *, full: bool = True) -> tuple[str | None, str | None]:
    """(why ``entry`` is not usable or None, whether that is because someone else could have put it there:
    ``"foreign"`` where a component belongs to someone else, ``"open"`` where others may write one of yours).

    The same checked open as loading (``open_library``): the ownership walk to the entry, then the manifest
    and the library as regular files inside it, the library's size (and with ``full`` its hash) from its fd.
    So a lookup never reads a planted FIFO or follows a planted link, and an entry only counts as found if
    loading it would pass."""
    try:
        os.close(_open_checked(Path(entry), key, full=full))
    except UnsafeLibraryError as err:
        return getattr(err, "problem", str(err)), "foreign" if getattr(err, "foreign", False) else "open"
    except LibraryLoadError as err:
        return str(err).split(": ", 1)[-1], None
    return None, None


def open_library(entry: Path, key: str | None = None) -> int:
    """A readable fd of ``entry``'s library, checked as it will be loaded (docs/design.md §5 "Trust").

    The entry dir is reached by ``trust.open_path`` (every component passes the ownership test, links
    only if yours or root's), the manifest and the library are opened inside that very directory fd
    without following links and pass the test too, and the library's bytes hashed here, from this fd,
    must match the manifest. Load the fd itself (``library.load_fd``): nothing that happens to the path
    afterwards changes what runs.

    Raises ``UnsafeLibraryError`` (someone else could have put it there: refuse, never move it) or
    ``LibraryLoadError`` (a broken or vanished entry: quarantine and rebuild)."""
    return _open_checked(Path(entry), key, full=True)


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()


def _open_checked(entry: Path, key: str | None, *, full: bool) -> int:
    """``open_library``'s checked open; without ``full`` the library's hash is not computed."""
    so = entry / LIB_NAME
    fds: list[int] = []
    try:
        fds.append(trust.open_path(entry, directory=True))
        fds.append(trust.open_regular(fds[0], entry, MANIFEST_NAME))
        manifest = json.loads(trust.read_all(fds[1], _MANIFEST_LIMIT))
        lib_fd = trust.open_regular(fds[0], entry, LIB_NAME)
        fds.append(lib_fd)
        digest = (lambda: _sha256_fd(lib_fd)) if full else None
        problem = _manifest_problem(manifest, key or entry.name, os.fstat(lib_fd).st_size, digest)
    except trust.Untrusted as err:
        raise unsafe_library_error(so, err.advised(trust.CACHE_ADVICE), err.foreign) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:  # a JSON too deep
        why = f"{err.strerror} ({err.filename})" if isinstance(err, OSError) and err.strerror else f"{err!r}"
        raise LibraryLoadError(f"cannot load kernel library {so}: unreadable entry: {why}") from err
    finally:
        for fd in fds[:2]:
            os.close(fd)
    if problem is not None:
        os.close(lib_fd)
        raise LibraryLoadError(f"cannot load kernel library {so}: {problem}")
    return lib_fd


def load_entry(entry: Path, key: str | None = None) -> library.KernelLibrary:
    """``open_library`` then load that fd."""
    fd = open_library(entry, key)
    try:
        return library.load_fd(fd, Path(entry) / LIB_NAME)
    finally:
        os.close(fd)


def entry_identity(entry: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the directory at ``entry`` now (not followed), or None when nothing is there: which
    entry a check or a load saw, so that a later move cannot take a peer's fresh one by its name."""
    try:
        st = os.lstat(entry)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def quarantine(entry: Path, reason: str, *, expect: tuple[int, int] | None = None) -> Path | None:
    """Move a bad entry to ``quarantine/<key>-<time>/`` with ``reason.txt``; None if it is not moved.

    With ``expect`` (its ``entry_identity`` when it was found bad) only that very directory is moved: ranks
    that found the same entry bad at once each try to move it, and by the time a slower one does, the name
    may hold a peer's fresh, good build (or nothing yet), which is not this process's to move.

    Both directories are reached by the trust walk and the entry is renamed through their fds (the name
    itself moves: a link there is never followed), as every removal in ``layout.remove_tree``."""
    entry = Path(entry)
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {reason}\n"
    try:
        base = version_base(entry)
        name = f"{entry.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        target = base / "quarantine" / name
        parent_fd = trust.open_path(entry.parent, directory=True)
        try:
            if expect is not None and not _still(parent_fd, entry.name, expect):
                log().info("not moving %s: another process has already moved or replaced it", entry)
                return None
            into_fd = trust.open_path(target.parent, create=True, directory=True)
            try:
                # freshened first: the sweep removes a quarantined entry an hour old by its mtime, and a
                # process killed before reason.txt (whose write freshens it too) would leave the build's
                _freshen(parent_fd, entry.name)
                os.rename(entry.name, name, src_dir_fd=parent_fd, dst_dir_fd=into_fd)
                _note_reason(into_fd, name, text)
            finally:
                os.close(into_fd)
        finally:
            os.close(parent_fd)
    except (OSError, ValueError) as err:
        log().warning("cannot quarantine %s: %s", entry, err)
        return None
    log().warning("moved the bad cache entry %s to %s: %s", entry, target, reason)
    return target


def _freshen(dir_fd: int, name: str) -> None:
    """Set ``name``'s times to now (best effort: the move is what matters)."""
    try:
        os.utime(name, dir_fd=dir_fd, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass


def _still(dir_fd: int, name: str, expect: tuple[int, int]) -> bool:
    """Whether ``name`` in ``dir_fd`` is still the directory whose identity is ``expect``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == expect


def _note_reason(dir_fd: int, name: str, text: str) -> None:
    """``reason.txt`` in the quarantined entry ``name`` (best effort: the move is what matters)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            trust.create_file(fd, "reason.txt", text.encode("utf-8", "surrogateescape"), 0o644)
        finally:
            os.close(fd)
    except OSError:
        pass


def unsafe_library_error(so: Path, problem: str, foreign: bool = False) -> UnsafeLibraryError:
    """The refusal to load ``so``: the component that failed, what was found, the fix and the opt-out."""
    err = UnsafeLibraryError(
        f"refusing to load the kernel library {so}: {problem}. Whoever can write there could have "
        "replaced it with their own code, which loading would run in this process. A shared prebuilt "
        "tier must be owned by root (or by you) and writable by nobody else (see the README). If you "
        f"trust everyone who can write there, set {_env.SKIP_PERMISSION_CHECK}=1"
    )
    err.problem = problem  # type: ignore[attr-defined]  # the part `cache verify` prints
    err.foreign = foreign  # type: ignore[attr-defined]  # a component belongs to someone else
    return err


def noexec_mount(path: Path) -> bool:
    """Whether ``path`` is on a filesystem mounted ``noexec``, where the dynamic linker maps no library
    ("failed to map segment from shared object"): a cache root there holds good entries no process can load."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_NOEXEC)
    except (OSError, AttributeError):  # gone, or a platform without the flag
        return False


def missing_dependency(err: LibraryLoadError, so: Path) -> str | None:
    """The shared library that dlopen could not find when loading ``so`` (not ``so`` itself), or None."""
    cause = err.__cause__
    if not isinstance(cause, OSError):
        return None
    m = re.match(r"\s*([^:\s]+): cannot open shared object file", str(cause))
    if m is None or m.group(1).startswith(("/proc/self/fd/", "/dev/fd/")):
        return None
    if os.path.realpath(m.group(1)) == os.path.realpath(so):
        return None
    return m.group(1)
