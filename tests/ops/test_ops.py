"""The registered ops ``torch.ops.ascend_rmsnorm.*`` (docs/design.md §2): schemas, opcheck, fake tensors,
make_fx, export, torch.func, forward-mode AD, double backward, and the routing of the public calls.

Bitwise claims compare raw bits (helpers.bits); "the plain call" is the eager public function.
"""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import ascend_rmsnorm
from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import choice
from ascend_rmsnorm.backends import torch as torch_backend

from helpers import DTYPES, assert_same_bits, emu_kernel, kernels_run_on, make_input, make_weight

OPS = torch.ops.ascend_rmsnorm
NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
#: opcheck's schema test and forward-mode AD's decompositions use TorchScript, which warns it is deprecated.
#: The filters here name no category: torch 2.13 warns with a DeprecationWarning, 2.14 a FutureWarning.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")


def test_schemas_carry_modes_offset_residual_and_masks():
    fwd = str(OPS.rms_norm.default._schema)
    add = str(OPS.add_rms_norm.default._schema)
    bwd = str(OPS.rms_norm_backward.default._schema)
    for schema in (fwd, add, bwd):
        assert "str casting_mode, float offset" in schema and "str backend" in schema
    assert fwd.endswith("-> (Tensor y, Tensor rstd)")
    assert "Tensor residual," in add and add.endswith("-> (Tensor y, Tensor residual_out, Tensor rstd)")
    assert "Tensor? grad_residual_out" in bwd and "bool need_dx, bool need_dw" in bwd
    for op in (OPS.rms_norm, OPS.add_rms_norm, OPS.rms_norm_backward):
        name = op.default.name()
        for key in ("CPU", "PrivateUse1", "CUDA", "CompositeExplicitAutograd", "Autograd", "Meta"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(name, key), (name, key)
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")


# ---- opcheck: schema, fake, autograd registration, aot_dispatch (static and dynamic) ---------------

_SHAPES = ((1, 40), (0, 40), (2, 3, 40))
_MODES = (("fp32", "same"), ("llama", "float32"), ("gemma", None))
#: (need_dx, need_dw, with grad_residual_out) of the backward op, rotated through the cases.
_MASKS = ((True, True, False), (True, False, True), (False, True, False))


def _opcheck_cases():
    """3 dtypes x 3 shapes (1 row, an empty batch, 3-D), the modes and backward masks rotated."""
    cases = []
    for i, dtype in enumerate(DTYPES):
        for j, shape in enumerate(_SHAPES):
            mode, w_kind = _MODES[(i + j) % 3]
            mask = _MASKS[(i + 2 * j) % 3]
            cases.append(pytest.param(dtype, shape, mode, w_kind, mask, id=f"{NAME[dtype]}-{shape}-{mode}-w{w_kind}"))
    return cases


@pytest.mark.parametrize("dtype, shape, mode, w_kind, mask", _opcheck_cases())
def test_opcheck_every_op(dtype, shape, mode, w_kind, mask):
    hidden = shape[-1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    x = make_input(rows, hidden, dtype, seed=1).view(shape).requires_grad_()
    res = make_input(rows, hidden, dtype, seed=2).view(shape).requires_grad_()
    w = None if w_kind is None else make_weight(hidden, dtype if w_kind == "same" else torch.float32)
    if w is not None:
        w.requires_grad_()
    offset = 1.0 if mode == "gemma" else 0.0
    torch.library.opcheck(OPS.rms_norm.default, (x, w, 1e-6, mode, offset, "torch"))
    torch.library.opcheck(OPS.add_rms_norm.default, (x, res, w, 1e-6, mode, offset, "torch"))
    y, rstd = ascend_rmsnorm.rms_norm(x.detach(), w, casting_mode=mode, return_rstd=True)
    dy = make_input(rows, hidden, y.dtype, seed=3).view(shape)
    need_dx, need_dw, with_gro = mask
    gro = res.detach() if with_gro else None
    args = (dy, x.detach(), w, rstd, gro, 1e-6, mode, offset, need_dx, need_dw, "torch")
    torch.library.opcheck(OPS.rms_norm_backward.default, args)


def test_opcheck_non_contiguous_input():
    x = make_input(40, 6, torch.bfloat16, seed=4).t().requires_grad_()  # [6, 40], strides (1, 6)
    w = make_weight(40, torch.bfloat16).requires_grad_()
    torch.library.opcheck(OPS.rms_norm.default, (x, w, 1e-5, "fp32", 0.0, "torch"))


# ---- the public call and the op give the same bits, whatever route a call takes --------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fast_path_op_path_and_autograd_path_agree(dtype):
    x = make_input(9, 300, dtype, seed=5)
    w = make_weight(300, dtype)
    fast = ascend_rmsnorm.rms_norm(x, w, 1e-6, return_rstd=True)
    via_op = OPS.rms_norm(x, w, 1e-6, "fp32", 0.0, "auto")
    with_grad = ascend_rmsnorm.rms_norm(x.clone().requires_grad_(), w, 1e-6, return_rstd=True)
    assert with_grad[0].grad_fn is not None
    for a, b, c, what in zip(fast, via_op, with_grad, ("y", "rstd")):
        assert_same_bits(a, b, what + " fast vs op")
        assert_same_bits(a, c.detach(), what + " fast vs autograd")


@pytest.mark.parametrize("backend", ("emu", "torch", "auto"))
def test_the_fast_path_runs_the_backend_asked_for(backend):
    """Plain eager CPU tensors take the entries' fast path (the chooser called directly, no op): "emu"
    launches the emu kernels there, "torch" and "auto" the torch path. Both give the same bits, so which
    kernel launched is what tells them apart."""
    from ascend_rmsnorm import ops
    from ascend_rmsnorm.backends import emu

    emu.library()
    x = make_input(4, 64, torch.float32, seed=7)
    w = make_weight(64, torch.float32)
    assert ops._plain_eager(x, x, w)
    for name, call in (
        ("rms_norm", lambda: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend=backend)),
        ("add_rms_norm", lambda: ascend_rmsnorm.add_rms_norm(x, x, w, 1e-6, backend=backend)),
    ):
        emu.reset_stats()
        call()
        ran = emu.peak_ub(emu_kernel("fwd", torch.float32)) > 0
        assert ran == (backend == "emu"), f"{name}, backend={backend!r}: the emu kernel ran: {ran}"


def test_modes_and_a_weight_subclass_see_the_op_not_the_fast_path():
    """The entries skip the dispatcher only where nothing could see the call: under a TorchDispatchMode,
    a TorchFunctionMode, or with a weight of a tensor subclass, the registered op is what runs (a
    logging or tracing mode records it; a subclass weight gets its turn), with the same bits."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    def record(func, args, kwargs):
        seen.append(str(func))
        return func(*args, **(kwargs or {}))

    class DispatchLog(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return record(func, args, kwargs)

    class FunctionLog(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return record(func, args, kwargs)

    class LoggedWeight(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = make_input(3, 64, torch.float32, seed=6)
    w = make_weight(64, torch.float32)
    want_y, (want_y2, want_r) = ascend_rmsnorm.rms_norm(x, w, 1e-6), ascend_rmsnorm.add_rms_norm(x, x, w, 1e-6)
    for how in ("dispatch mode", "function mode", "weight subclass"):
        seen.clear()
        ctx = {"dispatch mode": DispatchLog(), "function mode": FunctionLog()}.get(how, contextlib.nullcontext())
        ww = w.as_subclass(LoggedWeight) if how == "weight subclass" else w
        with ctx:
            y = ascend_rmsnorm.rms_norm(x, ww, 1e-6)
            y2, r = ascend_rmsnorm.add_rms_norm(x, x, ww, 1e-6)
        for op in ("ascend_rmsnorm.rms_norm.default", "ascend_rmsnorm.add_rms_norm.default"):
            assert op in seen, (how, op, seen)
        for got, want, what in ((y, want_y, "y"), (y2, want_y2, "add y"), (r, want_r, "residual_out")):
            assert_same_bits(got.as_subclass(torch.Tensor), want, f"{what} under a {how}")


def test_direct_op_call_has_autograd():
    x = make_input(7, 64, torch.float32, seed=6).requires_grad_()
    w = make_weight(64, torch.float32).requires_grad_()
    dy = make_input(7, 64, torch.float32, seed=7)
    gx, gw = torch.autograd.grad(OPS.rms_norm(x, w, 1e-6, "fp32", 0.0, "torch")[0], (x, w), dy)
    ex, ew = torch.autograd.grad(ascend_rmsnorm.rms_norm(x, w, 1e-6), (x, w), dy)
    assert_same_bits(gx, ex, "dx")
    assert_same_bits(gw, ew, "dw")
    # one input requiring grad is enough for the Autograd kernel: the weight alone, the residual alone
    (gw_only,) = torch.autograd.grad(OPS.rms_norm(x.detach(), w, 1e-6, "fp32", 0.0, "torch")[0], (w,), dy)
    assert_same_bits(gw_only, ew, "dw, only the weight requiring grad")
    r = make_input(7, 64, torch.float32, seed=8).requires_grad_()
    (gr,) = torch.autograd.grad(OPS.add_rms_norm(x.detach(), r, None, 1e-6, "fp32", 0.0, "torch")[0], (r,), dy)
    (er,) = torch.autograd.grad(ascend_rmsnorm.add_rms_norm(x.detach(), r, None, 1e-6)[0], (r,), dy)
    assert_same_bits(gr, er, "d(residual), only the residual requiring grad")


@pytest.mark.parametrize("eps", (-0.5, float("nan"), float("inf"), 1e-40))
@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_the_op_called_directly_refuses_an_eps_rms_norm_refuses(backend, eps):
    """rms_norm checks eps before the op; the op, called directly, checks it too: with a negative eps
    the torch path gave rstd NaN and the kernels +0 (the rstd chain's +inf test on a negative a's guess)."""
    x = torch.full((2, 8), 1e-3)
    with pytest.raises(ValueError, match="^ascend_rmsnorm::rms_norm: eps must be finite and >= 0"):
        torch.ops.ascend_rmsnorm.rms_norm(x, None, eps, "fp32", 0.0, backend)
    with pytest.raises(ValueError, match="^ascend_rmsnorm::add_rms_norm: eps must be finite and >= 0"):
        torch.ops.ascend_rmsnorm.add_rms_norm(x, x, None, eps, "fp32", 0.0, backend)


def test_the_op_called_directly_says_why_a_subnormal_eps_is_refused():
    """contract.check_eps is the one eps check: the op called directly gives rms_norm's reason (a zero
    row's rstd), not only the rule."""
    x = torch.full((2, 8), 1e-3)
    with pytest.raises(ValueError, match="once rounded to float32.*a row of zeros would get an rstd of NaN"):
        torch.ops.ascend_rmsnorm.rms_norm(x, None, 1e-40, "fp32", 0.0, "torch")


def _op_shape_cases():
    """Arguments of the ops called directly whose shapes disagree with x: the kernels read as many
    elements as x's shape says (past a short weight's, dy's or rstd's end), the torch path broadcast;
    and the scalars rms_norm refuses."""
    x = torch.randn(2, 8)
    big = torch.arange(1.0, 9.0)  # a short weight as a view: the kernels read big[4:] past its end
    rstd = torch.ones(2)
    return {
        "weight (4,)": (OPS.rms_norm, (x, big[:4], 1e-6, "fp32", 0.0), "weight"),
        "weight (1,)": (OPS.rms_norm, (x, torch.ones(1), 1e-6, "fp32", 0.0), "weight"),
        "weight int": (OPS.rms_norm, (x, torch.ones(8, dtype=torch.int32), 1e-6, "fp32", 0.0), "weight"),
        "add weight (1,)": (OPS.add_rms_norm, (x, x, torch.ones(1), 1e-6, "fp32", 0.0), "weight"),
        "x int": (OPS.rms_norm, (x.long(), None, 1e-6, "fp32", 0.0), "x has dtype"),
        "x H=0": (OPS.rms_norm, (torch.randn(2, 0), None, 1e-6, "fp32", 0.0), "hidden size"),
        "x 0-d": (OPS.rms_norm, (torch.tensor(1.0), None, 1e-6, "fp32", 0.0), "0-d"),
        "bwd dy (1, 8)": (
            OPS.rms_norm_backward,
            (x[:1], x, None, rstd, None, 1e-6, "fp32", 0.0, True, False),
            "dy",
        ),
        "bwd dy int": (
            OPS.rms_norm_backward,
            (x.int(), x, None, rstd, None, 1e-6, "fp32", 0.0, True, False),
            "dy must be a floating tensor",
        ),
        "bwd rstd int": (
            OPS.rms_norm_backward,
            (x, x, None, rstd.int(), None, 1e-6, "fp32", 0.0, True, False),
            "rstd must hold one float per row",
        ),
        "bwd rstd (1,)": (
            OPS.rms_norm_backward,
            (x, x, None, rstd[:1], None, 1e-6, "fp32", 0.0, True, False),
            "rstd",
        ),
        "bwd weight (4,)": (
            OPS.rms_norm_backward,
            (x, x, big[:4], rstd, None, 1e-6, "fp32", 0.0, True, True),
            "weight",
        ),
        "add residual fp16": (OPS.add_rms_norm, (x, x.half(), None, 1e-6, "fp32", 0.0), "residual"),
        "casting_mode": (OPS.rms_norm, (x, None, 1e-6, "fp16", 0.0), "casting_mode must be one of"),
        "gemma offset": (OPS.rms_norm, (x, None, 1e-6, "gemma", 0.5), "gemma"),
        "bwd eps": (OPS.rms_norm_backward, (x, x, None, rstd, None, -1.0, "fp32", 0.0, True, False), "eps"),
        "offset nan": (OPS.rms_norm, (x, torch.ones(8), 1e-6, "fp32", math.nan), "offset must be finite"),
        "add offset inf": (OPS.add_rms_norm, (x, x, torch.ones(8), 1e-6, "llama", math.inf), "offset must be finite"),
        "offset 1e39": (OPS.rms_norm, (x, torch.ones(8), 1e-6, "fp32", 1e39), "offset must be finite"),
        "bwd offset nan": (
            OPS.rms_norm_backward,
            (x, x, torch.ones(8), rstd, None, 1e-6, "fp32", math.nan, True, True),
            "offset must be finite",
        ),
    }


@pytest.mark.parametrize("backend", ("torch", "emu"))
@pytest.mark.parametrize("case", list(_op_shape_cases()))
def test_the_op_called_directly_refuses_arguments_that_do_not_fit_x(case, backend):
    """The registered ops are public (README: torch.ops.ascend_rmsnorm.*) and reach the kernels with
    no check from rms_norm: a weight, dy or rstd shorter than x's shape says was read past its end by
    the kernels (garbage, or a fault on the NPU) and broadcast by the torch path. They are refused."""
    op, args, what = _op_shape_cases()[case]
    with pytest.raises((ValueError, TypeError), match=f"^{op._qualified_op_name}: .*{what}"):  # named for the op
        op(*args, backend)


def _op_device_cases():
    """Tensor arguments of the ops called directly that are on another device than x. Dispatch picks
    one device's implementation for all of them (an NPU x with a CPU residual reaches the NPU kernels),
    which would hand the kernels the other device's address. Meta stands in for "another device" here:
    the CPU implementation is reached by redispatching to it, as dispatch would reach the NPU's."""
    x, meta = torch.randn(2, 8), "meta"
    rstd, bwd = torch.ones(2), (1e-6, "fp32", 0.0, True, False)
    return {
        "weight": (OPS.rms_norm, (x, torch.ones(8, device=meta), 1e-6, "fp32", 0.0)),
        "residual": (OPS.add_rms_norm, (x, torch.randn(2, 8, device=meta), None, 1e-6, "fp32", 0.0)),
        "dy": (OPS.rms_norm_backward, (torch.randn(2, 8, device=meta), x, None, rstd, None, *bwd)),
        "rstd": (OPS.rms_norm_backward, (x, x, None, torch.ones(2, device=meta), None, *bwd)),
        "grad_residual_out": (OPS.rms_norm_backward, (x, x, None, rstd, torch.randn(2, 8, device=meta), *bwd)),
    }


@pytest.mark.parametrize("backend", ("torch", "emu"))
@pytest.mark.parametrize("case", list(_op_device_cases()))
def test_the_op_called_directly_refuses_a_tensor_on_another_device(case, backend):
    """Every tensor the kernels read must be on x's device, as the weight's check already says: refused
    with the op's name before any backend sees it (the emu kernels got the meta tensor's null address)."""
    op, args = _op_device_cases()[case]
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    with pytest.raises(ValueError, match=f"^{op._qualified_op_name}: {case} is on meta but x is on cpu"):
        op.default.redispatch(cpu, *args, backend)


def test_add_rms_norm_grads_equal_the_two_calls_apart():
    x = make_input(12, 96, torch.bfloat16, seed=8).view(3, 4, 96).requires_grad_()
    r = make_input(12, 96, torch.bfloat16, seed=9).view(3, 4, 96).requires_grad_()
    w = make_weight(96, torch.float32).requires_grad_()
    y, r_out = ascend_rmsnorm.add_rms_norm(x, r, w, casting_mode="llama")
    loss = y.float().square().sum() + r_out.float().sum()
    fused = torch.autograd.grad(loss, (x, r, w))
    x2, r2, w2 = (t.detach().clone().requires_grad_() for t in (x, r, w))
    r_out2 = (x2.float() + r2.float()).to(torch.bfloat16)
    y2 = ascend_rmsnorm.rms_norm(r_out2, w2, casting_mode="llama")
    apart = torch.autograd.grad(y2.float().square().sum() + r_out2.float().sum(), (x2, r2, w2))
    assert_same_bits(y.detach(), y2.detach(), "y")
    for a, b, what in zip(fused, apart, ("dx", "dresidual", "dw")):
        assert_same_bits(a, b, what)


def test_empty_batch_through_the_op_with_grads():
    x = torch.empty(0, 5, 16, dtype=torch.float16, requires_grad=True)
    r = torch.empty(0, 5, 16, dtype=torch.float16, requires_grad=True)
    w = make_weight(16, torch.float32).requires_grad_()
    y, r_out, rstd = ascend_rmsnorm.add_rms_norm(x, r, w, return_rstd=True, casting_mode="llama")
    assert (y.shape, y.dtype, r_out.dtype, rstd.shape) == ((0, 5, 16), torch.float32, torch.float16, (0, 5))
    gx, gr, gw = torch.autograd.grad(y.sum() + r_out.float().sum(), (x, r, w))
    assert gx.shape == gr.shape == x.shape
    assert torch.equal(gw, torch.zeros(16)) and not torch.signbit(gw).any()


def test_meta_tensors_get_shapes_and_dtypes():
    x = torch.empty(3, 7, 64, dtype=torch.bfloat16, device="meta")
    w = torch.empty(64, dtype=torch.float32, device="meta")
    y, rstd = ascend_rmsnorm.rms_norm(x, w, casting_mode="llama", return_rstd=True)
    assert (y.device.type, y.shape, y.dtype) == ("meta", x.shape, torch.float32)
    assert (rstd.shape, rstd.dtype) == ((3, 7), torch.float32)
    y, r_out = ascend_rmsnorm.add_rms_norm(x, x, w)
    assert (y.dtype, r_out.dtype, r_out.shape) == (torch.bfloat16, torch.bfloat16, x.shape)


# ---- fake tensors, make_fx, export: they work and leave nothing behind -------------------------------


def _bits_now(x, w):
    y, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-6, return_rstd=True)
    y2, r_out = ascend_rmsnorm.add_rms_norm(x, x, w)
    return y, rstd, y2, r_out


