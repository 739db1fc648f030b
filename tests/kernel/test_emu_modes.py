"""The kernel's numerics on special rows through the emulation, bit for bit against the torch path:
rows that overflow or hold +-Inf, NaN (any payload) or subnormals, eps = 0, under every casting
mode with the fused residual and need_dx/need_dw, at the first H of every path the planner takes.

The casting modes x weight dtypes x H x rows x block counts matrix is drawn from the planner in
test_emu_planned.py (tests/support/plan_cases.py). The emulation aborts on any hardware rule the kernel
breaks, so every case here also checks the kernel's syncs, alignment, UB and repeat limits.
"""

from __future__ import annotations

import pytest
import torch

from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.backends import torch as torch_backend

import plan_cases
from helpers import assert_same_bits, bits, emu_kernel, kernels_run_on, make_input, make_weight

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
NAME = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}

#: (casting_mode, offset, residual) combinations each case runs.
VARIANTS = (
    ("fp32", 0.0, False),
    ("llama", 0.0, False),
    ("gemma", 0.0, True),
    ("fp32", 0.5, True),
    ("llama", -1.0, True),
)


@pytest.fixture(scope="module", autouse=True)
def _built():
    emu.library()


def run_case(backend, x, w, eps, mode, offset, residual, dy_seed, what):
    """Forward, then backward three ways (dx and dw, dx only, dw only), emu vs the torch path."""
    kw = {"casting_mode": mode, "offset": offset, "residual": residual}
    got = backend.forward(x, w, eps, **kw)
    want = torch_backend.forward(x, w, eps, **kw)
    for name, a, b in zip(("y", "rstd", "residual_out"), got, want):
        assert_same_bits(a, b, f"{what} {name}")
    normed = want[2] if residual is not None else x
    dy = make_input(*x.shape, torch.float32, seed=dy_seed, scale_rows=False).to(want[0].dtype)
    for need_dx, need_dw in ((True, True), (True, False), (False, True)):
        opts = {"casting_mode": mode, "offset": offset, "need_dx": need_dx, "need_dw": need_dw}
        got_b = backend.backward(dy, normed, w, want[1], **opts)
        want_b = torch_backend.backward(dy, normed, w, want[1], **opts)
        for name, a, b in zip(("dx", "dw"), got_b, want_b):
            assert_same_bits(a, b, f"{what} {name} (need_dx={need_dx}, need_dw={need_dw})")


