"""The real kernel (kernels/rmsnorm.asc) run through the CPU emulation: bit for bit the torch path.

The emulation aborts the process on any rule the hardware would break, so every test here also
asserts that the kernel keeps the UB budget, alignment, queue/event protocol and pipe sync.
"""

from __future__ import annotations

import re

import pytest
import torch

from ascend_rmsnorm import contract, rms_norm
from ascend_rmsnorm.backends import emu, reference
from ascend_rmsnorm.errors import KernelLaunchError

import oracle
from helpers import DTYPES, assert_same_bits, bits, make_input, make_weight

HIDDEN = (1, 7, 8, 31, 100, 1000, 4095, 4096, 4097, 8192, 12288, 20000)
ROWS = (1, 3, 48, 49, 300)
NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
KNAME = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@pytest.fixture(scope="module")
def emu_lib():
    return emu.library()


def _both(backend, x, w, dy, eps=1e-6):
    y, rstd, _ = backend.forward(x, w, eps)
    dx, dw = backend.backward(dy, x, w, rstd)
    return y, rstd.reshape(-1), dx, dw


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
def test_emu_equals_torch_bitwise(emu_lib, dtype, hidden, rows):
    x = make_input(rows, hidden, dtype, seed=hidden + rows)
    w = make_weight(hidden, dtype)
    dy = make_input(rows, hidden, dtype, seed=7, scale_rows=False)
    got = _both(emu.BACKEND, x, w, dy)
    want = _both(reference, x, w, dy)
    for name, a, b in zip(("y", "rstd", "dx", "dw"), got, want):
        assert_same_bits(a, b, name)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=lambda d: NAME[d])
@pytest.mark.parametrize("hidden", (31, 4097, 12288))
def test_emu_fp32_weight_equals_torch(emu_lib, dtype, hidden):
    x = make_input(70, hidden, dtype, seed=2)
    w = make_weight(hidden, torch.float32)
    dy = make_input(70, hidden, dtype, seed=3)
    got = _both(emu.BACKEND, x, w, dy, eps=1e-5)
    want = _both(reference, x, w, dy, eps=1e-5)
    for name, a, b in zip(("y", "rstd", "dx", "dw"), got, want):
        assert_same_bits(a, b, name)
    assert got[3].dtype == torch.float32


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAME[d])
@pytest.mark.parametrize("hidden", (7, 100, 4097))
def test_emu_equals_scalar_oracle(emu_lib, dtype, hidden):
    x = make_input(3, hidden, dtype, seed=9)
    w = make_weight(hidden, dtype)
    dy = make_input(3, hidden, dtype, seed=10)
    y, rstd, dx, dw = _both(emu.BACKEND, x, w, dy)
    mask = 0xFFFFFFFF if dtype == torch.float32 else 0xFFFF
    wl, contribs = w.float().tolist(), []
    for i, (xr, dyr) in enumerate(zip(x.float().tolist(), dy.float().tolist())):
        yo, ro = oracle.forward_row(xr, wl, 1e-6)
        assert [v & mask for v in bits(y[i]).tolist()] == [oracle.cast_bits(v, NAME[dtype]) for v in yo]
        assert oracle.f32_bits(ro) == int(bits(rstd[i])) & 0xFFFFFFFF
        dxo, c = oracle.backward_row(dyr, xr, wl, ro)
        contribs.append(c)
        assert [v & mask for v in bits(dx[i]).tolist()] == [oracle.cast_bits(v, NAME[dtype]) for v in dxo]
    assert [v & mask for v in bits(dw).tolist()] == [oracle.cast_bits(v, NAME[dtype]) for v in oracle.dw(contribs)]


@pytest.mark.parametrize("hidden", (100, 4097, 12288))
def test_block_dim_does_not_change_bits(emu_lib, hidden):
    x = make_input(300, hidden, torch.bfloat16, seed=4)
    w = make_weight(hidden, torch.bfloat16)
    dy = make_input(300, hidden, torch.bfloat16, seed=5)
    results = [_both(emu.with_block_dim(n), x, w, dy) for n in (1, 7, 48)]
    for other in results[1:]:
        for name, a, b in zip(("y", "rstd", "dx", "dw"), results[0], other):
            assert_same_bits(a, b, f"{name} with another block_dim")