@pytest.mark.parametrize("rows", (1, 3, 9))
def test_fake_mode_make_fx_and_export_leave_no_state(rows, monkeypatch):
    monkeypatch.setattr(torch_backend._Constants, "_by_device", {})  # as in a fresh process
    x = make_input(rows, 48, torch.float32, seed=10)
    w = make_weight(48, torch.float32)
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        y, rstd = ascend_rmsnorm.rms_norm(fx, fw, return_rstd=True)
        assert (y.shape, rstd.shape) == (x.shape, x.shape[:-1])
        g = torch.autograd.grad(ascend_rmsnorm.rms_norm(fx.requires_grad_(), fw).sum(), fx)[0]
        assert g.shape == x.shape
    after_fake = _bits_now(x, w)

    def f(x, w):
        return ascend_rmsnorm.add_rms_norm(x, x, w, casting_mode="gemma")

    for tracing_mode in ("fake", "symbolic"):
        gm = make_fx(f, tracing_mode=tracing_mode)(x, w)
        assert "ascend_rmsnorm.add_rms_norm" in gm.code
        for a, b in zip(gm(x, w), f(x, w)):
            assert_same_bits(a, b, f"make_fx {tracing_mode}")

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(w.clone())

        def forward(self, x):
            return ascend_rmsnorm.rms_norm(x, self.w, return_rstd=True)

    dims = {"x": {0: torch.export.Dim("rows", min=1, max=4096)}} if rows > 1 else None
    ep = torch.export.export(Norm(), (x,), dynamic_shapes=dims)
    exported = ep.module()
    for n in (rows, 2, 5) if rows > 1 else (1,):
        xn = make_input(n, 48, torch.float32, seed=11)
        for a, b in zip(exported(xn), ascend_rmsnorm.rms_norm(xn, w, return_rstd=True)):
            assert_same_bits(a, b, f"exported program, {n} rows")
    assert all(type(c.neg_half) is torch.Tensor for c in torch_backend._Constants._by_device.values())
    for a, b in zip(_bits_now(x, w), after_fake):
        assert_same_bits(a, b, "a real call after the tracing")


