"""The public API: shapes, dtypes, autograd against a float64 textbook, bad input, the module."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm import RMSNorm, rms_norm

from helpers import DTYPES, assert_same_bits, make_input, make_weight


def _textbook(x, w, eps):
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y * w.double() if w is not None else y


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized tensors are deprecated, still creatable
        return torch.quantize_per_tensor(torch.ones(4, 8), 0.1, 0, torch.qint8)


def _nested() -> torch.Tensor:
    return torch.nested.nested_tensor([torch.ones(2, 8), torch.ones(3, 8)], layout=torch.jagged)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.detach().double() - want.detach()).abs().max() / want.detach().abs().max())


@pytest.mark.parametrize("hidden", (7, 1000, 4097))
def test_forward_and_grads_close_to_float64_textbook(hidden):
    x = make_input(130, hidden, torch.float32, seed=1).requires_grad_()
    w = make_weight(hidden, torch.float32).requires_grad_()
    dy = make_input(130, hidden, torch.float32, seed=2, scale_rows=False)
    y = rms_norm(x, w, 1e-6)
    gx, gw = torch.autograd.grad(y, (x, w), dy)

    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y64 = _textbook(x64, w64, 1e-6)
    gx64, gw64 = torch.autograd.grad(y64, (x64, w64), dy.double())
    assert _rel_err(y, y64) <= 1e-6
    assert _rel_err(gx, gx64) <= 1e-5
    assert _rel_err(gw, gw64) <= 1e-5


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("w_dtype", ("same", "float32", None))
def test_dtypes_shapes_and_grad_dtypes(dtype, w_dtype):
    x = make_input(2 * 5, 64, dtype).view(2, 5, 64).requires_grad_()
    w = None if w_dtype is None else make_weight(64, dtype if w_dtype == "same" else torch.float32).requires_grad_()
    y, rstd = rms_norm(x, w, return_rstd=True)
    assert y.dtype == dtype and y.shape == x.shape
    assert rstd.dtype == torch.float32 and rstd.shape == (2, 5)
    assert not rstd.requires_grad
    y.float().sum().backward()
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    if w is not None:
        assert w.grad.dtype == w.dtype and w.grad.shape == (64,)


def test_only_weight_requires_grad():
    x = make_input(10, 32, torch.float32)
    w = make_weight(32, torch.float32).requires_grad_()
    rms_norm(x, w).sum().backward()
    assert w.grad is not None and x.grad is None


def test_no_grad_fast_path_builds_no_graph():
    x = make_input(4, 32, torch.float32)
    w = make_weight(32, torch.float32)
    assert rms_norm(x, w).grad_fn is None
    with torch.no_grad():
        assert rms_norm(x.requires_grad_(), w).grad_fn is None


def test_grad_path_and_fast_path_give_the_same_bits():
    x = make_input(33, 500, torch.bfloat16, seed=3)
    w = make_weight(500, torch.bfloat16)
    fast = rms_norm(x, w)
    slow = rms_norm(x.clone().requires_grad_(), w)
    assert slow.grad_fn is not None
    assert_same_bits(fast, slow.detach(), "y")


def test_empty_batch_returns_empty():
    x = torch.empty(0, 3, 16, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(16, dtype=torch.bfloat16, requires_grad=True)
    y, rstd = rms_norm(x, w, return_rstd=True)
    assert y.shape == (0, 3, 16) and y.dtype == torch.bfloat16 and rstd.shape == (0, 3)
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert_same_bits(w.grad, torch.zeros(16, dtype=torch.bfloat16), "dw of no rows: +0.0, not -0.0")


def test_nan_and_inf_stay_in_their_row():
    x = make_input(6, 300, torch.float32, seed=4)
    clean_y = rms_norm(x, None)
    x[1, 7] = float("nan")
    x[4, 0] = float("inf")
    y = rms_norm(x, None)
    assert torch.isnan(y[1]).all()
    assert not torch.isfinite(y[4]).all()
    for i in (0, 2, 3, 5):
        assert_same_bits(y[i], clean_y[i], f"row {i}")


def test_zero_row_gives_zeros():
    y, rstd = rms_norm(torch.zeros(2, 40), None, 1e-6, return_rstd=True)
    assert_same_bits(y, torch.zeros(2, 40), "y of a zero row: +0.0, not -0.0")
    assert torch.allclose(rstd, torch.full((2,), 1000.0), rtol=1e-6)


@pytest.mark.parametrize("eps", (2.0**-126 - 2.0**-150, 2.0**-126), ids=("rounds up to 2^-126", "2^-126"))
def test_the_smallest_eps_taken_gives_a_zero_row_a_positive_finite_rstd(eps):
    """eps rounds to float32's smallest normal number: the least a zero row's a can be once subnormal eps
    are refused, and the Newton steps stay finite there (a subnormal a gives NaN or +-inf)."""
    y, rstd = rms_norm(torch.zeros(3, 64), None, eps, return_rstd=True)
    assert_same_bits(y, torch.zeros(3, 64), "y of a zero row")
    assert bool(torch.isfinite(rstd).all()) and bool((rstd > 0).all()), rstd


@pytest.mark.parametrize(
    "args, kwargs, exc, words",
    [
        (([1.0, 2.0],), {}, TypeError, "torch.Tensor"),
        ((torch.ones(4, 8, dtype=torch.float64),), {}, TypeError, "float64"),
        ((torch.ones(4, 8, dtype=torch.int32),), {}, TypeError, "int32"),
        ((torch.tensor(3.0),), {}, ValueError, "0-d"),
        ((torch.ones(4, 0),), {}, ValueError, "hidden size"),
        ((torch.ones(4, 8), torch.ones(7)), {}, ValueError, "(8,)"),
        ((torch.ones(4, 8), torch.ones(2, 4)), {}, ValueError, "(2, 4)"),
        ((torch.ones(4, 8), torch.ones(8, dtype=torch.int32)), {}, TypeError, "floating"),
        ((torch.ones(4, 8), "w"), {}, TypeError, "weight"),
        ((torch.ones(4, 8), None, -1e-6), {}, ValueError, "-1e-06"),
        ((torch.ones(4, 8), None, float("nan")), {}, ValueError, "nan"),
        ((torch.ones(4, 8), None, float("inf")), {}, ValueError, "inf"),
        ((torch.ones(4, 8), None, "1e-6"), {}, TypeError, "str"),
        ((torch.ones(4, 8), None, True), {}, TypeError, "bool"),
        ((torch.ones(4, 8),), {"backend": "cuda"}, ValueError, "rms_norm: unknown backend 'cuda'"),
        ((torch.ones(4, 8),), {"backend": 123}, TypeError, "rms_norm: backend must be a str"),
        ((torch.ones(4, 8), None, 1e39), {}, ValueError, "float32"),
        ((torch.ones(4, 8), None, 1e-50), {}, ValueError, "smallest normal"),  # would be eps = 0
        ((torch.ones(4, 8), None, 2.0**-150), {}, ValueError, "smallest normal"),  # the tie: RNE gives 0
        ((torch.ones(4, 8), None, 1e-39), {}, ValueError, "smallest normal"),  # a subnormal in float32
        # float32's largest subnormal, and the largest double that rounds to it (RNE: the midpoint goes up)
        ((torch.ones(4, 8), None, 2.0**-126 - 2.0**-149), {}, ValueError, "smallest normal"),
        ((torch.ones(4, 8), None, 2.0**-126 - 2.0**-150 - 2.0**-170), {}, ValueError, "smallest normal"),
        ((torch.ones(4, 8),), {"return_rstd": "no"}, TypeError, "return_rstd must be a bool, got builtins.str"),
        ((torch.ones(4, 8), None, 10**400), {}, ValueError, "eps is too large"),
        ((torch.ones(4, 8),), {"offset": float("nan")}, ValueError, "offset"),
        ((torch.ones(4, 8),), {"offset": float("-inf")}, ValueError, "offset must be finite"),
        ((torch.ones(4, 8),), {"offset": -1e39}, ValueError, "offset must be finite"),
        ((torch.ones(4, 8),), {"offset": "1"}, TypeError, "offset"),
        ((torch.ones(4, 8),), {"casting_mode": "none"}, ValueError, "rms_norm: casting_mode must be one of"),
        ((torch.ones(4, 8), None, torch.tensor(1e-6)), {}, TypeError, "(a one-element tensor: pass .item())"),
        ((torch.ones(4, 8),), {"casting_mode": 1}, TypeError, "casting_mode"),
        ((torch.ones(4, 8),), {"casting_mode": "gemma", "offset": 0.5}, ValueError, "rms_norm: casting_mode='gemma'"),
        ((torch.ones(4, 8).to_sparse(),), {}, TypeError, "layout torch.sparse_coo"),
        ((_nested(),), {}, TypeError, "nested"),
        ((_quantized(),), {}, TypeError, "quantized"),
        ((torch.ones(4, 8), torch.ones(8).to_sparse()), {}, TypeError, "weight has layout"),
    ],
)
def test_bad_input_is_named(args, kwargs, exc, words):
    with pytest.raises(exc) as info:
        rms_norm(*args, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize("call", ("add_rms_norm", "warmup"))
def test_a_bad_backend_is_named_with_the_function_that_got_it(call):
    """Every other bad argument's error opens with the public name that got it; a bad backend too."""
    args = {"add_rms_norm": (torch.ones(4, 8), torch.ones(4, 8)), "warmup": ()}[call]
    fn = getattr(ascend_rmsnorm, call)
    with pytest.raises(ValueError, match=rf"^{call}: unknown backend 'cuda'"):
        fn(*args, backend="cuda")
    with pytest.raises(TypeError, match=rf"^{call}: backend must be a str or None"):
        fn(*args, backend=3)


