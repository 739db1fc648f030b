"""Off the CPU the torch path reads nothing back to the host (README: torch.compile, CUDA graphs).

``backends/torch.py`` may read values back (``.item()``, ``.tolist()``, ``bool()``) only where
``_reads_back`` says so: on the CPU. Elsewhere a read is a host-device sync per call and breaks CUDA
graph capture, so the NaN/Inf fix-ups always run there. Two things are checked here, on this CPU-only
machine:

- no read-back: the other devices' branch run on ``meta`` tensors, where every read-back raises
  (forward, the residual variant, backward with dx, dw and the residual's gradient, and the registered
  ops' device code: their argument checks, the backend choice, the flattening);
- same bits: that branch forced on CPU tensors (``_reads_back`` patched to False) gives the CPU branch's
  bits on the edge-value probes and ordinary rows of every casting mode, offset, weight kind and the
  residual variant, and the scalar oracle's bits in the limit tests and the oracle matrix.
"""

from __future__ import annotations

import weakref

import pytest
import test_contract_torch
import test_limits_torch
import torch

from ascend_rmsnorm.backends import choice
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.cli.selftest import PROBE_HINTS, inputs, probe_inputs
from ascend_rmsnorm.ops import device as op_device

from helpers import DTYPES, assert_same_bits, load_script
from oracle_check import NAME

META = torch.device("meta")

#: (casting_mode, offset, weight: None, "x" for x's dtype, or a dtype): the variants a GPU host's
#: check_cuda_contract runs, the same table, so the branch checked here is the one checked there.
VARIANTS = load_script("benchmarks/check_cuda_contract.py", "check_cuda_contract").VARIANTS


def _weight(w, dtype, kind):
    return None if kind is None else w.to(dtype if kind == "x" else kind)


@pytest.fixture
def no_read_back(monkeypatch):
    """The branch every device but the CPU takes, forced on CPU tensors."""
    monkeypatch.setattr(torch_backend, "_reads_back", lambda t: False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("rows, hidden", [(1, 32), (3, 64), (9, 300), (2, 5000)])
def test_meta_tensors_run_without_a_read_back(dtype, rows, hidden):
    """On meta tensors any .item()/bool()/.tolist() raises: the backend and the ops' device code run through."""
    x = torch.empty(rows, hidden, dtype=dtype, device=META)
    r, dy = torch.empty_like(x), torch.empty_like(x)
    for mode, offset, kind in VARIANTS:
        w = None if kind is None else torch.empty(hidden, dtype=dtype if kind == "x" else kind, device=META)
        y, rstd, none = torch_backend.forward(x, w, 1e-6, casting_mode=mode, offset=offset)
        assert y.shape == x.shape and rstd.shape == (rows,) and none is None
        y, rstd, r_out = torch_backend.forward(x, w, 0.0, casting_mode=mode, offset=offset, residual=r)
        assert r_out.shape == x.shape
        dyy = torch.empty_like(y)
        for need_dx, need_dw in ((True, True), (True, False), (False, True)):
            dx, dw = torch_backend.backward(
                dyy, r_out, w, rstd, casting_mode=mode, offset=offset, need_dx=need_dx, need_dw=need_dw
            )
            assert (dx is not None) == need_dx and (dw is not None) == (need_dw and w is not None)
        dx, _ = torch_backend.backward(dyy, r_out, w, rstd, casting_mode=mode, offset=offset, grad_residual=dy)
        assert dx.shape == x.shape
        # the registered ops' CUDA/other-device code: checks, choice.for_other, flattening (3-D here)
        x3, r3 = x.view(1, rows, hidden), r.view(1, rows, hidden)
        op_device._check_op_args("add_rms_norm", x3, w, 1e-6, mode, offset, r3)
        y3, rstd3, r_out3 = op_device._forward(choice.for_other, x3, r3, w, 1e-6, mode, offset, "auto")
        assert y3.shape == x3.shape and rstd3.shape == (1, rows) and r_out3.shape == x3.shape
        dx3, _ = op_device._backward(
            choice.for_other, torch.empty_like(y3), r_out3, w, rstd3, r3, 1e-6, mode, offset, True, True, "torch"
        )
        assert dx3.shape == x3.shape


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_sync_free_branch_gives_the_cpu_bits(dtype, monkeypatch):
    """The other devices' branch (fix-ups always run, no host tails) against the CPU branch, bit for bit:
    every variant on the edge-value probes (subnormals with eps = 0 and zero rows, Inf/NaN rows,
    overflow) and on ordinary rows at 3 rows (the CPU's host paths) and 65 (its tensor path); y, rstd,
    residual_out, dx with and without the residual's gradient, dw."""
    cases = []
    for rows, hidden in ((3, 64), (3, 5000), (65, 300)):
        x, w, dy = inputs(rows, hidden, dtype, seed=rows + hidden)
        cases.append((f"{rows}x{hidden}", x, w, dy, 1e-6, dy.flip(0) * 0.5))
    for kind in PROBE_HINTS:
        x, w, dy, eps, _ = probe_inputs(kind, dtype)
        cases.append((kind, x, w, dy, eps, torch.zeros_like(x)))
        x9, dy9 = x.repeat(3, 1)[:9], dy.repeat(3, 1)[:9]  # more rows than the CPU's host paths take
        cases.append((kind + " x9", x9, w, dy9, eps, torch.zeros_like(x9)))

    def run(x, w, dy, eps, r, mode, offset):
        y, rstd, _ = torch_backend.forward(x, w, eps, casting_mode=mode, offset=offset)
        ry, rrstd, r_out = torch_backend.forward(x, w, eps, casting_mode=mode, offset=offset, residual=r)
        dyy = dy.to(y.dtype)
        dx, dw = torch_backend.backward(dyy, x, w, rstd, casting_mode=mode, offset=offset)
        rdx, _ = torch_backend.backward(dyy, r_out, w, rrstd, casting_mode=mode, offset=offset, grad_residual=r)
        return {"y": y, "rstd": rstd, "y (residual)": ry, "rstd (residual)": rrstd, "residual_out": r_out,
                "dx": dx, "dw": dw, "dx (residual)": rdx}  # fmt: skip

    checked = 0
    for label, x, w0, dy, eps, r in cases:
        for mode, offset, kind in VARIANTS:
            w = _weight(w0, dtype, kind)
            with monkeypatch.context():
                cpu = run(x, w, dy, eps, r, mode, offset)
            with monkeypatch.context() as m:
                m.setattr(torch_backend, "_reads_back", lambda t: False)
                other = run(x, w, dy, eps, r, mode, offset)
            for name in cpu:
                assert_same_bits(other[name], cpu[name], f"{name}: {label}, {mode}, offset {offset}, weight {kind}")
                checked += 1
    assert checked == len(cases) * len(VARIANTS) * 8


def test_forced_branch_really_skips_the_shortcuts(no_read_back, monkeypatch):
    """The forced branch runs the fix-ups on rows that do not need them (and reads nothing back): so the
    bit tests above compare two different code paths, not one."""
    calls = []
    real = torch_backend._canonical
    monkeypatch.setattr(torch_backend, "_canonical", lambda t: calls.append(tuple(t.shape)) or real(t))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("read back with .item()"))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: pytest.fail("read back with .tolist()"))
    x, w, dy = inputs(2, 64, torch.bfloat16, seed=1)  # finite rows: the CPU branch runs no fix-up here
    y, rstd, _ = torch_backend.forward(x, w, 1e-6)
    torch_backend.backward(dy, x, w, rstd)
    assert calls == [(2, 64), (64,), (2, 64)]  # y, dw, dx


