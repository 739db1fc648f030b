"""Whose files the cache trusts, and a path walk that binds each check to the inode it checked.

Loading a library runs its code, and writing into a directory someone else controls hands them what is
written. So both go through one **ownership test** (``component_problem``): every component of the path,
from ``/`` down, must belong to you or root and be writable by nobody else; a sticky directory such as
``/tmp`` passes (others may add names there but cannot rename or remove yours), and group write passes
only for your private group (named after you, with no other member and nobody else's primary group).

Checking a path and then using it by name again would let whoever can change a component in between
swap what is used (a symlink flipped between the check and the ``dlopen``). ``walk`` therefore opens
the path one component at a time from ``/``, relative to the directory fd it has just checked,
``O_NOFOLLOW``, and ``fstat``s each fd. A symbolic link is followed only when it belongs to you or root
(only they could point it elsewhere); its target is walked the same way. What comes back is an fd of the
checked inode: callers read, load (``/proc/self/fd/N``) and create files through it, never by name.

``ASCEND_RMSNORM_TRUSTED_USERS`` names other owners the test accepts as it accepts root (the account that
installed CANN, or a container's overflow uid: ``_userns.unmapped``); their files must be writable by nobody else.
``ASCEND_RMSNORM_SKIP_PERMISSION_CHECK=1`` turns the ownership test off (you trust everyone who can
write there), never the walk: what is read, hashed and loaded is still the one inode that was opened.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import struct
import threading
import uuid
from pathlib import Path

from .. import _env
from ._fs import safe_mode, unmapped, unmapped_fix, you_and_root

#: Open a component without following it and without needing read permission on it (Linux).
_O_PATH = getattr(os, "O_PATH", 0)
_WALK_FLAGS = (_O_PATH or os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
#: As the kernel: at most this many symbolic links on one walk.
MAX_LINKS = 40
#: Where an fd can be named as a path (to reopen it, load it, or run a compiler in it).
_FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"


class Untrusted(OSError):
    """A path component fails the ownership test; the text names it, what was found, and the fix.

    An ``OSError`` (EPERM) so that the cache's write path treats it as "cannot write here": it falls back
    to the private root exactly as for a read-only one."""

    def __init__(self, path: str | Path, problem: str, foreign: bool = False) -> None:
        super().__init__(errno.EPERM, problem, str(path))
        self.problem = problem
        self.foreign = foreign  # the component belongs to someone else (not: others may write one of yours)

    def __str__(self) -> str:
        return self.problem

    def advised(self, advice: str) -> str:
        """The problem, its fix (which fits any path) followed by ``advice`` where the component belongs to
        someone else: what fits the place the caller reached (``CACHE_ADVICE`` for a kernel cache tier)."""
        if not (self.foreign and advice) or advice in self.problem:  # none to add, or added already
            return self.problem
        return f"{self.problem}; {advice}"


def checking() -> bool:
    """Whether the ownership test applies (``ASCEND_RMSNORM_SKIP_PERMISSION_CHECK`` is not set)."""
    return not _env.flag(_env.SKIP_PERMISSION_CHECK)


def trusted_uids() -> frozenset[int]:
    """The owners the ownership test accepts: you, root and ``ASCEND_RMSNORM_TRUSTED_USERS`` (its names
    looked up once per value: the test runs on every component of every walk), an ``unmapped`` uid if named."""
    key = (os.getuid(), _env.raw(_env.TRUSTED_USERS))
    uids = _trusted_memo.get(key)
    if uids is None:
        uids = _trusted_memo[key] = frozenset((*you_and_root(), *_env.get(_env.TRUSTED_USERS)))
    return uids


_trusted_memo: dict[tuple[int, str | None], frozenset[int]] = {}


def policy() -> tuple[bool, frozenset[int]]:
    """What the ownership test is now (on or off, whom it trusts): a part of what a memo of a check is keyed by."""
    return checking(), trusted_uids()


def fd_path(fd: int) -> str:
    """A path naming the open file ``fd`` itself (a magic link on Linux): opening it reopens that inode."""
    return f"{_FD_DIR}/{fd}"


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


# --------------------------------------------------------------------------------------------------- the test


def owner_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name if not unmapped(uid) else f"the unmapped uid {uid}"
    except KeyError:
        return f"uid {uid}"


def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


#: ``group_outsiders``'s answers by (owner, group) while this thread's ``tree_problem`` walks a tree
#: (``memo``; absent otherwise): reading the account database for each of a tree's files would cost more
#: than the walk itself.
_walking = threading.local()


def group_outsiders(st: os.stat_result) -> list[str] | None:
    """The accounts besides the file's owner that can write through its group, if the group is the
    owner's private one (named after the owner): the listed members and every account whose *primary*
    group it is (those are not in ``gr_mem``). None when it is not the owner's private group at all."""
    memo = getattr(_walking, "memo", None)
    if memo is None:
        return _group_outsiders(st)
    key = (st.st_uid, st.st_gid)
    if key not in memo:
        memo[key] = _group_outsiders(st)
    return memo[key]


