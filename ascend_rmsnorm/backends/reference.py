"""The numerics contract (DESIGN.md §3) written in plain PyTorch: the ``torch`` backend.

Every reduction is built from elementwise adds on slices, so the order of additions depends
only on H (and, for dw, on the row count), never on threads, devices or batch shape.
PyTorch's own ``sum``/``mean`` promise no such order, so they are never called over a row.
Elementwise fp32 add and mul are correctly rounded on every device torch runs on, which
is what makes this path give the same bits as the kernels.
"""

from __future__ import annotations

import struct

import torch

from ..contract import (
    DW_CHUNK_ROWS,
    NEWTON_STEPS,
    RSQRT_MAGIC,
    TILE,
    inv_hidden,
    largest_pow2_at_most,
    resolve_mode,
    to_f32,
)

_F32 = torch.float32


def fold_and_halve_(q: torch.Tensor, dim: int = -1, lanes: int = 1) -> torch.Tensor:
    """The fold-and-halve tree along ``dim``, in place, stopped at ``lanes`` values (a power of two).

    b = largest power of two <= n; q[:n-b] += q[b:n]; then halve: q[:b] += q[b:2b] while b > lanes.
    Returns ``q`` with ``dim`` reduced to ``lanes`` values (or left as is when n < lanes: the whole
    tree is then the caller's). Stopping at 8 lanes and finishing later gives the same additions as
    running the tree to the end. The power-of-two body is viewed as (2, ..., 2, lanes) so that each
    level is one ``unbind`` and one add: on small inputs a torch call costs about a microsecond
    whatever its size, so the number of calls is the cost.
    """
    d = dim % q.dim()
    n = q.shape[d]
    if n < lanes:
        return q
    b = largest_pow2_at_most(n)
    if b < n:
        q.narrow(d, 0, n - b).add_(q.narrow(d, b, n - b))
        q = q.narrow(d, 0, b)
    levels = b.bit_length() - lanes.bit_length()
    q = q.unflatten(d, (2,) * levels + (lanes,))
    for _ in range(levels):
        lo, hi = q.unbind(d)
        q = lo.add_(hi)
    return q


#: The vector part of a row sum stops at this many lanes per tile, like the kernel's vector tree;
#: the rest (the scalar tail) runs either as more tensor ops or, for a few CPU rows, on the host.
LANES = 8
#: CPU batches up to this many rows run the scalar tail and rstd on the host in Python floats.
HOST_TAIL_MAX_ROWS = 4


def _tile_lanes_(q: torch.Tensor) -> list[torch.Tensor]:
    """Per tile of TILE elements, the tree down to LANES lanes: [N, tiles, lanes] for the full tiles
    and [N, 1, lanes] for a shorter last tile (fewer lanes when it has fewer than 8 elements)."""
    hidden = q.shape[-1]
    full, tail = divmod(hidden, TILE)
    if full == 0:  # the common small case: one short tile, no slicing needed
        return [fold_and_halve_(q.unsqueeze(1), lanes=LANES)]
    groups = [fold_and_halve_(q.narrow(-1, 0, full * TILE).unflatten(-1, (full, TILE)), lanes=LANES)]
    if tail:
        groups.append(fold_and_halve_(q.narrow(-1, full * TILE, tail).unsqueeze(1), lanes=LANES))
    return groups


def _sums_from_lanes(groups: list[torch.Tensor]) -> torch.Tensor:
    """Finish each tile's tree, then add the tile partials left to right: [N, 1]."""
    partials = [p for g in groups for p in fold_and_halve_(g).unbind(1)]
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


_F32_PACK = struct.Struct("<f")
_U32_PACK = struct.Struct("<I")
_PACK, _UNPACK = _F32_PACK.pack, _F32_PACK.unpack


def _f32(v: float) -> float:
    """Round a double to float32 (RNE). This emulates a float32 + or * exactly: both operands are
    float32, so the double result, rounded once more to float32, is the correctly rounded result."""
    try:
        return _UNPACK(_PACK(v))[0]
    except OverflowError:  # the nearest float32 is infinity
        return float("inf") if v > 0 else float("-inf")


