"""Bitwise batch invariance of the torch backend: y, rstd and dx of a row depend only on that row."""

from __future__ import annotations

import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm.backends import torch as torch_backend

from helpers import DTYPES, assert_same_bits, make_input, make_weight, same_bits

PREFIXES = (1, 2, 7, 64, 255, 256, 300)


def _fwd_bwd(x, w, dy):
    y, rstd = torch_backend.forward(x, w, 1e-6)[:2]
    dx, _ = torch_backend.backward(dy, x, w, rstd, need_dw=False)
    return y, rstd, dx


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", (100, 4096, 5000))
def test_row_prefixes(dtype, hidden):
    x = make_input(300, hidden, dtype, seed=11)
    dy = make_input(300, hidden, dtype, seed=12, scale_rows=False)
    w = make_weight(hidden, dtype)
    full = _fwd_bwd(x, w, dy)
    for n in PREFIXES:
        part = _fwd_bwd(x[:n], w, dy[:n])
        for name, a, b in zip(("y", "rstd", "dx"), part, full):
            assert_same_bits(a, b[:n], f"{name} of the first {n} rows")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_row_at_any_position(dtype):
    hidden = 3000
    row = make_input(1, hidden, dtype, seed=21)
    dyrow = make_input(1, hidden, dtype, seed=22)
    w = make_weight(hidden, dtype)
    alone = _fwd_bwd(row, w, dyrow)
    for pos in (0, 37, 63):
        x = make_input(64, hidden, dtype, seed=23)
        dy = make_input(64, hidden, dtype, seed=24)
        x[pos], dy[pos] = row[0], dyrow[0]
        batch = _fwd_bwd(x, w, dy)
        for name, a, b in zip(("y", "rstd", "dx"), alone, batch):
            assert_same_bits(a[0], b[pos], f"{name} of a row at position {pos}")


def test_3d_equals_2d_through_the_public_api():
    x = make_input(4 * 33, 2048, torch.bfloat16, seed=31).requires_grad_()
    w = make_weight(2048, torch.bfloat16).requires_grad_()
    x3 = x.detach().view(4, 33, 2048).requires_grad_()
    y2, r2 = ascend_rmsnorm.rms_norm(x, w, return_rstd=True)
    y3, r3 = ascend_rmsnorm.rms_norm(x3, w, return_rstd=True)
    assert y3.shape == (4, 33, 2048) and r3.shape == (4, 33)
    assert_same_bits(y3.reshape(-1, 2048), y2, "y")
    assert_same_bits(r3.reshape(-1), r2, "rstd")
    dy = make_input(4 * 33, 2048, torch.bfloat16, seed=32)
    (gx2,) = torch.autograd.grad(y2, x, dy)
    (gx3,) = torch.autograd.grad(y3, x3, dy.view(4, 33, 2048))
    assert_same_bits(gx3.reshape(-1, 2048), gx2, "dx")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_equals_contiguous(dtype):
    hidden = 1000
    w = make_weight(hidden, dtype)
    wide = make_input(50, hidden + 24, dtype, seed=41)
    views = {
        "column slice": wide[:, 24:],
        "row stride": make_input(100, hidden, dtype, seed=42)[::2],
        "transposed": make_input(hidden, 50, dtype, seed=43).t(),
    }
    for name, x in views.items():
        assert not x.is_contiguous()
        y, r = ascend_rmsnorm.rms_norm(x, w, return_rstd=True)
        yc, rc = ascend_rmsnorm.rms_norm(x.contiguous(), w, return_rstd=True)
        assert_same_bits(y, yc, f"y, {name}")
        assert_same_bits(r, rc, f"rstd, {name}")


