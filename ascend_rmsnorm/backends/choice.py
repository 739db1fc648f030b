"""Which backend runs a call: ``auto``, ``npu``, ``emu`` or ``torch`` (DESIGN.md §2).

A backend is any object with ``forward(x2d, weight, eps) -> (y2d, rstd)`` and
``backward(dy2d, x2d, weight, rstd, need_dw) -> (dx2d, dw)``.

``auto`` sends NPU tensors to the kernels and everything else to the torch path. When the kernels
cannot run on an NPU tensor (no CANN, unsupported SoC, a failed build), ``auto`` falls back to the
torch path with one warning that says why, or raises with ``ASCEND_RMSNORM_STRICT=1``. The numerics
never change silently: both paths implement the same contract.
"""

from __future__ import annotations

import threading
import warnings

import torch

from .. import _env
from ..errors import AscendRMSNormError
from . import reference

BACKEND_NAMES = ("auto", "npu", "emu", "torch")
ENV_BACKEND = "ASCEND_RMSNORM_BACKEND"
ENV_STRICT = "ASCEND_RMSNORM_STRICT"

_fallback_lock = threading.Lock()
_npu_failure: list[AscendRMSNormError] = []  # the first reason the npu kernels could not be had
_warned = False


def requested_name(name: str | None) -> str:
    """The backend asked for: the argument, else ``ASCEND_RMSNORM_BACKEND``, else ``auto``."""
    if name is None:
        return _env.get(ENV_BACKEND)  # a nonsense value warns once and gives auto
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


def _fall_back(err: AscendRMSNormError):
    global _warned
    if strict():
        raise type(err)(f"{err}\n({ENV_STRICT} is set, so there is no fallback to the torch path)") from err
    with _fallback_lock:
        first, _warned = not _warned, True
    if first:
        warnings.warn(
            "ascend_rmsnorm: the NPU kernels are unavailable, so NPU tensors use the torch path "
            f"(same numerics, slower). Why: {err}. Set {ENV_STRICT}=1 to make this an error.",
            RuntimeWarning,
            stacklevel=4,
        )
    return reference


def resolve(name: str | None, x: torch.Tensor):
    """The backend object for tensor ``x``."""
    chosen = requested_name(name)
    on_npu = x.device.type == "npu"
    if chosen == "auto":
        if not on_npu:
            return reference
        try:
            return _npu_backend()
        except AscendRMSNormError as err:
            return _fall_back(err)
    if chosen == "torch":
        return reference
    if chosen == "emu":
        from . import emu

        return emu.BACKEND
    if not on_npu:
        raise ValueError(f"backend 'npu' needs tensors on an NPU; x is on {x.device}")
    return _npu_backend()


def describe(impl) -> str:
    """A short human name for a backend object."""
    return getattr(impl, "name", None) or ("torch" if impl is reference else type(impl).__name__)


def reset() -> None:
    """Forget a remembered npu failure and the once-only warning (tests; after fixing the environment)."""
    global _warned
    with _fallback_lock:
        _npu_failure.clear()
        _warned = False
