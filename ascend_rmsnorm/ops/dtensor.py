"""DTensor: rows may be sharded, the normalised dim may not."""

from __future__ import annotations

import torch

from ._torch_compat import key_sharding_on_scalars, mark_constant
from .schema import add_rms_norm_op, rms_norm_backward_op, rms_norm_op

_sharding_registered = False


def sharding_registered() -> bool:
    return _sharding_registered


def ensure_sharding() -> bool:
    """register_sharding(), callable from traced code: dynamo runs it once while tracing."""
    register_sharding()
    return True


mark_constant(ensure_sharding)  # dynamo runs it once while tracing, then treats it as a constant


def register_sharding() -> None:
    """Teach DTensor the ops' sharding (called the first time a tensor subclass reaches rms_norm).

    Replicate, or Shard on any dim but the last (rows are independent: each rank's rows give the
    plain tensor's bits); the weight replicated; dw of row-sharded inputs is Partial (a sum over
    each rank's rows, then over ranks). Shard on the last dim is not offered, so DTensor
    redistributes such an input to a placement that is first: Replicate, or on a mesh of more dims
    possibly another dim's Shard (``[Shard(2), Replicate]`` of a 3-D input on a 2-D mesh comes out
    as ``(Replicate, Shard(0))``).
    """
    global _sharding_registered
    if _sharding_registered or not torch.distributed.is_available():
        return
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding as _register

    def row_shards(ndim):
        return [d for d in range(ndim - 1)]

    @_register(rms_norm_op)
    def _fwd(x, weight, eps, casting_mode, offset, backend):
        w = None if weight is None else Replicate()
        out = [([Replicate(), Replicate()], [Replicate(), w, None, None, None, None])]
        for d in row_shards(x.ndim):
            out.append(([Shard(d), Shard(d)], [Shard(d), w, None, None, None, None]))
        return out

    @_register(add_rms_norm_op)
    def _add_fwd(x, residual, weight, eps, casting_mode, offset, backend):
        w = None if weight is None else Replicate()
        rep = Replicate()
        out = [([rep, rep, rep], [rep, rep, w, None, None, None, None])]
        for d in row_shards(x.ndim):
            s = Shard(d)
            out.append(([s, s, s], [s, s, w, None, None, None, None]))
        return out

    @_register(rms_norm_backward_op)
    def _bwd(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
        w = None if weight is None else Replicate()
        g = None if gro is None else Replicate()
        rep = Replicate()
        tail = [None] * 6
        out = [([rep, rep], [rep, rep, w, rep, g, *tail])]
        dw_sharded = Partial() if (need_dw and weight is not None) else rep
        for d in row_shards(x.ndim):
            s = Shard(d)
            gs = None if gro is None else s
            out.append(([s if need_dx else rep, dw_sharded], [s, s, w, s, gs, *tail]))
        return out

    for op in (rms_norm_op, add_rms_norm_op, rms_norm_backward_op):
        key_sharding_on_scalars(op)  # need_dx/need_dw change the backward's output shapes
    _sharding_registered = True