@pytest.mark.skipif(
    torch.torch_version.TorchVersion(torch.__version__) < "2.13",
    reason="torch 2.8 to 2.12 fail export of torch.func.grad through a custom op's Autograd kernel "
    "(an INTERNAL ASSERT in PythonFallbackKernel.cpp; README, Which torch)",
)
def test_export_of_torch_func_grad_records_the_forward_and_backward_ops():
    """Under torch.export (``torch.compiler.is_compiling()``) the Function's backward calls the backward op,
    whose Autograd kernel applies its Function one transform level at a time, as torch.compile's trace
    does; applying the Function at the Python level there fails export's pre-dispatch trace ("Current
    active mode ProxyTorchDispatchMode not registered"). Only the graph is checked: torch 2.13 lifts
    torch.func.grad's own tensors into the program as fake constants, for plain torch ops too, so the
    exported program cannot be run."""
    x = make_input(4, 32, torch.float32, seed=10)
    w = make_weight(32, torch.float32)

    class GradOf(torch.nn.Module):
        def forward(self, x, w):
            return torch.func.grad(lambda x, w: ascend_rmsnorm.rms_norm(x, w, 1e-6).square().sum(), (0, 1))(x, w)

    ep = torch.export.export(GradOf(), (x, w))
    targets = {str(n.target) for n in ep.graph.nodes}
    assert {"ascend_rmsnorm.rms_norm.default", "ascend_rmsnorm.rms_norm_backward.default"} <= targets


