"""An independent scalar oracle of DESIGN.md §3, written with numpy float32 scalars.

No torch inside: it reads plain Python lists of floats and returns plain values, so the
tests can compare every backend with it bit for bit. Slow by design; call it on few rows.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
TILE = 4096
DW_CHUNK_ROWS = 64
MAGIC = 0x5F375A86


def f32_bits(v: np.float32) -> int:
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def bits_f32(u: int) -> np.float32:
    return np.array(u & 0xFFFFFFFF, dtype=np.uint32).view(np.float32)[()]


def round_to_bf16_bits(v: np.float32) -> int:
    """fp32 -> bf16 with round-to-nearest-even, as 16 raw bits."""
    u = f32_bits(v)
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return (u >> 16) | 0x0040  # quiet NaN
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def round_to_fp16_bits(v: np.float32) -> int:
    with np.errstate(over="ignore"):  # overflow to inf is the RNE result
        return int(np.array(v, dtype=np.float32).astype(np.float16).view(np.uint16))


def cast_bits(v: np.float32, dtype: str) -> int:
    """The raw bits of v cast to dtype ('float32', 'bfloat16', 'float16') with RNE."""
    if dtype == "float32":
        return f32_bits(v)
    if dtype == "bfloat16":
        return round_to_bf16_bits(v)
    return round_to_fp16_bits(v)


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
    a = sum_sq * F32(1.0 / hidden)
    a = a + F32(eps)
    y = bits_f32(MAGIC - (f32_bits(a) >> 1))
    h = F32(0.5) * a
    for _ in range(3):
        t = y * y
        t = h * t
        t = F32(1.5) - t
        y = y * t
    return y


def forward_row(x: list, w: list | None, eps: float) -> tuple[list, np.float32]:
    """One row: (y as float32 values before the final cast, rstd)."""
    with np.errstate(all="ignore"):
        xf = [F32(v) for v in x]
        r = rstd(row_sum([v * v for v in xf]), len(xf), eps)
        y = [v * r for v in xf]
        if w is not None:
            y = [yi * F32(wi) for yi, wi in zip(y, w)]
    return y, r


def backward_row(dy: list, x: list, w: list | None, r: np.float32) -> tuple[list, list]:
    """One row: (dx as float32 values before the cast, dw contributions dy*xh)."""
    hidden = len(x)
    with np.errstate(all="ignore"):
        xh = [F32(v) * r for v in x]
        dyf = [F32(v) for v in dy]
        g = [d * F32(wi) for d, wi in zip(dyf, w)] if w is not None else dyf
        c = row_sum([gi * xi for gi, xi in zip(g, xh)]) * F32(1.0 / hidden)
        dx = [r * (gi - xi * c) for gi, xi in zip(g, xh)]
        contrib = [d * xi for d, xi in zip(dyf, xh)]
    return dx, contrib


def dw(contribs: list[list]) -> list:
    """Sum row contributions: chunks of DW_CHUNK_ROWS from +0.0 in row order, then the tree."""
    hidden = len(contribs[0])
    partials = []
    with np.errstate(all="ignore"):
        for start in range(0, len(contribs), DW_CHUNK_ROWS):
            acc = [F32(0.0)] * hidden
            for row in contribs[start : start + DW_CHUNK_ROWS]:
                acc = [a + v for a, v in zip(acc, row)]
            partials.append(acc)
        return [tree([p[j] for p in partials]) for j in range(hidden)]