def _group_outsiders(st: os.stat_result) -> list[str] | None:
    import grp
    import pwd

    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
        group = grp.getgrgid(st.st_gid)
    except KeyError:
        return None
    if group.gr_name != owner:
        return None
    others = {m for m in group.gr_mem if m != owner}
    others |= {p.pw_name for p in pwd.getpwall() if p.pw_gid == st.st_gid and p.pw_uid != st.st_uid}
    return sorted(others)


#: A POSIX access ACL (acl(5)): with one, a file's group mode bits are the ACL's mask, and named users and
#: groups may write through it. The xattr is a u32 version, then (u16 tag, u16 perm, u32 id) entries.
_ACL_XATTR = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 0x02, 0x04, 0x08, 0x10
_ACL_WRITE = 0x2


def acl_writers(fd: int) -> tuple[list[str], bool] | None:
    """Of the inode ``fd``: (the named users but you and root, and the named groups, that its access ACL
    lets write; whether it lets the owning group write), or None when it has no ACL (or the system none)."""
    if not hasattr(os, "getxattr"):
        return None
    try:
        raw = os.getxattr(fd_path(fd), _ACL_XATTR)
    except OSError as err:
        if err.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):  # no ACL; none on this filesystem
            return None
        return [f"an ACL this check cannot read ({err.strerror or err})"], True  # fail closed
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != 2:
        return [f"an ACL this check cannot read ({len(raw)} bytes)"], True
    entries = [struct.unpack_from("<HHI", raw, at) for at in range(4, len(raw), 8)]
    if not any(tag == _ACL_GROUP_OBJ for tag, _, _ in entries):
        return [f"an ACL this check cannot read (no entry for the owning group, {len(entries)} entries)"], True
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0x7)
    writers, group_obj = [], False
    for tag, perm, ident in entries:
        if not perm & mask & _ACL_WRITE:
            continue
        if tag == _ACL_USER and (ident not in (0, os.getuid()) or unmapped(ident)):
            writers.append(owner_name(ident))
        elif tag == _ACL_GROUP:
            writers.append(f"the group {group_name(ident)}")
        elif tag == _ACL_GROUP_OBJ:
            group_obj = True
    return writers, group_obj


def _quoted(path: str | Path) -> str:
    return shlex.quote(str(path))


#: What a kernel cache tier's caller adds to the fix for someone else's component (``Untrusted.advised``).
CACHE_ADVICE = (
    "or, for a kernel cache: a shared tier should belong to root; or build your own copy with "
    "`ascend-rmsnorm warm --cache-dir DIR`"
)


def component_problem(
    path: str | Path, st: os.stat_result, fd: int | None = None, *, searched: bool = False
) -> str | None:
    """What makes one path component (``st`` from ``lstat``/``fstat``; ``fd``, where given, its inode) unsafe
    to trust, or None.

    The owner must be you, root or a user ``ASCEND_RMSNORM_TRUSTED_USERS`` names. A symbolic link is
    judged by its owner only (the walk then checks where it leads). A directory with the sticky bit
    passes whatever its mode, unless it is ``searched``: a directory something looks names up in (PATH,
    LD_LIBRARY_PATH, an include or library dir, a place files are created by name), where the names
    others may add are what would be found. Otherwise nobody else may write it: not everyone, and not a
    group, unless it is your private group and nobody else has it as a primary group or is listed in it;
    and, where it has a POSIX ACL (its group bits are then the ACL's mask), no user or group the ACL
    names."""
    if st.st_uid not in trusted_uids():
        me, owner = owner_name(os.getuid()), owner_name(st.st_uid)
        trust_them = unmapped_fix(st.st_uid) or (
            f"; if {owner} is an account you trust (the one that installed CANN for everyone, say), set "
            f"{_env.TRUSTED_USERS}={owner.removeprefix('uid ')}"  # an owner with no name: the uid, as it takes
        )
        if stat.S_ISLNK(st.st_mode):
            return (
                f"{path} is a symbolic link owned by {owner}, not by you ({me}) or root, so it is "
                "not followed (its owner could point it elsewhere at any moment); fix: use the directory it "
                f"points to directly, or a link of your own{trust_them}"
            )
        return (
            f"{path} belongs to {owner}, not to you ({me}) or root; fix: if you did not put it "
            "there, have it removed (its owner could have put anything in it, so do not take it over with "
            f"chown){trust_them}"
        )
    if stat.S_ISLNK(st.st_mode):
        return None
    sticky = stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    if sticky and not searched:
        return None  # like /tmp: nobody can rename or remove what is yours in it
    problem = _writers_problem(path, st, fd)
    if problem is None or not sticky:
        return problem
    return (
        f"{without_fix(problem)}, and names are looked up or made in it: the sticky bit keeps your "
        "files there yours, but anyone who can write there can add a name (a program, library, header or "
        "file) that would be found or followed; fix: use a directory only you (or root) can write"
    )