# ---- torch.func -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_func_grad_and_jacrev_give_autograd_bits(dtype):
    x = make_input(5, 32, dtype, seed=12)
    w = make_weight(32, dtype)

    def loss(x, w):
        return ascend_rmsnorm.rms_norm(x, w, 1e-6).float().square().sum()

    gx, gw = torch.func.grad(loss, argnums=(0, 1))(x, w)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(loss(xr, wr), (xr, wr))
    assert_same_bits(gx, ex, "grad x")
    assert_same_bits(gw, ew, "grad w")
    jac = torch.func.jacrev(lambda w: ascend_rmsnorm.rms_norm(x[:2], w))(w)  # [2, 32, 32]
    for i, j in ((0, 0), (1, 5), (1, 31)):
        wr = w.clone().requires_grad_()
        (row,) = torch.autograd.grad(ascend_rmsnorm.rms_norm(x[:2], wr)[i, j], wr)
        assert_same_bits(jac[i, j], row, f"jacrev row ({i}, {j})")


def test_vmap_folds_into_rows_with_the_plain_bits():
    x = make_input(24, 64, torch.bfloat16, seed=13).view(4, 6, 64)
    r = make_input(24, 64, torch.bfloat16, seed=14).view(4, 6, 64)
    w = make_weight(64, torch.bfloat16)
    got = torch.func.vmap(lambda x: ascend_rmsnorm.rms_norm(x, w, 1e-6, return_rstd=True), in_dims=1)(x)
    want = ascend_rmsnorm.rms_norm(x.transpose(0, 1), w, 1e-6, return_rstd=True)
    for a, b in zip(got, want):
        assert_same_bits(a, b, "vmap over dim 1")
    got = torch.func.vmap(lambda r: ascend_rmsnorm.add_rms_norm(x[0], r, w))(r)  # only residual batched
    want = ascend_rmsnorm.add_rms_norm(x[0].expand(4, 6, 64), r, w)
    for a, b in zip(got, want):
        assert_same_bits(a, b, "vmap, residual batched")
    ws = torch.stack([w, w * 2, w - 1])  # a batched weight: one call per weight
    got = torch.func.vmap(lambda w: ascend_rmsnorm.rms_norm(x[0], w))(ws)
    for i in range(3):
        assert_same_bits(got[i], ascend_rmsnorm.rms_norm(x[0], ws[i]), f"vmap over weight {i}")
    got = torch.func.vmap(lambda w: ascend_rmsnorm.add_rms_norm(x[0], r[0], w))(ws)  # add's batched weight too
    for i in range(3):
        for a, b in zip(got, ascend_rmsnorm.add_rms_norm(x[0], r[0], ws[i])):
            assert_same_bits(a[i], b, f"add_rms_norm, vmap over weight {i}")
    # and dx alone under a batched weight (the backward op's own vmap rule, dw not asked for)
    dxs = torch.func.vmap(torch.func.grad(lambda x, w: ascend_rmsnorm.rms_norm(x, w).float().sum()))(x[:3], ws)
    for i in range(3):
        xi = x[i].clone().requires_grad_()
        (want,) = torch.autograd.grad(ascend_rmsnorm.rms_norm(xi, ws[i]).float().sum(), xi)
        assert_same_bits(dxs[i], want, f"dx, vmap over weight {i}")


