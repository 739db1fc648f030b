"""An independent scalar oracle of docs/design.md §3, written with numpy float32 scalars.

No torch inside, and nothing imported from the package: it reads plain Python lists of floats and
returns plain values, so the tests can compare every backend with it bit for bit. Slow by design;
call it on few rows.

What it knows (docs/design.md §3 items 1-4): the tiled fold-and-halve sum, the Newton rstd with the
rule "a = +inf gives rstd = +0", the casting modes ("fp32", "llama", "gemma" = "fp32" with offset 1),
the weight offset (added in fp32 once; offset 0 adds nothing, so a -0.0 weight stays -0.0), the
residual add (r_out = cast_x(x + residual), then the norm of r_out), y's dtype under each mode,
the backward of every mode, dw, and the canonical NaN pattern of every output dtype.
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32
TILE = 4096
DW_CHUNK_ROWS = 64  # rows per dw chunk at most
DW_MIN_CHUNKS = 128  # R = clamp(N // 128, 1, 64): at least min(N, 128) chunks
MAGIC = 0x5F375A86

#: The one NaN pattern an output of each dtype may hold: the positive quiet NaN.
CANONICAL_NAN = {"float32": 0x7FC00000, "bfloat16": 0x7FC0, "float16": 0x7E00, "float64": 0x7FF8000000000000}
#: casting mode -> (formula, forced offset or None).
MODES = {"fp32": ("fp32", None), "llama": ("llama", None), "gemma": ("fp32", 1.0)}


def f32_bits(v: np.float32) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def bits_f32(u: int) -> np.float32:
    return np.array(u & 0xFFFFFFFF, dtype=np.uint32).view(np.float32)[()]


def round_to_bf16_bits(v: np.float32) -> int:
    """fp32 -> bf16 with round-to-nearest-even, as 16 raw bits (NaN: the canonical pattern)."""
    u = f32_bits(v)
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return CANONICAL_NAN["bfloat16"]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def round_to_fp16_bits(v: np.float32) -> int:
    if np.isnan(v):
        return CANONICAL_NAN["float16"]
    with np.errstate(over="ignore"):  # overflow to inf is the RNE result
        return int(np.array(v, dtype=np.float32).astype(np.float16).view(np.uint16))


def cast_bits(v: np.float32, dtype: str) -> int:
    """The raw bits of v cast to dtype ('float32', 'bfloat16', 'float16', 'float64') with RNE.

    Every NaN comes out as the dtype's canonical pattern (docs/design.md §3)."""
    if np.isnan(v):
        return CANONICAL_NAN[dtype]
    if dtype == "float32":
        return f32_bits(v)
    if dtype == "float64":
        return int(np.array(v, dtype=np.float64).view(np.uint64))
    if dtype == "bfloat16":
        return round_to_bf16_bits(v)
    return round_to_fp16_bits(v)


def cast_row_bits(values: list, dtype: str) -> list[int]:
    """``[cast_bits(v, dtype) for v in values]``, with numpy's array casts (float32 -> float16 and
    float64 are RNE; bf16 is the integer RNE of ``round_to_bf16_bits``): the same result, faster."""
    a = np.array(values, dtype=np.float32)
    nan = np.isnan(a)
    if dtype == "float32":
        out = a.view(np.uint32).astype(np.int64)
    elif dtype == "float64":
        out = a.astype(np.float64).view(np.uint64).astype(object)
    elif dtype == "bfloat16":
        u = a.view(np.uint32).astype(np.int64)
        out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    else:
        with np.errstate(over="ignore"):
            out = a.astype(np.float16).view(np.uint16).astype(np.int64)
    return [CANONICAL_NAN[dtype] if n else int(v) for v, n in zip(out.tolist(), nan.tolist())]


def round_to(v: np.float32, dtype: str) -> np.float32:
    """v rounded (RNE) to dtype and widened back to float32 exactly: cast_x in the formulas."""
    if dtype == "float32" or np.isnan(v):
        return F32(v)
    if dtype == "bfloat16":
        return bits_f32(round_to_bf16_bits(v) << 16)
    with np.errstate(over="ignore"):
        return F32(np.float16(v))


