"""Fake (meta) implementations: exact shapes, dtypes and strides, for tracing and torch.compile."""

from __future__ import annotations

import torch

from ..contract import result_dtype
from .schema import _F32, lib


def _y_dtype(x, weight, casting_mode):
    return result_dtype(x.dtype, None if weight is None else weight.dtype, casting_mode)


@torch.library.register_fake("ascend_rmsnorm::rms_norm", lib=lib)
def _rms_norm_fake(x, weight, eps, casting_mode, offset, backend):
    return x.new_empty(x.shape, dtype=_y_dtype(x, weight, casting_mode)), x.new_empty(x.shape[:-1], dtype=_F32)


@torch.library.register_fake("ascend_rmsnorm::add_rms_norm", lib=lib)
def _add_rms_norm_fake(x, residual, weight, eps, casting_mode, offset, backend):
    y = x.new_empty(x.shape, dtype=_y_dtype(x, weight, casting_mode))
    return y, x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=_F32)


@torch.library.register_fake("ascend_rmsnorm::rms_norm_backward", lib=lib)
def _rms_norm_backward_fake(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
    dx = x.new_empty(x.shape) if need_dx else x.new_empty(0)
    dw = weight.new_empty(x.shape[-1]) if (need_dw and weight is not None) else x.new_empty(0)
    return dx, dw
