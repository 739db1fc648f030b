"""The constants of the numerics contract (docs/design.md §3), shared by every backend.

Changing any value here changes the bits every backend produces, so the kernel source
repeats them and a test checks the two agree.
"""

from __future__ import annotations

import functools
import math
import struct

import torch

#: Row tile for the sum of squares: a row is cut into tiles of this many elements.
TILE = 4096
#: Rows per dw chunk at most: chunk partials are summed in row order, then combined by the tree.
DW_CHUNK_ROWS = 64
#: A batch of N rows has at least min(N, DW_MIN_CHUNKS) chunks: R = clamp(N // DW_MIN_CHUNKS, 1, 64)
#: (a function of N only, never of cores or blocks), so every core gets a chunk when N >= cores.
DW_MIN_CHUNKS = 128
#: Integer first guess of 1/sqrt(a): f32_from_bits(RSQRT_MAGIC - (bits(a) >> 1)).
RSQRT_MAGIC = 0x5F375A86
#: Newton steps after the first guess: t = y*y; t = h*t; t = 1.5 - t; y = y*t.
NEWTON_STEPS = 3

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Integer dtype codes of the kernel ABI (docs/design.md §4).
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def to_f32(value: float) -> float:
    """Round a Python float to the nearest float32 (RNE) and return it as a Python float.

    Not memoised: a cache keyed by value would hand -0.0 the result of +0.0 (they compare equal).
    """
    return struct.unpack("<f", struct.pack("<f", value))[0]


@functools.lru_cache(maxsize=1024)  # H repeats call after call
def inv_hidden(hidden: int) -> float:
    """float32(1/H): computed once on the host and passed to every backend."""
    return to_f32(1.0 / hidden)


