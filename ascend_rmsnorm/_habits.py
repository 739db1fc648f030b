"""Errors for the call shapes people bring from ``F.rms_norm``, torch_npu, Liger and vLLM: each names
the call this package takes instead (the README's porting table has the whole mapping)."""

from __future__ import annotations

import torch

#: keyword someone else's API uses -> what to write here (for rms_norm/add_rms_norm, then for RMSNorm).
_KEYWORDS = {
    "epsilon": "eps= (torch_npu's epsilon=)",
    "variance_epsilon": "eps= (HF's variance_epsilon attribute)",
    "gamma": "weight= (torch_npu's gamma)",
    "W": "weight= (Liger's W)",
    "normalized_shape": "nothing: rms_norm normalises over the last dim (for several trailing dims use "
    "RMSNorm(normalized_shape) or reshape x to (..., H))",
    "residual": "add_rms_norm(x, residual, weight, eps) -> (y, residual_out)",
    "in_place": "nothing: this package never overwrites its inputs or dy (Liger's in_place=)",
    "init_fn": "nothing: a fresh weight is 1 - offset (Liger's init_fn=); load your state dict",
    "row_mode": "nothing: every row count takes the same code path here (Liger's row_mode=)",
}
_MODULE_KEYWORDS = {
    "hidden_size": "RMSNorm(4096, eps) or RMSNorm(normalized_shape=4096) (nn.RMSNorm's first argument)",
    "epsilon": "eps=",
    "variance_epsilon": "eps=",
    "has_weight": "elementwise_affine= (vLLM's has_weight=)",
    "var_hidden_size": "nothing: the norm is over the whole row (vLLM's var_hidden_size= is not supported)",
    "in_place": _KEYWORDS["in_place"],
    "init_fn": _KEYWORDS["init_fn"],
    "row_mode": _KEYWORDS["row_mode"],
}


def _keyword_errors(fn: str, kwargs: dict, table: dict) -> str:
    parts = []
    for name in kwargs:
        hint = table.get(name)
        parts.append(f"{name}= (write {hint})" if hint else f"{name}=")
    return f"{fn}() got unexpected keyword argument(s) {', '.join(parts)}"


def bad_call(fn: str, signature: str, args: tuple, kwargs: dict) -> TypeError:
    """The TypeError for a call to ``rms_norm``/``add_rms_norm`` with more positional arguments or other
    keywords than it takes (``signature`` is the call's real form)."""
    if kwargs:
        return TypeError(_keyword_errors(fn, kwargs, _KEYWORDS) + f"; the call is {signature}")
    return TypeError(
        f"{fn}() got {len(args)} positional argument(s) more than it takes; the call is {signature} (the "
        "options after * are keywords: casting_mode=..., offset=...)"
    )


def not_a_weight(fn: str, weight: object) -> TypeError | None:
    """A TypeError when ``weight`` looks like F.rms_norm's ``normalized_shape`` (an int, a tuple or list
    of ints, a torch.Size): the F.rms_norm(x, (H,), w, eps) habit. ``fn`` is ``rms_norm`` (the weight is
    its second argument) or ``add_rms_norm`` (its third, after the residual)."""
    shape_like = isinstance(weight, (int, torch.Size)) and not isinstance(weight, bool)
    shape_like = shape_like or (
        isinstance(weight, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in weight)
    )
    if not shape_like:
        return None
    shown = weight if isinstance(weight, int) else tuple(weight)
    place, args = ("third", "x, residual, weight, eps") if fn == "add_rms_norm" else ("second", "x, weight, eps")
    return TypeError(
        f"{fn}: the {place} argument is the weight, got the shape {shown!r}:"
        f" F.rms_norm(x, normalized_shape, weight, eps) is ascend_rmsnorm.{fn}({args}) here (it "
        "normalises over the last dim; for several trailing dims use RMSNorm(normalized_shape))"
    )


def module_bad_keywords(kwargs: dict, signature: str) -> TypeError:
    """The TypeError for ``RMSNorm(...)`` with keywords of another RMSNorm class (``hidden_size=``, ...)."""
    return TypeError(_keyword_errors("RMSNorm", kwargs, _MODULE_KEYWORDS) + f"; the constructor is {signature}")
