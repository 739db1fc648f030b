"""The registered operators ``torch.ops.ascend_rmsnorm.*`` (docs/design.md §2), and the entries
``functional`` calls (this module: the three routes below).

The modules: ``schema`` (the definitions), ``device`` (the per-dispatch-key implementations), ``fake``,
``autograd``, ``vmap``, ``dtensor``, and ``_torch_compat`` (every private torch probe, in one place).

Three ops, designed once for every casting mode, the offset and the residual variant::

    rms_norm(Tensor x, Tensor? weight, float eps, str casting_mode, float offset, str backend)
        -> (Tensor y, Tensor rstd)
    add_rms_norm(Tensor x, Tensor residual, Tensor? weight, float eps, str casting_mode, float offset,
                 str backend) -> (Tensor y, Tensor residual_out, Tensor rstd)
    rms_norm_backward(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, Tensor? grad_residual_out,
                      float eps, str casting_mode, float offset, bool need_dx, bool need_dw,
                      str backend) -> (Tensor dx, Tensor dw)

``x`` has any leading shape (the ops flatten it themselves); ``y`` has x's shape and the dtype
``contract.result_dtype`` gives, ``rstd`` is float32 of shape ``x.shape[:-1]``, ``residual_out`` is
x's shape and dtype. In the backward, ``x`` is the tensor that was normalised (residual_out for
add_rms_norm) and ``grad_residual_out``, when given, is added to dx inside the backend: one fp32 add
of dx in x's dtype and the gradient, rounded once (what autograd does for the two calls apart), with
canonical NaNs; it has x's shape and dtype. ``dx`` is empty (shape (0,)) unless need_dx; ``dw`` is empty unless
need_dw and a weight was given. ``backend`` is the requested name ("auto", "npu", "emu", "torch");
each device key's implementation turns it into a backend object (``backends/choice.py``).

How they are registered, and why:
- ``torch.library.Library`` + ``define`` + ``impl`` per dispatch key (CPU, PrivateUse1 = the NPU,
  CUDA, and CompositeExplicitAutograd for every other device), ``register_fake`` for shapes and
  dtypes. No decomposition exists, so Inductor keeps each op as one opaque call: no compiler can
  fuse a multiply and an add into an FMA or reorder the tree, and compiled bits equal eager bits.
- Autograd is one Python kernel on the Autograd key per op, written here rather than with
  ``torch.library.register_autograd``: that one wraps a ctx-style ``autograd.Function`` (torch.func
  refuses it: "must override the setup_context staticmethod", pytorch/pytorch#168393) and ignores
  forward-mode tangents (``jvp`` silently gives a tangent as if the op were constant). Ours calls an
  ``autograd.Function`` with ``setup_context``, ``jvp`` and ``generate_vmap_rule`` when an input
  requires grad or a forward-AD level is open, and otherwise redispatches to the device kernel.
  Measured per call without autograd on a trivial 1 us body (benchmarks/bench_ops.py, this CPU):
  this ~6 us, Library + register_autograd ~8 us, ``torch.library.custom_op`` ~11 us, for the same
  graph behaviour.
- The Python entries ``rms_norm``/``add_rms_norm`` (what functional.py calls) take one of three
  routes, never branching on the row count: (1) plain eager tensors with nothing for the dispatcher to
  do (no autograd, forward AD, torch.func transform, dispatch or function mode, not tracing): the
  device implementation directly, since two Python kernels cost about 6 us, as much as the torch
  path's own work on a small batch; (2) autograd or a torch.func transform: the ``autograd.Function``
  at the Python level, where every composition of transforms works (inside an Autograd kernel,
  ``Function.apply`` under torch.func fails, pytorch/pytorch#170834: see ``autograd._apply`` for what the
  kernels do instead); (3) everything else, and all tracing: the op.
- The backward op is itself differentiable (double backward through a float32 textbook of the
  same math, correct to float32 rounding rather than bit-exact; forward-over-reverse too); vmap rules
  fold a batch dim into the rows, which batch invariance makes bit-identical to a loop, except where
  dw sums over rows.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd import forward_ad as _fwad

from ..backends import choice
from . import fake, vmap  # noqa: F401  (they register the ops' fake and vmap rules)
from ._torch_compat import any_requires_grad as _any_requires_grad
from ._torch_compat import functionalizing as _functionalizing
from ._torch_compat import functorch_transforms_active as _functorch_active
from ._torch_compat import jit_tracing_state as _jit_tracing_state
from ._torch_compat import torch_dispatch_stack_len as _dispatch_stack_len
from ._torch_compat import torch_function_mode_enabled as _torch_function_mode
from .autograd import _AddRMSNormFunction, _needs_function, _RMSNormFunction
from .device import _forward
from .dtensor import ensure_sharding, sharding_registered
from .schema import add_rms_norm_op, rms_norm_backward_op, rms_norm_op

_PLAIN = (Tensor, torch.nn.Parameter)

__all__ = [
    "add_rms_norm",
    "add_rms_norm_op",
    "ensure_sharding",
    "rms_norm",
    "rms_norm_backward_op",
    "rms_norm_op",
    "sharding_registered",
]

_grad_enabled = torch.is_grad_enabled


def _plain_eager(x, *others) -> bool:
    """Whether nothing stands between this call and the device kernel: plain tensors off the meta
    device, no autograd or forward AD, no torch.func transform, no dispatch or function mode, not
    being traced. Then the dispatcher would only pass the call through (two Python kernels on this
    CPU cost about 6 us, more than the torch path's own work on a small batch), so the entry calls the
    device implementation itself; anything else goes through ``torch.ops.ascend_rmsnorm``."""
    if type(x) is not Tensor or x.is_meta:  # is_meta/is_cpu: a fifth of what x.device.type costs
        return False
    for t in others:
        if t is not None and type(t) not in _PLAIN:
            return False
    if _grad_enabled() and _any_requires_grad(x, *others):
        return False
    return (
        _fwad._current_level < 0
        and not _functorch_active()
        and _dispatch_stack_len() == 0
        and not _torch_function_mode()
        and _jit_tracing_state() is None  # torch.jit.trace records only what the dispatcher sees
    )


def _function_route(*tensors) -> bool:
    """Route (2): the autograd.Function, when autograd or a torch.func transform needs it, except
    under torch.jit.trace (which would record the Function as a Python op: no check_trace, no
    jit.save) and under torch.func.functionalize (which has no rule for an autograd.Function): the op
    then, whose Autograd kernel applies the Function per transform level."""
    if not _needs_function(*tensors) or _jit_tracing_state() is not None:
        return False
    return not (_functorch_active() and _functionalizing())


def rms_norm(x, weight, eps, casting_mode, offset, backend):
    """The entry ``functional.rms_norm`` calls (inputs checked): ``(y, rstd)``."""
    if not torch.compiler.is_compiling():  # compiled: the op, whose Autograd kernel AOTAutograd traces
        if _plain_eager(x, weight):
            y, rstd, _ = _forward(choice.chooser(x), x, None, weight, eps, casting_mode, offset, backend)
            return y, rstd
        if _function_route(x, weight):
            return _RMSNormFunction.apply(x, weight, eps, casting_mode, offset, backend)
    return rms_norm_op(x, weight, eps, casting_mode, offset, backend)


def add_rms_norm(x, residual, weight, eps, casting_mode, offset, backend):
    """The entry ``functional.add_rms_norm`` calls (inputs checked): ``(y, residual_out, rstd)``."""
    args = (x, residual, weight, eps, casting_mode, offset, backend)
    if not torch.compiler.is_compiling():
        if _plain_eager(x, residual, weight):
            y, rstd, r_out = _forward(choice.chooser(x), x, residual, weight, eps, casting_mode, offset, backend)
            return y, r_out, rstd
        if _function_route(x, residual, weight):
            return _AddRMSNormFunction.apply(*args)
    return add_rms_norm_op(*args)