def test_per_sample_grads_with_a_weight_that_needs_grad():
    """vmap(grad) over samples: dw per sample equals the plain per-sample backward."""
    x = make_input(6, 32, torch.float32, seed=15).view(3, 2, 32)
    w = make_weight(32, torch.float32)

    def loss(w, xs):
        return ascend_rmsnorm.rms_norm(xs, w).square().sum()

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(w, x)
    for i in range(3):
        wr = w.clone().requires_grad_()
        (want,) = torch.autograd.grad(loss(wr, x[i]), wr)
        assert_same_bits(per_sample[i], want, f"sample {i}")


def _textbook64(x, w, eps, offset=0.0, residual=None):
    h = x.double() if residual is None else x.double() + residual.double()
    y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
    return y * (w.double() + offset) if w is not None else y


def _rel(got, want):
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("mode, offset", (("fp32", 0.0), ("gemma", 1.0)))
def test_forward_mode_ad_is_correct(mode, offset):
    x = make_input(4, 40, torch.float32, seed=16)
    r = make_input(4, 40, torch.float32, seed=17)
    w = make_weight(40, torch.float32)
    tx, tr, tw = (torch.randn_like(t) for t in (x, r, w))
    _, got = torch.func.jvp(lambda x, w: ascend_rmsnorm.rms_norm(x, w, 1e-6, casting_mode=mode), (x, w), (tx, tw))
    primals, tangents = (x.double(), w.double()), (tx.double(), tw.double())
    _, want = torch.func.jvp(lambda x, w: _textbook64(x, w, 1e-6, offset), primals, tangents)
    assert _rel(got, want) < 1e-5
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, tx)
        dual_r = torch.autograd.forward_ad.make_dual(r, tr)
        y, _ = ascend_rmsnorm.add_rms_norm(dual, dual_r, w, 1e-6, casting_mode=mode)
        tangent = torch.autograd.forward_ad.unpack_dual(y).tangent
    _, want = torch.func.jvp(
        lambda x, r: _textbook64(x, w, 1e-6, offset, residual=r), (x.double(), r.double()), (tx.double(), tr.double())
    )
    assert tangent is not None and _rel(tangent, want) < 1e-5


def test_forward_mode_ad_with_a_tangent_for_the_weight_only_is_correct():
    """Only the weight has a tangent (fine-tuning a norm's scale, say): x's and the residual's tangents are
    absent, not zero tensors, and the tangent of y is x_hat * w_t alone, for rms_norm and add_rms_norm."""
    x = make_input(4, 40, torch.float32, seed=19)
    r = make_input(4, 40, torch.float32, seed=20)
    w = make_weight(40, torch.float32)
    tw = torch.randn_like(w)
    _, got = torch.func.jvp(lambda w: ascend_rmsnorm.rms_norm(x, w, 1e-6), (w,), (tw,))
    _, want = torch.func.jvp(lambda w: _textbook64(x.double(), w, 1e-6), (w.double(),), (tw.double(),))
    assert _rel(got, want) < 1e-5
    _, (got, got_res) = torch.func.jvp(lambda w: ascend_rmsnorm.add_rms_norm(x, r, w, 1e-6), (w,), (tw,))
    _, want = torch.func.jvp(
        lambda w: _textbook64(x.double(), w, 1e-6, residual=r.double()), (w.double(),), (tw.double(),)
    )
    assert _rel(got, want) < 1e-5
    assert torch.equal(got_res, torch.zeros_like(x))  # residual_out = x + residual has no tangent from w


def test_double_backward_matches_float64():
    x = make_input(3, 24, torch.float32, seed=18)
    w = make_weight(24, torch.float32)

    def second(fn, x, w):
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = fn(x, w)
        gx, gw = torch.autograd.grad(y.square().sum(), (x, w), create_graph=True)
        return torch.autograd.grad((gx * gx).sum() + gw.sum(), (x, w))

    got = second(lambda x, w: ascend_rmsnorm.rms_norm(x, w, 1e-6), x, w)
    want = second(lambda x, w: _textbook64(x, w, 1e-6), x.double(), w.double())
    for a, b, what in zip(got, want, ("d2/dx", "d2/dw")):
        assert _rel(a, b) < 1e-4, what
    hess = torch.func.jacrev(torch.func.jacrev(lambda x: ascend_rmsnorm.rms_norm(x, w, 1e-6).sum()))(x[0])
    want = torch.func.jacrev(torch.func.jacrev(lambda x: _textbook64(x, w, 1e-6).sum()))(x[0].double())
    assert _rel(hess, want) < 1e-4


def test_the_backward_ops_dx_is_differentiable_in_grad_residual_out_alone():
    """add_rms_norm's backward adds grad_residual_out to dx: with only that input requiring grad the op still
    records its graph (a double backward through residual_out's gradient), and that gradient is the
    identity."""
    x, w = make_input(3, 24, torch.float32, seed=22), make_weight(24, torch.float32)
    _, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-6, return_rstd=True)
    dy, u = make_input(3, 24, torch.float32, seed=23), make_input(3, 24, torch.float32, seed=25)
    gro = make_input(3, 24, torch.float32, seed=24).requires_grad_()
    dx, _ = OPS.rms_norm_backward(dy, x, w, rstd, gro, 1e-6, "fp32", 0.0, True, False, "torch")
    (g,) = torch.autograd.grad(dx, gro, u)
    assert_same_bits(g, u, "d dx / d grad_residual_out")


def test_hessian_forward_over_reverse_matches_float64():
    """torch.func.hessian is jacfwd(jacrev): forward-mode AD through the backward op."""
    x = make_input(2, 16, torch.float32, seed=19)
    w = make_weight(16, torch.float32)

    def ours(x, w):
        return ascend_rmsnorm.rms_norm(x, w, casting_mode="gemma").square().sum()

    def textbook(x, w):
        return _textbook64(x, w, 1e-6, 1.0).square().sum()

    for argnum in (0, 1):
        got = torch.func.hessian(ours, argnums=argnum)(x[:1], w)
        want = torch.func.hessian(textbook, argnums=argnum)(x[:1].double(), w.double())
        assert _rel(got, want) < 1e-4, f"hessian wrt argument {argnum}"


