"""The registered operators ``torch.ops.ascend_rmsnorm.*`` (docs/design.md §2).

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
  ``Function.apply`` under torch.func fails, pytorch/pytorch#170834: see ``_apply`` for what the
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

from .backends import choice
from .contract import check_grad_residual, resolve_mode, result_dtype

NAMESPACE = "ascend_rmsnorm"
_lib = torch.library.Library(NAMESPACE, "DEF")
_lib.define(
    "rms_norm(Tensor x, Tensor? weight, float eps, str casting_mode, float offset, str backend)"
    " -> (Tensor y, Tensor rstd)"
)
_lib.define(
    "add_rms_norm(Tensor x, Tensor residual, Tensor? weight, float eps, str casting_mode, float offset,"
    " str backend) -> (Tensor y, Tensor residual_out, Tensor rstd)"
)
_lib.define(
    "rms_norm_backward(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, Tensor? grad_residual_out,"
    " float eps, str casting_mode, float offset, bool need_dx, bool need_dw, str backend)"
    " -> (Tensor dx, Tensor dw)"
)

rms_norm_op = torch.ops.ascend_rmsnorm.rms_norm.default
add_rms_norm_op = torch.ops.ascend_rmsnorm.add_rms_norm.default
rms_norm_backward_op = torch.ops.ascend_rmsnorm.rms_norm_backward.default

_F32 = torch.float32


# ---- the device implementations (real tensors only) ------------------------------------------------


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
        y, rstd, _ = _forward(pick, x, None, weight, eps, casting_mode, offset, backend)
        return y, rstd

    def add_fwd(x, residual, weight, eps, casting_mode, offset, backend):
        y, rstd, r_out = _forward(pick, x, residual, weight, eps, casting_mode, offset, backend)
        return y, r_out, rstd

    def bwd(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
        return _backward(pick, dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend)

    _lib.impl("rms_norm", fwd, key)
    _lib.impl("add_rms_norm", add_fwd, key)
    _lib.impl("rms_norm_backward", bwd, key)


_register_device("CPU", choice.for_cpu)
_register_device("PrivateUse1", choice.for_npu)
_register_device("CUDA", choice.for_other)
_register_device("CompositeExplicitAutograd", choice.for_other)


# ---- fake (meta) implementations: exact shapes, dtypes and strides --------------------------------


def _y_dtype(x, weight, casting_mode):
    return result_dtype(x.dtype, None if weight is None else weight.dtype, casting_mode)


@torch.library.register_fake("ascend_rmsnorm::rms_norm", lib=_lib)
def _rms_norm_fake(x, weight, eps, casting_mode, offset, backend):
    return x.new_empty(x.shape, dtype=_y_dtype(x, weight, casting_mode)), x.new_empty(x.shape[:-1], dtype=_F32)


@torch.library.register_fake("ascend_rmsnorm::add_rms_norm", lib=_lib)
def _add_rms_norm_fake(x, residual, weight, eps, casting_mode, offset, backend):
    y = x.new_empty(x.shape, dtype=_y_dtype(x, weight, casting_mode))
    return y, x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=_F32)


@torch.library.register_fake("ascend_rmsnorm::rms_norm_backward", lib=_lib)
def _rms_norm_backward_fake(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
    dx = x.new_empty(x.shape) if need_dx else x.new_empty(0)
    dw = weight.new_empty(x.shape[-1]) if (need_dw and weight is not None) else x.new_empty(0)
    return dx, dw


# ---- autograd ----------------------------------------------------------------------------------------

_any_requires_grad = torch._C._any_requires_grad
_grad_enabled = torch.is_grad_enabled
_fw_grad_enabled = torch._C._is_fwd_grad_enabled
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset


def _autograd_wanted(*tensors) -> bool:
    """Whether a call needs the autograd.Function: an input requires grad, or forward AD is active
    (tangents do not set requires_grad, so without this check they would be dropped silently)."""
    if _grad_enabled() and _any_requires_grad(*tensors):
        return True
    return _fwad._current_level >= 0 and _fw_grad_enabled()


def _w32(weight, offset):
    """The weight as the formulas use it: widened to fp32, offset added once (None without a weight)."""
    if weight is None:
        return None
    w = weight.to(_F32)
    return w + offset if offset != 0.0 else w


def _jvp_norm(x, x_t, weight, w_t, eps, casting_mode, offset, y_dtype):
    """Tangents of y and rstd (float32 arithmetic; casts pass tangents through, as autograd does).

    rstd is recomputed from x here rather than taken from the forward: the saved one is not
    differentiable, and reverse mode over this tangent (torch.func.grad of a jvp) needs d rstd / dx."""
    _, off = resolve_mode(casting_mode, offset)
    xf = x.to(_F32)
    r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
    w = _w32(weight, off)
    xh = xf * r
    if x_t is not None:
        xt = x_t.to(_F32)
        r_t = -(r * r * r) * (xf * xt).mean(-1, keepdim=True)
        xh_t = xt * r + xf * r_t
    else:
        r_t = torch.zeros_like(r)
        xh_t = torch.zeros_like(xf)
    y_t = xh_t * w if w is not None else xh_t
    if w_t is not None:
        y_t = y_t + xh * w_t.to(_F32)
    return y_t.to(y_dtype), None  # rstd is not differentiable: no tangent


class _RMSNormFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, eps, casting_mode, offset, backend):  # noqa: D102
        return rms_norm_op(x, weight, eps, casting_mode, offset, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: D102
        x, weight, eps, casting_mode, offset, backend = inputs
        _, rstd = output
        ctx.save_for_backward(x, weight, rstd)
        ctx.save_for_forward(x, weight, rstd)
        ctx.args = (eps, casting_mode, offset, backend)
        ctx.y_dtype = output[0].dtype
        ctx.mark_non_differentiable(rstd)

    @staticmethod
    def backward(ctx, dy, _drstd):  # noqa: D102
        x, weight, rstd = ctx.saved_tensors
        eps, casting_mode, offset, backend = ctx.args
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw = _call_backward(dy, x, weight, rstd, None, eps, casting_mode, offset, need_dx, need_dw, backend)
        return (dx if need_dx else None), (dw if need_dw else None), None, None, None, None

    @staticmethod
    def jvp(ctx, x_t, w_t, *_):  # noqa: D102
        x, weight, rstd = ctx.saved_tensors
        _, casting_mode, offset, _ = ctx.args
        eps = ctx.args[0]
        return _jvp_norm(x, x_t, weight, w_t, eps, casting_mode, offset, ctx.y_dtype)


class _AddRMSNormFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, residual, weight, eps, casting_mode, offset, backend):  # noqa: D102
        return add_rms_norm_op(x, residual, weight, eps, casting_mode, offset, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: D102
        x, residual, weight, eps, casting_mode, offset, backend = inputs
        y, r_out, rstd = output
        ctx.save_for_backward(r_out, weight, rstd)
        ctx.save_for_forward(r_out, weight, rstd)
        ctx.args = (eps, casting_mode, offset, backend)
        ctx.y_dtype = y.dtype
        ctx.mark_non_differentiable(rstd)

    @staticmethod
    def backward(ctx, dy, d_r_out, _drstd):  # noqa: D102
        r_out, weight, rstd = ctx.saved_tensors
        eps, casting_mode, offset, backend = ctx.args
        need_dx = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        need_dw = ctx.needs_input_grad[2]
        if dy is None:  # only residual_out was used
            dy = torch.zeros_like(r_out, dtype=ctx.y_dtype)
        dx, dw = _call_backward(dy, r_out, weight, rstd, d_r_out, eps, casting_mode, offset, need_dx, need_dw, backend)
        dx = dx if need_dx else None
        return (
            dx if ctx.needs_input_grad[0] else None,
            dx if ctx.needs_input_grad[1] else None,
            dw if need_dw else None,
            None, None, None, None,
        )  # fmt: skip

    @staticmethod
    def jvp(ctx, x_t, res_t, w_t, *_):  # noqa: D102
        r_out, weight, rstd = ctx.saved_tensors
        _, casting_mode, offset, _ = ctx.args
        if x_t is None and res_t is None:
            r_t = None
        else:
            r_t = (x_t if res_t is None else res_t if x_t is None else x_t + res_t).to(r_out.dtype)
        y_t, _ = _jvp_norm(r_out, r_t, weight, w_t, ctx.args[0], casting_mode, offset, ctx.y_dtype)
        return y_t, (r_t if r_t is not None else torch.zeros_like(r_out)), None


def _textbook_grads(dy, x, weight, eps, casting_mode, offset):
    """dx and dw of the same math in float32 differentiable torch ops (for double backward only)."""
    _, off = resolve_mode(casting_mode, offset)
    xf = x.to(_F32)
    r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
    xh = xf * r
    g = dy.to(_F32)
    gw = g * _w32(weight, off) if weight is not None else g
    c = (gw * xh).mean(-1, keepdim=True)
    dx = r * (gw - xh * c)
    dw = (g * xh).reshape(-1, x.shape[-1]).sum(0) if weight is not None else None
    return dx, dw


class _RMSNormBackwardFunction(torch.autograd.Function):
    """Makes the backward op differentiable: double backward (create_graph=True) and gradgradcheck."""

    generate_vmap_rule = True

    @staticmethod
    def forward(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):  # noqa: D102
        return rms_norm_backward_op(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend)

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: D102
        dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend = inputs
        ctx.save_for_backward(dy, x, weight)
        ctx.save_for_forward(dy, x, weight)
        ctx.args = (eps, casting_mode, offset, need_dx, need_dw and weight is not None, gro is not None)
        ctx.empty_outputs = tuple(o for o, used in zip(output, (need_dx, need_dw)) if not used)

    @staticmethod
    def backward(ctx, g_dx, g_dw):  # noqa: D102
        dy, x, weight = ctx.saved_tensors
        eps, casting_mode, offset, need_dx, need_dw, has_gro = ctx.args

        def first_order(dy, x, *w):
            dx, dw = _textbook_grads(dy, x, w[0] if w else None, eps, casting_mode, offset)
            return (dx,) if dw is None else (dx, dw)

        # torch.func.vjp differentiates with respect to its own primals only (dy depends on x through
        # the forward; autograd.grad would follow that path too), and stays differentiable itself.
        primals = (dy, x) if weight is None else (dy, x, weight)
        outs, vjp_fn = torch.func.vjp(first_order, *primals)
        cot_dx = g_dx.to(_F32) if (need_dx and g_dx is not None) else torch.zeros_like(outs[0])
        cots = (cot_dx,)
        if weight is not None:
            cots += (g_dw.to(_F32) if (need_dw and g_dw is not None) else torch.zeros_like(outs[1]),)
        grads = vjp_fn(cots)
        g_dy, g_x = grads[0].to(dy.dtype), grads[1].to(x.dtype)
        g_w = grads[2].to(weight.dtype) if weight is not None else None
        g_gro = g_dx if (has_gro and need_dx) else None
        return g_dy, g_x, g_w, None, g_gro, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, dy_t, x_t, w_t, _rstd_t, gro_t, *_):  # noqa: D102
        """Forward-over-reverse (torch.func.hessian, jacfwd(jacrev)): the textbook's tangent, in closed
        form (a nested torch.func.jvp is refused inside forward AD)."""
        dy, x, weight = ctx.saved_tensors
        eps, casting_mode, offset, need_dx, need_dw, has_gro = ctx.args
        _, off = resolve_mode(casting_mode, offset)
        xf, dyf = x.to(_F32), dy.to(_F32)
        xt = torch.zeros_like(xf) if x_t is None else x_t.to(_F32)
        dyt = torch.zeros_like(dyf) if dy_t is None else dy_t.to(_F32)
        r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
        r_t = -(r * r * r) * (xf * xt).mean(-1, keepdim=True)
        xh, xh_t = xf * r, xt * r + xf * r_t
        w = _w32(weight, off)
        g, g_t = (dyf * w, dyt * w) if w is not None else (dyf, dyt)
        if w is not None and w_t is not None:
            g_t = g_t + dyf * w_t.to(_F32)
        c = (g * xh).mean(-1, keepdim=True)
        c_t = (g_t * xh + g * xh_t).mean(-1, keepdim=True)
        dx_t = dw_t = None
        if need_dx:
            dx_t = (r_t * (g - xh * c) + r * (g_t - xh_t * c - xh * c_t)).to(x.dtype)
            if has_gro and gro_t is not None:
                dx_t = dx_t + gro_t
        if need_dw:
            dw_t = (dyt * xh + dyf * xh_t).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        # an output that was not asked for is an empty tensor: its tangent is empty too
        dx_t = dx_t if dx_t is not None else x.new_empty(0)
        dw_t = dw_t if dw_t is not None else (weight if weight is not None else x).new_empty(0)
        return dx_t, dw_t


def _needs_function(*tensors) -> bool:
    """Whether a call goes through the autograd.Function at the Python level: autograd or forward
    AD as above, or a torch.func transform (the Function's setup_context/jvp/vmap rules serve them)."""
    return _autograd_wanted(*tensors) or _functorch_active()


_functorch_active = torch._C._are_functorch_transforms_active
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_torch_function_mode = torch._C._is_torch_function_mode_enabled
_PLAIN = (Tensor, torch.nn.Parameter)


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
    )