def without_fix(problem: str) -> str:
    """A problem's what and why with its ``; fix: ...`` advice cut, for a caller whose fix differs."""
    return problem.split("; fix:")[0]


def _writers_problem(path: str | Path, st: os.stat_result, fd: int | None) -> str | None:
    """``component_problem``'s mode test: who besides you and root may write ``st``, and the fix."""
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    if st.st_mode & stat.S_IWOTH:
        return f"{path} is writable by everyone ({mode}); fix: `chmod o-w {_quoted(path)}`"
    if st.st_mode & stat.S_IWGRP:
        acl = acl_writers(fd) if fd is not None else None
        if acl is not None:
            writers, group_write = acl
            if writers:
                return (
                    f"{path} is writable by {', '.join(writers[:5])} through its ACL ({mode}, `getfacl "
                    f"{_quoted(path)}`); fix: `setfacl -b {_quoted(path)}`"
                )
            if not group_write:
                return None  # the mask allows writing, but nobody the ACL names may
        outsiders = group_outsiders(st)
        if outsiders is None:
            return f"{path} is writable by the group {group_name(st.st_gid)} ({mode}); fix: `chmod g-w {_quoted(path)}`"
        if outsiders:
            who = ", ".join(outsiders[:5]) + (f" and {len(outsiders) - 5} more" if len(outsiders) > 5 else "")
            return (
                f"{path} is writable by the group {group_name(st.st_gid)} ({mode}), its owner's private group, "
                f"but {who} can write through it too (a member, or it is their primary group); "
                f"fix: `chmod g-w {_quoted(path)}`"
            )
    return None


# --------------------------------------------------------------------------------------------------- the walk


def _open_root(check: bool) -> int:
    fd = os.open("/", _WALK_FLAGS | os.O_DIRECTORY)
    if check:
        st = os.fstat(fd)
        problem = component_problem("/", st, fd)
        if problem is not None:
            os.close(fd)
            raise Untrusted("/", problem, foreign=st.st_uid not in trusted_uids())
    return fd


def _readlink(name: str, fd: int | None, dir_fd: int) -> str:
    if fd is not None and _O_PATH:
        return os.readlink("", dir_fd=fd)  # the very link that was checked (readlinkat on an O_PATH fd)
    return os.readlink(name, dir_fd=dir_fd)  # no O_PATH (not Linux): by name, in a checked directory


def _walk(start_fd: int, start: Path, parts: list[str], *, check: bool, create: bool, must_be_dir: bool) -> int:
    """The fd (``O_PATH`` on Linux) of ``start/parts...`` reached from ``start_fd``; see the module doc.

    With ``create``, missing directories are made (never group- or world-writable), each inside a
    directory that has just passed the test, and then checked like the rest."""
    fd = os.dup(start_fd)
    here = start
    pending = list(parts)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            last = not pending
            there = here.parent if name == ".." else here / name
            try:
                child = os.open(name, _WALK_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create or name == "..":
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(there)) from None
                try:
                    os.mkdir(name, safe_mode(0o755), dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as err:
                    raise OSError(err.errno, err.strerror, str(there)) from None
                child = os.open(name, _WALK_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno != errno.ELOOP or _O_PATH:  # ELOOP: a link, on systems without O_PATH
                    raise OSError(err.errno, err.strerror, str(there)) from None
                child = None
            try:
                st = os.fstat(child) if child is not None else os.lstat(name, dir_fd=fd)
                if check:
                    problem = component_problem(there, st, child)
                    if problem is not None:
                        raise Untrusted(there, problem, foreign=st.st_uid not in trusted_uids())
                if stat.S_ISLNK(st.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(there))
                    target = _readlink(name, child, fd)
                    if target.startswith("/"):
                        os.close(fd)
                        fd = -1
                        fd = _open_root(check)
                        here = Path("/")
                    pending[:0] = target.split("/")
                    continue
                if not last and not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(there))
                if child is None:  # pragma: no cover - only without O_PATH, where links give ELOOP
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(there))
                os.close(fd)
                fd, child = child, None
                here = there
            finally:
                if child is not None:
                    os.close(child)
        if must_be_dir and not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(here))
        return fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def open_path(path: str | Path, *, check: bool | None = None, create: bool = False, directory: bool = False) -> int:
    """An fd of ``path`` (absolute or relative to the current dir) after the ownership test of every
    component; ``Untrusted`` names the first that fails. ``check`` defaults to ``checking()``.

    The fd is ``O_PATH`` on Linux: use it as a ``dir_fd``, or ``reopen`` it to read it."""
    check = checking() if check is None else check
    path = Path(os.path.abspath(path))
    root = _open_root(check)
    try:
        return _walk(root, Path("/"), list(path.parts[1:]), check=check, create=create, must_be_dir=directory)
    finally:
        os.close(root)