def _host_tree(values: list[float]) -> float:
    """The fold-and-halve tree over a few float32 values in Python floats."""
    q = list(values)
    n = len(q)
    b = largest_pow2_at_most(n)
    for i in range(n - b):
        q[i] = _f32(q[i] + q[i + b])
    while b > 1:
        b //= 2
        for i in range(b):
            q[i] = _f32(q[i] + q[i + b])
    return q[0]


def _host_row_sums(groups: list[torch.Tensor]) -> list[float]:
    """The scalar tail on the host: each tile's last tree levels, then the partials left to right."""
    per_group = [g.tolist() for g in groups]  # [rows][tiles][lanes]
    sums = []
    for row in zip(*per_group):
        total = None
        for tiles in row:
            for lanes in tiles:
                p = _host_tree(lanes)
                total = p if total is None else _f32(total + p)
        sums.append(total)
    return sums


def _rstd_host(sums: list[float], inv_h: float, eps: float) -> list[float]:
    """rstd from row sums on the host: the same float32 operations in the same order as
    rstd_from_sum (the kernel runs them on the AI core's scalar unit)."""
    out = []
    for s in sums:
        a = _f32(_f32(s * inv_h) + eps)
        bits = _U32_PACK.unpack(_PACK(a))[0]
        y = _UNPACK(_U32_PACK.pack((RSQRT_MAGIC - (bits >> 1)) & 0xFFFFFFFF))[0]
        h = _f32(0.5 * a)
        for _ in range(NEWTON_STEPS):
            y = _f32(y * _f32(1.5 - _f32(h * _f32(y * y))))
        out.append(y)
    return out


def _host_tail(q: torch.Tensor) -> bool:
    return q.device.type == "cpu" and q.shape[0] <= HOST_TAIL_MAX_ROWS


def row_rstd_(q: torch.Tensor, hidden: int, eps: float) -> torch.Tensor:
    """rstd ([N, 1]) of rows whose squares are ``q`` (consumed)."""
    groups = _tile_lanes_(q)
    if _host_tail(q):
        values = _rstd_host(_host_row_sums(groups), inv_hidden(hidden), to_f32(eps))
        return torch.tensor(values, dtype=_F32).view(-1, 1)
    return rstd_from_sum(_sums_from_lanes(groups), hidden, eps)


def row_mean_(q: torch.Tensor, hidden: int) -> torch.Tensor:
    """The contract's sum of each row of ``q`` (consumed) times float32(1/H): [N, 1]."""
    groups = _tile_lanes_(q)
    inv_h = inv_hidden(hidden)
    if _host_tail(q):
        return torch.tensor([_f32(s * inv_h) for s in _host_row_sums(groups)], dtype=_F32).view(-1, 1)
    return _sums_from_lanes(groups).mul_(inv_h)


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


def _not_yet(casting_mode: str, offset: float, residual: torch.Tensor | None) -> None:
    """The protocol's modes, offset and residual are issue 10's numerics; until they land here,
    anything but today's formula is refused rather than computed some other way."""
    formula, offset = resolve_mode(casting_mode, offset)
    if formula != "fp32" or offset != 0.0 or residual is not None:
        raise NotImplementedError(
            f"the torch path does not implement casting_mode={casting_mode!r}, offset={offset!r}"
            f"{', residual' if residual is not None else ''} yet"
        )


def forward(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """y = cast((x * rstd) * w), rstd ([N, 1]) and residual_out (None without a residual) for a
    [N, H] input; any strides, any device (the backend protocol of PLAN.md)."""
    _not_yet(casting_mode, offset, residual)
    xf = _as_f32(x)
    rstd = row_rstd_(xf * xf, x.shape[-1], eps)
    y = xf * rstd
    if weight is not None:
        y.mul_(_as_f32(weight))
    return y.to(x.dtype), rstd, None


def backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    *,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    need_dx: bool = True,
    need_dw: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """dx = cast(rstd * (g - xh * c)) with g = dy*w, xh = x*rstd, c = tree(g*xh) / H; and dw."""
    _not_yet(casting_mode, offset, None)
    hidden = x.shape[-1]
    rstd = rstd.view(-1, 1)
    xh = _as_f32(x) * rstd
    dyf = _as_f32(dy)
    g = dyf * _as_f32(weight) if weight is not None else dyf
    dx = None
    if need_dx:
        c = row_mean_(g * xh, hidden)
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