def test_non_contiguous_upstream_gradient():
    x = make_input(40, 600, torch.float32, seed=45).requires_grad_()
    w = make_weight(600, torch.float32)
    y = ascend_rmsnorm.rms_norm(x, w)
    dy_t = make_input(600, 40, torch.float32, seed=46).t()
    (g1,) = torch.autograd.grad(y, x, dy_t, retain_graph=True)
    (g2,) = torch.autograd.grad(y, x, dy_t.contiguous())
    assert_same_bits(g1, g2, "dx with a transposed dy")


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_thread_count_does_not_matter(threads, dtype):
    x = make_input(64, 70000, dtype, seed=51)
    dy = make_input(64, 70000, dtype, seed=52)
    w = make_weight(70000, dtype)
    results = []
    for n in (1, 4):
        threads(n)
        y, rstd = torch_backend.forward(x, w, 1e-6)[:2]
        dx, dw = torch_backend.backward(dy, x, w, rstd)
        one_row = torch_backend.forward(x[:1], w, 1e-6)[:2]
        results.append((y, rstd, dx, dw, *one_row))
    for name, a, b in zip(("y", "rstd", "dx", "dw", "y[0]", "rstd[0]"), *results):
        assert_same_bits(a, b, f"{name}, 1 vs 4 threads")


def test_very_long_rows_are_invariant(threads):
    threads(4)
    hidden = 1 << 17
    x = make_input(8, hidden, torch.float32, seed=61)
    dy = make_input(8, hidden, torch.float32, seed=62)
    w = make_weight(hidden, torch.float32)
    full = _fwd_bwd(x, w, dy)
    for i in range(8):
        single = _fwd_bwd(x[i : i + 1], w, dy[i : i + 1])
        for name, a, b in zip(("y", "rstd", "dx"), single, full):
            assert_same_bits(a, b[i : i + 1], f"{name} of row {i} alone vs in a batch of 8")


def test_plain_pytorch_mean_is_not_invariant_on_long_rows(threads):
    """Why the contract exists: on this CPU, x.pow(2).mean(-1) of a row changes with the batch."""
    threads(4)
    hidden = 1 << 17
    x = make_input(8, hidden, torch.float32, seed=61)
    batched = x.pow(2).mean(-1)
    alone = torch.cat([x[i : i + 1].pow(2).mean(-1) for i in range(8)])
    assert not same_bits(batched, alone), "torch's mean happened to be batch-invariant for all 8 rows"
    ours = torch_backend.forward(x, None, 1e-6)[1]
    ours_alone = torch.cat([torch_backend.forward(x[i : i + 1], None, 1e-6)[1] for i in range(8)])
    assert same_bits(ours, ours_alone)


def test_dw_is_identical_across_runs_and_threads(threads):
    x = make_input(300, 3000, torch.bfloat16, seed=71)
    dy = make_input(300, 3000, torch.bfloat16, seed=72)
    w = make_weight(3000, torch.float32)
    dws = []
    for n in (1, 2, 4, 1):
        threads(n)
        _, rstd, _ = torch_backend.forward(x, w, 1e-6)
        dws.append(torch_backend.backward(dy, x, w, rstd)[1])
    for d in dws[1:]:
        assert_same_bits(d, dws[0], "dw")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ("llama", "gemma"))
def test_modes_offset_and_residual_are_invariant(dtype, mode):
    """The other casting modes, an fp32 weight and the residual variant: prefixes and positions."""
    hidden = 4500  # one full tile and a short one
    x = make_input(300, hidden, dtype, seed=81)
    res = make_input(300, hidden, dtype, seed=82)
    w = make_weight(hidden, torch.float32)

    def run(xs, rs):
        y, rstd, r_out = torch_backend.forward(xs, w, 1e-6, casting_mode=mode, offset=0.0, residual=rs)
        dy = torch.ones_like(y)
        dx, _ = torch_backend.backward(dy, r_out, w, rstd, casting_mode=mode, need_dw=False)
        return y, rstd, r_out, dx

    full = run(x, res)
    names = ("y", "rstd", "residual_out", "dx")
    for n in (1, 4, 5, 64, 300):
        for name, a, b in zip(names, run(x[:n], res[:n]), full):
            assert_same_bits(a, b[:n], f"{name} of the first {n} rows ({mode})")
    alone = run(x[42:43], res[42:43])
    xs, rs = x.roll(100, 0), res.roll(100, 0)  # row 42 now sits at 142
    for name, a, b in zip(names, alone, run(xs, rs)):
        assert_same_bits(a[0], b[142], f"{name} of a row moved to position 142 ({mode})")
