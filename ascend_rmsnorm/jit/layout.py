"""Where the cache lives (docs/design.md §5 "Layout", "Tiers"): the roots, whether they can be written,
the private fallback, entry paths, and removing trees without a half-deleted entry ever showing.

Layout of one tier::

    <root>/v<N>/<cann-version|emu>/<arch>/<key>/{librmsnorm.so, manifest.json, build.log}
    <root>/v<N>/tmp/<host>-<pid>.<pidns>_<boot>.<start>-<rand>/  builds in progress (or left by a killed builder)
    <root>/v<N>/failed/<key>/                 the last failed build of a key: build.log + sources
    <root>/v<N>/quarantine/<key>-<time>/      entries that failed to load, with reason.txt
    <root>/v<N>/trash/<uuid>/                 trees being removed
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import _env
from .._forksafe import renew_in_child
from .._log import warn_once
from ..errors import CacheWriteError
from . import build, trust
from ._fs import mine, remove_tree_at
from .key import CACHE_FORMAT, BuildSpec
from .process_tag import builder_gone, builder_running, process_tag

MANIFEST_NAME = "manifest.json"
#: The directories of ``v<N>`` that hold no entries: builds in progress, failed builds, quarantine, trash.
NOT_ENTRY_DIRS = frozenset(("tmp", "failed", "quarantine", "trash"))
LOG_NAME = "build.log"

ENV_CACHE_DIR = _env.CACHE_DIR
ENV_PREBUILT_DIR = _env.PREBUILT_DIR


def cache_root(cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """(the writable root, whether it is the default): ``cache_dir``, ``ASCEND_RMSNORM_CACHE_DIR``, platformdirs."""
    if cache_dir:
        return Path(os.path.abspath(os.path.expanduser(str(cache_dir)))), False
    env = _env.get(ENV_CACHE_DIR)
    if env is not None:
        return env, False
    import platformdirs  # deferred: only a lookup needs it

    try:
        root = Path(platformdirs.user_cache_dir("ascend_rmsnorm", appauthor=False))
    except RuntimeError:  # a newer platformdirs' "could not determine the home directory"
        root = Path("~")
    if root.is_absolute():
        return root, True
    # An older platformdirs takes a relative XDG_CACHE_HOME as given (XDG says ignore it), and without a home
    # (no HOME and no passwd entry: a container's arbitrary uid, or a relative HOME) "~" stays "~", where a
    # newer one raises. Never below the working directory: ~/.cache, else a dir of this uid's in the temp
    # dir (the trust walk refuses it if someone else made it first, and the build then goes private).
    home = os.path.expanduser("~")
    if os.path.isabs(home):
        return Path(home) / ".cache" / "ascend_rmsnorm", True
    return Path(tempfile.gettempdir()) / f"ascend_rmsnorm-cache-{os.getuid()}", True


def prebuilt_dirs() -> list[Path]:
    """The read-only tiers from ``ASCEND_RMSNORM_PREBUILT_DIR`` (an ``os.pathsep`` list), in order."""
    return list(_env.get(ENV_PREBUILT_DIR))


_state_lock = threading.RLock()
_writable: dict[Path, OSError | None] = {}
_private_root: Path | None = None
# a forked child's first call must not hang; and it makes a private root of its own (private_root)
renew_in_child(globals(), _state_lock=threading.RLock, _private_root=lambda: None)


def writable_error(root: Path, *, create: bool = True) -> OSError | None:
    """None if ``root`` may and can be written; else the error (memoised per process).

    May: before anything is written, every existing component from ``/`` down to ``<root>/v<N>/tmp``
    passes the loader's ownership test (``trust.Untrusted`` otherwise), and the missing ones are created
    one by one inside components that just passed. Can: a real file is then created and removed there.
    ``create=False`` (``info``, ``cache path``: they look, a build writes): while ``<root>/v<N>/tmp`` is
    missing, nothing is made and the answer is about the nearest directory above it (``_creatable_error``)."""
    tmp = root / f"v{CACHE_FORMAT}" / "tmp"
    if not create and not os.path.isdir(tmp):
        return _creatable_error(tmp)
    with _state_lock:
        if root in _writable:
            return _writable[root]
    try:
        tmp_fd = trust.open_path(tmp, create=True, directory=True)
        try:
            trust.probe_write(tmp_fd, tmp)
        finally:
            os.close(tmp_fd)
        result = None
    except OSError as err:
        result = err
    with _state_lock:
        _writable[root] = result
    return result


def _creatable_error(path: Path) -> OSError | None:
    """Why the walk of ``writable_error`` could not make the missing directory ``path``, found without
    making it: the directory where the walk would make the first missing component must pass the
    ownership test, be a directory and be one this process may write and search, on a filesystem
    mounted read-write. That directory is the parent of the name the walk found missing, not the path's
    own parent: a link on the way (a trusted one) is followed, and its target is what the walk makes.
    (A name someone else takes first in a shared directory meanwhile is the build's walk to refuse, as
    it refuses any component that fails the test.)"""
    above = path
    for _ in range(len(path.parts) + trust.MAX_LINKS):  # each step goes up, or into a link's target
        try:
            fd = trust.open_path(above, directory=True)
            break
        except FileNotFoundError as err:
            missing = Path(err.filename) if err.filename else above
            if missing.parent == missing:
                return err
            above = missing.parent
        except OSError as err:
            return err
    else:  # pragma: no cover - a tree changing under the walk at every step
        return OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    try:
        if os.statvfs(trust.fd_path(fd)).f_flag & os.ST_RDONLY:
            return OSError(errno.EROFS, os.strerror(errno.EROFS), str(above))
        if not os.access(trust.fd_path(fd), os.W_OK | os.X_OK):
            return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(above))
    finally:
        os.close(fd)
    return None


def note_unwritable(root: Path, err: OSError) -> None:
    """Remember that writing ``root`` failed mid-build (a full disk, say): later builds go private at once."""
    with _state_lock:
        _writable[root] = err


def private_root() -> Path:
    """This process's private temp root, used when the cache root cannot be written (removed at exit).

    The temp dir passes the trust walk before anything in it is touched: in a dir others may write that is
    not sticky, they can rename anything of yours in it, to a dead private root's name too, which the sweep
    would then delete. Raises ``CacheWriteError`` when there is no usable temp dir either, or only one that
    is not safe. A child forked after the root was made gets one of its own: its parent removes that root
    at exit, perhaps while the child still builds there."""
    global _private_root
    with _state_lock:
        if _private_root is None:
            prefix = f"{_PRIVATE_PREFIX}{os.getuid()}-"
            tmp = None
            try:
                tmp = tempfile.gettempdir()
                made = _make_private_root(Path(tmp), prefix)
            except trust.Untrusted as err:  # a TMPDIR inside someone else's tree
                raise CacheWriteError(
                    f"the temp dir {tmp} is not safe for a private build dir: {err.problem}; or set TMPDIR to a "
                    f"directory of your own, or {ENV_CACHE_DIR} to a cache only you can write"
                ) from err
            except OSError as err:  # FileNotFoundError "No usable temporary directory" included
                raise CacheWriteError(
                    f"no usable temporary directory for a private kernel build ({err}); "
                    f"set TMPDIR to a writable directory, or {ENV_CACHE_DIR} to a writable cache"
                ) from err
            atexit.register(_remove_at_exit, str(made), os.getpid())
            _private_root = made
        return _private_root


def _remove_at_exit(path: str, owner: int) -> None:
    """Remove the private root ``path`` at exit, in the process ``owner`` that made it only: a child forked
    after it was made inherits this handler, and one that ends normally (not ``os._exit``) must not take
    its parent's root, with the libraries and any build in progress in it, away from under it."""
    if os.getpid() == owner:
        shutil.rmtree(path, True)


