"""Numerics at the limits on the torch path (docs/design.md §3 items 2 and 3):
rows whose sum of squares overflows or that hold +-Inf give rstd = +0 (never a negative rstd), and
every NaN in every output has its dtype's canonical pattern, so NaN rows are bitwise
batch-invariant. Each case is also held to the scalar oracle."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ascend_rmsnorm
from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import torch as torch_backend

from helpers import DTYPES, bits, make_input, make_weight
from oracle_check import NAME, check_backward, check_forward, ubits

INF, NAN = float("inf"), float("nan")
#: NaNs that are not canonical: negative, signalling, other payloads (as raw float32 bits).
ODD_NANS_F32 = (0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00123)
ODD_NANS_16 = {torch.bfloat16: (0xFFC0, 0x7F81, 0x7FFF, 0xFFFF), torch.float16: (0xFE00, 0x7C01, 0x7FFF, 0xFFFF)}


def odd_nan(dtype: torch.dtype, i: int) -> torch.Tensor:
    """A 0-d tensor holding a non-canonical NaN of dtype (the i-th of a few)."""
    if dtype == torch.float32:
        raw = ODD_NANS_F32[i % len(ODD_NANS_F32)]
        return torch.tensor(raw - (1 << 32) if raw >= 1 << 31 else raw, dtype=torch.int32).view(dtype)
    raw = ODD_NANS_16[dtype][i % 4]
    return torch.tensor(raw - (1 << 16) if raw >= 1 << 15 else raw, dtype=torch.int16).view(dtype)


def assert_nans_canonical(t: torch.Tensor, what: str) -> None:
    nan = torch.isnan(t)
    if bool(nan.any()):
        want = contract.CANONICAL_NAN_BITS[t.dtype]
        got = set(ubits(t[nan]))
        assert got == {want}, f"{what}: NaN patterns {sorted(hex(v) for v in got)}, want {hex(want)}"


def test_overflowing_row_gives_zero_rstd_and_signed_zeros_like_f_rms_norm():
    """The overflowing row: [1e20, -2e20, 3, 4] used to give rstd = -inf and y = [-inf, inf, -inf, -inf]."""
    for dtype in (torch.float32, torch.bfloat16):  # 1e20 is inf in fp16: see the Inf test
        x = torch.tensor([[1e20, -2e20, 3.0, 4.0]]).to(dtype)
        w = torch.ones(4, dtype=dtype)
        y, rstd = ascend_rmsnorm.rms_norm(x, w, backend="torch", return_rstd=True)
        assert ubits(rstd) == [0], "rstd must be +0"
        assert ubits(y) == ubits(F.rms_norm(x, (4,), w, 1e-6))  # [0, -0, 0, 0]
        assert ubits(y)[0][1] == ubits(torch.tensor(-0.0, dtype=dtype))
        check_forward(x, w, 1e-6)
        for mode in contract.CASTING_MODES:
            check_forward(x.expand(9, 4), w, 1e-6, mode)  # the tensor tail too


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_row_holding_inf_gives_nan_and_zeros_like_f_rms_norm(dtype):
    """[inf, 1, 2, 3] used to give all -inf; F.rms_norm gives [nan, 0, 0, 0]."""
    for first in (INF, -INF):
        x = torch.tensor([[first, 1.0, 2.0, 3.0]], dtype=dtype)
        w = torch.ones(4, dtype=dtype)
        y, rstd = ascend_rmsnorm.rms_norm(x, w, backend="torch", return_rstd=True)
        ref = F.rms_norm(x, (4,), w, 1e-6)
        assert ubits(rstd) == [0]
        assert bool(torch.isnan(y[0, 0])) and bool(torch.isnan(ref[0, 0]))
        assert ubits(y[:, 1:]) == ubits(ref[:, 1:]) == [[0, 0, 0]]
        assert_nans_canonical(y, "y")
        check_forward(x, w, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_backward_of_limit_rows_has_no_negative_infinity(dtype):
    big = 1e20 if dtype != torch.float16 else 6e4
    rows = [[big, -2 * big if dtype != torch.float16 else -big, 3.0, 4.0], [INF, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]]
    x = torch.tensor(rows, dtype=dtype).repeat(3, 1)  # 9 rows: the tensor tail
    w = make_weight(4, dtype)
    dy = make_input(9, 4, dtype, seed=3, scale_rows=False)
    for xs in (x[:3], x):  # host tail, tensor tail
        _, rstd, _ = torch_backend.forward(xs, w, 1e-6)
        dx, dw = check_backward(dy[: xs.shape[0]], xs, w, rstd.tolist())
        assert not bool(torch.isneginf(dx).any())
        assert_nans_canonical(dx, "dx")
        assert_nans_canonical(dw, "dw")
        if dtype != torch.float16:  # the overflowing row: rstd = +0, dx = +-0
            assert ubits(dx[0].abs()) == [0, 0, 0, 0]
        assert bool(torch.isnan(dx[1]).all())


def test_subnormal_and_zero_rows_with_eps_zero_follow_the_contract():
    """eps = 0: a = 0 (zero row) gives NaN rstd, a subnormal a gives +inf (Newton's own result);
    the outputs are what the oracle says, NaNs canonical."""
    x = torch.tensor([[0.0, 0.0, 0.0], [1e-22, 0.0, 2e-23], [1.0, 2.0, 3.0]])
    w = torch.ones(3)
    for xs in (x, x.repeat(3, 1)):
        (y, rstd, _), _ = check_forward(xs, w, 0.0)
        assert bool(torch.isnan(rstd[0])) and bool(torch.isposinf(rstd[1]))
        assert_nans_canonical(y, "y")
        assert_nans_canonical(rstd, "rstd")
        dy = torch.ones_like(xs)
        dx, _ = check_backward(dy, xs, w, rstd.tolist())
        assert_nans_canonical(dx, "dx")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("hidden", (1, 3, 7, 8, 100, 4097))
def test_nan_rows_are_canonical_and_batch_invariant(dtype, hidden):
    """A row holding odd NaNs (negative, signalling, payloads) alone, and at several positions in
    batches of 8 and 300: identical bits for y, rstd, residual_out and dx, all canonical."""
    row = make_input(1, hidden, dtype, seed=hidden)
    for i, j in enumerate(sorted({0, hidden // 2, hidden - 1})):
        row[0, j] = odd_nan(dtype, i + hidden)
    res_row = make_input(1, hidden, dtype, seed=hidden + 1)
    dy_row = make_input(1, hidden, dtype, seed=hidden + 2)
    w = make_weight(hidden, dtype)

    def outputs(x, res, dy):
        y, rstd, r_out = torch_backend.forward(x, w, 1e-6, casting_mode="llama", residual=res)
        dx, _ = torch_backend.backward(dy, r_out, w, rstd, casting_mode="llama", need_dw=False)
        y2, rstd2, _ = torch_backend.forward(x, w, 1e-6)
        return {"y": y, "rstd": rstd, "residual_out": r_out, "dx": dx, "y fp32 mode": y2, "rstd2": rstd2}

    alone = outputs(row, res_row, dy_row)
    for name, t in alone.items():
        assert_nans_canonical(t, name)
    assert bool(torch.isnan(alone["y"]).all()) and bool(torch.isnan(alone["rstd"]).all())
    for rows, pos in ((8, 0), (8, 5), (300, 137), (300, 299)):
        x = make_input(rows, hidden, dtype, seed=1)
        res = make_input(rows, hidden, dtype, seed=2)
        dy = make_input(rows, hidden, dtype, seed=3)
        x[pos], res[pos], dy[pos] = row[0], res_row[0], dy_row[0]
        batch = outputs(x, res, dy)
        for name, t in batch.items():
            assert torch.equal(bits(t[pos]), bits(alone[name][0])), f"{name}: row {pos} of {rows} vs alone"
            assert_nans_canonical(t, name)
    check_forward(row, w, 1e-6, "llama", residual=res_row)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_nan_and_inf_in_weight_residual_and_dy_are_canonical(dtype):
    hidden = 40
    x = make_input(6, hidden, dtype, seed=4)
    x[2, 3] = 0.0  # 0 * inf in y
    w = make_weight(hidden, dtype)
    w[5], w[7], w[9] = odd_nan(dtype, 1), INF, -INF
    res = make_input(6, hidden, dtype, seed=5)
    res[1, 0], res[3, 4], x[3, 4] = odd_nan(dtype, 2), INF, -INF  # a NaN, and inf + -inf
    for xs, rs in ((x, res), (x.repeat(2, 1), res.repeat(2, 1))):  # host tail and tensor tail
        for mode in contract.CASTING_MODES:
            (y, rstd, r_out), _ = check_forward(xs, w, 1e-6, mode, residual=rs)
            for name, t in (("y", y), ("rstd", rstd), ("residual_out", r_out)):
                assert_nans_canonical(t, name)
            assert bool(torch.isnan(y[:, 5]).all())
            dy = make_input(xs.shape[0], hidden, y.dtype, seed=6, scale_rows=False)
            dy[0, 1] = odd_nan(y.dtype, 3)
            dx, dw = check_backward(dy, r_out, w, rstd.tolist(), mode)
            assert_nans_canonical(dx, "dx")
            assert_nans_canonical(dw, "dw")
            assert bool(torch.isnan(dx).any()) and bool(torch.isnan(dw).any())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_non_finite_weight_alone_gives_canonical_nans(dtype):
    """Finite rows, a weight holding odd NaNs and +-inf (times a zero x: NaN): y canonical."""
    for rows, hidden in ((1, 5), (3, 40), (9, 40), (2, 5000)):
        x = make_input(rows, hidden, dtype, seed=10)
        x[:, 2] = 0.0
        w = make_weight(hidden, dtype)
        w[0], w[1], w[2] = odd_nan(dtype, 0), odd_nan(dtype, 1), -INF
        for mode in contract.CASTING_MODES:
            (y, _, _), _ = check_forward(x, w, 1e-6, mode)
            assert bool(torch.isnan(y[:, :3]).all())
            assert_nans_canonical(y, "y")


def test_finite_rows_and_weights_pay_no_nan_pass(monkeypatch):
    """The NaN pass runs only when a NaN is possible (a special rstd or c, or a non-finite weight)."""
    calls = []
    real = torch_backend._canonical
    monkeypatch.setattr(torch_backend, "_canonical", lambda t: calls.append(t.shape) or real(t))
    for rows in (2, 9):
        x = make_input(rows, 300, torch.float16, seed=7).requires_grad_()
        w = make_weight(300, torch.float16)
        y, rstd, _ = torch_backend.forward(x.detach(), w, 1e-6)
        torch_backend.backward(torch.ones_like(y), x.detach(), w, rstd)
    assert calls == []
    w[0] = INF
    torch_backend.forward(make_input(2, 300, torch.float16, seed=7), w, 1e-6)
    assert calls == [(2, 300)]


def test_constants_cache_holds_no_fake_tensors():
    """A FakeTensorMode (what torch.compile and export trace with) never leaves fake tensors in the
    process-wide constants, so a real call afterwards gives the same bits as before."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = make_input(9, 300, torch.bfloat16, seed=8)
    w = make_weight(300, torch.bfloat16)
    before = torch_backend.forward(x, w, 1e-6)
    saved = dict(torch_backend._Constants._by_device)
    torch_backend._Constants._by_device.clear()  # the first use in this process happens under the fake mode
    try:
        with FakeTensorMode() as mode:
            k = torch_backend._Constants.on(torch.device("cpu"))
            k.scalar(0.25)
            k.nan(torch.bfloat16)
            fx = mode.from_tensor(x)
            a = fx.float() * k.scalar(0.25)
            assert a.shape == x.shape
        assert torch_backend._Constants._by_device == {}
        after = torch_backend.forward(x, w, 1e-6)
        assert all(type(t) is torch.Tensor for t in vars(torch_backend._Constants.on(torch.device("cpu"))).values()
                   if isinstance(t, torch.Tensor))  # fmt: skip
    finally:
        torch_backend._Constants._by_device.update(saved)
    for a, b in zip(before[:2], after[:2]):
        assert torch.equal(bits(a), bits(b))


def test_constants_made_under_inference_mode_are_normal_tensors():
    """Made under inference_mode, the cached constants must not be inference tensors, or a later
    call outside inference mode that needs them (in place or for autograd) would fail."""
    saved = dict(torch_backend._Constants._by_device)
    torch_backend._Constants._by_device.clear()
    try:
        x = make_input(9, 64, torch.float32, seed=9)
        with torch.inference_mode():
            inside = torch_backend.forward(x, None, 1e-6)
        k = torch_backend._Constants.on(torch.device("cpu"))
        assert not k.zero.is_inference() and not k.scalar(1e-6).is_inference()
        outside = torch_backend.forward(x, None, 1e-6)
        assert torch.equal(bits(inside[0]), bits(outside[0]))
    finally:
        torch_backend._Constants._by_device.clear()
        torch_backend._Constants._by_device.update(saved)
