"""Autograd: one Python kernel on the Autograd key per op, calling an ``autograd.Function`` (with
``setup_context``, ``jvp`` and ``generate_vmap_rule``) when an input requires grad or forward AD is on;
the backward op is itself differentiable (double backward through a float32 textbook)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd import forward_ad as _fwad

from ..contract import resolve_mode
from ._torch_compat import AFTER_AUTOGRAD as _AFTER_AUTOGRAD
from ._torch_compat import any_requires_grad as _any_requires_grad
from ._torch_compat import functorch_transforms_active as _functorch_active
from ._torch_compat import fwd_grad_enabled as _fw_grad_enabled
from .schema import _F32, add_rms_norm_op, lib, rms_norm_backward_op, rms_norm_op

_grad_enabled = torch.is_grad_enabled


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
        # an unused output's gradient comes as None, not as autograd's zeros: those are a plain tensor
        # even for a DTensor output, which DTensor then refuses beside the DTensor gradients
        ctx.set_materialize_grads(False)

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
        ctx.set_materialize_grads(False)  # None for an unused dx or dw, as _AddRMSNormFunction's

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


lib.impl("rms_norm", _rms_norm_autograd, "Autograd", with_keyset=True)


lib.impl("add_rms_norm", _add_rms_norm_autograd, "Autograd", with_keyset=True)


lib.impl("rms_norm_backward", _rms_norm_backward_autograd, "Autograd", with_keyset=True)