def rms_norm(x, weight, eps, casting_mode, offset, backend):
    """The entry ``functional.rms_norm`` calls (inputs checked): ``(y, rstd)``."""
    if not torch.compiler.is_compiling():  # compiled: the op, whose Autograd kernel AOTAutograd traces
        if _plain_eager(x, weight):
            y, rstd, _ = _forward(choice.chooser(x), x, None, weight, eps, casting_mode, offset, backend)
            return y, rstd
        if _needs_function(x, weight):
            return _RMSNormFunction.apply(x, weight, eps, casting_mode, offset, backend)
    return rms_norm_op(x, weight, eps, casting_mode, offset, backend)


def add_rms_norm(x, residual, weight, eps, casting_mode, offset, backend):
    """The entry ``functional.add_rms_norm`` calls (inputs checked): ``(y, residual_out, rstd)``."""
    args = (x, residual, weight, eps, casting_mode, offset, backend)
    if not torch.compiler.is_compiling():
        if _plain_eager(x, residual, weight):
            y, rstd, r_out = _forward(choice.chooser(x), x, residual, weight, eps, casting_mode, offset, backend)
            return y, r_out, rstd
        if _needs_function(x, residual, weight):
            return _AddRMSNormFunction.apply(*args)
    return add_rms_norm_op(*args)