def test_hessian_through_the_residual_output_and_without_a_weight_matches_float64():
    """Forward-over-reverse where the backward op's tangent takes its two rarer inputs: a loss that reads
    add_rms_norm's residual_out too (the tangent of grad_residual_out joins dx's), and a norm with no
    weight (no w, no w tangent). Each y is weighted by u: the sum of y's squares alone is H whatever x (up
    to eps), whose Hessian is rounding noise."""
    x, r = make_input(1, 16, torch.float32, seed=26), make_input(1, 16, torch.float32, seed=27)
    w, u = make_weight(16, torch.float32), make_input(1, 16, torch.float32, seed=28)

    def ours(x, r):
        y, residual_out = ascend_rmsnorm.add_rms_norm(x, r, w)
        return (y * u).square().sum() + (residual_out * u).square().sum()

    def textbook(x, r):
        u64 = u.double()
        return (_textbook64(x, w, 1e-6, residual=r) * u64).square().sum() + ((x + r) * u64).square().sum()

    for argnum in (0, 1):
        got = torch.func.hessian(ours, argnums=argnum)(x, r)
        want = torch.func.hessian(textbook, argnums=argnum)(x.double(), r.double())
        assert _rel(got, want) < 1e-4, f"hessian wrt argument {argnum}"
    got = torch.func.hessian(lambda x: (ascend_rmsnorm.rms_norm(x) * u).square().sum())(x)
    want = torch.func.hessian(lambda x: (_textbook64(x, None, 1e-6) * u.double()).square().sum())(x.double())
    assert _rel(got, want) < 1e-4, "hessian without a weight"


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")  # float32 inputs, on purpose
def test_gradcheck_and_gradgradcheck_fp32():
    x = make_input(3, 8, torch.float32, seed=20, scale_rows=False).requires_grad_()
    r = make_input(3, 8, torch.float32, seed=21, scale_rows=False).requires_grad_()
    w = make_weight(8, torch.float32).requires_grad_()
    tol = {"eps": 1e-2, "atol": 5e-3, "rtol": 5e-3}  # float32: a central difference of step 1e-2
    more = {"check_forward_ad": True, "check_batched_grad": True}  # jvp, and vmap over the backward

    def gemma(x, w):
        return ascend_rmsnorm.rms_norm(x, w, casting_mode="gemma")

    assert torch.autograd.gradcheck(gemma, (x, w), **tol, **more)
    assert torch.autograd.gradcheck(lambda x, r, w: ascend_rmsnorm.add_rms_norm(x, r, w), (x, r, w), **tol, **more)
    assert torch.autograd.gradgradcheck(lambda x, w: ascend_rmsnorm.rms_norm(x, w, 1e-6), (x, w), **tol)


# ---- backends through the device keys -----------------------------------------------------------------


def test_kernel_hidden_limit_goes_through_choice(monkeypatch):
    from types import SimpleNamespace

    from ascend_rmsnorm.backends.kernel import MAX_HIDDEN

    npu_like = SimpleNamespace(device=SimpleNamespace(type="npu", index=0), get_device=lambda: 0)
    wide = MAX_HIDDEN + 1
    for name, pick in (("emu", choice.for_cpu), ("npu", choice.for_npu)):
        with pytest.raises(ValueError, match=f"H={wide} exceeds the kernels' limit of {MAX_HIDDEN}"):
            pick(name, torch.empty(0), wide)
    with pytest.warns(RuntimeWarning, match=f"H={wide} exceeds") as record:
        assert choice.for_npu("auto", npu_like, wide) is torch_backend
        assert choice.for_npu("auto", npu_like, wide) is torch_backend
    assert len(record) == 1
    monkeypatch.setenv("ASCEND_RMSNORM_STRICT", "1")
    with pytest.raises(ValueError, match="STRICT"):
        choice.for_npu("auto", npu_like, wide)
    # the limit itself is the kernels' (inclusive): every chooser hands it to them
    kernels = object()
    monkeypatch.setattr(choice, "_npu_backend", lambda: kernels)
    assert choice.for_npu("npu", npu_like, MAX_HIDDEN) is kernels
    assert choice.for_npu("auto", npu_like, MAX_HIDDEN) is kernels
    assert choice.for_cpu("emu", torch.empty(0), MAX_HIDDEN) is choice._emu_backend()


def test_src_limit_constant_matches_the_kernel():
    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends.kernel import MAX_HIDDEN

    # the kernels report their limit (ABI 2: ascend_rmsnorm_max_hidden, kMaxHidden = 2^31 - 1)
    assert emu.library().max_hidden() == MAX_HIDDEN


def test_result_dtype_is_the_fake_dtype():
    for x_dtype in DTYPES:
        for w_dtype in (None, torch.float32, torch.float64, torch.float16):
            for mode in contract.CASTING_MODES:
                x = torch.empty(2, 8, dtype=x_dtype, device="meta")
                w = None if w_dtype is None else torch.empty(8, dtype=w_dtype, device="meta")
                y = ascend_rmsnorm.rms_norm(x, w, 1e-6, casting_mode=mode)
                assert y.dtype == contract.result_dtype(x_dtype, w_dtype, mode)


def test_emu_under_fake_mode_vmap_and_func_grad():
    """The issue's emu failures (null-pointer launches under fake tensors and vmap): fake tensors never
    reach the kernels, and vmap hands them real, folded rows."""
    from ascend_rmsnorm.backends import emu

    emu.library()
    x = make_input(6, 40, torch.float32, seed=22)
    w = make_weight(40, torch.float32)
    with FakeTensorMode() as mode:
        y = ascend_rmsnorm.rms_norm(mode.from_tensor(x), mode.from_tensor(w), backend="emu")
        assert y.shape == x.shape
    plain = ascend_rmsnorm.rms_norm(x, w, backend="emu")
    assert_same_bits(plain, ascend_rmsnorm.rms_norm(x, w, backend="torch"), "emu vs torch")
    with kernels_run_on("emu", emu_kernel("fwd", torch.float32)):
        got = torch.func.vmap(lambda r: ascend_rmsnorm.rms_norm(r, w, backend="emu"))(x.view(2, 3, 40))
    assert_same_bits(got.reshape(6, 40), plain, "vmap on emu")
    with kernels_run_on("emu", emu_kernel("bwd", torch.float32)):
        gw = torch.func.grad(lambda w: ascend_rmsnorm.rms_norm(x, w, backend="emu").sum())(w)
    wr = w.clone().requires_grad_()
    (want,) = torch.autograd.grad(ascend_rmsnorm.rms_norm(x, wr, backend="emu").sum(), wr)
    assert_same_bits(gw, want, "torch.func.grad on emu")