@pytest.mark.parametrize(
    "args, words",
    [
        ((torch.ones(4, 8), torch.ones(4, 8, dtype=torch.bfloat16)), "dtype"),
        ((torch.ones(4, 8), torch.ones(2, 8)), "shape"),
        ((torch.ones(4, 8), [1.0]), "torch.Tensor"),
        ((torch.ones(4, 8), torch.ones(4, 8, device="meta")), "residual is on meta but x is on cpu"),
    ],
)
def test_add_rms_norm_checks_the_residual(args, words):
    with pytest.raises((TypeError, ValueError), match="^add_rms_norm: residual") as info:
        ascend_rmsnorm.add_rms_norm(*args)
    assert words in str(info.value)


@pytest.mark.parametrize("w_dtype", (torch.float64, torch.float16, torch.bfloat16, torch.float32), ids=str)
def test_any_floating_weight_is_widened_to_fp32(w_dtype):
    """Like F.rms_norm: any floating weight; widened to fp32 (exactly, but for float64), y in x's dtype."""
    x = make_input(5, 48, torch.float32, seed=5).requires_grad_()
    w = make_weight(48, w_dtype).requires_grad_()
    y = rms_norm(x, w)
    assert y.dtype == torch.float32
    assert_same_bits(y, rms_norm(x.detach(), w.detach().to(torch.float32)), "y vs the fp32-widened weight")
    y.sum().backward()
    assert w.grad.dtype == w_dtype