def open_in(dir_fd: int, dir_path: Path, name: str, *, check: bool | None = None, directory: bool = False) -> int:
    """Like ``open_path`` for ``name`` inside the already checked directory ``dir_fd`` (shown as ``dir_path``)."""
    check = checking() if check is None else check
    return _walk(dir_fd, Path(dir_path), name.split("/"), check=check, create=False, must_be_dir=directory)


def reopen(fd: int, flags: int = os.O_RDONLY) -> int:
    """A new fd for the inode ``fd`` refers to, opened with ``flags`` (checked to be that same inode)."""
    if not _O_PATH:
        return os.dup(fd)
    new = os.open(fd_path(fd), flags | os.O_CLOEXEC)
    if not same_file(os.fstat(new), os.fstat(fd)):  # pragma: no cover - the kernel reopens the same inode
        os.close(new)
        raise OSError(errno.ESTALE, "reopening an fd gave another file")
    return new


def open_regular(dir_fd: int, dir_path: Path, name: str, *, check: bool | None = None) -> int:
    """A readable fd of the regular file ``name`` in the checked directory ``dir_fd``, itself checked."""
    fd = open_in(dir_fd, dir_path, name, check=check)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(Path(dir_path) / name))
        return reopen(fd)
    finally:
        os.close(fd)


def _walk_problem(err: OSError, path: str | Path, advice: str = "") -> str:
    """What a failed walk to ``path`` says: the ownership test's problem (``Untrusted.advised``), or what stopped it."""
    if isinstance(err, Untrusted):
        return err.advised(advice)
    return f"cannot check {err.filename or path}: {err.strerror or err}"


def unsafe_reason(path: str | Path, *, searched: bool = False, advice: str = "") -> str | None:
    """Why using ``path`` could run or hand over code someone else controls (None if it cannot, or when
    the check is switched off). The same walk as loading, so the same answer. ``searched``: ``path`` is a
    directory names are looked up or made in (``component_problem``), so where it leads must not be a
    sticky directory others may write, as ``/tmp`` is. ``advice``: see ``Untrusted.advised``."""
    if not checking():
        return None
    try:
        fd = open_path(path, check=True)
    except OSError as err:
        return _walk_problem(err, path, advice)
    try:
        if not searched:
            return None
        try:
            real = os.readlink(fd_path(fd))  # where the walk led, to name it
        except OSError:
            real = str(path)
        return component_problem(real, os.fstat(fd), fd, searched=True)
    finally:
        os.close(fd)


def tree_problem(paths: list[str | Path], *, depth: int | None = None) -> str | None:
    """Why a tree a compiler or a loader reads by name could hand over code someone else controls, or
    None: each of ``paths`` as ``unsafe_reason(searched=True)`` judges it, then what lies below it,
    ``depth`` levels down (None: all of it). Every folder there is searched too (headers include each
    other by relative names), every file and link must pass the ownership test (a header anyone may
    write is anyone's code), and links are followed where they lead, through the same walk. A folder met
    twice (through a link, or under two of ``paths``) is judged once. CANN's header trees are some
    hundreds of files; ``depth=1`` judges a folder's entries and not what is below its folders (a
    library dir, which the loader searches by name and not below)."""
    if not checking():
        return None
    outer = getattr(_walking, "memo", None)
    _walking.memo = {} if outer is None else outer
    try:
        return _trees_problem(paths, depth)
    finally:
        _walking.memo = outer


def _trees_problem(paths: list[str | Path], depth: int | None) -> str | None:
    seen: set[tuple[int, int]] = set()
    for top in paths:
        try:
            fd = open_path(top, check=True, directory=True)  # the walk to it; the top itself, as searched, below
        except OSError as err:
            return _walk_problem(err, top)
        problem = _subtree_problem(fd, Path(os.path.abspath(top)), depth, seen)
        if problem is not None:
            return problem
    return None


