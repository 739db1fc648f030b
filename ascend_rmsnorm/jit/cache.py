"""The kernel-library cache (docs/design.md §5): key, tiers, atomic publish, self-heal.

Correctness never depends on the lock: every build happens in a private directory and is published
by one ``rename`` of that directory, so readers see either nothing or a complete entry with its
manifest. The node-local ``flock`` only keeps several ranks of one node from compiling the same key.

Layout of one tier::

    <root>/v<N>/<cann-version|emu>/<arch>/<key>/{librmsnorm.so, manifest.json, build.log}
    <root>/v<N>/tmp/<host>-<pid>-<uuid>/     builds in progress (or left by a killed builder)
    <root>/v<N>/failed/<key>/                 the last failed build of a key: build.log + sources
    <root>/v<N>/quarantine/<key>-<time>/      entries that failed to load, with reason.txt

The locks live in ``locks.py``; listing, verifying and cleaning (the ``cache`` command) in ``admin.py``;
whose files are trusted, and the path walk that loads and writes only what it checked, in ``trust.py``.
"""

from __future__ import annotations

import atexit
import contextvars
import errno
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import _env
from .._log import get_logger, log_once, warn_once
from .._version import __version__
from ..errors import CacheWriteError, KernelCompileError, KernelNotCachedError, LibraryLoadError, UnsafeLibraryError
from . import build, library, toolchain, trust
from ._fs import mkdirs as _mkdirs
from ._fs import remove_tree_at as _remove_tree_at
from ._fs import safe_mode as _safe_mode
from .elf import ELF_MAGIC, NotELFError, symbols_in
from .locks import build_lock, lock_dir
from .toolchain import Toolchain
from .trust import unsafe_reason  # noqa: F401 - part of this module's interface (admin, tests)

#: Bump by hand when the layout, the manifest or the key's meaning changes.
CACHE_FORMAT = 1
KERNEL_NAME = "rmsnorm"
MAIN_SOURCE = "rmsnorm.asc"
LIB_NAME = "librmsnorm.so"
MANIFEST_NAME = "manifest.json"
LOG_NAME = "build.log"
ABI_SYMBOL = "ascend_rmsnorm_abi_version"
#: Every library built from ``kernels/``: name -> (its source, the symbol a good build exports). Each has
#: its own key (the name is in it) and so its own entry; the calibration kernels (``bench --calibrate``)
#: are loaded by ``perf/calibrate.py``, never as the rmsnorm library.
KERNEL_SOURCES = {
    KERNEL_NAME: (MAIN_SOURCE, ABI_SYMBOL),
    "calibrate": ("calibrate.asc", "ascend_rmsnorm_calibrate_version"),
}

ENV_JIT = _env.JIT
ENV_CACHE_DIR = _env.CACHE_DIR
ENV_PREBUILT_DIR = _env.PREBUILT_DIR

#: Environment variables that change generated code and so belong in the key (none yet; keep the list).
KEY_ENV_VARS: tuple[str, ...] = ()

#: The shipped kernel sources; every file below is hashed by content and compiled from a copy.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
KERNELS_DIR = PACKAGE_DIR / "kernels"

_UNWRITABLE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}
_NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph", "fuse")

log = get_logger  # called, never at import


def jit_mode() -> str:
    """``import`` (default: build when ``import ascend_rmsnorm`` finds an NPU), ``lazy`` or ``off`` (never compile)."""
    return _env.get(ENV_JIT)