def test_weight_on_another_device_is_rejected():
    w = torch.ones(8, device="meta")
    with pytest.raises(ValueError, match="meta"):
        rms_norm(torch.ones(2, 8), w)


def test_backend_env_var_is_validated(monkeypatch, caplog):
    # a nonsense value warns once, naming the variable, the value and the default, which is used
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "tpu")
    assert_same_bits(rms_norm(torch.ones(2, 8)), rms_norm(torch.ones(2, 8), backend="auto"))
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == "ASCEND_RMSNORM_BACKEND='tpu' is not one of auto, npu, emu, torch; using the default (auto) instead"


def test_module_state_dict_matches_torch_rmsnorm():
    ours = RMSNorm(64, eps=1e-5)
    theirs = torch.nn.RMSNorm(64, eps=1e-5)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    theirs.weight.data.uniform_()
    ours.load_state_dict(theirs.state_dict())
    x = make_input(5, 64, torch.float32)
    assert torch.allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
    assert ours.variance_epsilon == 1e-5
    assert "(64,), eps=1e-05" in repr(ours)  # nn.RMSNorm's repr


def test_module_without_affine_and_with_dtype():
    m = RMSNorm(32, elementwise_affine=False)
    assert m.weight is None and list(m.state_dict()) == []
    m2 = RMSNorm(32, dtype=torch.bfloat16)
    assert m2.weight.dtype == torch.bfloat16
    assert m2(make_input(3, 32, torch.bfloat16)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="hidden_size"):
        RMSNorm(0)