_F = torch.func
#: Compositions of torch.func transforms over f(x) = rms_norm(x, w) (w fixed), each vs float64.
_COMPOSITIONS = {
    "grad": lambda f, x: _F.grad(lambda x: f(x).square().sum())(x),
    "grad(grad)": lambda f, x: _F.grad(lambda x: _F.grad(lambda x: f(x).square().sum())(x).sum())(x),
    "jacrev(jacrev)": lambda f, x: _F.jacrev(_F.jacrev(lambda x: f(x).square().sum()))(x[0]),
    "hessian": lambda f, x: _F.hessian(lambda x: f(x).square().sum())(x[0]),
    "vmap(grad)": lambda f, x: _F.vmap(_F.grad(lambda x: f(x).square().sum()))(x),
    "grad(vmap)": lambda f, x: _F.grad(lambda x: _F.vmap(f)(x).square().sum())(x),
    "jvp": lambda f, x: _F.jvp(f, (x,), (torch.ones_like(x),))[1],
    "jvp(grad)": lambda f, x: _F.jvp(_F.grad(lambda x: f(x).square().sum()), (x,), (torch.ones_like(x),))[1],
    "grad(jvp)": lambda f, x: _F.grad(lambda x: _F.jvp(f, (x,), (torch.ones_like(x),))[1].sum())(x),
    # functionalize has no rule for an autograd.Function: the functions must take the op there
    "functionalize": lambda f, x: _F.functionalize(f)(x),
    "grad(functionalize)": lambda f, x: _F.grad(_F.functionalize(lambda x: f(x).square().sum()))(x),
    "vmap(functionalize)": lambda f, x: _F.vmap(_F.functionalize(f))(x),
    "jvp(functionalize)": lambda f, x: _F.jvp(_F.functionalize(f), (x,), (torch.ones_like(x),))[1],
    # inside functionalize the functions take the raw op, and fail where it does (README, torch.func)
    "functionalize(grad)": lambda f, x: _F.functionalize(_F.grad(lambda x: f(x).square().sum()))(x),
    "vmap(grad(functionalize))": lambda f, x: _F.vmap(_F.grad(_F.functionalize(lambda x: f(x).square().sum())))(x),
}
#: The compositions the functions are known to fail, each with the words the README's torch.func item says it in.
_FUNCTIONS_FAIL = {
    "functionalize(grad)": "`functionalize` around `grad`",
    "vmap(grad(functionalize))": "`vmap(grad(functionalize(f)))` fails",
}
#: The compositions the raw op called directly fails (one transform level at a time), besides those: what
#: torch.compile, which traces the raw op, fails too, as the README's torch.func item says in these words.
_RAW_OP_FAILS = ("hessian", "vmap(grad)", "jvp(grad)")
_COMPILED_FAIL_WORDS = "(compiled per-sample gradients), `hessian` and `jvp(grad(f))` fail"


@pytest.mark.parametrize("name", list(_COMPOSITIONS))
def test_func_compositions_are_right_or_raise(name):
    """The functions: every composition right (float32 textbook math for the derivatives of the
    derivatives), but those inside functionalize that ``_FUNCTIONS_FAIL`` names, which raise as the raw
    op does there and which the README says fail. The raw op called directly: right, or an error; never
    a silently wrong value."""
    x = make_input(3, 16, torch.float32, seed=23, scale_rows=False)
    w = make_weight(16, torch.float32)
    compose = _COMPOSITIONS[name]
    want = compose(lambda x: _textbook64(x, w, 1e-6), x.double())
    if name in _FUNCTIONS_FAIL:
        readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
        assert _FUNCTIONS_FAIL[name] in readme, "the README's torch.func item must say this fails"
        with pytest.raises((RuntimeError, NotImplementedError)):
            compose(lambda x: ascend_rmsnorm.rms_norm(x, w, casting_mode="llama"), x)
    else:
        assert _rel(compose(lambda x: ascend_rmsnorm.rms_norm(x, w, casting_mode="llama"), x), want) < 1e-5
    try:
        got = compose(lambda x: OPS.rms_norm(x, w, 1e-6, "fp32", 0.0, "torch")[0], x)
    except (RuntimeError, NotImplementedError):
        known = {*_RAW_OP_FAILS, *_FUNCTIONS_FAIL}
        assert name in known, "only these are known to fail on the raw op"
    else:
        assert _rel(got, want) < 1e-5


@pytest.mark.parametrize("name", _RAW_OP_FAILS)
def test_compiled_compositions_fail_where_the_raw_op_does(name):
    """torch.compile traces the raw op, so the functions compiled fail where it does (the eager functions
    give these right: the test above), and the README says so; an error, never a wrong value."""
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
    assert _COMPILED_FAIL_WORDS in readme, "the README's torch.func item must say these fail compiled"
    x = make_input(3, 16, torch.float32, seed=23, scale_rows=False)
    w = make_weight(16, torch.float32)
    compose = _COMPOSITIONS[name]
    torch._dynamo.reset()

    def f(x):
        return compose(lambda x: ascend_rmsnorm.rms_norm(x, w), x)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="fake tensor|FakeTensor|Unsupported"):
        compiled(x)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
def test_the_private_torch_probes_exist_and_answer_on_this_torch():
    """``ops/_torch_compat.py`` holds every private torch name the ops use. Each must exist on this torch
    and answer as the ops read it; on another torch than the checked one a failure names both versions."""
    from torch.autograd import forward_ad

    from ascend_rmsnorm.ops import _torch_compat as compat

    where = f"(torch {torch.__version__}; ops/_torch_compat.py was checked on torch {compat.CHECKED_ON})"
    for name in (
        "_any_requires_grad",
        "_is_fwd_grad_enabled",
        "_after_autograd_keyset",
        "_are_functorch_transforms_active",
        "_len_torch_dispatch_stack",
        "_is_torch_function_mode_enabled",
        "_get_tracing_state",
        "_functorch.get_interpreter_stack",
        "_functorch.TransformType",
    ):
        found = torch._C
        for part in name.split("."):
            assert hasattr(found, part), f"torch._C.{name} is gone {where}"
            found = getattr(found, part)
    x, g = torch.ones(2), torch.ones(2, requires_grad=True)
    assert compat.any_requires_grad(x, g) and not compat.any_requires_grad(x, x), where
    assert not compat.functorch_transforms_active(), where
    assert torch.func.grad(lambda t: (t * float(compat.functorch_transforms_active())).sum())(x).eq(1).all(), where
    assert not compat.functionalizing(), where
    assert torch.func.functionalize(lambda t: t * float(compat.functionalizing()))(x).eq(1).all(), where
    assert torch.func.grad(lambda t: (t * float(compat.functionalizing())).sum())(x).eq(0).all(), where
    assert compat.torch_dispatch_stack_len() == 0 and not compat.torch_function_mode_enabled(), where
    assert compat.jit_tracing_state() is None, where
    seen = []
    torch.jit.trace(lambda t: seen.append(compat.jit_tracing_state()) or t * 2, (x,), check_trace=False)
    assert seen and seen[0] is not None, where
    with torch.overrides.TorchFunctionMode():
        assert compat.torch_function_mode_enabled(), where
    from torch.utils._python_dispatch import TorchDispatchMode

    with TorchDispatchMode():
        assert compat.torch_dispatch_stack_len() == 1, where
    assert not compat.fwd_grad_enabled() or forward_ad._current_level < 0, where
    assert hasattr(forward_ad, "_current_level"), f"torch.autograd.forward_ad._current_level is gone {where}"
    if torch.distributed.is_available():  # key_sharding_on_scalars' registry and its record
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

        propagator = DTensor._op_dispatcher.sharding_propagator
        assert isinstance(getattr(propagator, "op_to_schema_info", None), dict), f"DTensor's schema infos moved {where}"
        info = RuntimeSchemaInfo(5, needs_pytree=True)
        assert (info.static_argnum, info.needs_pytree) == (5, True), where
    marked = compat.mark_constant(lambda: True)
    assert getattr(marked, compat.DYNAMO_CONSTANT_ATTR) is True
    marker = torch.compiler.assume_constant_result(lambda: True)  # what mark_constant stands in for
    assert getattr(marker, compat.DYNAMO_CONSTANT_ATTR, False) is True, f"dynamo's constant marker changed {where}"


