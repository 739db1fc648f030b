"""The device implementations (real tensors only): flatten to rows, call the backend the device key's
chooser picks, give the outputs x's shape. One registration per dispatch key."""

from __future__ import annotations

import torch

from ..backends import choice
from ..contract import (
    check_eps,
    check_f32_finite,
    check_grad_residual,
    check_on_x_device,
    check_residual,
    check_weight,
    check_x,
    resolve_mode,
    result_dtype,
)
from .schema import _F32, lib


def _check_op_args(op: str, x, weight, eps: float, casting_mode: str, offset: float, residual=None) -> None:
    """What ``rms_norm`` checks before the op, checked again where the op is called directly
    (``torch.ops.ascend_rmsnorm.*`` is public): the same contract checks, named for the op. A negative or
    subnormal eps would give each backend's own answer; the kernels read a residual in x's dtype. A
    NaN or infinite offset gave NaN or infinite rows, and one beyond float32 a bare OverflowError
    from the kernels' float32 rounding of it."""
    name = f"ascend_rmsnorm::{op}"
    check_x(x, name)
    if weight is not None:
        check_weight(weight, x, name)
    check_eps(eps, name)
    check_f32_finite(offset, "offset", name)
    resolve_mode(casting_mode, offset, name)
    if residual is not None:
        check_residual(residual, x, name)
        check_on_x_device("residual", residual, x, name)


def _check_backward_args(dy, x, weight, rstd, gro, eps, casting_mode, offset) -> None:
    """The backward op's tensors must fit x: the kernels read x's shape's worth of dy and one rstd per row."""
    _check_op_args("rms_norm_backward", x, weight, eps, casting_mode, offset)
    if dy.shape != x.shape or not dy.is_floating_point():
        raise ValueError(
            f"ascend_rmsnorm::rms_norm_backward: dy must be a floating tensor of x's shape {tuple(x.shape)}, "
            f"got {tuple(dy.shape)} {dy.dtype}"
        )
    if rstd.numel() != x.numel() // x.shape[-1] or not rstd.is_floating_point():
        raise ValueError(
            f"ascend_rmsnorm::rms_norm_backward: rstd must hold one float per row of x, shape "
            f"{tuple(x.shape[:-1])}, got {tuple(rstd.shape)} {rstd.dtype}"
        )
    name = "ascend_rmsnorm::rms_norm_backward"
    check_on_x_device("dy", dy, x, name)
    check_on_x_device("rstd", rstd, x, name)
    if gro is not None:
        check_on_x_device("grad_residual_out", gro, x, name)


def _forward(pick, x, residual, weight, eps, casting_mode, offset, backend):
    """(y, rstd, residual_out) for any leading shape through the backend ``pick`` chooses."""
    hidden = x.shape[-1]
    x2d = x if x.dim() == 2 else x.reshape(-1, hidden)
    r2d = None if residual is None else (residual if residual.dim() == 2 else residual.reshape(-1, hidden))
    if x2d.shape[0] == 0:  # an empty batch: nothing to launch, every output empty
        y = x.new_empty(x.shape, dtype=result_dtype(x.dtype, None if weight is None else weight.dtype, casting_mode))
        r_out = None if residual is None else torch.empty_like(x, memory_format=torch.contiguous_format)
        return y, x.new_empty(x.shape[:-1], dtype=_F32), r_out
    impl = pick(backend, x, hidden)
    y, rstd, r_out = impl.forward(x2d, weight, eps, casting_mode=casting_mode, offset=offset, residual=r2d)
    # Views cost about 2 us each on a small CPU tensor (as much as an add): only where shapes differ.
    shape = x.shape
    if not y.is_contiguous():
        y = y.contiguous()
    if y.shape != shape:
        y = y.view(shape)
    if rstd.dim() != len(shape) - 1 or rstd.shape != shape[:-1]:
        rstd = rstd.view(shape[:-1])
    if r_out is not None:
        if not r_out.is_contiguous():
            r_out = r_out.contiguous()
        if r_out.shape != shape:
            r_out = r_out.view(shape)
    return y, rstd, r_out


def _backward(pick, dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
    _check_backward_args(dy, x, weight, rstd, gro, eps, casting_mode, offset)
    hidden = x.shape[-1]
    need_dw = need_dw and weight is not None
    rows = x.numel() // hidden
    if rows == 0 or not (need_dx or need_dw):
        dx = torch.empty_like(x, memory_format=torch.contiguous_format) if need_dx else x.new_empty(0)
        dw = weight.new_zeros(hidden) if need_dw else x.new_empty(0)  # a sum over no rows is +0
        return dx, dw
    impl = pick(backend, x, hidden)
    x2d = x if x.dim() == 2 else x.reshape(-1, hidden)
    dy2d = dy if dy.dim() == 2 else dy.reshape(-1, hidden)
    rstd1d = rstd if rstd.dim() == 1 else rstd.reshape(-1)
    kw = {}
    if gro is not None and need_dx:  # the backend adds it to dx (one rounding, canonical NaNs)
        check_grad_residual(gro, x)
        kw["grad_residual"] = gro if gro.dim() == 2 else gro.reshape(-1, hidden)
    dx, dw = impl.backward(
        dy2d, x2d, weight, rstd1d, casting_mode=casting_mode, offset=offset, need_dx=need_dx, need_dw=need_dw, **kw
    )
    if need_dx:
        if not dx.is_contiguous():
            dx = dx.contiguous()
        if dx.shape != x.shape:
            dx = dx.view(x.shape)
    else:
        dx = x.new_empty(0)
    if dw is None:
        dw = x.new_empty(0)
    return dx, dw


def _register_device(key: str, pick) -> None:
    def fwd(x, weight, eps, casting_mode, offset, backend):
        _check_op_args("rms_norm", x, weight, eps, casting_mode, offset)
        y, rstd, _ = _forward(pick, x, None, weight, eps, casting_mode, offset, backend)
        return y, rstd

    def add_fwd(x, residual, weight, eps, casting_mode, offset, backend):
        _check_op_args("add_rms_norm", x, weight, eps, casting_mode, offset, residual)
        y, rstd, r_out = _forward(pick, x, residual, weight, eps, casting_mode, offset, backend)
        return y, r_out, rstd

    def bwd(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
        return _backward(pick, dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend)

    lib.impl("rms_norm", fwd, key)
    lib.impl("add_rms_norm", add_fwd, key)
    lib.impl("rms_norm_backward", bwd, key)


_register_device("CPU", choice.for_cpu)


_register_device("PrivateUse1", choice.for_npu)


_register_device("CUDA", choice.for_other)


_register_device("CompositeExplicitAutograd", choice.for_other)