def result_dtype(x_dtype: str, w_dtype: str | None, casting_mode: str) -> str:
    """y's dtype: x's, except "llama" with a weight, where torch's promotion of
    ``weight * hidden.to(x.dtype)`` decides (fp32 weight with bf16 x gives fp32, as in HF)."""
    if casting_mode != "llama" or w_dtype is None or w_dtype == x_dtype:
        return x_dtype
    if "float64" in (x_dtype, w_dtype):
        return "float64"
    if w_dtype in ("float32", "float16", "bfloat16"):
        return "float32"  # any two different of fp32/bf16/fp16 promote to fp32
    return x_dtype  # float8 weights: torch defines no promotion; y keeps x's dtype


def tree(vals: list) -> np.float32:
    """The fold-and-halve tree over a list of float32 scalars."""
    q = list(vals)
    n = len(q)
    b = 1 << (n.bit_length() - 1)
    for i in range(n - b):
        q[i] = q[i] + q[i + b]
    while b > 1:
        b //= 2
        for i in range(b):
            q[i] = q[i] + q[i + b]
    return q[0]


def row_sum(q: list) -> np.float32:
    """Tiles of TILE elements, each reduced by the tree, partials added left to right."""
    partials = [tree(q[i : i + TILE]) for i in range(0, len(q), TILE)]
    total = partials[0]
    for p in partials[1:]:
        total = total + p
    return total


def rstd(sum_sq: np.float32, hidden: int, eps: float) -> np.float32:
    """Newton rstd of a = S/H + eps; a = +inf (overflow, or a row holding +-inf) gives +0."""
    with np.errstate(all="ignore"):
        a = sum_sq * F32(1.0 / hidden)
        a = a + F32(eps)
        if np.isposinf(a):
            return F32(0.0)
        y = bits_f32(MAGIC - (f32_bits(a) >> 1))
        h = F32(0.5) * a
        for _ in range(3):
            t = y * y
            t = h * t
            t = F32(1.5) - t
            y = y * t
    return y


def effective_weight(w: list | None, offset: float) -> list | None:
    """w widened to float32 (RNE from whatever it was given in), plus float32(offset) in fp32."""
    if w is None:
        return None
    off = F32(offset)
    with np.errstate(all="ignore"):
        return [F32(wi) + off if off != 0 else F32(wi) for wi in w]


def _mode(casting_mode: str, offset: float) -> tuple[str, float]:
    formula, forced = MODES[casting_mode]
    return formula, (forced if forced is not None else offset)


def residual_row(x: list, residual: list, x_dtype: str) -> list:
    """r_out = cast_x(x + residual): one fp32 add, rounded to x's dtype (float32 values)."""
    with np.errstate(all="ignore"):
        return [round_to(F32(a) + F32(b), x_dtype) for a, b in zip(x, residual)]


def forward_row(
    x: list, w: list | None, eps: float, *, casting_mode: str = "fp32", offset: float = 0.0, x_dtype: str = "float32"
) -> tuple[list, np.float32]:
    """One row: (y as float32 values before the final cast to y's dtype, rstd).

    ``x`` holds the values of x's dtype ``x_dtype`` (the llama formula rounds x*rstd to it)."""
    formula, offset = _mode(casting_mode, offset)
    weff = effective_weight(w, offset)
    with np.errstate(all="ignore"):
        xf = [F32(v) for v in x]
        r = rstd(row_sum([v * v for v in xf]), len(xf), eps)
        y = [v * r for v in xf]
        if formula == "llama":
            y = [round_to(v, x_dtype) for v in y]
        if weff is not None:
            y = [yi * wi for yi, wi in zip(y, weff)]
    return y, r


