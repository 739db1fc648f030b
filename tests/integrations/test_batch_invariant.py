"""``batch_invariant_mode()``: aten::rms_norm (F.rms_norm, nn.RMSNorm) and torch_npu's RMSNorm ops
run this package's op inside the mode, and nothing changes outside it (docs/design.md §2)."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch
import torch.nn.functional as F

import ascend_rmsnorm
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.integrations import batch_invariant as bi
from ascend_rmsnorm.integrations import batch_invariant_mode

from helpers import DTYPES, assert_same_bits, make_input, make_weight, same_bits

F32_EPS = torch.finfo(torch.float32).eps


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_f_rms_norm_and_nn_rmsnorm_run_ours_inside_and_torchs_outside(dtype, monkeypatch):
    calls = []
    real_forward = torch_backend.forward
    monkeypatch.setattr(torch_backend, "forward", lambda *a, **k: calls.append(1) or real_forward(*a, **k))
    x = make_input(9, 300, dtype, seed=1)
    w = make_weight(300, dtype)
    before = F.rms_norm(x, (300,), w, 1e-5)
    module = torch.nn.RMSNorm(300, eps=1e-5, dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(w)
    module_before = module(x)
    ours = ascend_rmsnorm.rms_norm(x, w, 1e-5)
    calls.clear()
    with batch_invariant_mode():
        assert bi.is_enabled()
        assert_same_bits(F.rms_norm(x, (300,), w, 1e-5), ours, "F.rms_norm inside")
        assert_same_bits(torch.rms_norm(x, (300,), w, 1e-5), ours, "torch.rms_norm inside")
        assert_same_bits(module(x), ours, "nn.RMSNorm inside")
        assert_same_bits(F.rms_norm(x, (300,), None, None), ascend_rmsnorm.rms_norm(x, None, F32_EPS), "eps=None")
        with torch.inference_mode():
            assert_same_bits(F.rms_norm(x, (300,), w, 1e-5), ours, "inference_mode")
    assert len(calls) == 6  # every call inside ran this package's torch backend (5 + 1 direct)
    assert not bi.is_enabled()
    assert_same_bits(F.rms_norm(x, (300,), w, 1e-5), before, "F.rms_norm after")
    assert_same_bits(module(x), module_before, "nn.RMSNorm after")
    assert len(calls) == 6  # none after


def test_autocast_casts_inside_the_mode_as_it_does_outside(monkeypatch):
    """CUDA's and XPU's autocast run aten::rms_norm under the fp32 policy; the mode's torch.rms_norm,
    which calls the package itself, applies it too: a 16-bit F.rms_norm under autocast is float32 (and
    the package's fp32 bits) inside the mode as outside. Played on the CPU with an fp32-policy
    AutocastCPU kernel registered for the test."""

    def fp32_policy(x, shape, w=None, eps=None):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
            return torch.ops.aten.rms_norm(x.float(), shape, None if w is None else w.float(), eps)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("rms_norm", fp32_policy, "AutocastCPU")
    try:
        x, w = make_input(5, 64, torch.bfloat16), make_weight(64, torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert F.rms_norm(x, (64,), w, 1e-6).dtype == torch.float32  # torch's, outside the mode
            with batch_invariant_mode():
                inside = F.rms_norm(x, (64,), w, 1e-6)
        assert_same_bits(inside, ascend_rmsnorm.rms_norm(x.float(), w.float(), 1e-6), "autocast inside")
        want = ascend_rmsnorm.rms_norm(x, w, 1e-6)
        # torch's own norm gives these very bits for this input: only the calls show whose norm ran
        calls = []
        real_forward = torch_backend.forward
        monkeypatch.setattr(torch_backend, "forward", lambda *a, **k: calls.append(a[0].dtype) or real_forward(*a, **k))
        with batch_invariant_mode():  # without autocast: the 16-bit inputs as they are
            assert_same_bits(F.rms_norm(x, (64,), w, 1e-6), want, "no autocast")
        assert calls == [torch.bfloat16], calls
    finally:
        lib._destroy()
    # an autocast without an aten::rms_norm kernel (the CPU's, as torch ships it) casts nothing, in or out
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.rms_norm(x, (64,), w, 1e-6).dtype == torch.bfloat16
        with batch_invariant_mode():
            assert_same_bits(F.rms_norm(x, (64,), w, 1e-6), want, "CPU autocast inside the mode")


def test_autograd_several_trailing_dims_and_what_we_do_not_take():
    x = make_input(12, 64, torch.bfloat16, seed=2).view(3, 4, 8, 8).requires_grad_()
    w = make_weight(64, torch.float32).view(8, 8).requires_grad_()
    dy = make_input(12, 64, torch.bfloat16, seed=3).view(3, 4, 8, 8)
    x2 = x.detach().reshape(12, 64).requires_grad_()
    w2 = w.detach().reshape(64).requires_grad_()
    want_y = ascend_rmsnorm.rms_norm(x2, w2, 1e-6)
    want = torch.autograd.grad(want_y, (x2, w2), dy.reshape(12, 64))
    x64 = torch.randn(5, 16, dtype=torch.float64)
    f64_before = F.rms_norm(x64, (16,))
    with batch_invariant_mode():
        y = F.rms_norm(x, (8, 8), w, 1e-6)
        gx, gw = torch.autograd.grad(y, (x, w), dy)
        assert_same_bits(F.rms_norm(x64, (16,)), f64_before, "float64: torch's own")
        with pytest.raises(RuntimeError, match="normalized_shape"):
            F.rms_norm(x, (4, 8), None, 1e-6)
    assert_same_bits(y.reshape(12, 64), want_y, "y")
    assert_same_bits(gx.reshape(12, 64), want[0], "dx")
    assert_same_bits(gw.reshape(64), want[1], "dw")


def test_inputs_the_package_does_not_take_get_torchs_own_answer_inside_the_mode():
    """A weight that is not floating (int, bool, complex) or of another shape, a complex x or a sparse x: torch's own
    composite answers inside the mode, as outside (the same value, or the same error), not the
    package's TypeError."""
    x = make_input(3, 8, torch.float32, seed=4)
    cases = (
        (x, torch.ones(8, dtype=torch.int32)),
        (x, torch.ones(8, dtype=torch.bool)),
        (x, torch.ones(8, dtype=torch.complex64)),
        (x.to(torch.complex64), None),
        (x.to_sparse(), None),
        (x, torch.ones(4)),
    )  # the last: a weight of another shape, torch's own error

    def call(xx, w):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's own warnings for a complex weight
                return F.rms_norm(xx, (8,), w, 1e-6)
        except Exception as err:  # noqa: BLE001 - compared with the one outside the mode
            return err

    for xx, w in cases:
        what = f"x {xx.dtype} {xx.layout}, weight {None if w is None else w.dtype}"
        outside = call(xx, w)
        with batch_invariant_mode():
            inside = call(xx, w)
        if isinstance(outside, Exception):
            assert (type(inside), str(inside)) == (type(outside), str(outside)), what
        else:
            assert isinstance(inside, torch.Tensor) and torch.equal(inside, outside), (what, inside)


def test_an_empty_normalized_shape_is_torchs_inside_the_mode():
    """H = 0 has nothing to normalise: torch's answer (an empty result), not the package's ValueError."""
    x = torch.zeros(3, 0)
    with batch_invariant_mode():
        assert F.rms_norm(x, (0,)).shape == (3, 0) and F.rms_norm(torch.zeros(2, 4, 0), (4, 0)).shape == (2, 4, 0)


def test_a_normalized_shape_of_no_dims_is_refused_inside_the_mode_as_outside():
    """torch refuses ``normalized_shape=()`` (RuntimeError "at least 1-dimensional"); inside the mode
    F.rms_norm, nn.RMSNorm and the aten op refuse it too, rather than hand it to torch's private
    ``_fused_rms_norm``, which normalises the whole last dim and returns a value torch never gives."""
    x = torch.tensor([[3.0, -4.0]])
    calls = (
        lambda: F.rms_norm(x, (), None, 1e-6),
        lambda: torch.nn.RMSNorm(())(x),
        lambda: torch.ops.aten.rms_norm(x, [], None, 1e-6),
    )
    for call in calls:
        with pytest.raises(RuntimeError, match="at least 1-dimensional") as outside:
            call()
        with batch_invariant_mode(), pytest.raises(RuntimeError, match="at least 1-dimensional") as inside:
            call()
        assert str(inside.value) == str(outside.value)


def test_an_eps_the_package_refuses_raises_inside_the_mode_where_torch_computes():
    """README: inside the mode a negative, float32-subnormal or tensor eps raises the package's error
    (torch computes a norm with each of them outside it): not torch's own norm, silently."""
    x = make_input(3, 8, torch.float32, seed=7)
    for eps, exc, words in ((-1e-6, ValueError, ">= 0"), (1e-45, ValueError, "smallest normal"),
                            (torch.tensor(1e-6), TypeError, "pass .item()")):  # fmt: skip
        assert F.rms_norm(x, (8,), None, eps).shape == x.shape  # torch's own takes it
        with batch_invariant_mode(), pytest.raises(exc, match="eps") as info:
            F.rms_norm(x, (8,), None, eps)
        assert words in str(info.value)


def test_modes_nest_and_enable_disable_pair():
    x = make_input(3, 40, torch.float32, seed=4)
    torch_y = F.rms_norm(x, (40,), None, 1e-6)
    ours = ascend_rmsnorm.rms_norm(x, None, 1e-6)
    with batch_invariant_mode():
        with batch_invariant_mode(backend="torch"):
            assert bi._backend() == "torch"
            assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), ours, "inner")
        assert bi._backend() is None
        assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), ours, "outer after the inner one left")
    assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), torch_y, "after both")
    bi.enable()
    try:
        assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), ours, "enable()")
    finally:
        bi.disable()
    assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), torch_y, "after disable()")
    with pytest.raises(RuntimeError, match="without a matching enable"):
        bi.disable()
    with pytest.raises(ValueError, match="backend"):
        bi.enable(backend="gpu")
    assert not bi.is_enabled()
    with pytest.raises(ZeroDivisionError), batch_invariant_mode():  # an error in the block leaves the mode too
        raise ZeroDivisionError
    assert not bi.is_enabled()
    assert_same_bits(F.rms_norm(x, (40,), None, 1e-6), torch_y, "after an error in the block")