def test_device_constants_outlive_a_captured_graph():
    """A CUDA graph holds the addresses of the constants a captured call used, not the tensors: off the
    CPU the constants cache must never free one (it was cleared past 256 values of eps, 1/H and offset).
    On the CPU it stays bounded."""
    k = torch_backend._Constants(META)  # an instance of its own: the process-wide cache is left as it is
    first = weakref.ref(k.scalar(0.125))
    for i in range(300):
        k.scalar(i + 0.5)
    assert first() is not None and k.scalar(0.125) is first()
    k = torch_backend._Constants(torch.device("cpu"))
    for i in range(300):
        k.scalar(i + 0.5)
    assert len(k._scalars) <= 257


#: The limit tests of test_limits_torch (each held to the scalar oracle) that do not count fix-up calls.
LIMIT_TESTS = [
    (test_limits_torch.test_overflowing_row_gives_zero_rstd_and_signed_zeros_like_f_rms_norm, {}),
    (test_limits_torch.test_subnormal_and_zero_rows_with_eps_zero_follow_the_contract, {}),
] + [
    (f, {"dtype": d})
    for d in DTYPES
    for f in (
        test_limits_torch.test_row_holding_inf_gives_nan_and_zeros_like_f_rms_norm,
        test_limits_torch.test_backward_of_limit_rows_has_no_negative_infinity,
        test_limits_torch.test_nan_and_inf_in_weight_residual_and_dy_are_canonical,
        test_limits_torch.test_non_finite_weight_alone_gives_canonical_nans,
    )
] + [(test_limits_torch.test_nan_rows_are_canonical_and_batch_invariant, {"dtype": d, "hidden": h})
     for d in DTYPES for h in (1, 7, 100)]  # fmt: skip

#: Some of test_contract_torch's oracle matrix: every mode and dtype, short and multi-tile rows.
ORACLE_TESTS = (
    [
        (test_contract_torch.test_forward_matches_oracle, {"dtype": d, "mode": m, "hidden": h})
        for d in DTYPES
        for m in test_contract_torch.MODES
        for h in (7, 100, 4097)
    ]
    + [
        (test_contract_torch.test_backward_matches_oracle, {"dtype": d, "mode": m, "rows": r, "hidden": h})
        for d in DTYPES
        for m in test_contract_torch.MODES
        for r, h in ((3, 31), (130, 31), (3, 4097))
    ]
    + [
        (f, {"dtype": d})
        for d in DTYPES
        for f in (
            test_contract_torch.test_offsets_match_oracle,
            test_contract_torch.test_backward_other_weight_dtypes_and_offsets_match_oracle,
        )
    ]
    + [(test_contract_torch.test_residual_matches_oracle, {"dtype": d, "rows": 3, "hidden": 7}) for d in DTYPES]
)


def _ids(cases):
    return [f.__name__.removeprefix("test_") + "".join(f"-{v if not isinstance(v, torch.dtype) else NAME[v]}"
                                                       for v in kw.values()) for f, kw in cases]  # fmt: skip


@pytest.mark.parametrize("case", LIMIT_TESTS + ORACLE_TESTS, ids=_ids(LIMIT_TESTS + ORACLE_TESTS))
def test_sync_free_branch_meets_the_oracle(case, no_read_back):
    """The existing oracle and limit tests, run on the other devices' branch."""
    fn, kwargs = case
    fn(**kwargs)
