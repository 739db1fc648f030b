"""The torch backend against the scalar oracle of DESIGN.md §3, bit for bit."""

from __future__ import annotations

import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import reference

import oracle
from helpers import DTYPES, bits, make_input, make_weight

HIDDEN_SIZES = (1, 2, 3, 17, 64, 100, 1000, 4095, 4096, 4097, 8192, 12288, 65536)
DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _oracle_forward(x: torch.Tensor, w: torch.Tensor | None, eps: float):
    """Oracle y bits and rstd bits for each row of x."""
    name = DTYPE_NAME[x.dtype]
    wl = w.float().tolist() if w is not None else None
    ys, rs = [], []
    for row in x.float().tolist():
        y, r = oracle.forward_row(row, wl, eps)
        ys.append([oracle.cast_bits(v, name) for v in y])
        rs.append(oracle.f32_bits(r))
    return ys, rs


def _as_unsigned(t: torch.Tensor) -> list:
    width = 0xFFFFFFFF if t.dtype == torch.float32 else 0xFFFF
    return [[v & width for v in row] for row in bits(t).tolist()]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAME[d])
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
def test_forward_matches_oracle_bitwise(dtype, hidden):
    rows = 2 if hidden >= 8192 else 3
    x = make_input(rows, hidden, dtype, seed=hidden)
    w = make_weight(hidden, dtype)
    y, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="torch", return_rstd=True)
    want_y, want_r = _oracle_forward(x, w, 1e-6)
    assert _as_unsigned(y) == want_y
    assert [v & 0xFFFFFFFF for v in bits(rstd).tolist()] == want_r


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAME[d])
def test_forward_fp32_weight_and_no_weight_match_oracle(dtype):
    x = make_input(3, 1000, dtype, seed=5)
    for w in (make_weight(1000, torch.float32), None):
        y, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-5, backend="torch", return_rstd=True)
        want_y, want_r = _oracle_forward(x, w, 1e-5)
        assert _as_unsigned(y) == want_y
        assert [v & 0xFFFFFFFF for v in bits(rstd).tolist()] == want_r


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DTYPE_NAME[d])
@pytest.mark.parametrize("hidden", (1, 7, 100, 4097))
def test_backward_matches_oracle_bitwise(dtype, hidden):
    rows = 70  # more than one dw chunk, the last one short
    x = make_input(rows, hidden, dtype, seed=3)
    w = make_weight(hidden, dtype)
    dy = make_input(rows, hidden, dtype, seed=4, scale_rows=False)
    y, rstd, _ = reference.forward(x, w, 1e-6)
    dx, dw = reference.backward(dy, x, w, rstd)
    name = DTYPE_NAME[dtype]
    wl, contribs, dx_bits = w.float().tolist(), [], []
    for xr, dyr, r in zip(x.float().tolist(), dy.float().tolist(), rstd.view(-1).tolist()):
        dxr, c = oracle.backward_row(dyr, xr, wl, oracle.F32(r))
        dx_bits.append([oracle.cast_bits(v, name) for v in dxr])
        contribs.append(c)
    assert _as_unsigned(dx) == dx_bits
    assert [v & 0xFFFF if dtype != torch.float32 else v & 0xFFFFFFFF for v in bits(dw).tolist()] == [
        oracle.cast_bits(v, name) for v in oracle.dw(contribs)
    ]


def test_rstd_newton_guess_is_within_2_ulp_of_correct_rounding():
    a = torch.logspace(-13, 13, 20001, dtype=torch.float64)
    a32 = a.float()
    got = reference.rstd_from_sum(a32.clone(), 1, 0.0)  # inv_h = 1, eps = 0: rstd of a itself
    exact = (1.0 / a32.double().sqrt()).float()
    ulp = (bits(got).long() - bits(exact).long()).abs()
    assert int(ulp.max()) <= 2
    rel = ((got.double() - 1.0 / a32.double().sqrt()) * a32.double().sqrt()).abs().max()
    assert float(rel) < 1.7e-7


def test_constants_are_the_contract():
    assert (contract.TILE, contract.DW_CHUNK_ROWS, contract.RSQRT_MAGIC, contract.NEWTON_STEPS) == (
        4096,
        64,
        0x5F375A86,
        3,
    )
    assert contract.inv_hidden(3) == float(torch.tensor(1.0 / 3, dtype=torch.float32))


def test_host_and_tensor_scalar_tails_give_the_same_bits():
    """Small CPU batches finish rstd and c on the host; larger ones with tensor ops: same bits."""
    g = torch.Generator().manual_seed(5)
    sums = (torch.rand(4000, generator=g) * torch.logspace(-44, 38, 4000)).float()
    sums = torch.cat([sums, torch.tensor([0.0, 1e-45, 3.4e38, float("inf"), float("nan")])])
    for hidden, eps in ((1, 0.0), (3, 1e-6), (4096, 1e-5), (70000, 1e30)):
        host = torch.tensor(
            reference._rstd_host(sums.tolist(), contract.inv_hidden(hidden), contract.to_f32(eps)), dtype=torch.float32
        )
        tensor = reference.rstd_from_sum(sums.clone(), hidden, eps)
        assert torch.equal(bits(host), bits(tensor)), (hidden, eps)
    for hidden in (5, 300, 4100, 9000):
        q = make_input(12, hidden, torch.float32, seed=hidden) ** 2
        many = reference.row_mean_(q.clone(), hidden)  # 12 rows: the tensor tail
        few = torch.cat([reference.row_mean_(q[i : i + 3].clone(), hidden) for i in range(0, 12, 3)])  # host tail
        assert torch.equal(bits(many), bits(few)), hidden
        assert torch.equal(bits(reference.row_rstd_(q.clone(), hidden, 1e-6)),
                           bits(torch.cat([reference.row_rstd_(q[i : i + 2].clone(), hidden, 1e-6)
                                           for i in range(0, 12, 2)])))  # fmt: skip
