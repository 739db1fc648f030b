"""The three ops' schemas in the ``ascend_rmsnorm`` namespace, and their handles."""

from __future__ import annotations

import torch

NAMESPACE = "ascend_rmsnorm"


lib = torch.library.Library(NAMESPACE, "DEF")

# No ``cudagraph_unsafe`` tag on the ops: on CUDA they run the torch path, which reads nothing back to
# the host there (``backends/torch.py``, ``_reads_back``: the NaN/Inf fix-ups run as tensor ops),
# allocates its outputs and branches only on shapes, dtypes and the scalar arguments. So a CUDA graph may
# capture them (``torch.cuda.graph`` after a warm-up call, ``torch.compile(mode="reduce-overhead")``).


lib.define(
    "rms_norm(Tensor x, Tensor? weight, float eps, str casting_mode, float offset, str backend)"
    " -> (Tensor y, Tensor rstd)"
)


lib.define(
    "add_rms_norm(Tensor x, Tensor residual, Tensor? weight, float eps, str casting_mode, float offset,"
    " str backend) -> (Tensor y, Tensor residual_out, Tensor rstd)"
)


lib.define(
    "rms_norm_backward(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, Tensor? grad_residual_out,"
    " float eps, str casting_mode, float offset, bool need_dx, bool need_dw, str backend)"
    " -> (Tensor dx, Tensor dw)"
)


rms_norm_op = torch.ops.ascend_rmsnorm.rms_norm.default


add_rms_norm_op = torch.ops.ascend_rmsnorm.add_rms_norm.default


rms_norm_backward_op = torch.ops.ascend_rmsnorm.rms_norm_backward.default


_F32 = torch.float32