@pytest.mark.parametrize(
    "backend, exc, words",
    [("gpu", ValueError, "unknown backend 'gpu'"), (3, TypeError, "backend must be a str or None")],
)
def test_a_bad_backend_is_named_with_the_entry_that_got_it(backend, exc, words):
    """As rms_norm's, add_rms_norm's, warmup's and RMSNorm's: the error opens with the public name."""
    with pytest.raises(exc, match=f"^batch_invariant_mode: {words}"):
        with batch_invariant_mode(backend=backend):
            pass
    with pytest.raises(exc, match=f"^enable: {words}"):
        bi.enable(backend=backend)
    assert not bi.is_enabled()


def test_an_unmodified_model_gets_batch_invariant_norms_inside(threads):
    """torch's own RMSNorm of 2**17-element rows differs for a row alone and in a batch of 8 on this
    CPU (4 threads); inside the mode the same unmodified module is bitwise invariant."""
    threads(4)
    hidden = 1 << 17
    model = torch.nn.Sequential(torch.nn.RMSNorm(hidden, eps=1e-6), torch.nn.Identity())
    x = make_input(8, hidden, torch.float32, seed=61, scale_rows=False)

    def alone_vs_batch():
        batch = model(x)
        return [same_bits(model(x[i : i + 1]), batch[i : i + 1]) for i in range(8)]

    assert not all(alone_vs_batch())  # torch's own: some row changes with the batch
    with batch_invariant_mode():
        assert all(alone_vs_batch())


