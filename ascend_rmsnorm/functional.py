"""``rms_norm`` and ``add_rms_norm``: the public functions. Input checks, then the backend.

Both take the casting mode and offset of docs/design.md §3 item 3 and pass them, unresolved, to the
backend through the backend protocol (docs/design.md §7): ``forward(x2d, weight, eps, *, casting_mode,
offset, residual) -> (y2d, rstd, residual_out)`` and ``backward(dy2d, x2d, weight, rstd, *,
casting_mode, offset, need_dx, need_dw) -> (dx2d, dw)``.
"""

from __future__ import annotations

import inspect
import numbers

import torch

from . import _habits, ops
from .backends import choice
from .contract import (
    F32_MAX,
    check_eps,
    check_f32_finite,
    check_on_x_device,
    check_residual,
    check_weight,
    check_x,
    resolve_mode,
)

#: What ``eps=None`` means, here as in ``F.rms_norm`` and ``nn.RMSNorm``: the epsilon of torch's
#: computation type, float32, for float32, bfloat16 and float16 inputs alike.
DEFAULT_EPS = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps


def _check_dense(fn: str, name: str, t: object) -> torch.Tensor:
    """A dense (strided, not nested, not quantized) tensor, or a TypeError that says what it is."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        raise TypeError(f"{fn}: {name} is a nested tensor; pad it or normalise its components one by one")
    if t.layout != torch.strided:
        raise TypeError(f"{fn}: {name} has layout {t.layout}; only dense tensors are supported (use .to_dense())")
    if t.is_quantized:
        raise TypeError(f"{fn}: {name} is a quantized tensor ({t.dtype}); dequantize() it first")
    return t


def _check_scalar(fn: str, name: str, value: object) -> float:
    """A real number that is finite and representable in float32, as a Python float."""
    if type(value) is float:  # the common case, without the ABC isinstance below
        v = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " (a one-element tensor: pass .item())" if isinstance(value, torch.Tensor) and value.numel() == 1 else ""
        raise TypeError(f"{fn}: {name} must be a real number, got {type(value).__name__}{hint}")
    else:
        try:
            v = float(value)
        except OverflowError:
            raise ValueError(f"{fn}: {name} is too large for float32 (at most {F32_MAX:.8g}), got {value!r}") from None
    check_f32_finite(v, name, fn)
    return v


def _check_eps(fn: str, eps: object) -> float:
    """``eps`` as the float every backend adds: None is DEFAULT_EPS; else a real number ``check_eps`` takes."""
    if eps is None:
        return DEFAULT_EPS
    eps_f = _check_scalar(fn, "eps", eps)
    check_eps(eps_f, fn)
    return eps_f


def _check_flag(fn: str, name: str, value: object) -> None:
    """A bool, Python's or numpy's (a string such as "no" would be true)."""
    kind = type(value)
    if not isinstance(value, bool) and (kind.__module__, kind.__name__) not in (("numpy", "bool_"), ("numpy", "bool")):
        raise TypeError(f"{fn}: {name} must be a bool, got {kind.__module__}.{kind.__qualname__} {value!r}")


def _check_inputs(
    fn: str,
    x: object,
    weight: object,
    eps: object,
    casting_mode: object,
    offset: object,
    residual: object = None,
    with_residual: bool = False,
) -> tuple[float, float]:
    """Validate everything a call gets; returns (eps, offset) as Python floats."""
    x = _check_dense(fn, "x", x)
    check_x(x, fn)
    if with_residual:
        residual = _check_dense(fn, "residual", residual)
        check_residual(residual, x, fn)
        check_on_x_device("residual", residual, x, fn)
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise _habits.not_a_weight(fn, weight) or TypeError(
                f"{fn}: weight must be a torch.Tensor or None, got {type(weight).__name__}"
            )
        _check_dense(fn, "weight", weight)
        check_weight(weight, x, fn)
    eps_f = _check_eps(fn, eps)
    offset_f = _check_scalar(fn, "offset", offset)
    if not isinstance(casting_mode, str):
        raise TypeError(f"{fn}: casting_mode must be a str, got {type(casting_mode).__name__}")
    resolve_mode(casting_mode, offset_f, fn)  # ValueError for an unknown mode or an offset gemma contradicts
    return eps_f, offset_f


def _backend_name(fn: str, backend: object, x: torch.Tensor) -> str:
    """The requested backend name (the argument, else ASCEND_RMSNORM_BACKEND, else auto), checked
    against x's device when it names a device of its own (meta: emu and npu have no fake device)."""
    try:
        name = choice.requested_name(backend)
    except (TypeError, ValueError) as err:  # a bad argument: named with the function, as every other one is
        raise type(err)(f"{fn}: {err}") from None
    # backend=None took it from the environment: say so, since the call itself asked for nothing
    source = f" (from {choice.ENV_BACKEND})" if backend is None else ""
    if name == "emu" and not x.is_cpu:
        raise ValueError(f"{fn}: the emu backend{source} runs on CPU tensors; x is on {x.device}")
    if name == "npu" and x.device.type != "npu":
        raise ValueError(f"{fn}: backend 'npu'{source} needs tensors on an NPU; x is on {x.device}")
    return name