def _make_private_root(tmp: Path, prefix: str) -> Path:
    """Sweep dead private roots from ``tmp`` and make this process's there, once ``tmp`` passed the walk."""
    tmp_fd = trust.open_path(tmp, directory=True)
    try:
        _sweep_dead_private_roots(tmp_fd, prefix)
    finally:
        os.close(tmp_fd)
    made = Path(tempfile.mkdtemp(prefix=f"{prefix}{process_tag()}-", dir=tmp))
    try:
        os.close(trust.open_path(made, directory=True))
    except OSError:
        try:
            os.rmdir(made)  # empty: nothing of anyone's is lost if it was swapped meanwhile
        except OSError:
            pass
        raise
    return made


_PRIVATE_PREFIX = "ascend_rmsnorm-"


def _sweep_dead_private_roots(tmp_fd: int, prefix: str) -> None:
    """Remove the private roots of this user's processes that died without their exit handler (kill -9):
    named ``<prefix><host>-<pid>.<pid space>.<start time>-<random>`` (``builder_gone`` tells a dead one), a
    directory of this user's (``_fs.mine``: never one shown as a user namespace's overflow uid), mode 700, in
    the temp dir ``tmp_fd`` (reached by the trust walk: sticky, or nobody else's). Nobody else can rename or
    replace such a name there, and the removal goes through directory fds and never follows a link."""
    try:
        listing = trust.reopen(tmp_fd, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = [n for n in os.listdir(listing) if n.startswith(prefix)]
        finally:
            os.close(listing)
    except OSError:
        return
    for name in names:
        try:
            st = os.stat(name, dir_fd=tmp_fd, follow_symlinks=False)
        except OSError:
            continue
        ours = stat.S_ISDIR(st.st_mode) and mine(st) and not stat.S_IMODE(st.st_mode) & 0o077
        if ours and builder_gone(name[len(prefix) :]):
            try:
                remove_tree_at(tmp_fd, name)
            except OSError:
                pass


def is_private(root: Path) -> bool:
    """Whether ``root`` is this process's private temp root (there is nowhere further to fall back to)."""
    with _state_lock:
        return _private_root is not None and root == _private_root


def use_private(root: Path, err: OSError) -> Path:
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


def human_bytes(n: int) -> str:
    """``n`` bytes as people read them: 512 B, 1.5 KiB, ... GiB (disk-full messages, ``cache list``)."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GiB"


def _blocking_file(path: Path) -> Path | None:
    """The nearest component of ``path`` (itself or a parent) that exists and is not a directory."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def describe_os_error(err: OSError, path: Path | None = None) -> str:
    """What an OSError from writing the cache means, in words (with the free space for a full disk)."""
    if isinstance(err, trust.Untrusted):
        return f"not safe to write into: {err.advised(trust.CACHE_ADVICE)}"
    where = Path(err.filename) if getattr(err, "filename", None) else path
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = getattr(err, "free_bytes", None)
        when = "when it failed"
        if free is None and where is not None:
            free, when = build.free_bytes(where), "now"
        room = f", {human_bytes(free)} free there {when}" if free is not None else ""
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


def failed_dir(root: Path, spec: BuildSpec) -> Path:
    """Where the last failed build of ``spec`` in ``root`` keeps its log and sources."""
    return Path(root) / f"v{CACHE_FORMAT}" / "failed" / spec.key


def version_base(path: Path) -> Path:
    """The ``<root>/v<N>`` directory above an entry or temp dir."""
    for parent in Path(path).parents:
        if parent.name == f"v{CACHE_FORMAT}":
            return parent
    raise ValueError(f"{path} is not inside a v{CACHE_FORMAT} cache tree")


def _remove_at(dir_fd: int, name: str, shown: Path) -> str | None:
    """``rm -rf`` of ``name`` in ``dir_fd`` through fds, never following a link; None once it is gone."""
    try:
        remove_tree_at(dir_fd, name)
    except FileNotFoundError:
        pass
    except OSError as err:
        inner = f" ({err.filename})" if err.filename and err.filename != name else ""
        return f"{shown}{inner}: {err.strerror or err}"
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return "still there after removing it"


def _trash_slot(path: Path) -> tuple[Path, str]:
    """Where ``path`` goes before it is deleted: ``<root>/v<N>/trash/<uuid>`` for what is inside a tier, and
    ``<root>/.trash-<uuid>`` for the ``v<N>`` directory itself."""
    try:
        return version_base(path) / "trash", uuid.uuid4().hex
    except ValueError:
        return path.parent, f".trash-{uuid.uuid4().hex}"


_ROOT_TRASH = re.compile(r"\.trash-[0-9a-f]{32}")


def root_trash(root: Path) -> list[tuple[str, os.stat_result]]:
    """The ``<root>/.trash-<uuid>`` directories (``_trash_slot``'s place for ``v<N>`` itself) in ``root``: a
    ``cache clean --all`` killed between its rename and its delete leaves one, a whole old cache that
    nothing inside ``v<N>`` would ever sweep. Only this user's: in a root others may add names to (a
    sticky shared dir) anyone can make a dir of that name, which is theirs, not a leftover of this user's
    to delete (root would delete it; anyone else would fail on it in every ``cache clean``)."""
    found = children(Path(root))
    return [(n, st) for n, st in found if _ROOT_TRASH.fullmatch(n) and stat.S_ISDIR(st.st_mode) and mine(st)]


def remove_tree(path: Path, *, via_trash: bool = True) -> str | None:
    """Delete ``path``, by renaming it into the trash first (``_trash_slot``) so that a half-deleted entry is
    never visible under its name; without ``via_trash``, or when it cannot be renamed, in place.

    Every directory above ``path`` is reached by the trust walk (``trust.open_path``), so a link someone
    else owns is never followed, and ``path`` itself is never followed: a link there is what is removed.
    Returns None when ``path`` is gone, else why it could not be removed (not safe, a read-only cache...)."""
    path = Path(path)
    try:
        parent_fd = trust.open_path(path.parent, directory=True)
    except FileNotFoundError:
        return None
    except OSError as err:
        return describe_os_error(err, path.parent)
    try:
        try:
            os.stat(path.name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        first: OSError | None = None
        if via_trash:
            trash, slot = _trash_slot(path)
            try:
                trash_fd = trust.open_path(trash, create=True, directory=True)
                try:
                    os.rename(path.name, slot, src_dir_fd=parent_fd, dst_dir_fd=trash_fd)
                except OSError as err:
                    raise OSError(err.errno, err.strerror, str(path)) from None
                try:
                    _remove_at(trash_fd, slot, trash / slot)  # gone from its name: a failure leaves only trash
                finally:
                    os.close(trash_fd)
                return None
            except OSError as err:
                first = err
        why = _remove_at(parent_fd, path.name, path)
        if why is not None and first is not None and first.errno != errno.ENOENT:
            return describe_os_error(first, path)  # the first refusal says most
        return why
    finally:
        os.close(parent_fd)


def children(directory: Path) -> list[tuple[str, os.stat_result]]:
    """The names in ``directory`` with their ``lstat``, sorted; [] if it is missing or fails the trust walk.

    Reached by the walk and listed through its fd, so a planted link at ``directory`` is not listed."""
    try:
        fd = trust.open_path(directory, directory=True)
    except OSError:
        return []
    try:
        return children_at(fd)
    finally:
        os.close(fd)


def children_at(dir_fd: int) -> list[tuple[str, os.stat_result]]:
    """The names in the directory ``dir_fd`` (a trust-walk fd or a plain one) with their ``lstat``,
    sorted; [] if it cannot be listed. A name gone between the listing and its ``lstat`` is left out."""
    try:
        listing = trust.reopen(dir_fd, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = sorted(os.listdir(listing))
        finally:
            os.close(listing)
    except OSError:
        return []
    out = []
    for name in names:
        try:
            out.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)))
        except OSError:
            continue
    return out