# --------------------------------------------------------------------------------------------------- key


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _kernel_files(kernels_dir: Path) -> list[tuple[str, Path]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(kernels_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            path = Path(dirpath) / name
            out.append((path.relative_to(kernels_dir).as_posix(), path))
    return sorted(out)


_hash_memo: dict[tuple, dict[str, str]] = {}


def source_hashes(kernels_dir: Path | None = None) -> dict[str, str]:
    """sha256 of every file under ``kernels/`` by relative name (memoised on the files' stat)."""
    kernels_dir = Path(kernels_dir or KERNELS_DIR)
    files = _kernel_files(kernels_dir)
    stats = [(rel, p.stat()) for rel, p in files]
    stamp = (str(kernels_dir),) + tuple((rel, st.st_size, st.st_mtime_ns, st.st_ino) for rel, st in stats)
    found = _hash_memo.get(stamp)
    if found is None:
        found = _hash_memo[stamp] = {rel: _sha256_file(p) for rel, p in files}
    return found


def _host_abi() -> dict[str, str]:
    import platform

    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    return {"machine": platform.machine(), "libc": libc}


@dataclass(frozen=True)
class BuildSpec:
    """One target: what to compile, how, and the key that names the result."""

    toolchain: Toolchain
    arch: str
    kernels_dir: Path
    argv: tuple[str, ...]  # run inside the build dir: relative source and output (the last command)
    key_input: dict
    key: str
    commands: tuple[tuple[str, ...], ...] = ()  # every command, in order (the legacy build has two)
    kernel: str = KERNEL_NAME  # which of KERNEL_SOURCES

    @property
    def short(self) -> str:
        return self.key[:12]


def build_spec(tc: Toolchain, arch: str, kernels_dir: Path | None = None, kernel: str = KERNEL_NAME) -> BuildSpec:
    """The key (K1) and command for ``tc`` + ``arch``; nothing here depends on where the package is installed."""
    kernels_dir = Path(kernels_dir or KERNELS_DIR)
    if kernel not in KERNEL_SOURCES:
        raise ValueError(f"unknown kernel library {kernel!r}; known: {', '.join(KERNEL_SOURCES)}")
    commands = build.compile_commands(tc, arch, f"src/{KERNEL_SOURCES[kernel][0]}", LIB_NAME)
    argv = commands[-1]
    placeholders = {str(PACKAGE_DIR): "$PKG", str(kernels_dir): "$KERNELS"}
    key_input = {
        "cache_format": CACHE_FORMAT,
        "package_version": __version__,
        "kernel": kernel,
        "sources": source_hashes(kernels_dir),
        "toolchain": tc.fingerprint(),
        "arch": arch,
        "argv": build.normalise_argv(argv, placeholders)
        if len(commands) == 1
        else [build.normalise_argv(c, placeholders) for c in commands],
        "env": {name: os.environ.get(name) for name in KEY_ENV_VARS},
        "host": _host_abi(),
    }
    key = hashlib.sha256(_canonical(key_input)).hexdigest()
    return BuildSpec(tc, arch, kernels_dir, tuple(argv), key_input, key, tuple(tuple(c) for c in commands), kernel)


# --------------------------------------------------------------------------------------------------- tiers


def cache_root(cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """(the writable root, whether it is the default): ``cache_dir``, ``ASCEND_RMSNORM_CACHE_DIR``, platformdirs."""
    if cache_dir:
        return Path(os.path.abspath(os.path.expanduser(str(cache_dir)))), False
    env = _env.get(ENV_CACHE_DIR)
    if env is not None:
        return env, False
    import platformdirs  # deferred: only a lookup needs it

    return Path(platformdirs.user_cache_dir("ascend_rmsnorm", appauthor=False)), True


def prebuilt_dirs() -> list[Path]:
    """The read-only tiers from ``ASCEND_RMSNORM_PREBUILT_DIR`` (an ``os.pathsep`` list), in order."""
    return list(_env.get(ENV_PREBUILT_DIR))


_state_lock = threading.RLock()
_writable: dict[Path, OSError | None] = {}
_private_root: Path | None = None
_bad_entries: set[Path] = set()  # read-only entries that failed to load in this process


def writable_error(root: Path) -> OSError | None:
    """None if ``root`` may and can be written; else the error (memoised per process).

    May: before anything is written, every existing component from ``/`` down to ``<root>/v<N>/tmp``
    passes the loader's ownership test (``trust.Untrusted`` otherwise), and the missing ones are created
    one by one inside components that just passed. Can: a real file is then created and removed there."""
    with _state_lock:
        if root in _writable:
            return _writable[root]
    try:
        tmp_fd = trust.open_path(root / f"v{CACHE_FORMAT}" / "tmp", create=True, directory=True)
        try:
            name = f".probe-{uuid.uuid4().hex}"
            try:
                fd = os.open(name, trust.CREATE_FLAGS, 0o600, dir_fd=tmp_fd)
                try:
                    os.write(fd, b"probe")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                    os.unlink(name, dir_fd=tmp_fd)
            except OSError as err:
                raise OSError(err.errno, err.strerror, str(root / f"v{CACHE_FORMAT}" / "tmp" / name)) from err
        finally:
            os.close(tmp_fd)
        result = None
    except OSError as err:
        result = err
    with _state_lock:
        _writable[root] = result
    return result


def private_root() -> Path:
    """This process's private temp root, used when the cache root cannot be written (removed at exit).

    Raises ``CacheWriteError`` when there is no usable temp dir either."""
    global _private_root
    with _state_lock:
        if _private_root is None:
            try:
                made = Path(tempfile.mkdtemp(prefix=f"ascend_rmsnorm-{os.getuid()}-"))
            except OSError as err:  # FileNotFoundError "No usable temporary directory" included
                raise CacheWriteError(
                    f"no usable temporary directory for a private kernel build ({err}); "
                    f"set TMPDIR to a writable directory, or {ENV_CACHE_DIR} to a writable cache"
                ) from err
            atexit.register(shutil.rmtree, str(made), True)
            try:
                os.close(trust.open_path(made, directory=True))
            except OSError as err:  # a TMPDIR inside someone else's tree
                raise CacheWriteError(
                    f"the private build dir {made} is not safe to use: {describe_os_error(err, made)}; "
                    f"set TMPDIR to a directory of your own, or {ENV_CACHE_DIR} to a cache only you can write"
                ) from err
            _private_root = made
        return _private_root


def _use_private(root: Path, err: OSError) -> Path:
    private = private_root()
    if isinstance(err, trust.Untrusted):
        warn_once(
            "private-root",
            "the kernel cache %s is not safe to write into: %s. This process builds into the private temp dir "
            "%s instead. Set %s to a directory that only you (or root) can write, or run `ascend-rmsnorm warm "
            "--cache-dir DIR` there",
            root,
            err.problem,
            private,
            ENV_CACHE_DIR,
        )
        return private
    warn_once(
        "private-root",
        "the kernel cache %s is not writable (%s); this process builds into the private temp dir %s. "
        "Set %s to a writable directory, or run `ascend-rmsnorm warm` where the cache is writable",
        root,
        describe_os_error(err, root),
        private,
        ENV_CACHE_DIR,
    )
    return private


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _blocking_file(path: Path) -> Path | None:
    """The nearest component of ``path`` (itself or a parent) that exists and is not a directory."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def describe_os_error(err: OSError, path: Path | None = None) -> str:
    """What an OSError from writing the cache means, in words (with the free space for a full disk)."""
    if isinstance(err, trust.Untrusted):
        return f"not safe to write into: {err.problem}"
    where = Path(err.filename) if getattr(err, "filename", None) else path
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = getattr(err, "free_bytes", None)
        when = "when it failed"
        if free is None and where is not None:
            free, when = build.free_bytes(where), "now"
        room = f", {_human_bytes(free)} free there {when}" if free is not None else ""
        what = "disk quota exceeded" if err.errno == errno.EDQUOT else "no space left on the device"
        detail = f": {err.strerror}" if err.strerror and err.strerror != os.strerror(err.errno) else ""
        return f"{what} ({where}{room}){detail}"
    if err.errno == errno.EROFS:
        return f"read-only file system ({where})"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied ({where})"
    if err.errno in (errno.ENOTDIR, errno.EEXIST) and path is not None:
        blocker = _blocking_file(Path(path))
        if blocker is not None:
            return f"{blocker} is a file, not a directory"
    return f"{err.strerror or err} ({where})"


def cache_origin(cache_dir: str | Path | None) -> str:
    """How the writable root was chosen, for messages: the option, the variable or the default."""
    if cache_dir:
        return "--cache-dir"
    if _env.get(ENV_CACHE_DIR) is not None:
        return ENV_CACHE_DIR
    return "the default cache dir"


def unwritable_error(root: Path, err: OSError, cache_dir: str | Path | None) -> CacheWriteError:
    """The error for a cache root that cannot be written, with advice that fits where the root came from."""
    origin = cache_origin(cache_dir)
    reason = describe_os_error(err, root)
    if origin == "--cache-dir":
        advice = "give a directory you can write (it is created if missing)"
    elif origin == ENV_CACHE_DIR:
        advice = f"set {ENV_CACHE_DIR} to a directory you can write, or pass --cache-dir"
    else:
        advice = f"pass --cache-dir DIR or set {ENV_CACHE_DIR} to a directory you can write"
    return CacheWriteError(f"cannot write the kernel cache {root} ({origin}): {reason}; {advice}")


@dataclass(frozen=True)
class Tier:
    kind: str  # prebuilt | writable | private
    path: Path


def tiers(cache_dir: str | Path | None = None) -> list[Tier]:
    """The search order: prebuilt dirs, the writable root, then this process's private root if it has one."""
    out = [Tier("prebuilt", p) for p in prebuilt_dirs()]
    out.append(Tier("writable", cache_root(cache_dir)[0]))
    with _state_lock:
        if _private_root is not None:
            out.append(Tier("private", _private_root))
    return out


def entry_dir(root: Path, spec: BuildSpec) -> Path:
    return Path(root) / f"v{CACHE_FORMAT}" / spec.toolchain.cache_dirname / spec.arch / spec.key


def read_manifest(entry: Path) -> dict | None:
    try:
        data = json.loads((Path(entry) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _manifest_problem(manifest: dict, want_key: str, size: int, sha256=None) -> str | None:
    """What is wrong with an entry whose manifest is ``manifest`` and whose library has ``size`` bytes
    (and, when ``sha256`` is given, that digest, a callable computing it)."""
    if manifest.get("key") != want_key:
        return f"manifest key {str(manifest.get('key'))[:12]} != {want_key[:12]}"
    if hashlib.sha256(_canonical(manifest["key_input"])).hexdigest() != manifest["key"]:
        return "manifest key does not match its key_input"
    lib = manifest["library"]
    if size != lib["size"]:
        return f"{LIB_NAME} is {size} bytes, manifest says {lib['size']}"
    if sha256 is not None and sha256() != lib["sha256"]:
        return f"{LIB_NAME} sha256 differs from the manifest"
    return None


def entry_problem(entry: Path, key: str | None = None, *, full: bool = True) -> str | None:
    """Why ``entry`` is not a usable cache entry (None if it is). Any read error counts as a problem (P4).

    By path, for lookups and listings; what is loaded is checked again, from the fds, by ``open_library``."""
    entry = Path(entry)
    manifest = read_manifest(entry)
    if manifest is None:
        return "no readable manifest.json"
    try:
        so = entry / LIB_NAME
        digest = (lambda: _sha256_file(so)) if full else None
        return _manifest_problem(manifest, key or entry.name, so.stat().st_size, digest)
    except (OSError, KeyError, TypeError) as err:
        return f"unreadable entry: {err}"


#: A manifest is a few KiB; anything far larger is not one (and is not read whole).
_MANIFEST_LIMIT = 1 << 24


def open_library(entry: Path, key: str | None = None) -> int:
    """A readable fd of ``entry``'s library, checked as it will be loaded (docs/design.md §5 "Trust").

    The entry dir is reached by ``trust.open_path`` (every component passes the ownership test, links
    only if yours or root's), the manifest and the library are opened inside that very directory fd
    without following links and pass the test too, and the library's bytes hashed here, from this fd,
    must match the manifest. Load the fd itself (``library.load_fd``): nothing that happens to the path
    afterwards changes what runs.

    Raises ``UnsafeLibraryError`` (someone else could have put it there: refuse, never move it) or
    ``LibraryLoadError`` (a broken or vanished entry: quarantine and rebuild)."""
    entry = Path(entry)
    so = entry / LIB_NAME
    fds: list[int] = []
    try:
        fds.append(trust.open_path(entry, directory=True))
        fds.append(trust.open_regular(fds[0], entry, MANIFEST_NAME))
        manifest = json.loads(trust.read_all(fds[1], _MANIFEST_LIMIT))
        lib_fd = trust.open_regular(fds[0], entry, LIB_NAME)
        fds.append(lib_fd)
        data = trust.read_all(lib_fd)
        problem = _manifest_problem(manifest, key or entry.name, len(data), lambda: hashlib.sha256(data).hexdigest())
    except trust.Untrusted as err:
        raise unsafe_library_error(so, err.problem) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
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


def lookup(spec: BuildSpec, cache_dir: str | Path | None = None, *, only: Path | None = None) -> Path | None:
    """The first valid entry for ``spec`` in the tiers (or in the root ``only``), or None."""
    for tier in tiers(cache_dir) if only is None else [Tier("writable", only)]:
        entry = entry_dir(tier.path, spec)
        if entry in _bad_entries or not entry.is_dir():
            continue
        problem = entry_problem(entry, spec.key)
        if problem is None:
            return entry
        log().debug("cache entry %s is not usable: %s", entry, problem)
    return None


# --------------------------------------------------------------------------------------------------- publish


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories
    finally:
        os.close(fd)


def _version_base(path: Path) -> Path:
    """The ``<root>/v<N>`` directory above an entry or temp dir."""
    for parent in Path(path).parents:
        if parent.name == f"v{CACHE_FORMAT}":
            return parent
    raise ValueError(f"{path} is not inside a v{CACHE_FORMAT} cache tree")


def _rmtree(path: Path) -> str | None:
    """Delete ``path`` entirely; None if it is gone afterwards, else the first reason it is not."""
    errors: list[str] = []

    def note(func, failed, err):
        if isinstance(err, tuple):  # onerror's exc_info (Python < 3.12)
            err = err[1]
        if not isinstance(err, FileNotFoundError):
            errors.append(f"{failed}: {getattr(err, 'strerror', None) or err}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=note)
    else:
        shutil.rmtree(path, onerror=note)
    if not os.path.lexists(path):
        return None
    return errors[0] if errors else "still there after removing it"


def remove_tree(path: Path) -> str | None:
    """Delete by renaming into ``trash/`` first, so a half-deleted entry is never visible under its name.

    Returns None when ``path`` is gone, else why it could not be removed (a read-only cache, say)."""
    path = Path(path)
    try:
        trash = _version_base(path) / "trash" / uuid.uuid4().hex
        _mkdirs(trash.parent)
        os.rename(path, trash)
    except (OSError, ValueError) as err:
        why = _rmtree(path)  # cannot rename it away (not a cache tree, or read-only): delete in place
        if why is not None and isinstance(err, OSError) and err.errno != errno.ENOENT:
            return describe_os_error(err, path)  # the first refusal says most
        return why
    _rmtree(trash)  # gone from its name already; a failure here leaves only trash, swept later
    return None


#: Leftovers (a killed build's tmp dir, quarantined and trashed entries) older than this are swept by
#: the next build and by ``cache clean``.
LEFTOVER_AGE_S = 3600.0


def sweep_leftovers(root: Path, *, older_than_s: float = LEFTOVER_AGE_S) -> list[Path]:
    """Remove ``tmp/``, ``quarantine/`` and ``trash/`` children older than ``older_than_s``; returns what went.

    Age only (never "its pid is dead"): a builder in another container with the same host name may be
    alive under a pid we cannot see. A build never takes an hour, so an hour-old tmp dir is a leftover.
    """
    base = Path(root) / f"v{CACHE_FORMAT}"
    now = time.time()
    removed = []
    for sub in ("tmp", "quarantine", "trash"):
        try:
            children = list((base / sub).iterdir())
        except OSError:
            continue
        for child in children:
            try:
                age = now - child.lstat().st_mtime
            except OSError:
                continue
            if age > older_than_s and (sub == "trash" or child.is_dir()):
                if (_rmtree(child) if sub == "trash" else remove_tree(child)) is None:
                    removed.append(child)
    return removed


def quarantine(entry: Path, reason: str) -> Path | None:
    """Move a bad entry to ``quarantine/<key>-<time>/`` with ``reason.txt``; None if it cannot be moved."""
    entry = Path(entry)
    try:
        base = _version_base(entry)
        target = base / "quarantine" / f"{entry.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        _mkdirs(target.parent)
        os.rename(entry, target)
    except (OSError, ValueError) as err:
        log().warning("cannot quarantine %s: %s", entry, err)
        return None
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {reason}\n"
    try:
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            trust.create_file(fd, "reason.txt", text.encode("utf-8", "surrogateescape"), 0o644)
        finally:
            os.close(fd)
    except OSError:
        pass
    log().warning("moved the bad cache entry %s to %s: %s", entry, target, reason)
    return target


def _open_output(work_fd: int, symbol: str = ABI_SYMBOL) -> tuple[int | None, bytes, str | None]:
    """(fd, bytes, None) of the library the compiler left in the build dir ``work_fd``, or (None, b"", why
    it is unusable). Opened without following links; a file that is not ours is not our build."""
    try:
        fd = os.open(LIB_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=work_fd)
    except OSError as err:
        return None, b"", f"no output library: {err.strerror or err}"
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        problem = f"{LIB_NAME} is not a regular file made by this build"
    data = b"" if problem else trust.read_all(fd)
    if problem is None and data[:4] != ELF_MAGIC:
        problem = f"{LIB_NAME} is not an ELF file"
    if problem is None:
        try:
            if symbol not in symbols_in(data):
                problem = f"{LIB_NAME} does not export {symbol}"
        except NotELFError as err:
            problem = f"{LIB_NAME} is not a readable shared object: {err}"
    if problem is not None:
        os.close(fd)
        return None, b"", problem
    return fd, data, None


def _fs_type(path: Path) -> str | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    target = os.path.realpath(path)
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
    return fstype


def _note_network_fs(root: Path) -> None:
    fstype = _fs_type(root)
    if fstype and fstype.split(".")[0] in _NETWORK_FS:
        log_once(
            f"fs:{root}",
            logging.INFO,
            "kernel cache %s is on %s; build locks are node-local (%s)",
            root,
            fstype,
            lock_dir(),
        )


def _describe(spec: BuildSpec) -> str:
    what = "kernels" if spec.kernel == KERNEL_NAME else f"{spec.kernel} kernels"
    return f"ascend-rmsnorm {what} for {spec.arch} with {spec.toolchain.describe()}"


def _copy_sources(src: Path, dst_fd: int, dst: Path) -> dict[str, str]:
    """Copy the kernel sources into the directory ``dst_fd`` (shown as ``dst``), each file created
    ``O_EXCL | O_NOFOLLOW``; returns the sha256 of what was written, by relative name. A failure is one
    ``OSError`` naming the path being written."""
    written: dict[str, str] = {}
    for rel, path in _kernel_files(src):
        parts = rel.split("/")
        fd = os.dup(dst_fd)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    os.mkdir(part, _safe_mode(0o755), dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as err:
                    raise OSError(err.errno, err.strerror, str(dst.joinpath(*parts[: i + 1]))) from err
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = sub
            data = path.read_bytes()
            trust.create_file(fd, parts[-1], data, 0o644, shown=dst / rel)
            written[rel] = hashlib.sha256(data).hexdigest()
        finally:
            os.close(fd)
    return written


def _temp_dir_usable() -> bool:
    try:
        tempfile.gettempdir()
        return True
    except (OSError, FileNotFoundError):
        return False


def _publish_build(spec: BuildSpec, root: Path) -> Path:
    """Compile ``spec`` in a private dir under ``root`` and rename it into place; returns the entry dir.

    Everything goes through directory fds: the build dir is made (mode 0700) inside the checked
    ``tmp/`` fd, the sources, the log and the manifest are created in it ``O_EXCL | O_NOFOLLOW``, the
    compiler runs with that very directory as its working directory, its output is opened there without
    following links, and what is renamed into place is checked to be that directory. Any exception
    leaves nothing behind but a kept failure in ``failed/<key>`` (a compile error, with its log and
    sources); an ``OSError`` (full disk, read-only, not safe to write) propagates for ``_build_locked``.
    """
    base = root / f"v{CACHE_FORMAT}"
    sweep_leftovers(root)
    tmp = base / "tmp"
    tmp_fd = trust.open_path(tmp, create=True, directory=True)
    try:
        host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname()) or "host"
        name = f"{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        work = tmp / name
        try:
            os.mkdir(name, 0o700, dir_fd=tmp_fd)
            work_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(work)) from err
        try:
            made = os.fstat(work_fd)
            if made.st_uid != os.getuid() or stat.S_IMODE(made.st_mode) & 0o077:
                raise _replaced(work, tmp)
            return _build_in(spec, root, work, _WorkDir(tmp_fd, name, work_fd, made))
        finally:
            os.close(work_fd)
    finally:
        os.close(tmp_fd)


@dataclass(frozen=True)
class _WorkDir:
    """A build dir: the ``tmp/`` fd, its name there, its own fd and its stat when made (its identity)."""

    tmp_fd: int
    name: str
    fd: int
    made: os.stat_result

    def still_named(self) -> bool:
        try:
            return trust.same_file(os.stat(self.name, dir_fd=self.tmp_fd, follow_symlinks=False), self.made)
        except OSError:
            return False

    def remove(self) -> None:
        """Delete the build dir, by name only while the name is still this directory."""
        if self.still_named():
            try:
                _remove_tree_at(self.tmp_fd, self.name)
            except OSError:
                pass  # left for the sweep


def _replaced(work: Path, tmp: Path) -> trust.Untrusted:
    return trust.Untrusted(
        work,
        f"the build dir {work} was replaced while this process was building in it, so someone else can "
        f"write {tmp}; nothing was published (fix: use a cache only you can write)",
    )


def _build_in(spec: BuildSpec, root: Path, work: Path, wd: _WorkDir) -> Path:
    failed_dir = root / f"v{CACHE_FORMAT}" / "failed" / spec.key
    what = _describe(spec)
    kept = False
    try:
        try:
            os.mkdir("src", _safe_mode(0o755), dir_fd=wd.fd)
            src_fd = os.open("src", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(work / "src")) from err
        try:
            written = _copy_sources(spec.kernels_dir, src_fd, work / "src")
        finally:
            os.close(src_fd)
        if written != spec.key_input["sources"]:
            raise KernelCompileError(f"the kernel sources in {spec.kernels_dir} changed during the build; retry")
        env = None
        if not _temp_dir_usable():  # the compiler needs a temp dir too: give it one inside the build dir
            os.mkdir(".tmp", 0o700, dir_fd=wd.fd)
            env = {**os.environ, "TMPDIR": str(work / ".tmp")}
        _note_network_fs(root)
        log().info("compiling %s; %s", what, _why_now.get())
        try:
            commands = [list(c) for c in spec.commands]
            result = build.run_compiler(
                commands, work, work / LOG_NAME, failed_dir=failed_dir, what=what, env=env, dir_fd=wd.fd
            )
        except KernelCompileError:
            kept = True  # moved to failed/<key> (or, if that was impossible, left for the sweep)
            raise
        lib_fd, data, problem = _open_output(wd.fd, KERNEL_SOURCES[spec.kernel][1])
        if problem is not None:
            fd = os.open(LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
            try:
                os.write(fd, os.fsencode(f"# rejected: {problem}\n"))
            finally:
                os.close(fd)
            bad = build.CompileResult(
                result.argv, 0, result.output + f"\n[ascend-rmsnorm] {problem}\n", result.seconds, result.log_path
            )
            kept = True
            raise build.compile_failure(
                bad, work, failed_dir, what + " (the compiler said ok but its output is unusable)"
            )
        try:
            entry = _commit(spec, root, work, wd, lib_fd, data, result)
        finally:
            os.close(lib_fd)
    except BaseException as err:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT) and not hasattr(err, "free_bytes"):
            err.free_bytes = build.free_bytes(work)  # type: ignore[attr-defined]  # before the cleanup frees it
        if not kept:
            wd.remove()  # no half-finished build left behind (a no-op once renamed)
        raise
    log().info("built %s in %.1f s -> %s", what, result.seconds, entry)
    return entry


def _commit(
    spec: BuildSpec, root: Path, work: Path, wd: _WorkDir, lib_fd: int, data: bytes, result: build.CompileResult
) -> Path:
    """Write the manifest last (with the sha256 of the bytes read from ``lib_fd``), fsync, rename into place."""
    for scratch in ("src", ".tmp"):
        _remove_tree_at(wd.fd, scratch)
    manifest = {
        "manifest_format": 1,
        "key": spec.key,
        "key_input": spec.key_input,
        "library": {"file": LIB_NAME, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)},
        "built": {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "unix_time": time.time(),
            "seconds": round(result.seconds, 3),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": list(spec.argv) if len(spec.commands) == 1 else [list(c) for c in spec.commands],
        },
    }
    os.fchmod(lib_fd, _safe_mode(0o755))
    os.fsync(lib_fd)
    log_fd = os.open(LOG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
    try:
        os.fchmod(log_fd, _safe_mode(0o644))
        os.fsync(log_fd)
    finally:
        os.close(log_fd)
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    # last: it marks the entry complete
    trust.create_file(wd.fd, MANIFEST_NAME, text.encode("utf-8", "surrogateescape"), 0o644, shown=work / MANIFEST_NAME)
    os.fchmod(wd.fd, _safe_mode(0o755))
    try:
        os.fsync(wd.fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories
    return _rename_into_place(work, entry_dir(root, spec), spec, wd)


def _rename_into_place(work: Path, final: Path, spec: BuildSpec, wd: _WorkDir) -> Path:
    """Publish ``work`` as ``final``; a peer's valid entry wins; a stale invalid one is quarantined first.

    Only the directory this process built in is published: its name is checked to still be it before
    the rename, and the name it lands on after it (a swap in between is undone into quarantine)."""
    tmp = work.parent
    parent_fd = trust.open_path(final.parent, create=True, directory=True)
    try:
        for attempt in range(2):
            if not wd.still_named():
                raise _replaced(work, tmp)
            try:
                os.rename(wd.name, final.name, src_dir_fd=wd.tmp_fd, dst_dir_fd=parent_fd)
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            else:
                landed = os.stat(final.name, dir_fd=parent_fd, follow_symlinks=False)
                if not trust.same_file(landed, wd.made):
                    quarantine(final, "not the build dir this process made (it was swapped during the rename)")
                    raise _replaced(work, tmp)
                _fsync_path(final.parent)
                return final
            problem = entry_problem(final, spec.key)
            if problem is None:  # another builder won the race: use its entry
                wd.remove()
                return final
            if attempt == 0:
                quarantine(final, f"replaced by a fresh build: {problem}")
    finally:
        os.close(parent_fd)
    log().warning("cannot publish %s at %s; using this process's own copy", spec.short, final)
    return work


def _build_locked(
    spec: BuildSpec, cache_dir: str | Path | None, *, private_ok: bool = True, target_only: bool = False
) -> tuple[str, Path]:
    """Build ``spec`` unless a peer does it first (re-checked after taking the lock).

    ``private_ok``: when the cache root cannot be written (up front, or ENOSPC/EROFS/EACCES mid-build),
    build into this process's private temp root instead, with one warning; without it, that is a
    ``CacheWriteError``. Every ``OSError`` of a build comes out as a ``CacheWriteError`` naming the path.
    """
    root = cache_root(cache_dir)[0]
    err = writable_error(root)
    if err is not None:
        if not private_ok:
            raise unwritable_error(root, err, cache_dir)
        root = _use_private(root, err)
    only = root if target_only else None
    try:
        with build_lock(spec.key):
            found = lookup(spec, cache_dir, only=only)
            if found is not None:
                return "hit", found
            try:
                return "built", _publish_build(spec, root)
            except OSError as err:
                if not private_ok or root == _private_root or err.errno not in _UNWRITABLE_ERRNOS:
                    raise
                with _state_lock:
                    _writable[cache_root(cache_dir)[0]] = err
                return "built", _publish_build(spec, _use_private(root, err))
    except OSError as err:
        raise CacheWriteError(
            f"building {_describe(spec)} into {root} failed: {describe_os_error(err, root)}. Nothing was "
            f"published and nothing partial is left. Free some space or point {ENV_CACHE_DIR} "
            "(warm: --cache-dir) at another filesystem"
        ) from err
    except shutil.Error as err:  # not raised by our own copy; kept so that no raw list ever escapes
        raise CacheWriteError(f"building {_describe(spec)} into {root} failed: {err}") from err


# --------------------------------------------------------------------------------------------------- public


def warm_command(spec_or_kind: BuildSpec | str, arch: str | None = None, cache_dir: str | Path | None = None) -> str:
    """The exact ``ascend-rmsnorm warm`` command line that would build this target."""
    if isinstance(spec_or_kind, BuildSpec):
        kind, arch = spec_or_kind.toolchain.kind, spec_or_kind.arch
    else:
        kind = spec_or_kind
    argv = ["ascend-rmsnorm", "warm", "--arch", str(arch), "--toolchain", kind]
    root, is_default = cache_root(cache_dir)
    if not is_default:
        argv += ["--cache-dir", str(root)]
    return shlex.join(argv)


def _not_cached(spec: BuildSpec, cache_dir: str | Path | None, extra: str = "") -> KernelNotCachedError:
    searched = "\n".join(f"  {t.kind}: {entry_dir(t.path, spec)}" for t in tiers(cache_dir))
    return KernelNotCachedError(
        f"no cached ascend-rmsnorm kernel library for {spec.toolchain.kind} {spec.arch} "
        f"({spec.toolchain.describe()}, key {spec.short}) and {ENV_JIT}=off forbids compiling.{extra}\n"
        f"Searched:\n{searched}\n"
        f"Build it once with:\n  {warm_command(spec, cache_dir=cache_dir)}"
    )


#: Why a build happens now, for its "compiling ..." log line: a library call's first use, unless
#: ``ensure_built`` (what ``warm`` runs) builds ahead of use.
_why_now = contextvars.ContextVar("why_now", default="first use only; `ascend-rmsnorm warm` precompiles")


def ensure_built(
    tc: Toolchain,
    arch: str,
    *,
    cache_dir: str | Path | None = None,
    kernels_dir: Path | None = None,
    private_ok: bool = True,
    target_only: bool = False,
    kernel: str = KERNEL_NAME,
) -> tuple[str, Path]:
    """("hit" | "built", entry dir) for ``tc`` + ``arch``; compiles if missing, whatever ``ASCEND_RMSNORM_JIT`` says.

    This is what ``ascend-rmsnorm warm`` runs; it does not load the library (a build host may lack the NPU
    runtime), but a build is only published after its ELF export table shows the ABI symbol. With
    ``private_ok=False`` an unwritable cache root is an error instead of a per-process temp dir. With
    ``target_only`` only the writable root counts as a hit (``warm --cache-dir D`` fills D).
    """
    arch = toolchain.check_supported(arch)
    spec = build_spec(tc, arch, kernels_dir, kernel)
    found = lookup(spec, cache_dir, only=cache_root(cache_dir)[0] if target_only else None)
    if found is not None:
        return "hit", found
    token = _why_now.set("ahead of use, once per toolchain and arch")
    try:
        return _build_locked(spec, cache_dir, private_ok=private_ok, target_only=target_only)
    finally:
        _why_now.reset(token)


_libraries: dict[tuple, library.KernelLibrary] = {}
_libraries_lock = threading.RLock()


def get_library(
    tc: Toolchain, arch: str, *, cache_dir: str | Path | None = None, kernels_dir: Path | None = None
) -> library.KernelLibrary:
    """The loaded kernel library for ``tc`` + ``arch``: process memo, then the tiers, then a build under lock.

    With ``ASCEND_RMSNORM_JIT=off`` a miss raises ``KernelNotCachedError`` naming the warm command. A
    cached library that fails to load is quarantined and rebuilt once; a second failure raises with both.
    """
    memo_key = (
        tc,
        arch,
        str(kernels_dir or KERNELS_DIR),
        str(cache_dir or ""),
        os.environ.get(ENV_CACHE_DIR),
        os.environ.get(ENV_PREBUILT_DIR),
    )
    found = _libraries.get(memo_key)
    if found is not None:
        return found
    if tc.kind == "emu":
        _env.check_emu()  # the C++ emulation reads these itself; a bad value is reported here, once
    with _libraries_lock:
        found = _libraries.get(memo_key)
        if found is None:
            try:
                found = _load_or_build(tc, arch, cache_dir, kernels_dir)
            except OSError as err:  # a package error, so that `auto` falls back with its one warning
                why = describe_os_error(err)
                raise CacheWriteError(f"getting the kernel library for {arch} failed: {why}") from err
            _libraries[memo_key] = found
        return found


def _find_or_build(spec: BuildSpec, cache_dir: str | Path | None, extra: str = "") -> Path:
    found = lookup(spec, cache_dir)
    if found is not None:
        return found
    if jit_mode() == "off":
        raise _not_cached(spec, cache_dir, extra)
    return _build_locked(spec, cache_dir)[1]


def _load_or_build(tc: Toolchain, arch: str, cache_dir: str | Path | None, kernels_dir: Path | None):
    arch = toolchain.check_supported(arch)
    spec = build_spec(tc, arch, kernels_dir)
    entry = _find_or_build(spec, cache_dir)
    try:
        return load_entry(entry, spec.key)
    except UnsafeLibraryError:
        raise  # refused, never quarantined: it is not ours to move
    except LibraryLoadError as first:
        missing = missing_dependency(first, entry / LIB_NAME)
        if missing is not None:  # the environment's fault, not the entry's: keep it, say what to fix
            raise LibraryLoadError(
                f"{first}\nThe library itself is fine, but the dynamic linker cannot find {missing}, which it needs: "
                "`source` CANN's set_env.sh (it sets LD_LIBRARY_PATH) on this host"
            ) from first
        if quarantine(entry, str(first)) is None:
            with _state_lock:
                _bad_entries.add(entry)  # a read-only tier: skip it from now on
        try:
            entry2 = _find_or_build(spec, cache_dir, f" (the cached library {entry} failed to load: {first})")
        except KernelNotCachedError:
            raise
        except Exception as second:
            raise LibraryLoadError(
                f"the kernel library for {arch} failed to load and rebuilding it failed too.\n"
                f"first ({entry}): {first}\nrebuild: {second}"
            ) from second
        try:
            # A rebuilt entry may reuse the path of one that is still mapped; loading goes by inode and
            # through a fresh fd name, so it is the new library that runs.
            return load_entry(entry2, spec.key)
        except UnsafeLibraryError:
            raise
        except LibraryLoadError as second:
            raise LibraryLoadError(
                f"the kernel library for {arch} failed to load twice, even after a rebuild.\n"
                f"first ({entry}): {first}\nafter rebuilding ({entry2}): {second}"
            ) from second


# --------------------------------------------------------------------------------------------------- permissions


def unsafe_library_error(so: Path, problem: str) -> UnsafeLibraryError:
    """The refusal to load ``so``: the component that failed, what was found, the fix and the opt-out."""
    err = UnsafeLibraryError(
        f"refusing to load the kernel library {so}: {problem}. Whoever can write there could have "
        "replaced it with their own code, which loading would run in this process. A shared prebuilt "
        "tier must be owned by root (or by you) and writable by nobody else (see the README). If you "
        f"trust everyone who can write there, set {_env.SKIP_PERMISSION_CHECK}=1"
    )
    err.problem = problem  # type: ignore[attr-defined]  # the part `cache verify` prints
    return err


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


def reset() -> None:
    """Forget memoised libraries, probes and the private root (tests)."""
    global _private_root
    with _libraries_lock, _state_lock:
        _libraries.clear()
        _writable.clear()
        _bad_entries.clear()
        _hash_memo.clear()
        _private_root = None