def largest_pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def dw_chunk_rows(rows: int) -> int:
    """R, the rows of every dw chunk (the last may be shorter) for a batch of ``rows`` rows."""
    return max(1, min(DW_CHUNK_ROWS, rows // DW_MIN_CHUNKS))


def dw_chunks(rows: int) -> int:
    """Number of row chunks whose partials the dw tree combines."""
    return math.ceil(rows / dw_chunk_rows(rows)) if rows else 0


# ---- casting modes (docs/design.md §3 item 3) -----------------------------------------------------
#: "fp32": y = cast_out((x * rstd) * w), one rounding (nn.RMSNorm's order, the default).
#: "llama": y = cast_out(cast_x(x * rstd) * w), HF Llama/Mistral/Qwen's `weight * hidden.to(input_dtype)`.
#: "gemma": "fp32" with the weight offset 1 (HF Gemma's `* (1.0 + weight.float())`).
CASTING_MODES = ("fp32", "llama", "gemma")
#: Integer codes of the casting formulas in the kernel ABI ("gemma" is "fp32" with offset 1).
FORMULA_CODES = {"fp32": 0, "llama": 1}


def resolve_mode(casting_mode: str, offset: float, caller: str = "") -> tuple[str, float]:
    """(formula, offset) for a casting mode: "gemma" is the "fp32" formula with offset 1.0.

    Raises ValueError for an unknown mode, or for "gemma" with an offset other than 0 or 1
    (Gemma's offset is part of the mode; asking for another one is a contradiction); ``caller``: the
    public name to open the message with.
    """
    if casting_mode not in CASTING_MODES:
        raise ValueError(
            f"{caller + ': ' if caller else ''}casting_mode must be one of {', '.join(map(repr, CASTING_MODES))}, "
            f"got {casting_mode!r}"
        )
    if casting_mode == "gemma":
        if offset not in (0.0, 1.0):
            raise ValueError(
                f"{caller + ': ' if caller else ''}casting_mode='gemma' implies offset=1.0; got offset={offset!r}"
            )
        return "fp32", 1.0
    return casting_mode, float(offset)


def result_dtype(x_dtype: torch.dtype, w_dtype: torch.dtype | None, casting_mode: str) -> torch.dtype:
    """The dtype of y: x's, except where torch's promotion of the mode's own expression gives another
    ("llama": ``weight * hidden.to(x.dtype)``, so an fp32 weight with bf16 x gives fp32, as in HF).

    Where torch defines no promotion (a float8 weight), y keeps x's dtype.
    """
    if casting_mode == "llama" and w_dtype is not None and w_dtype != x_dtype:
        try:
            return torch.promote_types(w_dtype, x_dtype)
        except RuntimeError:  # "Promotion for Float8 Types is not supported"
            return x_dtype
    return x_dtype


def same_shape(t: torch.Tensor, x: torch.Tensor) -> bool:
    """``t.shape == x.shape``, where a size that torch.compile leaves symbolic is compared as torch's own
    shape checks do: a size it cannot decide (unbacked, from ``mark_unbacked``: the row dim of every row
    count) is taken as equal and asserted when the graph runs, instead of guarded on, which fails there."""
    if not torch.compiler.is_compiling():
        return t.shape == x.shape
    if t.dim() != x.dim():
        return False
    from torch.fx.experimental.symbolic_shapes import guard_or_true

    for a, b in zip(t.shape, x.shape):
        equal = a == b
        if not guard_or_true(equal):  # decided unequal (a backed size guards, as before)
            return False
        if not isinstance(equal, bool):  # torch 2.8's Dynamo cannot trace a _check of a constant with a message
            torch._check(equal, lambda: "ascend_rmsnorm: residual must have x's shape")
    return True


def _check_like_x(name: str, t: torch.Tensor, x: torch.Tensor, caller: str = "") -> None:
    if not same_shape(t, x) or t.dtype != x.dtype:
        raise ValueError(
            f"{caller + ': ' if caller else ''}{name} must have x's shape and dtype ({tuple(x.shape)} {x.dtype}), "
            f"got {tuple(t.shape)} {t.dtype}"
        )


#: The largest finite float32: eps and offset are rounded to float32 by every backend.
F32_MAX = 3.4028234663852886e38
#: The midpoint of float32's largest subnormal and its smallest normal number, 2**-126: a positive
#: number below it rounds to a subnormal or to 0 there.
F32_BELOW_NORMAL = 2.0**-126 - 2.0**-150


def check_f32_finite(value: float, name: str, caller: str = "") -> None:
    """``value`` is finite and fits in float32, where every backend rounds it (eps, offset); ValueError
    otherwise, naming ``name`` (``caller``: the function's name, to open the message with)."""
    head = f"{caller}: " if caller else ""
    if not -F32_MAX <= value <= F32_MAX:  # False for NaN and +-inf too (and traceable: no math.isfinite)
        raise ValueError(f"{head}{name} must be finite and fit in float32 (|{name}| <= {F32_MAX:.8g}), got {value!r}")


def check_eps(eps: float, caller: str = "") -> None:
    """The eps every backend takes: finite, >= 0, and 0 or normal once rounded to float32 (item 2: a
    subnormal or negative eps makes the Newton steps' own answer, which the backends do not all give
    alike). ValueError otherwise (``caller``: the public function's name, to open the message with)."""
    head = f"{caller}: " if caller else ""
    if not 0 <= eps <= F32_MAX:  # False for NaN too
        raise ValueError(f"{head}eps must be finite and >= 0, got {eps!r}")
    # every backend adds eps in float32: a subnormal eps (or one that rounds to 0) leaves a row of zeros
    # with a subnormal a, where the Newton steps give NaN, +inf or -inf (docs/design.md §3 item 2)
    if 0 < eps < F32_BELOW_NORMAL:
        raise ValueError(
            f"{head}eps must be finite and >= 0, and 0 or at least float32's smallest normal number (1.18e-38) "
            f"once rounded to float32, where every backend adds it, got {eps!r}: a row of zeros would get an "
            "rstd of NaN or +-inf there. Pass 0 if that is meant, or a normal eps such as 1e-6"
        )


_DTYPE_NAMES = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
#: What to use instead, for dtypes this package does not compute in.
_DTYPE_ALTERNATIVE = {
    torch.float64: "for float64 arithmetic use torch.nn.functional.rms_norm or torch.nn.RMSNorm (not "
    "batch-invariant), or pass x.float() (this package's contract computes in float32)",
}


def check_x(x: torch.Tensor, caller: str) -> None:
    """x as every entry takes it: a supported dtype and a last dimension > 0 (TypeError, ValueError
    otherwise; ``caller`` opens the message): the public functions and the registered ops called directly."""
    if x.dtype not in SUPPORTED_DTYPES:
        instead = _DTYPE_ALTERNATIVE.get(x.dtype)
        hint = f"; {instead}" if instead else ""
        raise TypeError(f"{caller}: x has dtype {x.dtype}; supported dtypes are {_DTYPE_NAMES}{hint}")
    if x.dim() == 0:
        raise ValueError(f"{caller}: x is a 0-d tensor; it needs at least one dimension (the hidden size)")
    if x.shape[-1] == 0:
        raise ValueError(f"{caller}: x has shape {tuple(x.shape)}; the last dimension (hidden size) must be > 0")


def check_weight(weight: torch.Tensor, x: torch.Tensor, caller: str) -> None:
    """A weight of x's hidden size, floating, on x's device: the kernels read x.shape[-1] elements of it,
    past the end of a shorter one, and the torch path would broadcast it (TypeError, ValueError otherwise)."""
    hidden = x.shape[-1]
    if not weight.is_floating_point():
        raise TypeError(f"{caller}: weight has dtype {weight.dtype}; it must be a floating dtype")
    if tuple(weight.shape) != (hidden,):
        raise ValueError(
            f"{caller}: weight has shape {tuple(weight.shape)}; expected ({hidden},) to match x's last dimension"
        )
    check_on_x_device("weight", weight, x, caller)


def check_on_x_device(what: str, t: torch.Tensor, x: torch.Tensor, caller: str) -> None:
    """A tensor the kernels read must be on x's device: an op's implementation is picked by one device for
    all its tensors (an NPU x with a CPU residual reaches the NPU kernels, which would be handed the other
    device's address), and torch's own ops refuse the mix (ValueError)."""
    if t.device != x.device:
        raise ValueError(f"{caller}: {what} is on {t.device} but x is on {x.device}; put both on one device")


def check_residual(residual: torch.Tensor, x: torch.Tensor, caller: str = "") -> None:
    """add_rms_norm adds the residual to x in x's dtype (residual_out = cast_x(x + residual)) and the
    kernels read it as x's dtype, so it must have x's shape and dtype on every backend; ValueError
    otherwise (``caller``: the public function's name, to open the message with)."""
    _check_like_x("residual", residual, x, caller)


def check_grad_residual(grad_residual: torch.Tensor, x: torch.Tensor) -> None:
    """add_rms_norm's backward adds the gradient of residual_out to dx in x's dtype, so it must have
    x's shape and dtype (``x``: the tensor that was normalised); ValueError otherwise."""
    _check_like_x("grad_residual_out", grad_residual, x)


#: The one NaN bit pattern every output holds, per dtype: the positive quiet NaN (docs/design.md §3).
#: float64 appears because dw has the weight's dtype, which may be any floating dtype.
CANONICAL_NAN_BITS = {
    torch.float32: 0x7FC00000,
    torch.bfloat16: 0x7FC0,
    torch.float16: 0x7E00,
    torch.float64: 0x7FF8000000000000,
}


def canonical_nan_bits(dtype: torch.dtype) -> int:
    """The canonical NaN of ``dtype``: the table above, else what torch's cast of float32's
    canonical NaN gives (float8 weights' dw; one pattern per dtype either way)."""
    known = CANONICAL_NAN_BITS.get(dtype)
    if known is not None:
        return known
    nan = torch.tensor(CANONICAL_NAN_BITS[torch.float32], dtype=torch.int32).view(torch.float32).to(dtype)
    width = torch.empty((), dtype=dtype).element_size()
    raw = int(nan.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]))
    return raw & ((1 << 8 * width) - 1)