def backward_row(
    dy: list, x: list, w: list | None, r: np.float32, *, casting_mode: str = "fp32", offset: float = 0.0
) -> tuple[list, list]:
    """One row: (dx as float32 values before the cast, dw contributions dy*xh).

    The same for every mode (casts pass gradients through; w includes the offset)."""
    _, offset = _mode(casting_mode, offset)
    weff = effective_weight(w, offset)
    hidden = len(x)
    with np.errstate(all="ignore"):
        xh = [F32(v) * r for v in x]
        dyf = [F32(v) for v in dy]
        g = [d * wi for d, wi in zip(dyf, weff)] if weff is not None else dyf
        c = row_sum([gi * xi for gi, xi in zip(g, xh)]) * F32(1.0 / hidden)
        dx = [r * (gi - xi * c) for gi, xi in zip(g, xh)]
        contrib = [d * xi for d, xi in zip(dyf, xh)]
    return dx, contrib


def dw(contribs: list[list]) -> list:
    """Sum row contributions: chunks of R = clamp(N // 128, 1, 64) rows, each from +0.0 in row order,
    then the tree over the chunk partials."""
    hidden = len(contribs[0])
    size = max(1, min(DW_CHUNK_ROWS, len(contribs) // DW_MIN_CHUNKS))
    partials = []
    with np.errstate(all="ignore"):
        for start in range(0, len(contribs), size):
            acc = [F32(0.0)] * hidden
            for row in contribs[start : start + size]:
                acc = [a + v for a, v in zip(acc, row)]
            partials.append(acc)
        return [tree([p[j] for p in partials]) for j in range(hidden)]


# ---- whole calls: every output as raw bits ---------------------------------------------------------


def forward(
    x_rows: list[list],
    w: list | None,
    eps: float,
    *,
    x_dtype: str,
    w_dtype: str | None = None,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    residual_rows: list[list] | None = None,
) -> dict:
    """The bits of every output of one forward call.

    Returns ``{"y": [[bits]], "rstd": [bits], "residual_out": [[bits]] or None, "x_normed": rows of
    float32 values that were normalised (residual_out's values, or x's), "rstd_values": [float32]}``.
    """
    out_dtype = result_dtype(x_dtype, w_dtype if w is not None else None, casting_mode)
    ys, rs, ros, normed, rvals = [], [], [], [], []
    for i, row in enumerate(x_rows):
        if residual_rows is not None:
            row = residual_row(row, residual_rows[i], x_dtype)
            ros.append(cast_row_bits(row, x_dtype))
        y, r = forward_row(row, w, eps, casting_mode=casting_mode, offset=offset, x_dtype=x_dtype)
        ys.append(cast_row_bits(y, out_dtype))
        rs.append(cast_bits(r, "float32"))
        normed.append([F32(v) for v in row])
        rvals.append(F32(math.nan) if np.isnan(r) else r)
    return {
        "y": ys,
        "rstd": rs,
        "residual_out": ros if residual_rows is not None else None,
        "x_normed": normed,
        "rstd_values": rvals,
    }


def backward(
    dy_rows: list[list],
    x_rows: list[list],
    w: list | None,
    rstd_values: list,
    *,
    x_dtype: str,
    w_dtype: str | None = None,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    grad_residual_rows: list[list] | None = None,
) -> dict:
    """The bits of dx (x's dtype) and dw (the weight's dtype, or None) of one backward call.

    ``x_rows`` are the rows that were normalised (residual_out for the residual variant). With
    ``grad_residual_rows`` (add_rms_norm's gradient of residual_out, values of x's dtype), dx is
    cast_x(float(dx in x's dtype) + gradient): autograd's add of the two gradients, rounded once."""
    dxs, contribs = [], []
    for i, (dyr, xr, r) in enumerate(zip(dy_rows, x_rows, rstd_values)):
        dxr, c = backward_row(dyr, xr, w, F32(r), casting_mode=casting_mode, offset=offset)
        if grad_residual_rows is not None:
            with np.errstate(all="ignore"):
                dxr = [round_to(v, x_dtype) + F32(g) for v, g in zip(dxr, grad_residual_rows[i])]
        dxs.append(cast_row_bits(dxr, x_dtype))
        contribs.append(c)
    dws = None
    if w is not None and contribs:
        dws = cast_row_bits(dw(contribs), w_dtype or "float32")
    return {"dx": dxs, "dw": dws}