class _FakeTorchNpu:
    """A stand-in torch_npu module whose norms return sentinels, in sys.modules for one test."""

    def __init__(self, monkeypatch):
        self.module = types.ModuleType("torch_npu")
        self.calls = []

        def sentinel(name):
            def fn(*args, **kwargs):
                self.calls.append(name)
                return "torch_npu's own " + name

            return fn

        for name in bi.NPU_FUNCTIONS:
            setattr(self.module, name, sentinel(name))
        monkeypatch.setitem(sys.modules, "torch_npu", self.module)


def test_torch_npu_functions_are_served_with_their_conventions(monkeypatch):
    fake = _FakeTorchNpu(monkeypatch)
    originals = {n: getattr(fake.module, n) for n in bi.NPU_FUNCTIONS}
    x = make_input(6, 32, torch.bfloat16, seed=5).view(2, 3, 32)
    r = make_input(6, 32, torch.bfloat16, seed=6).view(2, 3, 32)
    w = make_weight(32, torch.bfloat16)
    with batch_invariant_mode():
        npu = sys.modules["torch_npu"]
        y, rstd = npu.npu_rms_norm(x, w)  # epsilon defaults to 1e-6, as in torch_npu
        want_y, want_rstd = ascend_rmsnorm.rms_norm(x, w, 1e-6, return_rstd=True)
        assert rstd.shape == (2, 3, 1) and rstd.dtype == torch.float32
        assert_same_bits(y, want_y, "npu_rms_norm y")
        assert_same_bits(rstd.reshape(2, 3), want_rstd, "npu_rms_norm rstd")
        y, rstd, x_out = npu.npu_add_rms_norm(x, r, w, epsilon=1e-5)
        want = ascend_rmsnorm.add_rms_norm(x, r, w, 1e-5, return_rstd=True)
        assert_same_bits(y, want[0], "npu_add_rms_norm y")
        assert_same_bits(x_out, want[1], "npu_add_rms_norm x_out")
        assert rstd.shape == (2, 3, 1)
        assert_same_bits(rstd.reshape(2, 3), want[2], "npu_add_rms_norm rstd")
        y, rstd = npu.npu_gemma_rms_norm(x, w - 1)
        assert_same_bits(y, ascend_rmsnorm.rms_norm(x, w - 1, 1e-6, casting_mode="gemma"), "gemma")
        g2 = make_weight(96, torch.bfloat16).view(3, 32)  # gamma over the last two dims
        y, rstd = npu.npu_rms_norm(x, g2)
        assert rstd.shape == (2, 1, 1)
        assert_same_bits(y.reshape(2, 96), ascend_rmsnorm.rms_norm(x.reshape(2, 96), g2.reshape(96)), "2-D gamma")
        for gamma in (w[0], w.view(2, 16), w.view(1, 1, 1, 32)):  # 0-d, not the last dims of x, more dims than x
            with pytest.raises(RuntimeError, match=r"npu_rms_norm: gamma of shape .* does not match the last dims"):
                npu.npu_rms_norm(x, gamma)
    assert fake.calls == []
    assert {n: getattr(fake.module, n) for n in bi.NPU_FUNCTIONS} == originals
    with batch_invariant_mode(), batch_invariant_mode(backend="torch"):  # nested: installed once
        assert sys.modules["torch_npu"].npu_rms_norm is bi._npu_rms_norm
    assert {n: getattr(fake.module, n) for n in bi.NPU_FUNCTIONS} == originals
    assert sys.modules["torch_npu"].npu_rms_norm(x, w) == "torch_npu's own npu_rms_norm"


