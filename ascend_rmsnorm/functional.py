"""``rms_norm``: input checks, backend choice, autograd, and a no-grad fast path."""

from __future__ import annotations

import math
import numbers

import torch

from .backends import choice
from .contract import SUPPORTED_DTYPES

_DTYPE_NAMES = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)


def _check_inputs(x: object, weight: object, eps: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rms_norm: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"rms_norm: x has dtype {x.dtype}; supported dtypes are {_DTYPE_NAMES}")
    if x.dim() == 0:
        raise ValueError("rms_norm: x is a 0-d tensor; it needs at least one dimension (the hidden size)")
    hidden = x.shape[-1]
    if hidden == 0:
        raise ValueError(f"rms_norm: x has shape {tuple(x.shape)}; the last dimension (hidden size) must be > 0")
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"rms_norm: weight must be a torch.Tensor or None, got {type(weight).__name__}")
        if tuple(weight.shape) != (hidden,):
            raise ValueError(
                f"rms_norm: weight has shape {tuple(weight.shape)}; expected ({hidden},) to match x's last dimension"
            )
        if weight.dtype not in (x.dtype, torch.float32):
            raise TypeError(
                f"rms_norm: weight has dtype {weight.dtype}; with x in {x.dtype} it must be {x.dtype} or torch.float32"
            )
        if weight.device != x.device:
            raise ValueError(f"rms_norm: weight is on {weight.device} but x is on {x.device}; put both on one device")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"rms_norm: eps must be a real number, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"rms_norm: eps must be finite and >= 0, got {eps!r}")


class _RMSNormFunction(torch.autograd.Function):
    """Autograd for one backend: the forward saves rstd so the backward needs no second reduction."""

    @staticmethod
    def forward(ctx, x2d, weight, eps, backend):  # noqa: D102
        y, rstd = backend.forward(x2d, weight, eps)[:2]  # (y, rstd, residual_out) in the new protocol
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.backend = backend
        ctx.mark_non_differentiable(rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, dy, _drstd):  # noqa: D102
        x2d, weight, rstd = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw = ctx.backend.backward(dy, x2d, weight, rstd, need_dw=need_dw)
        return (dx if need_dx else None), dw, None, None


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    backend: str | None = None,
    return_rstd: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Batch-invariant RMSNorm over the last dimension of ``x``.

    ``y = cast((x * rstd) * weight)`` with ``rstd = 1/sqrt(mean(x^2) + eps)`` computed in fp32
    by the fixed-order contract of DESIGN.md §3: the bits of row i depend only on row i.

    Args:
        x: any leading shape, last dimension H; float32, bfloat16 or float16; any strides.
        weight: shape (H,), x's dtype or float32, on x's device; ``None`` for no scale.
        eps: added to mean(x^2); finite and >= 0.
        backend: ``"auto"`` (default, or ``ASCEND_RMSNORM_BACKEND``), ``"npu"``, ``"emu"``
            or ``"torch"``.
        return_rstd: also return rstd (float32, shape ``x.shape[:-1]``).
    """
    _check_inputs(x, weight, eps)
    return apply(choice.resolve(backend, x), x, weight, float(eps), return_rstd)


def apply(impl, x: torch.Tensor, weight: torch.Tensor | None, eps: float, return_rstd: bool = False):
    """rms_norm with a given backend object and checked inputs: leading dims, autograd, empty batches."""
    hidden = x.shape[-1]
    x2d = x if x.dim() == 2 else x.reshape(-1, hidden)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    if x2d.shape[0] == 0:
        y2d = x2d * (weight if weight is not None else 1)  # keeps autograd wiring for empty batches
        y2d = y2d.to(x.dtype)
        rstd = torch.empty(0, dtype=torch.float32, device=x.device)
    elif needs_grad:
        y2d, rstd = _RMSNormFunction.apply(x2d, weight, eps, impl)
    else:
        y2d, rstd = impl.forward(x2d, weight, eps)[:2]
    y = y2d if x.dim() == 2 else y2d.reshape(x.shape)
    if return_rstd:
        return y, rstd.reshape(x.shape[:-1])
    return y
