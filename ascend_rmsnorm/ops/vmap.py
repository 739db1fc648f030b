"""vmap rules: fold the vmapped dim into the rows (batch invariance makes that bit-identical to a loop),
except where a weight is vmapped or dw sums over rows (then a loop)."""

from __future__ import annotations

import torch
from torch import Tensor

from .schema import add_rms_norm_op, lib, rms_norm_backward_op, rms_norm_op


def _front(t, bdim):
    return t if bdim is None or bdim == 0 else t.movedim(bdim, 0)


def _expand_to(t, bdim, size):
    """t with its batch dim first, or broadcast to ``size`` copies when it has none (a view)."""
    return _front(t, bdim) if bdim is not None else t.expand(size, *t.shape)


def _loop(op, info, in_dims, args, n_out):
    """The op once per batch element (when a weight is vmapped, or dw sums over rows)."""
    outs = []
    for i in range(info.batch_size):
        a = [t.select(d, i) if (isinstance(t, Tensor) and d is not None) else t for t, d in zip(args, in_dims)]
        outs.append(op(*a))
    return tuple(torch.stack([o[k] for o in outs]) for k in range(n_out)), (0,) * n_out


@torch.library.register_vmap("ascend_rmsnorm::rms_norm", lib=lib)
def _rms_norm_vmap(info, in_dims, x, weight, eps, casting_mode, offset, backend):
    x_bdim, w_bdim = in_dims[0], in_dims[1]
    if w_bdim is not None:
        return _loop(rms_norm_op, info, in_dims, (x, weight, eps, casting_mode, offset, backend), 2)
    return rms_norm_op(_front(x, x_bdim), weight, eps, casting_mode, offset, backend), (0, 0)


@torch.library.register_vmap("ascend_rmsnorm::add_rms_norm", lib=lib)
def _add_rms_norm_vmap(info, in_dims, x, residual, weight, eps, casting_mode, offset, backend):
    x_bdim, r_bdim, w_bdim = in_dims[0], in_dims[1], in_dims[2]
    if w_bdim is not None:
        return _loop(add_rms_norm_op, info, in_dims, (x, residual, weight, eps, casting_mode, offset, backend), 3)
    n = info.batch_size
    out = add_rms_norm_op(
        _expand_to(x, x_bdim, n), _expand_to(residual, r_bdim, n), weight, eps, casting_mode, offset, backend
    )
    return out, (0, 0, 0)


@torch.library.register_vmap("ascend_rmsnorm::rms_norm_backward", lib=lib)
def _rms_norm_backward_vmap(info, in_dims, *args):
    dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend = args
    if in_dims[2] is not None or (need_dw and weight is not None):
        return _loop(rms_norm_backward_op, info, in_dims, args, 2)
    n = info.batch_size
    dy_b, x_b, rstd_b = (_expand_to(t, d, n) for t, d in zip((dy, x, rstd), (in_dims[0], in_dims[1], in_dims[3])))
    gro_b = None if gro is None else _expand_to(gro, in_dims[4], n)
    dx, dw = rms_norm_backward_op(dy_b, x_b, weight, rstd_b, gro_b, eps, casting_mode, offset, need_dx, False, backend)
    return (dx, dw), (0 if need_dx else None, None)