def _subclass_hook(x: torch.Tensor) -> None:
    """A tensor subclass (DTensor) needs the ops' sharding rules; registered on first sight (importing
    DTensor costs about a second, so not at import). Under torch.compile the registration runs at
    trace time (``assume_constant_result``), not in the graph."""
    if type(x) is not torch.Tensor and not ops.sharding_registered():
        ops.ensure_sharding()


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *_extra: object,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    backend: str | None = None,
    return_rstd: bool = False,
    **_unknown: object,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Batch-invariant RMSNorm over the last dimension of ``x``.

    ``y = cast((x * rstd) * (weight + offset))`` with ``rstd = 1/sqrt(mean(x^2) + eps)`` computed in
    fp32 by the fixed-order contract of docs/design.md §3: the bits of row i depend only on row i.

    Args:
        x: any leading shape, last dimension H; float32, bfloat16 or float16; any strides.
        weight: shape (H,), any floating dtype (widened to fp32), on x's device; ``None`` for no scale.
        eps: added to mean(x^2); finite, representable in float32, 0 or at least float32's smallest
            normal number (1.18e-38; a subnormal one is refused). ``None`` (the default) is
            what ``F.rms_norm`` and ``nn.RMSNorm`` (and this package's ``RMSNorm``) use for None:
            float32's epsilon, 1.19e-07, for every input dtype. torch_npu, Liger, vLLM and HF configs
            mostly use 1e-6: pass it.
        casting_mode: ``"fp32"`` (one rounding, ``nn.RMSNorm``'s order), ``"llama"`` (HF Llama's
            ``weight * hidden.to(x.dtype)``) or ``"gemma"`` (``"fp32"`` with offset 1).
        offset: added to the weight in fp32 before use (Gemma's ``1 + weight``); ignored without a weight.
        backend: ``"auto"`` (default, or ``ASCEND_RMSNORM_BACKEND``), ``"npu"``, ``"emu"`` or ``"torch"``.
        return_rstd: also return rstd (float32, shape ``x.shape[:-1]``).

    Returns ``y`` (dtype ``contract.result_dtype(x.dtype, weight.dtype, casting_mode)``), or ``(y, rstd)``.
    A call shape of another API (``rms_norm(x, (H,), w, eps)``, ``epsilon=``) raises a TypeError that
    names this one's.
    """
    if _extra or _unknown:
        raise _habits.not_a_weight("rms_norm", weight) or _habits.bad_call(
            "rms_norm", _call_text(rms_norm), _extra, _unknown
        )
    eps_f, offset_f = _check_inputs("rms_norm", x, weight, eps, casting_mode, offset)
    _check_flag("rms_norm", "return_rstd", return_rstd)
    name = _backend_name("rms_norm", backend, x)
    _subclass_hook(x)
    y, rstd = ops.rms_norm(x, weight, eps_f, casting_mode, offset_f, name)
    return (y, rstd) if return_rstd else y


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *_extra: object,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    backend: str | None = None,
    return_rstd: bool = False,
    **_unknown: object,
) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual_out = cast_x(x + residual)`` (one fp32 add, rounded to x's dtype), then
    ``y = rms_norm(residual_out, weight, eps, ...)``, bit for bit the two steps apart (docs/design.md §3 item 3b).

    ``residual`` has x's shape and dtype; the other arguments are those of :func:`rms_norm`.
    Returns ``(y, residual_out)``, or ``(y, residual_out, rstd)`` with ``return_rstd``.
    (torch_npu's ``npu_add_rms_norm`` returns ``(y, rstd, x_sum)``: see the README's porting table.)
    """
    if _extra or _unknown:
        raise _habits.not_a_weight("add_rms_norm", weight) or _habits.bad_call(
            "add_rms_norm", _call_text(add_rms_norm), _extra, _unknown
        )
    eps_f, offset_f = _check_inputs("add_rms_norm", x, weight, eps, casting_mode, offset, residual, True)
    _check_flag("add_rms_norm", "return_rstd", return_rstd)
    name = _backend_name("add_rms_norm", backend, x)
    _subclass_hook(x)
    y, r_out, rstd = ops.add_rms_norm(x, residual, weight, eps_f, casting_mode, offset_f, name)
    return (y, r_out, rstd) if return_rstd else (y, r_out)


def _public_signature(fn, required: tuple[str, ...] = ()) -> None:
    """Show the real parameters: the catch-alls that only exist to explain a wrong call are hidden, and
    ``required`` ones (given a default only to explain their absence) show as required."""
    sig = inspect.signature(fn)
    kept = [
        p.replace(default=p.empty) if p.name in required else p
        for p in sig.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    fn.__signature__ = sig.replace(parameters=kept)


def _call_text(fn) -> str:
    """``rms_norm(x, weight=None, eps=None, *, casting_mode='fp32', ...)``: the call, without annotations."""
    parts: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    name = fn.__qualname__.replace(".__init__", "")
    return f"{name}({', '.join(parts)})"


_public_signature(rms_norm)
_public_signature(add_rms_norm)
