"""The NPU's float overflow mode: INF/NaN (IEEE, what the contract assumes) or saturation.

In saturation mode a device turns overflows into +-max and NaN into 0 (casts and arithmetic alike), so
rows holding Inf/NaN, or whose sums or outputs overflow, cannot follow the contract's Inf/NaN rules
(docs/design.md §3, §9); ordinary finite rows are not affected. The mode is device state no kernel controls:
torch_npu sets it when it starts a device (``aclrtSetDeviceSatMode``: INF/NaN unless
``INF_NAN_MODE_ENABLE=0`` or ``INF_NAN_MODE_FORCE_DISABLE=1``), and any code may set it again.

It is read once per device, the first time an NPU tensor reaches this package on that device:
``aclrtGetDeviceSatMode`` in ``libascendcl.so`` (CANN ``include/acl/acl_rt.h``: ``aclError
aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode)``, 0 = saturation, 1 = INF/NaN, 2 = undefined) on the
calling thread's device, made current for the call. torch_npu itself has no getter: its
``torch_npu.npu.utils.is_support_inf_nan()`` reports the mode it chose at start-up, which is asked only
when ACL cannot answer. A saturating device gets one warning per process. ACL applies a new mode only to
streams created after it is set, so the read says what the device is set to, not what an older stream runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import sys
import threading
import warnings

import torch

from .._forksafe import renew_in_child
from .acl_thread_error import ProbeWatch, probe_library

INF_NAN = "inf_nan"
SATURATION = "saturation"
UNKNOWN = "unknown"

#: ``aclrtFloatOverflowMode`` (CANN 8.1 ``include/acl/acl_rt.h``); 2 is ``ACL_RT_OVERFLOW_MODE_UNDEF``.
ACL_MODES = {0: SATURATION, 1: INF_NAN}
ACL_GETTER = "aclrtGetDeviceSatMode"

_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang
_known: dict[int, OverflowMode] = {}
_warned = False


@dataclasses.dataclass(frozen=True)
class OverflowMode:
    """The overflow mode of one NPU and how it was read (or why it could not be)."""

    device: int
    mode: str  # INF_NAN, SATURATION or UNKNOWN
    source: str

    @property
    def saturating(self) -> bool:
        return self.mode == SATURATION

    def describe(self) -> str:
        """One line for ``info`` and ``selftest``."""
        if self.mode == INF_NAN:
            return f"INF/NaN mode ({self.source}): the contract's Inf/NaN rules hold"
        if self.mode == SATURATION:
            return (
                f"saturation mode ({self.source}): rows holding Inf/NaN, or whose sums or outputs overflow, "
                "give +-max and 0 instead of the contract's Inf/NaN results; ordinary rows are not affected"
            )
        return f"not known: {self.source}"


def _from_acl() -> tuple[str | None, str]:
    """(mode or None, source or why not) from ``aclrtGetDeviceSatMode`` on the current device."""
    lib = probe_library()
    if lib is None:
        return None, "libascendcl.so cannot be loaded"
    fn = getattr(lib, ACL_GETTER, None)
    if fn is None:
        return None, f"libascendcl.so has no {ACL_GETTER}"
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]
    raw = ctypes.c_int(2)
    probe = ProbeWatch(lib)  # a failed read's thread error is ours to take (acl_thread_error.py)
    try:
        rc = fn(ctypes.byref(raw))
    except Exception as err:  # noqa: BLE001 - a broken runtime must not break a call
        probe.failed()
        return None, f"{ACL_GETTER} failed: {err}"
    if rc != 0:
        probe.failed()
        return None, f"{ACL_GETTER} returned error {rc}"
    mode = ACL_MODES.get(raw.value)
    if mode is None:
        return None, f"{ACL_GETTER} gave mode {raw.value} (undefined)"
    return mode, ACL_GETTER


def _from_torch_npu() -> tuple[str | None, str]:
    """(mode or None, source or why not) from torch_npu's start-up choice; never imports torch_npu."""
    utils = getattr(getattr(sys.modules.get("torch_npu"), "npu", None), "utils", None)
    ask = getattr(utils, "is_support_inf_nan", None)
    if ask is None:
        return None, "torch_npu is not imported" if "torch_npu" not in sys.modules else "torch_npu cannot tell"
    try:
        inf_nan = bool(ask())
    except Exception as err:  # noqa: BLE001
        return None, f"torch_npu.npu.utils.is_support_inf_nan() failed: {err}"
    return (INF_NAN if inf_nan else SATURATION), "torch_npu.npu.utils.is_support_inf_nan(), set at device start"


def _device_guard(index: int):
    npu = getattr(torch, "npu", None)
    guard = getattr(npu, "device", None)
    return guard(index) if guard is not None else contextlib.nullcontext()


def read(index: int) -> OverflowMode:
    """Ask the device (no memo): ACL first, with ``index`` made current, then torch_npu's setting."""
    try:
        with _device_guard(index):
            mode, acl = _from_acl()
    except Exception as err:  # noqa: BLE001 - a device that cannot be made current
        mode, acl = None, f"device {index} cannot be made current: {err}"
    if mode is not None:
        return OverflowMode(index, mode, acl)
    mode, tnpu = _from_torch_npu()
    if mode is not None:
        return OverflowMode(index, mode, f"{tnpu}; {acl}")
    return OverflowMode(index, UNKNOWN, f"{acl}; {tnpu}")


def of_device(index: int) -> OverflowMode:
    """The mode of NPU ``index``, read on the first ask and remembered; warns once if it saturates."""
    found = _known.get(index)
    if found is not None:
        return found
    with _lock:
        found = _known.get(index)
        if found is None:
            found = _known[index] = read(index)
            warn = found.saturating and not _warned
            if warn:
                _set_warned()
        else:
            warn = False
    if warn:
        warnings.warn(
            f"ascend_rmsnorm: npu:{index} is in {found.describe()}, on every backend (torch_npu's own ops run in "
            "the same mode). "
            "torch_npu chooses this mode when INF_NAN_MODE_ENABLE=0 or INF_NAN_MODE_FORCE_DISABLE=1 is set; "
            "unset them for the INF/NaN mode (the A2/A3 default).",
            RuntimeWarning,
            stacklevel=4,
        )
    return found


def _set_warned() -> None:
    global _warned
    _warned = True


def note(x: torch.Tensor) -> None:
    """Per call for NPU tensors: a dict look-up once the device's mode is known."""
    index = x.get_device()
    if index not in _known:
        of_device(index)


def known() -> list[OverflowMode]:
    """Every device read so far in this process, by index."""
    return [_known[i] for i in sorted(_known)]


def reset() -> None:
    """Forget what was read and the once-only warning (tests; after changing the mode)."""
    global _warned
    with _lock:
        _known.clear()
        _warned = False
