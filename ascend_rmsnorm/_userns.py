"""Owners a user namespace cannot tell apart: inside one (a rootless container, ``unshare -U``), every uid
it does not map is shown as the overflow uid, so a file shown as owned by that uid may be anyone's. The
ownership tests (``jit/trust.py``, ``jit/_fs.py``, ``_envvars.private_dir_problem``) ask here; it sits at
the bottom so that each of them can.
"""

from __future__ import annotations

import functools


@functools.cache
def _ambiguous_uid() -> int | None:
    """The uid that stands for "any owner this user namespace does not map", where some are unmapped; None
    in a namespace that maps every uid (the host's: ``0 0 4294967295``). Fails closed: without a readable
    ``/proc/self/uid_map`` the overflow uid is taken to be ambiguous."""
    try:
        with open("/proc/sys/kernel/overflowuid", "rb") as f:
            overflow = int(f.read())
    except (OSError, ValueError):
        overflow = 65534
    try:
        with open("/proc/self/uid_map", "rb") as f:
            mapped = sum(int(line.split()[2]) for line in f if line.strip())
    except (OSError, ValueError, IndexError):
        return overflow
    return None if mapped >= 0xFFFFFFFF else overflow


def unmapped(uid: int) -> bool:
    """Whether a file shown as owned by ``uid`` may belong to anyone: inside a user namespace (a rootless
    container, ``unshare -U``, ``docker --userns-remap``) every owner it does not map (the host's root,
    every other container's users) is shown as the overflow uid (65534, "nobody"). Such a file is not this
    process's own even where it runs as that uid, and is trusted only where ``ASCEND_RMSNORM_TRUSTED_USERS``
    names that uid: a choice to trust every owner the namespace does not map."""
    return uid == _ambiguous_uid()