def test_many_dw_chunks_and_no_weight(emu_lib):
    # 37 chunks of 64 rows: the dw tree folds 5 chunk rows and halves 5 levels.
    x = make_input(64 * 37 - 5, 24, torch.float32, seed=6)
    w = make_weight(24, torch.float32)
    dy = make_input(64 * 37 - 5, 24, torch.float32, seed=8)
    for name, a, b in zip(("y", "rstd", "dx", "dw"), _both(emu.BACKEND, x, w, dy), _both(reference, x, w, dy)):
        assert_same_bits(a, b, name)
    y, rstd, _ = emu.BACKEND.forward(x, None, 1e-6)
    assert_same_bits(y, reference.forward(x, None, 1e-6)[0], "y without weight")
    dx, dw = emu.BACKEND.backward(dy, x, None, rstd)
    assert dw is None
    assert_same_bits(dx, reference.backward(dy, x, None, rstd)[0], "dx without weight")


@pytest.mark.parametrize("hidden", (64, 4097, 12288))
def test_emu_row_prefixes_are_invariant(emu_lib, hidden):
    x = make_input(300, hidden, torch.float16, seed=12)
    dy = make_input(300, hidden, torch.float16, seed=13)
    w = make_weight(hidden, torch.float16)
    full = _both(emu.BACKEND, x, w, dy)
    for n in (1, 2, 7, 64, 255, 256):
        part = _both(emu.BACKEND, x[:n], w, dy[:n])
        for name, a, b in zip(("y", "rstd", "dx"), part[:3], full[:3]):
            assert_same_bits(a, b[:n], f"{name} of the first {n} rows")


def test_public_api_with_autograd(emu_lib):
    x = make_input(2 * 33, 300, torch.bfloat16, seed=14).view(2, 33, 300)
    w = make_weight(300, torch.bfloat16)
    dy = make_input(2 * 33, 300, torch.bfloat16, seed=15).view(2, 33, 300)
    grads = {}
    for backend in ("emu", "torch"):
        xi = x.clone().requires_grad_()
        wi = w.clone().requires_grad_()
        y, rstd = rms_norm(xi, wi, backend=backend, return_rstd=True)
        gx, gw = torch.autograd.grad(y, (xi, wi), dy)
        grads[backend] = (y.detach(), rstd, gx, gw)
    for name, a, b in zip(("y", "rstd", "dx", "dw"), grads["emu"], grads["torch"]):
        assert_same_bits(a, b, name)


def test_nan_row_stays_in_its_row(emu_lib):
    x = make_input(5, 700, torch.float32, seed=16)
    clean = emu.BACKEND.forward(x, None, 1e-6)[0]
    x[2, 5] = float("nan")
    y = emu.BACKEND.forward(x, None, 1e-6)[0]
    assert torch.isnan(y[2]).all()
    for i in (0, 1, 3, 4):
        assert_same_bits(y[i], clean[i], f"row {i}")


def test_emu_env_var_selects_backend(emu_lib, monkeypatch):
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "emu")
    x = make_input(4, 40, torch.float32)
    assert_same_bits(rms_norm(x, None), reference.forward(x, None, 1e-6)[0], "y")


def test_emu_rejects_tensors_off_the_cpu(emu_lib):
    with pytest.raises(ValueError, match="CPU"):
        rms_norm(torch.ones(2, 8, device="meta"), backend="emu")


def test_launcher_statuses(emu_lib):
    lib = emu_lib
    x = torch.ones(2, 8)
    y, r = torch.empty_like(x), torch.empty(2)
    args = [None, 4, 0, x.data_ptr(), x[0].data_ptr(), y.data_ptr(), r.data_ptr(), 2, 8, 1e-6, 0.125, 0]
    with pytest.raises(KernelLaunchError, match="block_dim"):
        lib.forward(*(args[:1] + [0] + args[2:]))
    with pytest.raises(KernelLaunchError, match="dtype"):
        lib.forward(*(args[:2] + [7] + args[3:]))
    with pytest.raises(KernelLaunchError, match="dtype"):  # bf16 x with an fp16 weight
        lib.forward(*(args[:2] + [2] + args[3:-1] + [1]))
    with pytest.raises(KernelLaunchError, match="shape"):
        lib.forward(*(args[:8] + [(1 << 20) + 1] + args[9:]))
    with pytest.raises(KernelLaunchError, match="null"):
        lib.forward(*(args[:3] + [None] + args[4:]))


def test_kernel_constants_are_the_contract():
    src = (emu.KERNELS / "rmsnorm.asc").read_text()

    def const(name):
        return int(re.search(rf"{name} = (0x[0-9A-Fa-f]+|\d+)", src).group(1), 0)

    assert const("kTile") == contract.TILE
    assert const("kDwChunkRows") == contract.DW_CHUNK_ROWS
    assert const("kRsqrtMagic") == contract.RSQRT_MAGIC
    assert const("kNewtonSteps") == contract.NEWTON_STEPS


