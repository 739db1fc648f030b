"""The numerics contract (DESIGN.md §3) written in plain PyTorch: the ``torch`` backend.

Every reduction is built from elementwise adds on slices, so the order of additions depends
only on H (and, for dw, on the row count), never on threads, devices or batch shape.
PyTorch's own ``sum``/``mean`` promise no such order, so they are never called over a row.
Elementwise fp32 add and mul are correctly rounded on every device torch runs on, which
is what makes this path give the same bits as the kernels.
"""

from __future__ import annotations

import torch

from .contract import (
    DW_CHUNK_ROWS,
    NEWTON_STEPS,
    RSQRT_MAGIC,
    TILE,
    inv_hidden,
    largest_pow2_at_most,
    to_f32,
)

_F32 = torch.float32


def fold_and_halve_(q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Reduce ``q`` along ``dim`` with the fold-and-halve tree, in place; returns the sums (dim kept, size 1).

    b = largest power of two <= n; q[:n-b] += q[b:n]; then halve: q[:b] += q[b:2b].
    The power-of-two body is viewed as (2, 2, ..., 2) so that each halving level is one
    ``unbind`` and one add: on small inputs a torch call costs about a microsecond whatever
    its size, so the number of calls is the cost.
    """
    d = dim % q.dim()
    n = q.shape[d]
    b = largest_pow2_at_most(n)
    if b < n:
        q.narrow(d, 0, n - b).add_(q.narrow(d, b, n - b))
        q = q.narrow(d, 0, b)
    levels = b.bit_length() - 1
    # (2, ..., 2, 1): after the last unbind the reduced dim stays, with size 1.
    q = q.unflatten(d, (2,) * levels + (1,))
    for _ in range(levels):
        lo, hi = q.unbind(d)
        q = lo.add_(hi)
    return q


def tiled_row_sum_(q: torch.Tensor) -> torch.Tensor:
    """Sum each row of a [N, H] fp32 tensor by tiles of TILE, partials left to right.

    ``q`` is consumed (may be overwritten). Returns a [N, 1] tensor.
    """
    hidden = q.shape[-1]
    full = hidden // TILE
    tail = hidden - full * TILE
    if full == 0:
        return fold_and_halve_(q)
    tile_sums = fold_and_halve_(q.narrow(-1, 0, full * TILE).unflatten(-1, (full, TILE)))  # [N, full, 1]
    partials = list(tile_sums.unbind(1))
    if tail:
        partials.append(fold_and_halve_(q.narrow(-1, full * TILE, tail)))
    total = partials[0]
    if len(partials) > 1:
        total = total + partials[1]
        for p in partials[2:]:
            total.add_(p)
    return total


class _Constants:
    """0-d float32/int32 tensors for the contract's constants, made once per device.

    A 0-d tensor operand costs half of what a Python scalar does per op on small inputs.
    """

    _by_device: dict[torch.device, _Constants] = {}

    def __init__(self, device: torch.device) -> None:
        def f32(v: float) -> torch.Tensor:
            return torch.tensor(v, dtype=_F32, device=device)

        self.neg_half = f32(-0.5)
        self.three_halves = f32(1.5)
        self.one = torch.tensor(1, dtype=torch.int32, device=device)
        self.magic = torch.tensor(RSQRT_MAGIC, dtype=torch.int32, device=device)
        self._scalars: dict[float, torch.Tensor] = {}
        self._f32 = f32

    def scalar(self, value: float) -> torch.Tensor:
        """A cached 0-d float32 tensor holding float32(value) (inv_h and eps vary per call)."""
        t = self._scalars.get(value)
        if t is None:
            if len(self._scalars) > 256:
                self._scalars.clear()
            t = self._scalars[value] = self._f32(to_f32(value))
        return t

    @classmethod
    def on(cls, device: torch.device) -> _Constants:
        c = cls._by_device.get(device)
        if c is None:
            c = cls._by_device[device] = cls(device)
        return c


def rstd_from_sum(sum_sq: torch.Tensor, hidden: int, eps: float) -> torch.Tensor:
    """rstd from the row sums: integer first guess, then NEWTON_STEPS Newton steps.

    Uses only IEEE add/mul and integer ops, so every device gives the same bits.
    Each step is t = y*y; t = h*t; t = 1.5 - t; y = y*t, computed as t = (y*y)*(-h) + 1.5:
    negation is exact and rounding is symmetric, so the bits are the same.
    The shift is arithmetic here and logical in the kernel; they differ only when the sign
    bit of a is set, which happens only for NaN rows, whose result is NaN either way.
    """
    k = _Constants.on(sum_sq.device)
    a = sum_sq * k.scalar(inv_hidden(hidden))
    a = a + k.scalar(eps)
    y = torch.sub(k.magic, torch.bitwise_right_shift(a.view(torch.int32), k.one)).view(_F32)
    neg_h = a * k.neg_half
    for _ in range(NEWTON_STEPS):
        t = y * y
        t = t * neg_h
        t = t + k.three_halves
        y = y * t
    return y


def _as_f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == _F32 else t.to(_F32)


def forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y = cast((x * rstd) * w) and rstd ([N, 1]) for a [N, H] input; any strides, any device."""
    xf = _as_f32(x)
    rstd = rstd_from_sum(tiled_row_sum_(xf * xf), x.shape[-1], eps)
    y = xf * rstd
    if weight is not None:
        y.mul_(_as_f32(weight))
    return y.to(x.dtype), rstd


def backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    need_dw: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """dx = cast(rstd * (g - xh * c)) with g = dy*w, xh = x*rstd, c = tree(g*xh) / H; and dw."""
    hidden = x.shape[-1]
    rstd = rstd.view(-1, 1)
    xh = _as_f32(x) * rstd
    dyf = _as_f32(dy)
    g = dyf * _as_f32(weight) if weight is not None else dyf
    c = tiled_row_sum_(g * xh).mul_(inv_hidden(hidden))
    u = xh * c
    torch.sub(g, u, out=u)
    dx = u.mul_(rstd).to(x.dtype)
    dw = None
    if need_dw and weight is not None:
        dw = dw_sum(dyf * xh).to(weight.dtype)
    return dx, dw


def dw_sum(contrib: torch.Tensor) -> torch.Tensor:
    """Sum [N, H] fp32 row contributions over rows, the contract's way.

    Rows go in fixed chunks of DW_CHUNK_ROWS; each chunk partial starts at +0.0 and adds its
    rows in order; the chunk partials are combined by the fold-and-halve tree.
    Adding the +0.0 rows that pad the last chunk would not change a bit, so they are skipped.
    """
    rows, hidden = contrib.shape
    if rows == 0:
        return contrib.new_zeros(hidden)
    full, tail = divmod(rows, DW_CHUNK_ROWS)
    chunks = full + (1 if tail else 0)
    acc = contrib.new_zeros(chunks, hidden)
    if full:
        body = contrib.narrow(0, 0, full * DW_CHUNK_ROWS).unflatten(0, (full, DW_CHUNK_ROWS))
        acc_body = acc.narrow(0, 0, full)
        for j in range(DW_CHUNK_ROWS):
            acc_body.add_(body.select(1, j))
    if tail:
        acc_tail = acc.select(0, full)
        for j in range(tail):
            acc_tail.add_(contrib.select(0, full * DW_CHUNK_ROWS + j))
    return fold_and_halve_(acc, dim=0).view(hidden).clone()
