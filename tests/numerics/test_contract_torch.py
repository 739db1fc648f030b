"""The torch backend against the scalar oracle of docs/design.md §3, bit for bit.

The matrix: 3 x dtypes x the casting modes x weight dtypes (none, x's, float32, one other) x
H in {1, 7, 8, 31, 100, 4095, 4096, 4097, 12288} x row counts that take each of the torch path's
code paths (all-host for a few short CPU rows, host tail, tensor tail, the bf16 alloc-saving path).
"""

from __future__ import annotations

import math

import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import torch as torch_backend

import oracle
from helpers import DTYPES, bits, make_input, make_weight
from oracle_check import MODES, NAME, OTHER_W, check_backward, check_forward, ubits

HIDDEN_SIZES = (1, 7, 8, 31, 100, 4095, 4096, 4097, 12288)


def _weights_for(dtype, hidden):
    """Every weight kind at small H; at large H x's dtype plus one other kind, rotating with H."""
    if hidden <= 100:
        return [None, dtype, torch.float32, OTHER_W[dtype]]
    return [dtype, [None, torch.float32, OTHER_W[dtype]][HIDDEN_SIZES.index(hidden) % 3]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("hidden", HIDDEN_SIZES)
def test_forward_matches_oracle(dtype, mode, hidden):
    rows = 3 if hidden <= 4097 else 2
    x = make_input(rows, hidden, dtype, seed=hidden)
    for kind in _weights_for(dtype, hidden):
        w = None if kind is None else make_weight(hidden, kind, seed=hidden % 5)
        check_forward(x, w, 1e-6, mode)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("rows, hidden", [(9, 31), (9, 4097), (70, 100)])
def test_forward_tensor_paths_match_oracle(dtype, rows, hidden):
    """More rows than the host tail takes: the tensor tail, and the bf16/fp16 alloc-saving path."""
    x = make_input(rows, hidden, dtype, seed=7)
    for mode in MODES:
        check_forward(x, make_weight(hidden, dtype), 1e-5, mode)
        check_forward(x, make_weight(hidden, torch.float32), 1e-5, mode)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_offsets_match_oracle(dtype):
    x = make_input(5, 100, dtype, seed=8)
    for mode in ("fp32", "llama"):
        for offset in (0.5, -1.0, 1e-3, 1.0 / 3):
            for w in (make_weight(100, dtype), make_weight(100, torch.float32), None):
                check_forward(x, w, 1e-6, mode, offset)


def test_gemma_is_fp32_with_offset_one_and_rejects_other_offsets():
    x = make_input(6, 300, torch.bfloat16, seed=9)
    w = make_weight(300, torch.bfloat16) - 1
    g = torch_backend.forward(x, w, 1e-6, casting_mode="gemma")
    f = torch_backend.forward(x, w, 1e-6, casting_mode="fp32", offset=1.0)
    assert torch.equal(bits(g[0]), bits(f[0])) and torch.equal(bits(g[1]), bits(f[1]))
    with pytest.raises(ValueError, match="offset"):
        torch_backend.forward(x, w, 1e-6, casting_mode="gemma", offset=0.5)
    with pytest.raises(ValueError, match="casting_mode"):
        torch_backend.forward(x, w, 1e-6, casting_mode="none")


def test_offset_zero_keeps_a_negative_zero_weight():
    """Offset 0 adds nothing (so y = x*rstd*(-0.0) = -0.0 for positive x, as F.rms_norm gives)."""
    x = torch.tensor([[1.0, 2.0, 3.0]])
    w = torch.tensor([-0.0, 1.0, -0.0])
    y = torch_backend.forward(x, w, 1e-6)[0]
    ref = torch.nn.functional.rms_norm(x, (3,), w, 1e-6)
    assert torch.equal(bits(y)[0, ::2], bits(ref)[0, ::2])
    assert bits(y)[0, 0] == bits(torch.tensor(-0.0))


def test_modes_differ_where_they_should():
    """llama rounds x*rstd to bf16 before the weight: different bits from fp32 on many elements;
    with fp32 x the two formulas are the same."""
    x = make_input(4, 4096, torch.bfloat16, seed=10)
    w = make_weight(4096, torch.bfloat16)
    fp32 = torch_backend.forward(x, w, 1e-6, casting_mode="fp32")[0]
    llama = torch_backend.forward(x, w, 1e-6, casting_mode="llama")[0]
    assert 0.05 < float((bits(fp32) != bits(llama)).float().mean()) < 0.5
    xf = make_input(4, 4096, torch.float32, seed=10)
    wf = make_weight(4096, torch.float32)
    a = torch_backend.forward(xf, wf, 1e-6, casting_mode="fp32")[0]
    b = torch_backend.forward(xf, wf, 1e-6, casting_mode="llama")[0]
    assert torch.equal(bits(a), bits(b))
    # llama with an fp32 weight and bf16 x gives fp32, like HF's weight * hidden.to(bf16)
    assert torch_backend.forward(x, wf, 1e-6, casting_mode="llama")[0].dtype == torch.float32
    assert torch_backend.forward(x, wf, 1e-6, casting_mode="fp32")[0].dtype == torch.bfloat16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("rows, hidden", [(70, 1), (70, 7), (3, 31), (130, 31), (70, 100), (3, 4097)])
def test_backward_matches_oracle(dtype, mode, rows, hidden):
    """dx and dw of every mode; 70 and 130 rows: more than one dw chunk, the last one short."""
    x = make_input(rows, hidden, dtype, seed=3)
    dy_dtype = dtype
    weights = [make_weight(hidden, dtype), make_weight(hidden, torch.float32)] + ([None] if rows == 3 else [])
    for w in weights:
        y, rstd, _ = torch_backend.forward(x, w, 1e-6, casting_mode=mode)
        dy_dtype = y.dtype  # dy has y's dtype (fp32 for llama with an fp32 weight)
        dy = make_input(rows, hidden, dy_dtype, seed=4, scale_rows=False)
        check_backward(dy, x, w, rstd.tolist(), mode)
    if rows == 70:  # only one of the two gradients
        check_backward(dy, x, w, rstd.tolist(), mode, need_dx=False)
        check_backward(dy, x, w, rstd.tolist(), mode, need_dw=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_backward_other_weight_dtypes_and_offsets_match_oracle(dtype):
    x = make_input(70, 33, dtype, seed=12)
    for w, offset in ((make_weight(33, OTHER_W[dtype]), 0.0), (make_weight(33, dtype), 0.75)):
        for mode in ("fp32", "llama"):
            y, rstd, _ = torch_backend.forward(x, w, 1e-6, casting_mode=mode, offset=offset)
            dy = make_input(70, 33, y.dtype, seed=13, scale_rows=False)
            check_backward(dy, x, w, rstd.tolist(), mode, offset)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("rows, hidden", [(3, 1), (3, 7), (3, 100), (9, 64), (2, 4097)])
def test_residual_matches_oracle(dtype, rows, hidden):
    x = make_input(rows, hidden, dtype, seed=14)
    res = make_input(rows, hidden, dtype, seed=15)
    for mode in MODES:
        (y, rstd, r_out), want = check_forward(x, make_weight(hidden, dtype), 1e-6, mode, residual=res)
        # bit for bit the two calls apart: the add, then the norm of its result
        assert torch.equal(bits(r_out), bits((x.float() + res.float()).to(dtype)))
        y2, rstd2, _ = torch_backend.forward(r_out, make_weight(hidden, dtype), 1e-6, casting_mode=mode)
        assert torch.equal(bits(y), bits(y2)) and torch.equal(bits(rstd), bits(rstd2))


def test_weight_of_any_floating_dtype():
    """float64 weights round to float32 (RNE) first; float8 ones widen exactly."""
    x = make_input(3, 50, torch.bfloat16, seed=16)
    w64 = make_weight(50, torch.float64) + 1e-9  # not representable in float32
    check_forward(x, w64, 1e-6, "fp32")
    check_forward(x, w64, 1e-6, "llama")  # llama: torch promotes to float64
    w8 = make_weight(50, torch.float32).to(torch.float8_e4m3fn)
    y = torch_backend.forward(x, w8, 1e-6)[0]
    assert y.dtype == torch.bfloat16
    assert torch.equal(bits(y), bits(torch_backend.forward(x, w8.float(), 1e-6)[0]))
    y = torch_backend.forward(x, w8, 1e-6, casting_mode="llama")[0]  # torch has no float8 promotion
    assert y.dtype == torch.bfloat16 and ascend_rmsnorm.rms_norm(x, w8, 1e-6, casting_mode="llama").dtype == y.dtype


def test_public_api_matches_the_backend():
    x = make_input(3, 1000, torch.bfloat16, seed=5)
    for w in (make_weight(1000, torch.float32), None):
        y, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-5, backend="torch", return_rstd=True)
        y2, rstd2, _ = torch_backend.forward(x, w, 1e-5)
        assert torch.equal(bits(y), bits(y2)) and torch.equal(bits(rstd), bits(rstd2))


def test_rstd_newton_guess_is_within_2_ulp_of_correct_rounding():
    a = torch.logspace(-13, 13, 20001, dtype=torch.float64)
    a32 = a.float()
    got = torch_backend.rstd_from_sum(a32.clone(), 1, 0.0)  # inv_h = 1, eps = 0: rstd of a itself
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
    assert contract.CANONICAL_NAN_BITS[torch.float16] == oracle.CANONICAL_NAN["float16"]
    assert contract.CANONICAL_NAN_BITS[torch.bfloat16] == oracle.CANONICAL_NAN["bfloat16"]
    assert contract.CANONICAL_NAN_BITS[torch.float32] == oracle.CANONICAL_NAN["float32"]


def test_host_and_tensor_scalar_tails_give_the_same_bits():
    """Small CPU batches finish rstd and c on the host; larger ones with tensor ops: same bits,
    including the special sums (0, subnormal, overflow, +inf, NaN)."""
    g = torch.Generator().manual_seed(5)
    sums = (torch.rand(4000, generator=g) * torch.logspace(-44, 38, 4000)).float()
    sums = torch.cat([sums, torch.tensor([0.0, 1e-45, 3.4e38, float("inf"), float("nan")])])
    for hidden, eps in ((1, 0.0), (3, 1e-6), (4096, 1e-5), (70000, 1e30)):
        host = torch.tensor(
            torch_backend._rstd_host(sums.tolist(), contract.inv_hidden(hidden), contract.to_f32(eps)),
            dtype=torch.float32,
        )
        tensor = torch_backend.rstd_from_sum(sums.clone(), hidden, eps)
        assert torch.equal(bits(host), bits(tensor)), (hidden, eps)
        want = [oracle.f32_bits(oracle.rstd(oracle.F32(s), hidden, eps)) for s in sums.tolist()]
        want = [oracle.CANONICAL_NAN["float32"] if (b & 0x7FFFFFFF) > 0x7F800000 else b for b in want]
        assert ubits(tensor) == want, (hidden, eps)
    for hidden in (5, 300, 4100, 9000):
        q = make_input(12, hidden, torch.float32, seed=hidden) ** 2
        many = torch_backend.row_mean_(q.clone(), hidden)  # 12 rows: the tensor tail
        few = torch.cat([torch_backend.row_mean_(q[i : i + 3].clone(), hidden) for i in range(0, 12, 3)])  # host tail
        assert torch.equal(bits(many), bits(few)), hidden
        assert torch.equal(bits(torch_backend.row_rstd_(q.clone(), hidden, 1e-6)),
                           bits(torch.cat([torch_backend.row_rstd_(q[i : i + 2].clone(), hidden, 1e-6)
                                           for i in range(0, 12, 2)])))  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_long_rows_match_oracle(dtype):
    """16 tiles: the left-to-right sum of tile partials over a long row (one row, kept cheap)."""
    x = make_input(1, 65536, dtype, seed=11)
    check_forward(x, make_weight(65536, dtype), 1e-6, "llama" if dtype != torch.float32 else "fp32")


def test_to_f32_keeps_the_sign_of_zero_whatever_came_before():
    # A value-keyed memo would hand -0.0 the cached +0.0 (they compare equal); the kernel backends'
    # scalars go through to_f32, so the sign must survive any call order.
    assert math.copysign(1.0, contract.to_f32(0.0)) == 1.0
    assert math.copysign(1.0, contract.to_f32(-0.0)) == -1.0
    assert math.copysign(1.0, contract.to_f32(-1e-50)) == -1.0  # underflows to -0.0