# ---- UB use: what the emulation records, the planner's figure, and the header's table -----------


def _header_maxima() -> dict:
    """Parse the UB table in the kernel's header comment: (path, dtype) -> bytes."""
    src = (emu.KERNELS / "rmsnorm.asc").read_text()
    out = {}
    for path in ("forward  resident", "forward  streamed", "backward resident", "backward tiled"):
        line = next(ln for ln in src.splitlines() if ln.startswith(f"//   {path}"))
        f32, b16 = re.findall(r"([\d,]{6,}) fp", line)[:2]
        out[(path.replace("  ", " "), "f32")] = int(f32.replace(",", ""))
        for k in ("f16", "bf16"):
            out[(path.replace("  ", " "), k)] = int(b16.replace(",", ""))
    dw_line = next(ln for ln in src.splitlines() if ln.startswith("//   dw reduce"))
    out[("dw reduce", "any")] = int(re.search(r"([\d,]{6,})", dw_line).group(1).replace(",", ""))
    return out


# Shapes that put each path at (or near) its largest footprint.
UB_CASES = [
    ("forward", torch.float32, 1),
    ("forward", torch.float32, 8576),
    ("forward", torch.bfloat16, 7137),
    ("forward", torch.float16, 10720),
    ("forward", torch.float32, 8577),
    ("forward", torch.bfloat16, 10721),
    ("backward", torch.float32, 4281),
    ("backward", torch.bfloat16, 3345),
    ("backward", torch.float16, 6128),
    ("backward", torch.float32, 4289),
    ("backward", torch.bfloat16, 6129),
]


@pytest.mark.parametrize("direction, dtype, hidden", UB_CASES)
def test_ub_use_matches_plan_and_header(emu_lib, direction, dtype, hidden):
    code = contract.DTYPE_CODES[dtype]
    plan = emu_lib.plan(direction, code, code, 130, hidden, 48)
    x = make_input(130, hidden, dtype, seed=1, scale_rows=False)
    w = make_weight(hidden, dtype)
    emu.reset_stats()
    if direction == "forward":
        emu.BACKEND.forward(x, w, 1e-6)
        kernel = f"rmsnorm_fwd_{KNAME[dtype]}_{KNAME[dtype]}"
    else:
        y, rstd, _ = emu.BACKEND.forward(x, w, 1e-6)
        emu.BACKEND.backward(x, x, w, rstd)
        kernel = f"rmsnorm_bwd_{KNAME[dtype]}_{KNAME[dtype]}"
        dw_plan = emu_lib.plan("dw", code, code, 130, hidden, 48)
        assert emu.peak_ub(f"rmsnorm_dw_{KNAME[dtype]}") == dw_plan.ub_bytes
        assert dw_plan.ub_bytes <= _header_maxima()[("dw reduce", "any")]
    assert emu.peak_ub(kernel) == plan.ub_bytes
    assert plan.ub_bytes <= _header_maxima()[(plan.path, KNAME[dtype])] <= 188160


def test_paths_switch_at_the_documented_sizes(emu_lib):
    f32, bf16 = contract.DTYPE_CODES[torch.float32], contract.DTYPE_CODES[torch.bfloat16]
    assert emu_lib.plan("forward", f32, f32, 10, 8576, 48).path == "forward resident"
    assert emu_lib.plan("forward", f32, f32, 10, 8577, 48).path == "forward streamed"
    assert emu_lib.plan("forward", bf16, bf16, 10, 10720, 48).path == "forward resident"
    assert emu_lib.plan("forward", bf16, f32, 10, 10721, 48).path == "forward streamed"
    assert emu_lib.plan("backward", f32, f32, 10, 4288, 48).path == "backward resident"
    assert emu_lib.plan("backward", f32, f32, 10, 4289, 48).path == "backward tiled"
    assert emu_lib.plan("backward", bf16, bf16, 10, 6128, 48).path == "backward resident"
    assert emu_lib.plan("backward", bf16, bf16, 10, 6129, 48).path == "backward tiled"
    # The row count never picks the path.
    for rows in (1, 7, 64, 100_000):
        assert emu_lib.plan("forward", bf16, bf16, rows, 4096, 48) == emu_lib.plan("forward", bf16, bf16, 3, 4096, 48)
        assert emu_lib.plan("backward", bf16, bf16, rows, 4096, 48) == emu_lib.plan("backward", bf16, bf16, 3, 4096, 1)
