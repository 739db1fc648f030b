"""The numerics contract (docs/design.md §3) written in plain PyTorch: the ``torch`` backend ("the torch path").

Every reduction is built from elementwise adds on slices, so the order of additions depends
only on H (and, for dw, on the row count), never on threads, devices or batch shape.
PyTorch's own ``sum``/``mean`` promise no such order, so they are never called over a row
(``sum`` appears only as a finiteness test of a weight or of per-row values, where order cannot
matter: any NaN or Inf makes any sum non-finite).
Elementwise fp32 add and mul are correctly rounded on every device torch runs on, which
is what makes this path give the same bits as the kernels.

This module is a backend (``base.Backend``: ``name``, ``forward``, ``backward``) as it stands.

NaN outputs are canonical (one pattern per dtype), but on the CPU this path pays for that only where
a NaN can arise: in the forward only when a row's rstd is not a positive finite number (the row holds
NaN or Inf, or its sum of squares overflowed) or the weight is not finite; in the backward only
when a row's c = tree(g*xh)/H is not finite. Everywhere else the proof that no NaN can appear is
in the comments of ``forward`` and ``backward``.

Knowing that takes reading values back to the host, which ``_reads_back`` allows on the CPU only: on
any other device it is a host-device sync per call that no CUDA graph can capture, so there the
fix-ups (``torch.where``) always run; they change nothing but what needs it, so the bits are the CPU's.

Large tensors cost more in fresh allocations (page faults) than in arithmetic on this CPU, so each
call allocates one fp32 [N, H] work buffer and reuses it; y is written into it when it is fp32.
"""

from __future__ import annotations

import math
import operator
import struct
from array import array

import torch

from ..contract import (
    NEWTON_STEPS,
    RSQRT_MAGIC,
    TILE,
    canonical_nan_bits,
    check_grad_residual,
    check_residual,
    dw_chunk_rows,
    inv_hidden,
    largest_pow2_at_most,
    resolve_mode,
    result_dtype,
    to_f32,
)

_F32 = torch.float32
#: The backend's one name: what ``backend=`` and ``ASCEND_RMSNORM_BACKEND`` take and what reports show.
name = "torch"

_INF = float("inf")
_NAN = float("nan")  # a Python NaN becomes float32's canonical 0x7FC00000 in torch.tensor()


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
    """Finish each tile's tree, then add the tile partials left to right: [N, 1] (a new tensor,
    never a view of the work buffer, which the caller reuses)."""
    partials = [p for g in groups for p in fold_and_halve_(g).unbind(1)]
    if len(partials) == 1:
        return partials[0].clone()
    total = partials[0] + partials[1]
    for p in partials[2:]:
        total.add_(p)
    return total


