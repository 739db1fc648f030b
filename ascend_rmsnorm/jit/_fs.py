"""Files and directories the cache creates are never writable by group or others, whatever the umask.

Why: the cache holds code that gets loaded; ``trust.py`` refuses libraries in places others
could write, so our own directories must never be such places (a umask of 002 is common).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .._forksafe import renew_in_child
from .._userns import unmapped  # trust.py takes it from here too

_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang


def mine(st: os.stat_result) -> bool:
    """Whether a leftover (``st`` from ``lstat``) is this user's to remove. What the package leaves (build
    dirs, quarantined and trashed entries, failed builds) is this user's; in a tree others may add names
    to (a sticky shared dir) a name of someone else's is theirs: root would delete it, anyone else would
    fail on it in every ``cache clean``. (Here, below ``layout`` and ``build``, so both use it.)"""
    return st.st_uid == os.getuid() and not unmapped(st.st_uid)


def you_and_root() -> tuple[int, ...]:
    """The owners trusted without being named: this process's uid and root, where they are not ``unmapped``
    (in a rootless container running as 65534, or with root unmapped, that uid is everyone else's too)."""
    return tuple(uid for uid in (0, os.getuid()) if not unmapped(uid))


def unmapped_fix(uid: int) -> str:
    """The fix for a component whose owner is ``unmapped`` ('' for any other): no variable can name its
    real owner."""
    if not unmapped(uid):
        return ""
    return (
        f"; uid {uid} is how this user namespace (a rootless container's) shows every owner it does not map "
        "(the host's root, other containers' users), so who owns it cannot be told from here: map its owner "
        "into the namespace, or use a copy inside the container of your own, or, if you trust every owner "
        f"this namespace does not map, set ASCEND_RMSNORM_TRUSTED_USERS={uid}"
    )


def others_uid(name: str | os.PathLike, dir_fd: int | None = None) -> int | None:
    """The owner of ``name`` (relative to ``dir_fd`` where given; a link is not followed) when it is someone
    else's (``mine``); None when it is this user's or not there. Other errors raise."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return None if mine(st) else st.st_uid


def umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _lock:  # elsewhere the only way to read it is to set it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def safe_mode(bits: int) -> int:
    """``bits`` as the umask allows, but never writable by group or others."""
    return bits & ~umask() & ~0o022


def remove_tree_at(dir_fd: int, name: str) -> None:
    """``rm -rf name`` inside the directory ``dir_fd``, through fds and never following a link (a link is
    unlinked, not what it points to). Raises the first ``OSError`` other than a name already gone."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError:  # not a directory (or a link): a plain name to unlink
        os.unlink(name, dir_fd=dir_fd)
        return
    try:
        with os.scandir(fd) as children:
            names = [(child.name, child.is_dir(follow_symlinks=False)) for child in children]
        for child, is_dir in names:
            if is_dir:
                remove_tree_at(fd, child)
            else:
                try:
                    os.unlink(child, dir_fd=fd)
                except FileNotFoundError:  # removed meanwhile: that is the goal
                    pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def fd_dir_problem() -> str | None:
    """Why the files the trust walk opened cannot be reopened or loaded here, or None: on Linux they are
    named ``/proc/self/fd/N`` (``trust.fd_path``; ``/dev/fd`` is a link to it), and without ``/proc`` (a
    hardened sandbox that mounts none) every lookup looked like a missing entry and every build like a
    directory removed under it."""
    if not hasattr(os, "O_PATH") or os.path.isdir("/proc/self/fd"):
        return None
    return (
        "/proc is not mounted here (no /proc/self/fd), and the kernel cache opens, checks and loads its files "
        "through it, so no kernel library can be looked up, built or loaded; fix: mount /proc (container "
        "runtimes do; a sandbox: `bwrap --proc /proc`, `unshare --mount-proc`)"
    )