def test_npu_add_rms_norm_refuses_an_x2_of_another_shape(monkeypatch):
    """x2 was reshaped to x1's shape: one of the same size but another shape, (4, 16) for (16, 4), was
    silently added element by element in memory order (wrong values, no error), and one of another size
    failed in reshape. Both say what torch_npu's AddRmsNorm requires: x1's shape."""
    _FakeTorchNpu(monkeypatch)
    x, g = torch.randn(4, 16), torch.ones(16)
    with batch_invariant_mode():
        npu = sys.modules["torch_npu"]
        for x2 in (torch.randn(16, 4), torch.randn(1, 16), torch.randn(64)):
            with pytest.raises(RuntimeError, match=r"^npu_add_rms_norm: x2 of shape .* must have x1's shape \(4, 16\)"):
                npu.npu_add_rms_norm(x, x2, g)


def test_torch_ops_npu_operators_are_overridden_and_restored(monkeypatch):
    """torch_npu registers its norms as npu:: operators; a reference taken before the mode (like
    ``from torch_npu import npu_rms_norm``) must be served too. Checked with a stand-in npu op."""
    try:
        import torch_npu  # noqa: F401

        pytest.skip("the real torch_npu is installed: its npu namespace is not ours to redefine")
    except ImportError:
        pass
    fake = _FakeTorchNpu(monkeypatch)
    lib = torch.library.Library("npu", "DEF")
    try:
        lib.define("npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)")
        # torch_npu registers its kernels in C++, which a Python kernel may override on every torch; a
        # Python one on the same key only from torch 2.9: the stand-in takes a key the mode leaves alone
        lib.impl("npu_rms_norm", lambda s, g, e=1e-6: (s * 0, s.new_zeros(s.shape[:-1] + (1,), dtype=torch.float32)),
                 "CompositeExplicitAutograd")  # fmt: skip
        op = torch.ops.npu.npu_rms_norm
        fake.module.npu_rms_norm = op
        x = make_input(5, 16, torch.float16, seed=7)
        w = make_weight(16, torch.float16)
        assert bool((op(x, w)[0] == 0).all())
        with batch_invariant_mode():
            y, rstd = op(x, w)
            assert_same_bits(y, ascend_rmsnorm.rms_norm(x, w, 1e-6), "torch.ops.npu.npu_rms_norm")
            xg = x.clone().requires_grad_()
            y, _ = op(xg, w)
            (gx,) = torch.autograd.grad(y.float().sum(), xg)
            assert gx.abs().sum() > 0
        assert bool((op(x, w)[0] == 0).all())
    finally:
        lib._destroy()


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_under_torch_compile_inside_the_mode(backend):
    """Compiled inside the mode, an unmodified nn.RMSNorm model traces to this package's op (fake
    tensors reach the override too): one graph, no breaks, the bits of eager inside the mode.
    (Inductor inside the mode: test_compile_caches.py.)"""
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.RMSNorm(256, eps=1e-6))
    x = make_input(33, 256, torch.float32, seed=8).requires_grad_()
    torch_own = model(x)
    with batch_invariant_mode():
        eager = model(x)
        assert not same_bits(eager, torch_own)  # this input tells the two norms apart
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        out = compiled(x)
        assert_same_bits(out, eager, f"compiled ({backend}) vs eager, inside the mode")
        if backend == "aot_eager":
            (g_compiled,) = torch.autograd.grad(out.sum(), x)
            (g_eager,) = torch.autograd.grad(eager.sum(), x)
            assert_same_bits(g_compiled, g_eager, "dx")
    torch._dynamo.reset()


