"""torch.compile through the registered ops (docs/design.md §2): zero graph breaks, compiled bits == eager bits
(forward and backward, torch and emu backends), Inductor keeps the ops opaque, and one graph serves
every row count from 1 to 4096 when the row dim is unbacked or size-oblivious.

Compiles cost seconds each, so the cases are few and each checks several things.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch._dynamo
import torch.fx.experimental._config as fx_config

import ascend_rmsnorm
from ascend_rmsnorm import RMSNorm

from helpers import assert_same_bits, emu_kernel, kernels_run_on, make_input, make_weight

#: Inductor imports TorchScript helpers that warn they are deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def emu_ready():
    from ascend_rmsnorm.backends import emu

    emu.library()


class _Counting:
    """A dynamo backend that counts the graphs it is given and compiles them with Inductor."""

    def __init__(self) -> None:
        self.graphs: list[str] = []  # their code (Inductor empties the GraphModule it compiles)
        self.targets: list[str] = []

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        self.graphs.append(gm.code)
        self.targets += [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        return compile_fx(gm, example_inputs)


def _grads(fn, inputs, cotangents):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o.float() * c.float()).sum() for o, c in zip(outs, cotangents))
    return outs, torch.autograd.grad(loss, leaves)


def _no_graph_breaks() -> None:
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])


@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_compiled_rms_norm_and_add_rms_norm_equal_eager_bitwise(backend, request):
    if backend == "emu":
        request.getfixturevalue("emu_ready")
    x = make_input(30, 256, torch.bfloat16, seed=1).view(3, 10, 256)
    r = make_input(30, 256, torch.bfloat16, seed=2).view(3, 10, 256)
    if backend == "emu":  # the kernels' modes and the fused residual (docs/design.md §4)
        w = make_weight(256, torch.bfloat16)

        def f(x, r, w):
            y, rstd = ascend_rmsnorm.rms_norm(x, w, backend="emu", return_rstd=True)
            return ascend_rmsnorm.rms_norm(y, None, 1e-5, backend="emu"), r + 0, rstd

        ops = {"ascend_rmsnorm.rms_norm.default"}
    else:
        w = make_weight(256, torch.float32)

        def f(x, r, w):
            y, r_out, rstd = ascend_rmsnorm.add_rms_norm(x, r, w, casting_mode="llama", return_rstd=True)
            return ascend_rmsnorm.rms_norm(y, None, 1e-5, casting_mode="gemma"), r_out, rstd

        ops = {"ascend_rmsnorm.add_rms_norm.default", "ascend_rmsnorm.rms_norm.default"}

    counting = _Counting()
    compiled = torch.compile(f, fullgraph=True, backend=counting)
    with torch.no_grad():
        eager_out = f(x, r, w)
        with kernels_run_on(backend, emu_kernel("fwd", torch.bfloat16)):  # not the torch path (the same bits)
            got = compiled(x, r, w)
    for a, b, what in zip(got, eager_out, ("z", "residual_out", "rstd")):
        assert_same_bits(a, b, f"no-grad {what}")
    cots = [make_input(30, 256, t.dtype, seed=3 + i).view(t.shape) for i, t in enumerate(eager_out[:2])]
    with kernels_run_on(backend, emu_kernel("bwd", torch.bfloat16)):
        (z, r_out, _), grads = _grads(compiled, (x, r, w), cots)
    (ez, er_out, _), egrads = _grads(f, (x, r, w), cots)
    assert_same_bits(z.detach(), ez.detach(), "z")
    for a, b, what in zip(grads, egrads, ("dx", "dresidual", "dw")):
        assert_same_bits(a, b, what)
    _no_graph_breaks()
    assert len(counting.graphs) == 2  # no-grad and grad: one graph each
    assert ops <= set(counting.targets)


def test_inductor_calls_the_op_opaquely():
    """Inductor emits a call of the op (no decomposition it could fuse or reorder into)."""
    x = make_input(64, 512, torch.float16, seed=4)
    w = make_weight(512, torch.float16)

    def f(x, w):
        return ascend_rmsnorm.rms_norm(x * 2, w) + 1

    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(f, fullgraph=True)
    out, codes = run_and_get_code(compiled, x, w)
    assert any("torch.ops.ascend_rmsnorm.rms_norm.default" in c for c in codes)
    assert not any("rsqrt" in c for c in codes)
    assert_same_bits(out, f(x, w), "y")


@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_compiled_model_of_rmsnorm_modules(backend, request):
    if backend == "emu":
        request.getfixturevalue("emu_ready")
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.norm1 = RMSNorm(hidden, backend=backend)
            self.proj = torch.nn.Linear(hidden, hidden, bias=False)
            self.norm2 = RMSNorm(hidden, backend=backend)

        def forward(self, x):
            return self.norm2(self.proj(self.norm1(x)) + x)

    model = torch.nn.Sequential(*[Block(96) for _ in range(3)])
    x = make_input(2 * 7, 96, torch.float32, seed=5).view(2, 7, 96).requires_grad_()
    counting = _Counting()
    compiled = torch.compile(model, fullgraph=True, backend=counting)
    with kernels_run_on(backend, emu_kernel("fwd", torch.float32), emu_kernel("bwd", torch.float32)):
        y = compiled(x)  # the compiled model's own launches: eager below gives the torch path's bits too
        grads = torch.autograd.grad(y.square().sum(), [x, *model.parameters()])
    ey = model(x)
    egrads = torch.autograd.grad(ey.square().sum(), [x, *model.parameters()])
    assert_same_bits(y.detach(), ey.detach(), "y")
    for i, (a, b) in enumerate(zip(grads, egrads)):
        assert_same_bits(a, b, f"grad {i}")
    _no_graph_breaks()
    assert len(counting.graphs) == 1
    assert counting.targets.count("ascend_rmsnorm.rms_norm.default") == 6


_ROWS = (1, 2, 3, 64, 4096)


@pytest.mark.parametrize("how", ("mark_unbacked", "size_oblivious"))
def test_one_graph_serves_every_row_count(how):
    """Dynamo specialises a size of 0 or 1 by default (dynamic=True: one graph for 1 row, one for the
    rest). An unbacked row dim, or backed_size_oblivious, gives one graph for 1..4096; the ops never
    branch on the row count, so nothing else forces a recompile. With a residual both row dims are
    unbacked: its shape check must not guard on them (the module's and the function's)."""
    w = make_weight(64, torch.float32).requires_grad_()
    norm = RMSNorm(64)

    def f(x, r, w):
        y, r_out = norm(x, r)
        return ascend_rmsnorm.rms_norm(ascend_rmsnorm.add_rms_norm(y, r_out, w)[0], w)

    counting = _Counting()
    if how == "mark_unbacked":
        compiled, ctx = torch.compile(f, fullgraph=True, backend=counting), contextlib.nullcontext()
    else:
        compiled = torch.compile(f, fullgraph=True, backend=counting, dynamic=True)
        ctx = fx_config.patch(backed_size_oblivious=True)
    with ctx:
        for rows in _ROWS:
            x = make_input(rows, 64, torch.float32, seed=rows).requires_grad_()
            r = make_input(rows, 64, torch.float32, seed=rows + 1)
            if how == "mark_unbacked":
                torch._dynamo.decorators.mark_unbacked(x, 0)
                torch._dynamo.decorators.mark_unbacked(r, 0)
            y = compiled(x, r, w)
            gx, gw = torch.autograd.grad(y.sum(), (x, w))
            ey = f(x, r, w)
            ex, ew = torch.autograd.grad(ey.sum(), (x, w))
            assert_same_bits(y.detach(), ey.detach(), f"y, {rows} rows")
            assert_same_bits(gx, ex, f"dx, {rows} rows")
            assert_same_bits(gw, ew, f"dw, {rows} rows")
    # dynamic=True also makes the float arguments dynamic; dynamo then restarts the analysis once with
    # them specialised (the op takes Python floats), which hands the backend a second, identical trace
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1, counting.graphs
    assert not torch._dynamo.utils.counters["recompiles"]
    _no_graph_breaks()


def test_cuda_graphs_may_capture_the_ops():
    """Off the CPU the torch path reads nothing back to the host (tests/numerics/test_no_read_back_torch.py
    runs it on meta tensors, where any read-back raises), so the ops carry no ``cudagraph_unsafe`` tag:
    ``torch.compile(mode="reduce-overhead")`` captures them in its CUDA graphs instead of running them
    between graphs (1bddaa4 had tagged them while the path still read a value back per call)."""
    from torch._inductor.utils import get_first_incompatible_cudagraph_node
    from torch.fx.experimental.proxy_tensor import make_fx

    from ascend_rmsnorm import ops

    x, r = make_input(4, 64, torch.float32, seed=5), make_input(4, 64, torch.float32, seed=6)
    w = make_weight(64, torch.float32)
    calls = {
        "rms_norm": lambda x, r, w: ops.rms_norm_op(x, w, 1e-6, "fp32", 0.0, "torch"),
        "add_rms_norm": lambda x, r, w: ops.add_rms_norm_op(x, r, w, 1e-6, "fp32", 0.0, "torch"),
        "rms_norm_backward": lambda x, r, w: ops.rms_norm_backward_op(
            r, x, w, x[:, 0].abs(), None, 1e-6, "fp32", 0.0, True, True, "torch"
        ),
    }
    for name, fn in calls.items():
        gm = make_fx(fn)(x, r, w)
        assert any(str(n.target) == f"ascend_rmsnorm.{name}.default" for n in gm.graph.nodes), name
        assert get_first_incompatible_cudagraph_node(gm) is None, name


def test_check_cuda_contract_does_not_call_a_skipped_cuda_graph_clean():
    """benchmarks/check_cuda_contract.py claims its reduce-overhead run checks the ops inside CUDA graphs.
    Inductor does not raise where it declines a CUDA graph: it counts the skip and runs the code as the
    default mode does, with the same bits, which read as clean. Here (CPU tensors: every graph is skipped)
    the run must be reported as skipped, so a GPU run that captured nothing fails the script."""
    from helpers import load_script

    script = load_script("benchmarks/check_cuda_contract.py", "check_cuda_contract")
    report = script.compiled_vs_eager(torch.device("cpu"))
    assert {c["mode"] for c in report} == {"default", "reduce-overhead"}
    for case in report:
        assert script.compile_case_failed(case) == (case["mode"] == "reduce-overhead"), case
    assert all(c["result"]["cudagraph_skips"] > 0 for c in report if c["mode"] == "reduce-overhead")
