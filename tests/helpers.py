"""Shared test helpers: raw-bit comparison and deterministic inputs."""

from __future__ import annotations

import torch

_INT_VIEW = {
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.float64: torch.int64,
}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor as an integer tensor (so -0.0 != 0.0 and NaN == NaN)."""
    return t.contiguous().view(_INT_VIEW[t.dtype])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def assert_same_bits(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    ba, bb = bits(a), bits(b)
    if not torch.equal(ba, bb):
        diff = (ba != bb).nonzero()
        first = tuple(diff[0].tolist())
        raise AssertionError(
            f"{what}: {diff.shape[0]} of {ba.numel()} elements differ in their bits; "
            f"first at {first}: {a[first].item()!r} vs {b[first].item()!r}"
        )


def make_input(rows: int, hidden: int, dtype: torch.dtype, seed: int = 0, scale_rows: bool = True) -> torch.Tensor:
    """Random rows with per-row scales from 1e-3 to 1e3, so the tree sees very different magnitudes."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + hidden * 7 + rows)
    x = torch.randn(rows, hidden, generator=g, dtype=torch.float32)
    if scale_rows and rows > 1:
        x *= torch.logspace(-3, 3, rows, dtype=torch.float32).roll(seed % rows).unsqueeze(-1)
    return x.to(dtype)


def make_weight(hidden: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 7919 + hidden)
    return (1.0 + 0.25 * torch.randn(hidden, generator=g)).to(dtype)