def test_version_is_exported():
    assert isinstance(ascend_rmsnorm.__version__, str) and ascend_rmsnorm.__version__.count(".") >= 2


@pytest.mark.parametrize("eps", (10.0, 3.4028234663852886e38), ids=("10", "float32 max"))
def test_large_eps_matches_textbook(eps):
    """Up to float32's largest finite number, the largest eps taken (it is finite in float32)."""
    x = make_input(3, 50, torch.float32, seed=9)
    assert math.isclose(
        float(rms_norm(x, None, eps, return_rstd=True)[1][0]),
        float(torch.rsqrt(x[0].double().pow(2).mean() + eps)),
        rel_tol=1e-6,
    )


X8, W8 = torch.randn(3, 8), torch.ones(8)


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda: ascend_rmsnorm.rms_norm(X8, (8,), W8, 1e-6), r"F\.rms_norm\(x, normalized_shape, weight, eps\) is "
         r"ascend_rmsnorm\.rms_norm\(x, weight, eps\)"),
        (lambda: ascend_rmsnorm.rms_norm(X8, torch.Size([8]), W8), r"the second argument is the weight"),
        (lambda: ascend_rmsnorm.rms_norm(X8, W8, epsilon=1e-6), r"epsilon= \(write eps="),
        (lambda: ascend_rmsnorm.rms_norm(X8, gamma=W8), r"gamma= \(write weight="),
        (lambda: ascend_rmsnorm.rms_norm(X8, W8, residual=X8), r"add_rms_norm\(x, residual, weight, eps\)"),
        (lambda: ascend_rmsnorm.rms_norm(X8, W8, 1e-6, "gemma"), r"casting_mode=\.\.\."),
        (lambda: ascend_rmsnorm.add_rms_norm(X8, X8, (8,), W8), r"^add_rms_norm: the third argument is the weight, "
         r".* is ascend_rmsnorm\.add_rms_norm\(x, residual, weight, eps\) here"),
        (lambda: ascend_rmsnorm.add_rms_norm(X8, X8, 8), r"^add_rms_norm: the third argument is the weight, got the "
         r"shape 8"),
        (lambda: ascend_rmsnorm.add_rms_norm(X8, X8, W8, 1e-6, "gemma"), r"add_rms_norm\(\) got 1 positional"),
        (lambda: ascend_rmsnorm.add_rms_norm(X8, X8, W8, epsilon=1e-6), r"add_rms_norm\(\) .*epsilon= \(write eps="),
        (lambda: RMSNorm(hidden_size=8, eps=1e-6), r"hidden_size= \(write RMSNorm\(4096, eps\)"),
        (lambda: RMSNorm(8, has_weight=False), r"has_weight= \(write elementwise_affine="),
        (lambda: RMSNorm(8, 1e-6, 0.0, "gemma"), r"LigerRMSNorm\(hidden_size, eps, offset, casting_mode\) is RMSNorm"),
        (lambda: RMSNorm(), r"RMSNorm needs normalized_shape"),
    ],
)  # fmt: skip
def test_habits_from_other_apis_name_the_call_to_make(call, says):
    with pytest.raises(TypeError, match=says):
        call()