class _Constants:
    """0-d float32/int32 tensors for the contract's constants, made once per device.

    A 0-d tensor operand costs half of what a Python scalar does per op on small inputs.
    Only real tensors are ever cached: under a tracing or dispatch mode (FakeTensorMode, make_fx,
    functionalisation) a fresh uncached set is made, so no process-wide cache holds tensors of a
    tracing mode, and a real call after a fake one computes with real constants.
    """

    _by_device: dict[torch.device, _Constants] = {}

    def __init__(self, device: torch.device) -> None:
        def f32(v: float) -> torch.Tensor:
            return torch.tensor(v, dtype=_F32, device=device)

        with torch.inference_mode(False):  # usable by autograd-recorded calls later on
            self.neg_half = f32(-0.5)
            self.three_halves = f32(1.5)
            self.zero = f32(0.0)
            self.one = torch.tensor(1, dtype=torch.int32, device=device)
            self.magic = torch.tensor(RSQRT_MAGIC, dtype=torch.int32, device=device)
        self.device = device
        self._scalars: dict[float, torch.Tensor] = {}
        self._nans: dict[torch.dtype, torch.Tensor] = {}
        self._f32 = f32

    def scalar(self, value: float) -> torch.Tensor:
        """A cached 0-d float32 tensor holding float32(value) (inv_h and eps vary per call).

        Keyed by value, so -0.0 may get +0.0's tensor: harmless for its callers (1/H > 0; eps is
        added to a >= +0, where either zero gives a; the offset is used only when non-zero).

        Cleared past 256 values on the CPU only: a CUDA graph that captured a call holds the addresses
        of its constants, so off the CPU none is ever freed (one small tensor per eps, H and offset)."""
        t = self._scalars.get(value)
        if t is None:
            if len(self._scalars) > 256 and self.device.type == "cpu":
                self._scalars.clear()
            with torch.inference_mode(False):
                t = self._scalars[value] = self._f32(to_f32(value))
        return t

    def nan(self, dtype: torch.dtype) -> torch.Tensor:
        """A 0-d tensor of ``dtype`` holding its canonical NaN, built from the bits."""
        t = self._nans.get(dtype)
        if t is None:
            width = torch.empty((), dtype=dtype).element_size()
            int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
            raw = canonical_nan_bits(dtype)
            if int_dtype is not torch.uint8 and raw >= 1 << (8 * width - 1):
                raw -= 1 << (8 * width)  # as a signed integer of that width
            with torch.inference_mode(False):
                t = self._nans[dtype] = torch.tensor(raw, dtype=int_dtype, device=self.device).view(dtype)
        return t

    @classmethod
    def on(cls, device: torch.device) -> _Constants:
        c = cls._by_device.get(device)
        if c is None:
            if torch._C._len_torch_dispatch_stack() > 0:
                return cls(device)  # a tracing/dispatch mode is active: never cache what it makes
            c = cls(device)
            if type(c.zero) is torch.Tensor:  # a plain, real tensor (not a FakeTensor or other subclass)
                cls._by_device[device] = c
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
        return _INF if v > 0 else -_INF


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
    rstd_from_sum (the kernel runs them on the AI core's scalar unit); a = +inf gives +0.0 and a
    NaN gives the canonical NaN."""
    out = []
    for s in sums:
        a = _f32(_f32(s * inv_h) + eps)
        if not a < _INF:  # +inf or NaN (a is never negative: S >= 0 and eps >= 0)
            out.append(0.0 if a == _INF else _NAN)
            continue
        bits = _U32_PACK.unpack(_PACK(a))[0]
        y = _UNPACK(_U32_PACK.pack((RSQRT_MAGIC - (bits >> 1)) & 0xFFFFFFFF))[0]
        h = _f32(0.5 * a)
        for _ in range(NEWTON_STEPS):
            y = _f32(y * _f32(1.5 - _f32(h * _f32(y * y))))
        out.append(y if y == y else _NAN)  # a = 0 (eps = 0, a zero row) ends in 0 * inf = NaN
    return out


#: Whether values of ``t`` may be read back to the host (``.item()``, ``.tolist()``, ``bool()``): on the
#: CPU only (the module doc says why). The one predicate for it; tests patch it to ``lambda t: False`` to
#: run the other devices' branch on CPU tensors. An ``attrgetter``: about 20 ns a use.
_reads_back = operator.attrgetter("is_cpu")


def _host_tail(q: torch.Tensor) -> bool:
    return _reads_back(q) and q.shape[0] <= HOST_TAIL_MAX_ROWS


#: CPU calls with at most HOST_TAIL_MAX_ROWS rows of at most this many elements do the whole row
#: reduction on the host (fewer torch calls: on small inputs a call costs a microsecond or two).
SMALL_HIDDEN = 64


def _small(t: torch.Tensor) -> bool:
    return _reads_back(t) and t.shape[0] <= HOST_TAIL_MAX_ROWS and t.shape[-1] <= SMALL_HIDDEN


def _round_f32(values: list[float]) -> list[float]:
    """Round each double to float32 (RNE; beyond float32's range: +-inf) in one C call. Each value
    is one + or * of two float32 values done in double, so this gives the float32 result exactly."""
    return array("f", values).tolist()


def _small_tree(q: list[float]) -> float:
    """The fold-and-halve tree over one short row of float32 values (one tile), on the host."""
    n = len(q)
    b = largest_pow2_at_most(n)
    if b < n:
        q = _round_f32([q[i] + q[i + b] for i in range(n - b)]) + q[n - b : b]
    while b > 1:
        b //= 2
        q = _round_f32([q[i] + q[i + b] for i in range(b)])
    return q[0]


def _small_rstd(x2d: torch.Tensor, hidden: int, eps: float) -> tuple[torch.Tensor, bool]:
    """rstd ([N, 1]) and the special-row flag of a few short CPU rows, all on the host."""
    sums = [_small_tree(_round_f32([v * v for v in row])) for row in x2d.tolist()]
    values = _rstd_host(sums, inv_hidden(hidden), to_f32(eps))
    return _column(values), not all(0.0 < v < _INF for v in values)


def _small_mean(p: torch.Tensor, hidden: int) -> tuple[torch.Tensor, bool]:
    """c ([N, 1]) = tree(row) * float32(1/H) of a few short CPU rows, and whether one is not finite."""
    inv_h = inv_hidden(hidden)
    values = _round_f32([_small_tree(row) * inv_h for row in p.tolist()])
    return _column(values), not all(math.isfinite(v) for v in values)


def _column(values: list[float]) -> torch.Tensor:
    """A [N, 1] float32 CPU tensor of host values (no copy: ``frombuffer`` over a float array)."""
    return torch.frombuffer(array("f", values), dtype=_F32).view(-1, 1)


def _rstd_and_flag(q: torch.Tensor, hidden: int, eps: float) -> tuple[torch.Tensor, bool]:
    """rstd ([N, 1]) of rows whose squares are ``q`` (consumed), and whether some row's rstd may not be a
    positive finite number (+0 from a = +inf, NaN, or +-inf from a subnormal a): only such rows can
    make NaNs. Where values are not read back (``_reads_back``) the flag is always True."""
    groups = _tile_lanes_(q)
    if _host_tail(q):
        values = _rstd_host(_host_row_sums(groups), inv_hidden(hidden), to_f32(eps))
        special = not all(0.0 < v < _INF for v in values)
        return _column(values), special
    return _rstd_tensor(_sums_from_lanes(groups), hidden, eps)


def row_rstd_(q: torch.Tensor, hidden: int, eps: float) -> torch.Tensor:
    """rstd ([N, 1]) of rows whose squares are ``q`` (consumed)."""
    return _rstd_and_flag(q, hidden, eps)[0]


def _mean_and_flag(q: torch.Tensor, hidden: int) -> tuple[torch.Tensor, bool]:
    """The contract's sum of each row of ``q`` (consumed) times float32(1/H) ([N, 1], a new tensor),
    and whether some row's value may not be finite (always True where values are not read back)."""
    if _small(q):
        return _small_mean(q, hidden)
    groups = _tile_lanes_(q)
    inv_h = inv_hidden(hidden)
    if _host_tail(q):
        values = [_f32(s * inv_h) for s in _host_row_sums(groups)]
        return _column(values), not all(math.isfinite(v) for v in values)
    c = _sums_from_lanes(groups).mul_(inv_h)
    return c, not _reads_back(c) or not math.isfinite(c.sum().item())


def row_mean_(q: torch.Tensor, hidden: int) -> torch.Tensor:
    """The contract's sum of each row of ``q`` (consumed) times float32(1/H): [N, 1]."""
    return _mean_and_flag(q, hidden)[0]


def _rstd_tensor(sum_sq: torch.Tensor, hidden: int, eps: float) -> tuple[torch.Tensor, bool]:
    """rstd from the row sums with tensor ops, and the "special row" flag of ``_rstd_and_flag``.

    For a normal float a, Newton gives a positive finite rstd. It turns a = +inf into -inf, a NaN
    into some NaN, a = 0 (eps = 0 and a zero row) into NaN (0 * inf in the second step) and most
    subnormal a into +inf or -inf (y*y overflows; docs/design.md §3 item 2). All of these make the sum of
    rstd non-finite, and only then are they fixed: +0 for a = +inf, the canonical NaN for NaN; an
    infinite rstd stays, as the kernel leaves it. Off the CPU (``_reads_back``) the fixes always run:
    a finite y has a < +inf (a = +inf gives y = -inf or NaN), so neither ``where`` changes it.
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
    if _reads_back(y) and math.isfinite(y.sum().item()):
        return y, False
    y = torch.where(a == _INF, k.zero, y)
    y = torch.where(torch.isnan(y), k.nan(_F32), y)
    return y, True


def rstd_from_sum(sum_sq: torch.Tensor, hidden: int, eps: float) -> torch.Tensor:
    """rstd from the row sums: integer first guess, then NEWTON_STEPS Newton steps; +0 where
    a = S/H + eps is +inf; NaN rows give the canonical NaN.

    Uses only IEEE add/mul and integer ops, so every device gives the same bits.
    Each step is t = y*y; t = h*t; t = 1.5 - t; y = y*t, computed as t = (y*y)*(-h) + 1.5:
    negation is exact and rounding is symmetric, so the bits are the same.
    The shift is arithmetic here and logical in the kernel; they differ only when the sign
    bit of a is set, which happens only for NaN rows, whose result is the canonical NaN either way.
    """
    return _rstd_tensor(sum_sq, hidden, eps)[0]


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """``t`` with every NaN replaced by its dtype's canonical NaN (a new tensor, same layout)."""
    return torch.where(torch.isnan(t), _Constants.on(t.device).nan(t.dtype), t)


def _canonical_if_nan(t: torch.Tensor) -> torch.Tensor:
    """For small outputs (rstd, dw): check, and replace only when a NaN is there (off the CPU: always)."""
    if not _reads_back(t) or (t.numel() and bool(torch.isnan(t).any())):
        return _canonical(t)
    return t


def _weight_f32(weight: torch.Tensor | None, offset: float) -> torch.Tensor | None:
    """The weight as the formulas use it: widened to float32 (RNE from float64; exact from the
    16- and 8-bit floats), plus float32(offset) in fp32. Offset 0 adds nothing, so a -0.0 weight
    stays -0.0 (as in torch.nn.functional.rms_norm)."""
    if weight is None:
        return None
    w = weight if weight.dtype == _F32 else weight.to(_F32)
    off = to_f32(offset)
    if off != 0.0:
        w = w + _Constants.on(w.device).scalar(off)
    return w


def _finite(t: torch.Tensor) -> bool:
    """Whether every element is known to be finite (False off the CPU; a sum of finite values that
    overflows also reads as "not finite", which only costs the NaN pass)."""
    if not _reads_back(t):
        return False
    if t.numel() <= SMALL_HIDDEN:
        return math.isfinite(sum(t.reshape(-1).tolist()))
    return math.isfinite(t.sum().item())


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _add_rounded(x2d: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual_out = cast_x(x + residual): one fp32 add, rounded (RNE) to x's dtype; contiguous.

    On CPU and CUDA torch's own bf16/fp16 add is exactly that (both widen to float, add, round
    once), so it is used there; elsewhere the add is spelled out in fp32."""
    out = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
    if x2d.dtype == _F32 or x2d.is_cpu or x2d.is_cuda:
        return torch.add(x2d, residual, out=out)
    return out.copy_(x2d.to(_F32).add_(residual.to(_F32)))


#: From this many elements on, bf16/fp16 inputs are widened into the work buffer by ``copy_``
#: twice instead of holding a second fp32 copy: one fresh [N, H] fp32 allocation less.
_SAVE_ALLOC_NUMEL = 1 << 15


def forward(
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    *,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(y2d, rstd [N], residual_out) for a [N, H] input; any strides, any device.

    "fp32": y = cast_out((x * rstd) * w); "llama": y = cast_out(cast_x(x * rstd) * w); "gemma" is
    "fp32" with offset 1. With ``residual``, x is first replaced by residual_out = cast_x(x + residual).

    Where NaNs can come from: if every rstd is a positive finite number, every x is finite (an Inf
    makes a = +inf, a NaN makes a NaN) and |x * rstd| is at most about sqrt(H); with a finite
    weight every product is then finite or +-Inf, never NaN. So the NaN pass runs only when some
    rstd is not positive-finite or the weight is not finite; off the CPU (``_reads_back``) it always
    runs, and changes nothing but NaNs.
    """
    formula, offset = resolve_mode(casting_mode, offset)
    rows, hidden = x2d.shape
    dtype = x2d.dtype
    out_dtype = result_dtype(dtype, weight.dtype if weight is not None else None, casting_mode)
    residual_out = None
    if residual is not None:
        check_residual(residual, x2d)
        residual_out = _add_rounded(x2d, residual)
        x2d = residual_out
    else:
        x2d = _contiguous(x2d)
    if rows == 0:
        y = torch.empty((0, hidden), dtype=out_dtype, device=x2d.device)
        return y, torch.empty(0, dtype=_F32, device=x2d.device), residual_out
    w = _weight_f32(weight, offset)

    if _small(x2d):
        rstd, bad_rows = _small_rstd(x2d, hidden, eps)
        xf, q = x2d, None
    elif dtype == _F32:
        xf = x2d
        q = x2d * x2d  # the work buffer
    elif x2d.numel() >= _SAVE_ALLOC_NUMEL:
        xf = None  # re-widened into the buffer below
        q = x2d.to(_F32)
        q.mul_(q)
    else:
        xf = x2d.to(_F32)
        q = xf * xf
    if q is not None:
        rstd, bad_rows = _rstd_and_flag(q, hidden, eps)  # q's contents are spent; its memory is reused
    if xf is None:
        y = q.copy_(x2d).mul_(rstd)
    else:
        y = torch.mul(xf, rstd, out=q)
    if formula == "llama" and dtype != _F32:  # cast_x(x * rstd); for fp32 x the cast is exact
        if w is None:
            y = y.to(dtype)
        else:
            y.copy_(y.to(dtype))
    bad_weight = False
    if w is not None:
        y = y.mul_(w)
        bad_weight = not bad_rows and not _finite(w)
    y = y if y.dtype == out_dtype else y.to(out_dtype)

    if bad_rows or bad_weight:
        y = _canonical(y)
    if bad_rows and residual_out is not None:  # a NaN in residual_out makes its row's rstd NaN
        residual_out = _canonical(residual_out)
    return y, rstd.view(rows), residual_out


def backward(
    dy2d: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    *,
    casting_mode: str = "fp32",
    offset: float = 0.0,
    need_dx: bool = True,
    need_dw: bool = True,
    grad_residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(dx2d, dw) of every mode: g = dy*w, xh = x*rstd, c = tree(g*xh)/H, dx = cast_x(rstd*(g - xh*c)),
    dw = the chunked row sum of dy*xh, cast to the weight's dtype. ``w`` includes the offset;
    casts pass gradients through unchanged (docs/design.md §3 item 4), so the llama formula's backward
    is the fp32 formula's. ``grad_residual`` (add_rms_norm: the gradient of residual_out, x's shape
    and dtype) is added to dx: cast_x(float(dx) + float(grad_residual)), one fp32 add and one
    rounding, which is what autograd gives for the two calls apart, with canonical NaNs.

    Where NaNs can come from in dx: a NaN or Inf in g (from dy or w) or in xh (a NaN row, or an
    Inf x with rstd = +0) makes that row's c NaN or Inf. If c is finite, g and xh are finite, and
    rstd*(g - xh*c) is finite or +-Inf (rstd = +0 comes with xh = 0, so no 0*Inf). So dx gets the
    NaN pass only when some c is not finite; dw ([H]) is checked directly. Off the CPU
    (``_reads_back``) both always get it, and it changes nothing but NaNs.
    """
    _, offset = resolve_mode(casting_mode, offset)
    rows, hidden = x2d.shape
    want_dw = need_dw and weight is not None
    if grad_residual is not None:
        check_grad_residual(grad_residual, x2d)
    if rows == 0 or not (need_dx or want_dw):
        dx = torch.empty((rows, hidden), dtype=x2d.dtype, device=x2d.device) if need_dx else None
        dw = torch.zeros(hidden, dtype=weight.dtype, device=weight.device) if want_dw else None
        return dx, dw
    rstd = rstd.reshape(rows, 1)
    w = _weight_f32(weight, offset)
    x2d, dy2d = _contiguous(x2d), _contiguous(dy2d)

    xh = x2d * rstd if x2d.dtype == _F32 else x2d.to(_F32).mul_(rstd)
    private_dy = dy2d.dtype != _F32
    dyf = dy2d.to(_F32) if private_dy else dy2d
    spare = None  # an fp32 [N, H] buffer whose contents are spent
    dw = None
    if want_dw:
        contrib = dyf * xh
        dw = _canonical_if_nan(dw_sum(contrib).to(weight.dtype))
        spare = contrib
    if not need_dx:
        return None, dw

    if w is None:
        g = dyf
    elif private_dy:
        g = dyf.mul_(w)
    else:
        g = dyf * w
    gx = torch.mul(g, xh, out=spare)
    c, bad_rows = _mean_and_flag(gx, hidden)  # gx is spent: it becomes u
    u = torch.mul(xh, c, out=gx)
    torch.sub(g, u, out=u).mul_(rstd)
    dx = u if x2d.dtype == _F32 else u.to(x2d.dtype)
    if grad_residual is not None:
        # a NaN can come only from a NaN row of dx, or a NaN / Inf gradient (Inf - Inf)
        bad_rows = bad_rows or not _finite(grad_residual)
        dx = _add_rounded(dx, grad_residual)
    if bad_rows:
        dx = _canonical(dx)
    return dx, dw


def dw_sum(contrib: torch.Tensor) -> torch.Tensor:
    """Sum [N, H] fp32 row contributions over rows, the contract's way.

    Rows go in chunks of R = dw_chunk_rows(N) (at most 64; at least min(N, 128) chunks); each chunk
    partial starts at +0.0 and adds its rows in order; the chunk partials are combined by the
    fold-and-halve tree. Adding the +0.0 rows that pad the last chunk would not change a bit, so
    they are skipped.
    """
    rows, hidden = contrib.shape
    if rows == 0:
        return contrib.new_zeros(hidden)
    size = dw_chunk_rows(rows)
    full, tail = divmod(rows, size)
    chunks = full + (1 if tail else 0)
    acc = contrib.new_zeros(chunks, hidden)
    if full:
        body = contrib.narrow(0, 0, full * size).unflatten(0, (full, size))
        acc_body = acc.narrow(0, 0, full)
        for j in range(size):
            acc_body.add_(body.select(1, j))
    if tail:
        acc_tail = acc.select(0, full)
        for j in range(tail):
            acc_tail.add_(contrib.select(0, full * size + j))
    return fold_and_halve_(acc, dim=0).view(hidden).clone()