def test_vmap_inside_the_mode_runs_ours():
    x = make_input(20, 256, torch.float32, seed=9).view(4, 5, 256)
    ours = ascend_rmsnorm.rms_norm(x, None, 1e-6)
    torch_own = F.rms_norm(x, (256,), None, 1e-6)
    assert not same_bits(ours, torch_own)
    with batch_invariant_mode():
        v = torch.vmap(lambda t: F.rms_norm(t, (256,), None, 1e-6))(x)
        v_default = torch.vmap(lambda t: torch.ops.aten.rms_norm(t, [256], None, None))(x)
    assert_same_bits(v, ours, "vmap of F.rms_norm inside the mode")
    assert_same_bits(v_default, ascend_rmsnorm.rms_norm(x), "vmap of aten::rms_norm, eps=None (float32's epsilon)")


def test_torch_func_grad_inside_the_mode():
    """Inside the mode F.rms_norm gives the package function's own gradients, bit for bit, under
    torch.func.grad and under compositions such as per-sample gradients (vmap of grad), which the
    function serves and the raw op alone does not; aten::rms_norm called directly goes through the
    registered op, whose Autograd kernel joins the transform's level."""
    x = make_input(20, 256, torch.float32, seed=10)
    w = make_weight(256, torch.float32)
    want = torch.func.grad(lambda w: ascend_rmsnorm.rms_norm(x, w, 1e-6).sum())(w)
    per_sample = torch.func.vmap(torch.func.grad(lambda x: ascend_rmsnorm.rms_norm(x, w, 1e-6).square().sum()))(x)
    with batch_invariant_mode():
        got = torch.func.grad(lambda w: F.rms_norm(x, (256,), w, 1e-6).sum())(w)
        direct = torch.func.grad(lambda w: torch.ops.aten.rms_norm(x, (256,), w, 1e-6).sum())(w)
        got_per_sample = torch.func.vmap(torch.func.grad(lambda x: F.rms_norm(x, (256,), w, 1e-6).square().sum()))(x)
    assert_same_bits(got, want, "torch.func.grad of F.rms_norm inside the mode")
    assert_same_bits(direct, want, "torch.func.grad of aten::rms_norm inside the mode")
    assert_same_bits(got_per_sample, per_sample, "vmap(grad) of F.rms_norm inside the mode")