def test_signatures_show_the_real_parameters():
    import inspect

    assert str(inspect.signature(ascend_rmsnorm.rms_norm)).startswith(
        "(x: 'torch.Tensor', weight: 'torch.Tensor | None' = None, eps: 'float | None' = None, *, casting_mode"
    )
    assert "**" not in str(inspect.signature(ascend_rmsnorm.add_rms_norm))
    params = inspect.signature(RMSNorm).parameters
    assert list(params)[:5] == ["normalized_shape", "eps", "elementwise_affine", "device", "dtype"]
    assert params["normalized_shape"].default is inspect.Parameter.empty and "_unknown" not in params


def test_return_rstd_takes_numpy_bools_as_eps_takes_numpy_numbers():
    import numpy as np

    from ascend_rmsnorm import rms_norm

    x = torch.ones(2, 8)
    assert isinstance(rms_norm(x, return_rstd=np.True_), tuple)
    assert isinstance(rms_norm(x, return_rstd=np.False_), torch.Tensor)
    assert len(ascend_rmsnorm.add_rms_norm(x, x, return_rstd=np.True_)) == 3
    with pytest.raises(TypeError, match=r"^add_rms_norm: return_rstd must be a bool, got builtins\.str"):
        ascend_rmsnorm.add_rms_norm(x, x, return_rstd="no")  # a string would be true: 3 outputs, not 2


def test_eps_zero_on_a_tiny_row_gives_what_the_readme_says():
    """The README's warning about eps=0, as stated there: a bf16 row of 3e-20s gives y = -inf (the
    Newton steps on a subnormal mean square, docs/design.md §3 item 2) where F.rms_norm gives 1.0;
    any normal eps > 0 gives a finite row."""
    x = torch.full((2, 8), 3e-20).to(torch.bfloat16)
    assert bool(torch.isneginf(rms_norm(x, None, 0.0)).all())
    assert torch.nn.functional.rms_norm(x, (8,), None, 0.0).float().tolist() == [[1.0] * 8] * 2
    assert bool(torch.isfinite(rms_norm(x, None, 1e-6)).all())


def test_a_backend_forced_by_the_environment_is_named_when_it_cannot_run_the_tensor(monkeypatch):
    """ASCEND_RMSNORM_BACKEND=npu set for a job, then a CPU tensor: the error says the backend came
    from the variable (the call itself asked for nothing), so the user knows where to look."""
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "npu")
    with pytest.raises(ValueError, match=r"backend 'npu' \(from ASCEND_RMSNORM_BACKEND\) needs tensors on an NPU"):
        rms_norm(torch.ones(2, 8))
    with pytest.raises(ValueError, match=r"backend 'npu' needs tensors on an NPU; x is on cpu$"):
        rms_norm(torch.ones(2, 8), backend="npu")
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "emu")
    with pytest.raises(ValueError, match=r"the emu backend \(from ASCEND_RMSNORM_BACKEND\) runs on CPU tensors"):
        ascend_rmsnorm.add_rms_norm(torch.ones(2, 8, device="meta"), torch.ones(2, 8, device="meta"))


def test_warmup_prepares_what_the_calls_will_use_the_environment_included(monkeypatch):
    """README: ``warmup()`` builds or loads the kernels this host needs now and raises if they cannot be
    had. What the calls need follows ``ASCEND_RMSNORM_BACKEND`` as ``rms_norm(backend=None)`` does: with
    it set to emu the emu kernels, with it set to torch on an NPU host nothing (no build, no error)."""
    from ascend_rmsnorm.backends import npu

    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "emu")
    assert ascend_rmsnorm.warmup().startswith("emu kernels loaded from ")

    def no_npu_build():
        raise AssertionError("warmup built the npu kernels that ASCEND_RMSNORM_BACKEND=torch never uses")

    monkeypatch.setattr(npu, "npu_present", lambda: True)
    monkeypatch.setattr(npu, "library", no_npu_build)
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "torch")
    assert ascend_rmsnorm.warmup() == "nothing to build: the torch path needs no kernels"
    assert ascend_rmsnorm.warmup("emu").startswith("emu kernels loaded from ")  # an argument wins, as in rms_norm