#: Leftovers (a killed build's tmp dir, quarantined and trashed entries) older than this are swept by
#: the next build and by ``cache clean``.
LEFTOVER_AGE_S = 3600.0


def tmp_aged_out(name: str, st: os.stat_result, now: float, older_than_s: float = LEFTOVER_AGE_S) -> bool:
    """Whether the ``tmp/`` child ``name`` is a leftover by its age: older than ``older_than_s``, and not a
    build dir whose builder is seen to run (``builder_running``: its mtime may look old). The sweep and
    ``cache clean`` judge by it alike."""
    return now - st.st_mtime > older_than_s and not (stat.S_ISDIR(st.st_mode) and builder_running(name))


def sweep_leftovers(root: Path, *, older_than_s: float = LEFTOVER_AGE_S) -> list[Path]:
    """Remove this user's ``tmp/``, ``quarantine/`` and ``trash/`` children older than ``older_than_s``, and
    ``root_trash`` dirs as old; returns what went.

    Age only (never "its pid is dead"): a builder in another container with the same host name may be
    alive under a pid we cannot see. A build never takes an hour, so an hour-old tmp dir is a leftover, and
    so is a plain file there: the write probe's, left by a process killed between its create and unlink;
    except a build dir whose builder is seen to run, kept whatever its age (``tmp_aged_out``).
    """
    base = Path(root) / f"v{CACHE_FORMAT}"
    now = time.time()
    removed = []
    for sub in ("tmp", "quarantine", "trash"):
        for name, st in children(base / sub):
            child = base / sub / name
            aged = tmp_aged_out(name, st, now, older_than_s) if sub == "tmp" else now - st.st_mtime > older_than_s
            if aged and mine(st):
                if remove_tree(child, via_trash=sub != "trash") is None:
                    removed.append(child)
    for name, st in root_trash(root):
        if now - st.st_mtime > older_than_s and remove_tree(Path(root) / name, via_trash=False) is None:
            removed.append(Path(root) / name)
    return removed


def reset() -> None:
    """Forget the writability probes and the private root (tests; ``cache.reset`` calls it)."""
    global _private_root
    with _state_lock:
        _writable.clear()
        _private_root = None