def special_rows(hidden: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows that overflow, hold +-Inf, NaNs of odd payloads and signs, subnormals, zeros, a normal one."""
    big = {torch.float32: 3e38, torch.bfloat16: 3e38, torch.float16: 6e4}[dtype]
    tiny = {torch.float32: 1e-40, torch.bfloat16: 1e-40, torch.float16: 1e-7}[dtype]
    x = make_input(8, hidden, torch.float32, seed=hidden).to(dtype)
    x[0] = big  # fp32/bf16: the sum of squares overflows: rstd = +0, y = +-0
    x[1, hidden // 2] = float("inf")
    x[2, 0] = float("-inf")
    nan_bits = {
        torch.float32: [0x7FA00001, -0x00400001],
        torch.bfloat16: [0x7F81, -0x3F],
        torch.float16: [0x7C01, -0x1FF],
    }
    r = bits(x)
    r[3, hidden - 1] = nan_bits[dtype][0]  # a signalling-pattern NaN
    r[4, hidden // 3] = nan_bits[dtype][1]  # a negative NaN
    x[5] = tiny  # subnormal rows: x*x underflows to 0
    x[6] = 0.0  # a zero row: with eps > 0, rstd = 1/sqrt(eps)
    return x


def path_starts(
    dtype: torch.dtype, w: str | None = None, directions: tuple[str, ...] = ("fwd", "bwd"), residual: bool = False
) -> list[int]:
    """H = 1, 8 and the first H of every path each direction takes for x of ``dtype`` and a weight and y
    (dy) of ``w`` (default: ``dtype``)."""
    planner, name = plan_cases.Planner(emu.library()), str(dtype).removeprefix("torch.")
    w = w or name
    found = {1, 8}
    for direction in directions:
        fam = plan_cases.Family(direction, name, w, w, residual=residual, need_dw=direction == "bwd")
        found.update(plan_cases.path_starts(planner, fam).values())
    return sorted(found)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
def test_special_rows_equal_torch(dtype):
    """+inf a gives rstd = +0, no -inf anywhere; every NaN output canonical; subnormals as the torch path."""
    for hidden in path_starts(dtype):
        _special_rows_agree(dtype, hidden)


@pytest.mark.parametrize("dtype", DTYPES, ids=NAME.get)
def test_one_row_finishes_its_dw_with_the_canonical_nan(dtype):
    """One row is one dw chunk: the backward finishes dw itself (no reduce launch), casting a 16-bit dw
    and selecting its NaN after the cast, a sub-tile at a time (two per store) where H is larger, or
    (fp32) storing it tile by tile (bwd/backward_base.h StorePartial), at the first H of every path."""
    for hidden in path_starts(dtype):
        x = special_rows(hidden, dtype)[3:4]  # its NaN makes rstd, every xh and so every dw column NaN
        run_case(emu.BACKEND, x, make_weight(hidden, dtype), 1e-6, "fp32", 0.0, None, 7, f"one NaN row H={hidden}")


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=NAME.get)
def test_special_rows_with_fp32_y_equal_torch(dtype):
    """16-bit x, an fp32 weight, llama: y is fp32 and the fused residual's residual_out the one 16-bit
    output, its NaN canonical too (the register holds y's fp32 NaN around it), at the first H of every
    path that forward takes."""
    for hidden in path_starts(dtype, "float32", ("fwd",), residual=True):
        x = special_rows(hidden, dtype)
        res = make_input(8, hidden, dtype, seed=9)
        w = make_weight(hidden, torch.float32)
        run_case(emu.with_block_dim(7), x, w, 1e-6, "llama", 0.0, res, 7, f"special llama fp32 weight H={hidden}")


def _special_rows_agree(dtype, hidden):
    x = special_rows(hidden, dtype)
    w = make_weight(hidden, dtype)
    for i, (mode, offset, residual) in enumerate(VARIANTS):
        res = make_input(8, hidden, dtype, seed=9) if residual else None
        run_case(emu.with_block_dim((1, 7, 48)[i % 3]), x, w, 1e-6, mode, offset, res, 7, f"special {mode}")
    y, rstd, _ = emu.BACKEND.forward(x, w, 1e-6)
    assert bits(rstd)[1].item() == 0 and bits(rstd)[2].item() == 0  # +-Inf in the row: +0, not -inf
    if dtype != torch.float16:  # a 16-bit float's squares cannot overflow fp32
        assert bits(rstd)[0].item() == 0
    nan = contract.canonical_nan_bits(dtype)
    ry = bits(y)[3].to(torch.int64) & ((1 << (8 * y.element_size())) - 1)
    assert bool((ry == nan).all()) and bits(rstd)[3].item() == contract.canonical_nan_bits(torch.float32)


def test_eps_zero_zero_row_and_subnormal_sum():
    """eps = 0: a zero row gives NaN (0 * inf in Newton's step), a subnormal mean +inf, as the contract."""
    x = torch.zeros(3, 64)
    x[1] = 1e-22  # the mean of squares is subnormal
    x[2] = 1.0
    for blocks in (1, 3):
        run_case(emu.with_block_dim(blocks), x, None, 0.0, "fp32", 0.0, None, 1, "eps=0")


def test_add_rms_norm_on_emu_equals_the_torch_path():
    """add_rms_norm on the emu backend gives the torch path's bits (that it is one launch of the fused
    kernel, each tensor read or written once: tests/perf/test_kernel_counts.py)."""
    from ascend_rmsnorm import add_rms_norm

    x = make_input(5, 300, torch.bfloat16, seed=1)
    res = make_input(5, 300, torch.bfloat16, seed=2)
    w = make_weight(300, torch.bfloat16)
    with kernels_run_on("emu", emu_kernel("fwd", torch.bfloat16)):
        got = add_rms_norm(x, res, w, backend="emu")
    want = add_rms_norm(x, res, w, backend="torch")
    for a, b in zip(got, want):
        assert_same_bits(a, b, "add_rms_norm")