def _call_backward(dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
    """The backward op, through its Function when the backward itself is differentiated."""
    args = (dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend)
    if not torch.compiler.is_compiling() and _needs_function(dy, x, weight, gro):
        return _RMSNormBackwardFunction.apply(*args)
    return rms_norm_backward_op(*args)


def _apply(function, op, *args):
    """Apply an autograd.Function from inside an Autograd-key kernel (``op`` is the op it wraps).

    Under a torch.func grad or jvp transform the kernel runs below functorch's front layer, on the
    transform's wrapped tensors, where ``Function.apply`` routes to the ``custom_function_call``
    higher-order op, which has no kernel there (pytorch/pytorch#170834). So the kernel does what
    functorch's rule for that op does, with the op in place of the higher-order op: record the
    Function at this level, run the op one level down on the unwrapped tensors (where the same
    happens again, so nested transforms are right) and wrap the outputs for this level.
    """
    if _functorch_active():
        from torch._functorch.pyfunctorch import TransformType, retrieve_current_functorch_interpreter

        interpreter = retrieve_current_functorch_interpreter()
        if interpreter.key() in (TransformType.Grad, TransformType.Jvp):
            return _at_level(interpreter, function, op, args)
    return function.apply(*args)


def _at_level(interpreter, function, op, args):
    from torch._C._functorch import _unwrap_for_grad, _wrap_for_grad
    from torch._functorch.autograd_function import wrap_outputs_maintaining_identity
    from torch._functorch.utils import enable_single_level_autograd_function

    level = interpreter.level()

    def forward(*operands):
        unwrapped = tuple(_unwrap_for_grad(t, level) if isinstance(t, Tensor) else t for t in operands)
        with torch.enable_grad(), _fwad._set_fwd_grad_enabled(True), interpreter.lower():
            out = op(*unwrapped)
        return wrap_outputs_maintaining_identity(out, unwrapped, operands, lambda t: _wrap_for_grad(t, level))

    body = {"forward": staticmethod(forward)}
    body.update({name: staticmethod(getattr(function, name)) for name in ("setup_context", "backward", "jvp")})
    single = type(function.__name__ + "AtLevel", (torch.autograd.function._SingleLevelFunction,), body)
    with enable_single_level_autograd_function():
        return single.apply(*args)


def _rms_norm_autograd(keyset, x, weight, eps, casting_mode, offset, backend):
    if _autograd_wanted(x, weight):
        return _apply(_RMSNormFunction, rms_norm_op, x, weight, eps, casting_mode, offset, backend)
    return rms_norm_op.redispatch(keyset & _AFTER_AUTOGRAD, x, weight, eps, casting_mode, offset, backend)


def _add_rms_norm_autograd(keyset, x, residual, weight, eps, casting_mode, offset, backend):
    if _autograd_wanted(x, residual, weight):
        return _apply(_AddRMSNormFunction, add_rms_norm_op, x, residual, weight, eps, casting_mode, offset, backend)
    return add_rms_norm_op.redispatch(keyset & _AFTER_AUTOGRAD, x, residual, weight, eps, casting_mode, offset, backend)


def _rms_norm_backward_autograd(keyset, dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend):
    args = (dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend)
    if _autograd_wanted(dy, x, weight, gro):
        return _apply(_RMSNormBackwardFunction, rms_norm_backward_op, *args)
    return rms_norm_backward_op.redispatch(keyset & _AFTER_AUTOGRAD, *args)


_lib.impl("rms_norm", _rms_norm_autograd, "Autograd", with_keyset=True)
_lib.impl("add_rms_norm", _add_rms_norm_autograd, "Autograd", with_keyset=True)
_lib.impl("rms_norm_backward", _rms_norm_backward_autograd, "Autograd", with_keyset=True)


# ---- vmap: fold the vmapped dim into the rows (batch invariance makes that bit-identical) ----------


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


@torch.library.register_vmap("ascend_rmsnorm::rms_norm", lib=_lib)
def _rms_norm_vmap(info, in_dims, x, weight, eps, casting_mode, offset, backend):
    x_bdim, w_bdim = in_dims[0], in_dims[1]
    if w_bdim is not None:
        return _loop(rms_norm_op, info, in_dims, (x, weight, eps, casting_mode, offset, backend), 2)
    return rms_norm_op(_front(x, x_bdim), weight, eps, casting_mode, offset, backend), (0, 0)


@torch.library.register_vmap("ascend_rmsnorm::add_rms_norm", lib=_lib)
def _add_rms_norm_vmap(info, in_dims, x, residual, weight, eps, casting_mode, offset, backend):
    x_bdim, r_bdim, w_bdim = in_dims[0], in_dims[1], in_dims[2]
    if w_bdim is not None:
        return _loop(add_rms_norm_op, info, in_dims, (x, residual, weight, eps, casting_mode, offset, backend), 3)
    n = info.batch_size
    out = add_rms_norm_op(
        _expand_to(x, x_bdim, n), _expand_to(residual, r_bdim, n), weight, eps, casting_mode, offset, backend
    )
    return out, (0, 0, 0)


@torch.library.register_vmap("ascend_rmsnorm::rms_norm_backward", lib=_lib)
def _rms_norm_backward_vmap(info, in_dims, *args):
    dy, x, weight, rstd, gro, eps, casting_mode, offset, need_dx, need_dw, backend = args
    if in_dims[2] is not None or (need_dw and weight is not None):
        return _loop(rms_norm_backward_op, info, in_dims, args, 2)
    n = info.batch_size
    dy_b, x_b, rstd_b = (_expand_to(t, d, n) for t, d in zip((dy, x, rstd), (in_dims[0], in_dims[1], in_dims[3])))
    gro_b = None if gro is None else _expand_to(gro, in_dims[4], n)
    dx, dw = rms_norm_backward_op(dy_b, x_b, weight, rstd_b, gro_b, eps, casting_mode, offset, need_dx, False, backend)
    return (dx, dw), (0 if need_dx else None, None)


# ---- DTensor: rows may be sharded, the normalised dim may not -------------------------------------

_sharding_registered = False


def sharding_registered() -> bool:
    return _sharding_registered


def ensure_sharding() -> bool:
    """register_sharding(), callable from traced code: dynamo runs it once while tracing."""
    register_sharding()
    return True


# What torch.compiler.assume_constant_result(ensure_sharding) does, without importing torch._dynamo
# (about a second) when the package is imported.
ensure_sharding._dynamo_marked_constant = True  # type: ignore[attr-defined]


def register_sharding() -> None:
    """Teach DTensor the ops' sharding (called the first time a tensor subclass reaches rms_norm).

    Replicate, or Shard on any dim but the last (rows are independent: each rank's rows give the
    plain tensor's bits); the weight replicated; dw of row-sharded inputs is Partial (a sum over
    each rank's rows, then over ranks). Shard on the last dim is not offered, so DTensor
    redistributes such an input to Replicate first.
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

    _sharding_registered = True
