"""ACL's per-thread last error, around the package's own runtime probes.

A runtime call that fails records its code as the calling thread's last error, which stays until someone
takes it (``aclrtGetLastError``; CANN's "异常处理" API). The kernel launchers check a launch only on a
thread with no such error (kernels/host/launch_check.h), so an error one of our probes left there would
keep every later launch of that thread unchecked, silently. ``ProbeWatch`` peeks before a probe and,
when the probe failed, takes the error it left, only where the thread had none before: an error an
earlier call left is not ours to clear (docs/design.md §4, "A refused launch").
"""

from __future__ import annotations

import ctypes

#: ``aclrtLastErrLevel``'s one value (CANN 8.1 ``include/acl/acl_rt.h``).
ACL_RT_THREAD_LEVEL = 0


class ProbeWatch:
    """Made right before a runtime probe; ``failed()`` after a failed one takes the error it left."""

    def __init__(self, lib: ctypes.CDLL | None) -> None:
        peek = getattr(lib, "aclrtPeekAtLastError", None)
        take = getattr(lib, "aclrtGetLastError", None)
        self._take = None
        if peek is None or take is None:  # no ACL, or one without these: launches are unchecked anyway
            return
        for fn in (peek, take):
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
        if peek(ACL_RT_THREAD_LEVEL) == 0:
            self._take = take

    def failed(self) -> None:
        """The probe failed: take the thread's error, if the thread was clean before the probe."""
        if self._take is not None:
            self._take(ACL_RT_THREAD_LEVEL)
            self._take = None


def probe_library() -> ctypes.CDLL | None:
    """The ``libascendcl.so`` the package's runtime probes call: the copy the process has loaded, else the
    CANN install's (``toolchain.acl_library``), or None."""
    from ..jit import toolchain

    cann = toolchain.find_cann()
    return toolchain.acl_library(cann.root if cann else None)


def watch() -> ProbeWatch:
    """A ``ProbeWatch`` on ``probe_library()``."""
    try:
        lib = probe_library()
    except Exception:  # noqa: BLE001 - a broken install must not break a call; nothing to watch then
        lib = None
    return ProbeWatch(lib)