def test_a_missing_private_probe_fails_naming_the_versions(monkeypatch):
    from ascend_rmsnorm.ops import _torch_compat as compat

    monkeypatch.delattr(torch._C, "_len_torch_dispatch_stack")
    version = re.escape(torch.__version__)
    want = rf"torch\._C\._len_torch_dispatch_stack.*torch {version}.*checked on torch {compat.CHECKED_ON}"
    with pytest.raises(ImportError, match=want):
        compat._private("_len_torch_dispatch_stack")


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.jit.trace is deprecated; its tracer warnings
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated")
@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_torch_jit_trace_records_the_op_not_the_fast_paths_work(backend):
    """Under torch.jit.trace (and the TorchScript ONNX export built on it) a no-grad call took the eager
    fast path: the emu/npu kernels, called through ctypes, are invisible to the tracer, so the trace
    replayed an uninitialised buffer (values of 1e31 seen); the torch path's host scalars were baked in.
    The traced function must give the eager bits for a new input."""
    w = make_weight(64, torch.float32)

    def f(x):
        return ascend_rmsnorm.rms_norm(x, w, 1e-6, backend=backend)

    x1, x2 = make_input(4, 64, torch.float32, seed=11), make_input(4, 64, torch.float32, seed=12)
    traced = torch.jit.trace(f, (x1,), check_trace=False)
    with kernels_run_on(backend, emu_kernel("fwd", torch.float32)):  # the trace launches the kernel itself
        got = traced(x2)
    assert_same_bits(got, f(x2), "traced y")


class _AddNormModel(torch.nn.Sequential):
    """A Linear and an RMSNorm that adds the input back first (add_rms_norm): both its outputs."""

    def forward(self, x):
        return self[1](self[0](x), x)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.[a-z_]+` is deprecated")  # trace, save, load
@pytest.mark.parametrize("residual", (False, True), ids=("rms_norm", "add_rms_norm"))
@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_torch_jit_trace_of_a_trainable_model_records_the_op(backend, residual, tmp_path):
    """torch.jit.trace(model, x) with the model's weights requiring grad (the default) took the
    autograd.Function route: the trace held a Python op, so torch's own check_trace failed ("Tracing
    failed sanity checks!": the check's re-trace recorded the op), and torch.jit.save refused it. While
    tracing, the op itself is recorded (its Autograd kernel serves the gradients): the trace passes its
    check, saves, loads, and gives the eager bits and gradients for a new input."""
    model = (_AddNormModel if residual else torch.nn.Sequential)(
        torch.nn.Linear(64, 64), ascend_rmsnorm.RMSNorm(64, eps=1e-6, backend=backend)
    )
    with torch.no_grad():
        model[1].weight.copy_(make_weight(64, torch.float32))
    x1 = make_input(4, 64, torch.float32, seed=13)
    path = tmp_path / "traced.pt"
    torch.jit.save(torch.jit.trace(model, (x1,)), str(path))  # check_trace on (the default)
    traced = torch.jit.load(str(path))
    x2 = make_input(4, 64, torch.float32, seed=14)
    with kernels_run_on(backend, emu_kernel("fwd", torch.float32), emu_kernel("bwd", torch.float32)):
        outs_traced = traced(x2)  # the loaded trace's own launches: the torch path gives the same bits
        outs_traced = outs_traced if residual else (outs_traced,)  # y (, residual_out)
        loss_traced = sum(o.float().pow(2).sum() for o in outs_traced)  # each output's gradient its own
        grads_traced = torch.autograd.grad(loss_traced, list(traced.parameters()))
    outs = model(x2)
    outs = outs if residual else (outs,)
    grads = torch.autograd.grad(sum(o.float().pow(2).sum() for o in outs), list(model.parameters()))
    for got, want in zip(outs_traced, outs, strict=True):
        assert_same_bits(got, want, "traced output")
    for got, want in zip(grads_traced, grads, strict=True):
        assert_same_bits(got, want, "traced grad")


@pytest.mark.parametrize("device_key", ("cpu", "npu", "other"))
def test_the_op_called_directly_names_an_unknown_backend(device_key, monkeypatch):
    """The op does not normalise ``backend`` as rms_norm does: an unknown name on a CPU tensor was
    answered "backend 'npu' needs tensors on an NPU", and on an NPU tensor it ran the npu kernels."""
    monkeypatch.setattr(choice, "_note_overflow_mode", lambda x: None)
    monkeypatch.setattr(choice, "_npu_backend", lambda: pytest.fail("an unknown name ran the npu kernels"))
    pick = {"cpu": choice.for_cpu, "npu": choice.for_npu, "other": choice.for_other}[device_key]
    with pytest.raises(ValueError, match=r"unknown backend 'bogus'.*auto, npu, emu, torch"):
        pick("bogus", torch.ones(2, 8), 8)
    if device_key != "cpu":  # a known backend that cannot run there is told apart from an unknown one
        with pytest.raises(ValueError, match=r"^the emu backend runs on CPU tensors"):
            pick("emu", torch.ones(2, 8), 8)
    with pytest.raises(ValueError, match=r"unknown backend 'bogus'"):
        OPS.rms_norm(torch.ones(2, 8), None, 1e-6, "fp32", 0.0, "bogus")
