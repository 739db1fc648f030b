"""Which backend runs a call: ``auto``, ``npu``, ``emu`` or ``torch`` (docs/design.md §2).

A backend is any object that satisfies ``base.Backend`` (``name``, ``forward``, ``backward``).

The registered ops (``ops/device.py``) call one chooser per dispatch key with the requested name:
``for_cpu`` (CPU tensors), ``for_npu`` (PrivateUse1, the NPU), ``for_other`` (CUDA and the rest).

``auto`` sends NPU tensors to the kernels and everything else to the torch path. When the kernels
cannot run on an NPU tensor (no CANN, unsupported SoC, a failed build), ``auto`` falls back to the
torch path with one warning that says why, or raises with ``ASCEND_RMSNORM_STRICT=1``. The numerics
never change silently: both paths implement the same contract. Whatever runs an NPU tensor, the device's
float overflow mode is read the first time (``overflow_mode``): a saturating device gets one warning.
"""

from __future__ import annotations

import threading
import warnings

import torch

from .. import _env
from .._forksafe import renew_in_child
from ..errors import AscendRMSNormError
from . import torch as torch_backend
from .kernel import MAX_HIDDEN

BACKEND_NAMES = ("auto", "npu", "emu", "torch")
ENV_BACKEND = "ASCEND_RMSNORM_BACKEND"
ENV_STRICT = "ASCEND_RMSNORM_STRICT"

_fallback_lock = threading.Lock()
renew_in_child(globals(), _fallback_lock=threading.Lock)  # a forked child's first call must not hang
_npu_failure: list[AscendRMSNormError] = []  # the first reason the npu kernels could not be had
_warned: set[str] = set()  # which fallback reasons have had their one warning


def requested_name(name: str | None) -> str:
    """The backend asked for: the argument, else ``ASCEND_RMSNORM_BACKEND``, else ``auto``."""
    if name is None:
        return _env.get(ENV_BACKEND)  # a nonsense value warns once and gives auto
    if not isinstance(name, str):
        raise TypeError(f"backend must be a str or None, got {type(name).__name__}: {name!r}")
    chosen = name.strip().lower()
    if chosen not in BACKEND_NAMES:
        source = "backend argument" if name is not None else ENV_BACKEND
        raise ValueError(f"unknown backend {chosen!r} from {source}; choose one of {', '.join(BACKEND_NAMES)}")
    return chosen


def strict() -> bool:
    return _env.flag(ENV_STRICT)


def _npu_backend():
    """The npu backend with its library ready, or raise why not (remembered: no rebuild per call)."""
    from . import npu

    if _npu_failure:
        raise _npu_failure[0]
    try:
        npu.library()
    except AscendRMSNormError as err:
        with _fallback_lock:
            if not _npu_failure:
                _npu_failure.append(err)
        raise
    return npu.BACKEND


def _warn_once(kind: str, why: str) -> None:
    with _fallback_lock:
        first = kind not in _warned
        _warned.add(kind)
    if first:
        warnings.warn(
            "ascend_rmsnorm: the NPU kernels are unavailable, so NPU tensors use the torch path "
            f"(same numerics, slower). Why: {why}. Set {ENV_STRICT}=1 to make this an error.",
            RuntimeWarning,
            stacklevel=5,
        )


def _fall_back(err: AscendRMSNormError):
    if strict():
        raise type(err)(f"{err}\n({ENV_STRICT} is set, so there is no fallback to the torch path)") from err
    _warn_once("kernels", str(err))
    return torch_backend


def _too_wide(name: str, hidden: int) -> str:
    return (
        f"backend {name!r}: hidden size H={hidden} exceeds the kernels' limit of {MAX_HIDDEN} "
        "(kMaxHidden in kernels/common/constants.h); use backend='torch' (or 'auto', which falls back)"
    )


def _check_hidden(name: str, hidden: int | None) -> None:
    if hidden is not None and hidden > MAX_HIDDEN:
        raise ValueError(_too_wide(name, hidden))


def _unknown(name: object) -> ValueError:
    """An unknown name reaching a chooser (the op called directly does not normalise it as rms_norm does)."""
    return ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")


