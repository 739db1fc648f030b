"""``RMSNorm``: a drop-in for ``torch.nn.RMSNorm`` over this package's batch-invariant op.

A subclass of ``nn.RMSNorm`` (so wrap policies, weight-decay exclusions and init code that look for
``nn.RMSNorm`` find it) with the same constructor, attributes, parameter, state dict and repr (and
Hugging Face's RMSNorm layers' only parameter is also ``weight``), plus the casting mode and weight
offset of docs/design.md §3 item 3 and vLLM's ``forward(x, residual)`` convention.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable

import torch
from torch import nn

from . import _habits
from .backends.choice import requested_name
from .contract import resolve_mode, same_shape
from .functional import (
    DEFAULT_EPS,
    _call_text,
    _check_eps,
    _check_scalar,
    _public_signature,
    add_rms_norm,
    rms_norm,
)


def _dim(d: object) -> int:
    if isinstance(d, bool):
        raise TypeError("a bool is not a dimension")
    return operator.index(d)


def _as_shape(normalized_shape: object) -> tuple[int, ...]:
    """``normalized_shape`` as a tuple of positive ints: an int, or a sequence of them, where "int"
    is anything ``operator.index`` accepts (numpy integers, 0-d integer tensors), as in nn.RMSNorm."""
    try:
        dims = (_dim(normalized_shape),)
    except TypeError:
        if isinstance(normalized_shape, (str, bytes)) or not isinstance(normalized_shape, Iterable):
            raise TypeError(
                f"RMSNorm: normalized_shape must be an int or a sequence of ints, got {type(normalized_shape).__name__}"
            ) from None
        try:
            dims = tuple(_dim(d) for d in normalized_shape)
        except TypeError:
            raise TypeError(f"RMSNorm: normalized_shape must hold ints, got {normalized_shape!r}") from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError(
            f"RMSNorm: normalized_shape (the hidden_size) must be one or more positive ints, got {normalized_shape!r}"
        )
    return dims


class RMSNorm(nn.RMSNorm):
    """Batch-invariant RMSNorm, a drop-in for ``torch.nn.RMSNorm`` (and a subclass of it).

    Args:
        normalized_shape: the trailing shape to normalise over: an int (the hidden size) or a tuple
            (several trailing dims, flattened into one row of prod(normalized_shape) elements, as
            ``nn.RMSNorm`` does); numpy integers are fine.
        eps: added to mean(x^2). ``None`` (the default, like ``nn.RMSNorm``, ``F.rms_norm`` and this
            package's ``rms_norm``) uses what ``nn.RMSNorm`` really uses: the epsilon of the
            computation type, float32, for float32, bfloat16 and float16 inputs alike
            (``torch.finfo(torch.float32).eps``, 1.19e-07; the docs' "finfo of x's dtype" is not what
            torch computes for bf16/fp16). HF configs mostly say 1e-6 or 1e-5: pass theirs.
            ``variance_epsilon`` is the eps actually used.
        elementwise_affine: learn a ``weight`` of shape ``normalized_shape``.
        device, dtype: of the weight.
        casting_mode: ``"fp32"`` (default: nn.RMSNorm's order, one rounding), ``"llama"`` (HF
            Llama/Qwen/Mistral: the normalised row is rounded to x's dtype before the weight) or
            ``"gemma"`` (``"fp32"`` with offset 1: HF Gemma's ``* (1 + weight)``).
        offset: added to the weight in fp32 before use (forced to 1 by "gemma").
        backend: the backend of every call (see ``rms_norm``).

    ``forward(x)`` returns y; ``forward(x, residual)`` returns ``(y, residual_out)`` with
    ``residual_out = x + residual`` (rounded to x's dtype) and y its norm (vLLM's convention).
    A fresh weight is the identity scale of its mode: ``1 - offset`` (ones, or zeros for Gemma).
    x must be float32, bfloat16 or float16 (the contract computes in float32); a float64 x raises
    a TypeError that names the alternatives (``nn.RMSNorm``, or ``x.float()``).
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine", "casting_mode", "offset"]

    def __init__(
        self,
        normalized_shape: object = None,  # None only to explain RMSNorm(hidden_size=...): required
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        casting_mode: str = "fp32",
        offset: float = 0.0,
        backend: str | None = None,
        **_unknown: object,
    ) -> None:
        if _unknown:  # hidden_size=, epsilon=, has_weight=, ...: say what this constructor calls them
            raise _habits.module_bad_keywords(_unknown, _call_text(RMSNorm.__init__))
        if normalized_shape is None:
            raise TypeError(f"RMSNorm needs normalized_shape (the hidden size): {_call_text(RMSNorm.__init__)}")
        if not isinstance(elementwise_affine, (bool, int)) or isinstance(elementwise_affine, float):
            raise TypeError(
                f"RMSNorm: elementwise_affine (the third argument, as in nn.RMSNorm) must be a bool, got "
                f"{elementwise_affine!r}; LigerRMSNorm(hidden_size, eps, offset, casting_mode) is "
                "RMSNorm(hidden_size, eps, offset=..., casting_mode=...) here"
            )
        shape = _as_shape(normalized_shape)
        # every value a call would refuse is refused here, where the layer is built, not at its first forward
        _check_eps("RMSNorm", eps)  # None, or a real number (a one-element tensor is told to pass .item())
        if (
            elementwise_affine
            and dtype is not None
            and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point)
        ):
            raise TypeError(f"RMSNorm: dtype {dtype} (the weight's) must be a floating dtype, such as torch.float32")
        if not isinstance(casting_mode, str):
            raise TypeError(f"RMSNorm: casting_mode must be a str, got {type(casting_mode).__name__}")
        _, offset = resolve_mode(casting_mode, _check_scalar("RMSNorm", "offset", offset), "RMSNorm")
        if backend is not None:
            try:
                requested_name(backend)
            except (TypeError, ValueError) as err:
                raise type(err)(f"RMSNorm: {err}") from None
        super().__init__(shape, eps, bool(elementwise_affine), device, dtype)  # weight, then reset_parameters()
        self.casting_mode, self.offset, self.backend = casting_mode, offset, backend
        self.reset_parameters()  # again, now that the offset is known

    @property
    def hidden_size(self) -> int:
        """The number of elements normalised together: prod(normalized_shape)."""
        return math.prod(self.normalized_shape)

    @property
    def variance_epsilon(self) -> float:
        """The eps actually added (the name Hugging Face RMSNorm layers use): float32's epsilon for None."""
        return self._eps()

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        """Set ``eps`` (HF layers keep it as a plain attribute, which code may assign), checked as at construction."""
        _check_eps("RMSNorm", value)
        self.eps = value

    def reset_parameters(self) -> None:
        """Set the weight to the identity scale of the mode: 1 - offset (nn.RMSNorm: ones)."""
        if self.weight is not None:
            with torch.no_grad():
                self.weight.fill_(1.0 - getattr(self, "offset", 0.0))

    def _eps(self) -> float:
        return DEFAULT_EPS if self.eps is None else self.eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        k = len(self.normalized_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < k or tuple(x.shape[-k:]) != self.normalized_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"RMSNorm: input of shape {got} does not end in normalized_shape {self.normalized_shape}")
        hidden = self.hidden_size
        flat = k != 1
        x2 = x.reshape(*x.shape[:-k], hidden) if flat else x
        w = self.weight
        if w is not None and flat:
            w = w.reshape(hidden)
        kw = {"casting_mode": self.casting_mode, "offset": self.offset, "backend": self.backend}
        if residual is None:
            y = rms_norm(x2, w, self._eps(), **kw)
            return y.reshape(x.shape) if flat else y
        if not isinstance(residual, torch.Tensor) or not same_shape(residual, x):
            got = tuple(residual.shape) if isinstance(residual, torch.Tensor) else type(residual).__name__
            raise ValueError(f"RMSNorm: residual must be a tensor of x's shape {tuple(x.shape)}, got {got}")
        r2 = residual.reshape(x2.shape) if flat else residual
        y, r_out = add_rms_norm(x2, r2, w, self._eps(), **kw)
        if flat:
            return y.reshape(x.shape), r_out.reshape(x.shape)
        return y, r_out

    def extra_repr(self) -> str:
        text = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.casting_mode != "fp32" or self.offset != 0.0:
            text += f", casting_mode={self.casting_mode!r}, offset={self.offset}"
        if self.backend is not None:  # a pinned backend decides where the layer runs: show it
            text += f", backend={self.backend!r}"
        return text


_public_signature(RMSNorm.__init__, required=("normalized_shape",))