#: How many folders below one of ``tree_problem``'s paths it walks (CANN 8.1's header trees: 6): past that a
#: tree is refused, not walked on (each level holds an fd and a Python frame).
MAX_TREE_LEVELS = 64


def _through_link(entry: Path, problem: str) -> str:
    """``problem``, found where the symbolic link ``entry`` leads, with the link named (the problem names
    only the place it leads to, which may be anywhere: /tmp, /dev/null)."""
    return (
        f"{entry} is a symbolic link, and where it leads: {problem}; or have the link removed or pointed at a "
        "copy nobody else can write"
    )


def _subtree_problem(fd: int, shown: Path, depth: int | None, seen: set[tuple[int, int]], level: int = 0) -> str | None:
    """``tree_problem`` below the checked folder ``fd`` (closed here; ``shown``: its path as listed, through
    any link), ``level`` folders below its top and walked while above ``depth``."""
    try:
        here = shown
        try:
            here = Path(os.readlink(fd_path(fd)))  # where the walk led, to name what is found there
        except OSError:
            pass
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in seen:
            return None
        seen.add((st.st_dev, st.st_ino))
        problem = component_problem(here, st, fd, searched=True)
        if problem is not None and level > 0 and str(here) != str(shown):  # reached through a link
            problem = _through_link(shown, problem)
        if problem is not None or (depth is not None and level >= depth):
            return problem
        if not os.access(fd_path(fd), os.X_OK):  # no name in it can be opened by you, nor by what you run
            return None
        try:
            listing = reopen(fd, os.O_RDONLY | os.O_DIRECTORY)
            try:
                names = sorted(os.listdir(listing))
            finally:
                os.close(listing)
        except OSError as err:  # names could still be opened in it, and what they hold is unknown
            return (
                f"cannot list {here} to check what is in it ({err.strerror or err}), though its files can be "
                f"opened by name; fix: have its owner let you read it (`chmod o+r {_quoted(here)}`)"
            )
        for name in names:
            entry = here / name
            try:
                child = open_in(fd, here, name, check=True)  # the entry, and where a link leads, judged
            except OSError as err:
                problem = _walk_problem(err, entry)
                # a path other than the entry's own failed: the entry is a link and led there
                return problem if err.filename in (None, str(entry)) else _through_link(entry, problem)
            if not stat.S_ISDIR(os.fstat(child).st_mode):
                os.close(child)
                continue
            if level >= MAX_TREE_LEVELS:
                os.close(child)
                return (
                    f"{entry} is more than {MAX_TREE_LEVELS} folders deep in a header or library tree, deeper "
                    "than this check walks (CANN's own are a few levels deep); fix: remove what is nested that deep"
                )
            problem = _subtree_problem(child, entry, depth, seen, level + 1)
            if problem is not None:
                return problem
        return None
    finally:
        os.close(fd)


def read_regular(path: str | Path, limit: int, *, follow: bool = True) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (OSError if it is anything else). Opened without
    blocking (and with ``follow=False``, without following a last link), then checked by ``fstat``: a FIFO
    or device planted under a file's name is an error, never a hang."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return read_all(fd, limit)
    finally:
        os.close(fd)


def read_all(fd: int, limit: int | None = None, start: int = 0) -> bytes:
    """Every byte of the open file ``fd`` from ``start`` (at most ``limit``)."""
    chunks = []
    offset = 0
    while limit is None or offset < limit:
        chunk = os.pread(fd, 1 << 20 if limit is None else min(1 << 20, limit - offset), start + offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_file(dir_fd: int, name: str, data: bytes, mode: int = 0o644, *, shown: str | Path | None = None) -> None:
    """Create ``name`` in ``dir_fd`` with ``data``: ``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing that is
    already there (a planted link or file) is ever followed, truncated or reused; fsynced. An error
    names ``shown`` (the path, for messages)."""
    try:
        fd = os.open(name, CREATE_FLAGS, mode, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, safe_mode(mode))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(shown if shown is not None else name)) from err


def probe_write(dir_fd: int, dir_path: str | Path) -> None:
    """Create and remove a file in ``dir_fd`` (shown as ``dir_path``): whether a write there can succeed,
    which the mode bits alone do not say (a read-only file system, a full quota, an ACL). An error names
    the probe's path."""
    name = f".probe-{uuid.uuid4().hex}"
    create_file(dir_fd, name, b"probe", 0o600, shown=Path(dir_path) / name)
    os.unlink(name, dir_fd=dir_fd)