def _off_device(name: str, x: torch.Tensor) -> ValueError:
    if name not in BACKEND_NAMES:
        return _unknown(name)
    if name == "emu":
        return ValueError(f"the emu backend runs on CPU tensors; x is on {x.device}")
    return ValueError(f"backend 'npu' needs tensors on an NPU; x is on {x.device}")


def for_cpu(name: str, x: torch.Tensor, hidden: int | None = None):
    """The backend for a CPU tensor: the torch path, or the emu kernels when asked."""
    if name == "auto" or name == "torch":
        return torch_backend
    if name == "emu":
        _check_hidden(name, hidden)
        return _emu_backend()
    raise _off_device(name, x)


def _emu_backend():
    """emu.BACKEND, imported on first use (an import statement per call costs about a microsecond)."""
    global _EMU
    if _EMU is None:
        from . import emu

        _EMU = emu.BACKEND
    return _EMU


_EMU = None


def _note_overflow_mode(x: torch.Tensor) -> None:
    """overflow_mode.note, imported on the first NPU tensor (import ascend_rmsnorm stays as fast)."""
    global _NOTE_OVERFLOW
    if _NOTE_OVERFLOW is None:
        from . import overflow_mode

        _NOTE_OVERFLOW = overflow_mode.note
    _NOTE_OVERFLOW(x)


_NOTE_OVERFLOW = None


def for_npu(name: str, x: torch.Tensor, hidden: int | None = None):
    """The backend for an NPU tensor: the kernels, falling back to the torch path under ``auto``
    (one warning per reason, or an error with ASCEND_RMSNORM_STRICT=1)."""
    _note_overflow_mode(x)
    if name == "auto":
        if hidden is not None and hidden > MAX_HIDDEN:
            if strict():
                raise ValueError(_too_wide("auto", hidden) + f" ({ENV_STRICT} is set, so there is no fallback)")
            _warn_once("hidden", f"H={hidden} exceeds the kernels' limit of {MAX_HIDDEN}")
            return torch_backend
        try:
            return _npu_backend()
        except AscendRMSNormError as err:
            return _fall_back(err)
    if name == "torch":
        return torch_backend
    if name != "npu":
        raise _off_device(name, x)
    _check_hidden(name, hidden)
    return _npu_backend()


def for_other(name: str, x: torch.Tensor, hidden: int | None = None):
    """The backend for any other device (CUDA, XPU, ...): the torch path."""
    if name == "auto" or name == "torch":
        return torch_backend
    raise _off_device(name, x)


def resolve(name: str | None, x: torch.Tensor, hidden: int | None = None):
    """The backend object for tensor ``x`` (``name`` unvalidated: None reads the env var)."""
    return chooser_for(x.device.type)(requested_name(name), x, hidden)


def chooser_for(device_type: str):
    """The chooser for a device type: for_cpu, for_npu or for_other."""
    return for_cpu if device_type == "cpu" else for_npu if device_type == "npu" else for_other


def chooser(x: torch.Tensor):
    """chooser_for(x's device type), for the per-call path: ``is_cpu`` costs a fifth of ``x.device.type``."""
    return for_cpu if x.is_cpu else chooser_for(x.device.type)


def name_of(impl) -> str | None:
    """The backend name whose chooser returns ``impl`` ("torch", "emu", "npu"), or None for another object."""
    if impl is torch_backend:
        return "torch"
    from . import emu, npu

    if impl is emu.BACKEND:
        return "emu"
    if impl is npu.BACKEND:
        return "npu"
    return None


def describe(impl) -> str:
    """A short human name for a backend object."""
    return getattr(impl, "name", None) or ("torch" if impl is torch_backend else type(impl).__name__)


def reset() -> None:
    """Forget a remembered npu failure (here and the npu backend's failed build) and the once-only warning
    (tests; after fixing the environment)."""
    from . import npu

    with _fallback_lock:
        _npu_failure.clear()
        _warned.clear()
    npu.forget_failure()
    if _NOTE_OVERFLOW is not None:
        from . import overflow_mode

        overflow_mode.reset()
