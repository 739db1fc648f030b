"""The real kernel (kernels/rmsnorm.asc) run through the CPU emulation: bit for bit the torch path.

The emulation aborts the process on any rule the hardware would break, so every test here also
asserts that the kernel keeps the UB budget, alignment, queue/event protocol and pipe sync.
"""

from __future__ import annotations

import re

import pytest
import torch

from ascend_rmsnorm import contract, rms_norm
from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.backends import kernel as kernel_backend
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.errors import KernelLaunchError

import plan_cases
from helpers import assert_same_bits, emu_kernel, make_input, make_weight

NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
KNAME = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


@pytest.fixture(scope="module")
def emu_lib():
    return emu.library()


def _both(backend, x, w, dy, eps=1e-6):
    y, rstd, _ = backend.forward(x, w, eps)
    dx, dw = backend.backward(dy, x, w, rstd)
    return y, rstd.reshape(-1), dx, dw


@pytest.fixture(scope="module")
def path_starts(emu_lib):
    """The first H of each backward path for bf16 x, weight and dy."""
    fam = plan_cases.Family("bwd", "bfloat16", "bfloat16", "bfloat16", need_dw=True)
    return list(plan_cases.path_starts(plan_cases.Planner(emu_lib), fam).values())


def _rows_for(hidden: int) -> int:
    """300 rows (dw chunks of 2 from 256 on) where H is small; 49 (one over the cores) on long rows."""
    return 300 if hidden < contract.TILE else 49


def test_block_dim_does_not_change_bits(emu_lib, path_starts):
    for hidden in path_starts:
        _block_dims_agree(hidden, _rows_for(hidden))


def _block_dims_agree(hidden, rows):
    """The same bits whatever the blocks, each launch on as many as its plan says and those different."""
    x = make_input(rows, hidden, torch.bfloat16, seed=4)
    w = make_weight(hidden, torch.bfloat16)
    dy = make_input(rows, hidden, torch.bfloat16, seed=5)
    bf16 = contract.DTYPE_CODES[torch.bfloat16]
    results, launched = [], []
    for n in (1, 7, 48):
        emu.reset_stats()
        results.append(_both(emu.with_block_dim(n), x, w, dy))
        got = tuple(emu.last_blocks(emu_kernel(d, torch.bfloat16)) for d in ("fwd", "bwd"))
        planned = tuple(emu.library().plan(d, bf16, bf16, rows, hidden, n).blocks for d in ("forward", "backward"))
        assert got == planned, (hidden, n, got, planned)
        launched.append(got)
    assert len(set(launched)) == 3, (hidden, launched)
    for other in results[1:]:
        for name, a, b in zip(("y", "rstd", "dx", "dw"), results[0], other):
            assert_same_bits(a, b, f"{name} with another block_dim")
    # and the torch path's: a slip every block count shares (a dw partial never stored, read back as
    # the same poison by all three) is not a difference between them
    for name, a, b in zip(("y", "rstd", "dx", "dw"), results[0], _both(torch_backend, x, w, dy)):
        assert_same_bits(a, b, f"{name} (emu vs torch)")


def test_many_dw_chunks_and_no_weight(emu_lib):
    # 37 chunks of 64 rows: the dw tree folds 5 chunk rows and halves 5 levels.
    x = make_input(64 * 37 - 5, 24, torch.float32, seed=6)
    w = make_weight(24, torch.float32)
    dy = make_input(64 * 37 - 5, 24, torch.float32, seed=8)
    for name, a, b in zip(("y", "rstd", "dx", "dw"), _both(emu.BACKEND, x, w, dy), _both(torch_backend, x, w, dy)):
        assert_same_bits(a, b, name)
    y, rstd, _ = emu.BACKEND.forward(x, None, 1e-6)
    assert_same_bits(y, torch_backend.forward(x, None, 1e-6)[0], "y without weight")
    dx, dw = emu.BACKEND.backward(dy, x, None, rstd)
    assert dw is None
    assert_same_bits(dx, torch_backend.backward(dy, x, None, rstd)[0], "dx without weight")


def test_emu_row_prefixes_are_invariant(emu_lib, path_starts):
    for hidden in path_starts:
        _prefixes_agree(hidden, _rows_for(hidden))


def _prefixes_agree(hidden, rows):
    x = make_input(rows, hidden, torch.float16, seed=12)
    dy = make_input(rows, hidden, torch.float16, seed=13)
    w = make_weight(hidden, torch.float16)
    full = _both(emu.BACKEND, x, w, dy)
    for n in (n for n in (1, 2, 7, 48, 64, 255, 256) if n < rows):
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
        emu.reset_stats()
        y, rstd = rms_norm(xi, wi, backend=backend, return_rstd=True)
        gx, gw = torch.autograd.grad(y, (xi, wi), dy)
        grads[backend] = (y.detach(), rstd, gx, gw)
        ran = [emu.peak_ub(f"rmsnorm_{d}_bf16_bf16_bf16") > 0 for d in ("fwd", "bwd")]
        assert ran == [backend == "emu"] * 2, (backend, ran)  # else this compares the torch path with itself
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
    """The torch path gives the same bits, so the kernel's own record says that it ran."""
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "emu")
    x = make_input(4, 40, torch.float32)
    emu.reset_stats()
    assert emu.peak_ub("rmsnorm_fwd_f32_f32_f32") == 0
    assert_same_bits(rms_norm(x, None), torch_backend.forward(x, None, torch.finfo(torch.float32).eps)[0], "y")
    assert emu.peak_ub("rmsnorm_fwd_f32_f32_f32") > 0, "the emu kernel did not run"


def test_emu_rejects_tensors_off_the_cpu(emu_lib):
    with pytest.raises(ValueError, match="CPU"):
        rms_norm(torch.ones(2, 8, device="meta"), backend="emu")


def test_launcher_statuses(emu_lib):
    lib = emu_lib
    x = torch.ones(2, 8)
    y, r = torch.empty_like(x), torch.empty(2)
    f32, f16, bf16 = (contract.DTYPE_CODES[t] for t in (torch.float32, torch.float16, torch.bfloat16))
    names = "stream bd dt wdt ydt x w y r rows h eps invh off formula".split()
    args = [
        None,
        4,
        f32,
        f32,
        f32,
        x.data_ptr(),
        x[0].data_ptr(),
        y.data_ptr(),
        r.data_ptr(),
        2,
        8,
        1e-6,
        0.125,
        0.0,
        0,
    ]

    def fwd(**change):
        a = dict(zip(names, args), **change)
        lib.forward(*(a[n] for n in names))

    fwd()
    with pytest.raises(KernelLaunchError, match="block_dim"):
        fwd(bd=0)
    with pytest.raises(KernelLaunchError, match="dtype"):
        fwd(dt=7)
    with pytest.raises(KernelLaunchError, match="dtype"):  # bf16 x with an fp16 weight: the host widens it
        fwd(dt=bf16, wdt=f16, ydt=bf16)
    with pytest.raises(KernelLaunchError, match="dtype"):  # fp32 y only with an fp32 weight (or none)
        fwd(dt=bf16, wdt=bf16, ydt=f32)
    with pytest.raises(KernelLaunchError, match="shape"):
        fwd(h=0)
    with pytest.raises(KernelLaunchError, match="limit"):  # the one named limit: H is an int32 in the kernels
        fwd(h=lib.max_hidden() + 1)
    with pytest.raises(KernelLaunchError, match="null"):
        fwd(x=None)
    with pytest.raises(KernelLaunchError, match="formula"):
        fwd(formula=2)
    with pytest.raises(KernelLaunchError, match="null"):  # the fused launcher needs residual and residual_out
        lib.add_forward(None, 4, f32, f32, f32, x.data_ptr(), None, None, y.data_ptr(), r.data_ptr(), None, 2, 8,
                        1e-6, 0.125, 0.0, 0)  # fmt: skip
    ptr = x.data_ptr()
    with pytest.raises(KernelLaunchError, match="null"):  # dw over several chunks needs the workspace
        lib.backward(None, 4, f32, f32, f32, ptr, ptr, ptr, ptr, None, None, ptr, None, 130, 8, 0.125, 0.0)
    assert lib.max_hidden() == (1 << 31) - 1 == kernel_backend.MAX_HIDDEN


def test_launcher_and_plan_statuses_for_each_argument(emu_lib):
    """Every refusal of host/abi.h on its own (the package never passes such arguments, so no other test
    reaches them): each null output or input, each dtype check, the shape and block-count checks of the
    plan query, and the early returns with nothing to do (no rows; a backward asked for neither dx nor dw,
    or for dw without a weight), which launch nothing and so need no pointers at all."""
    lib = emu_lib
    f32, f16, bf16 = (contract.DTYPE_CODES[t] for t in (torch.float32, torch.float16, torch.bfloat16))
    x = torch.ones(2, 8)
    p = x.data_ptr()
    fwd = "stream bd dt wdt ydt x w y r rows h eps invh off formula".split()
    fwd_ok = dict(zip(fwd, (None, 4, f32, f32, f32, p, p, p, p, 2, 8, 1e-6, 0.125, 0.0, 0)))
    bwd = "stream bd dt wdt dydt dy x w r gro dx dw ws rows h invh off".split()
    bwd_ok = dict(zip(bwd, (None, 4, f32, f32, f32, p, p, p, p, None, p, p, p, 2, 8, 0.125, 0.0)))

    def forward(**change):
        a = dict(fwd_ok, **change)
        lib.forward(*(a[n] for n in fwd))

    def add_forward(res, rout):
        a = [fwd_ok[n] for n in fwd]
        lib.add_forward(*a[:6], res, *a[6:9], rout, *a[9:])

    def backward(**change):
        a = dict(bwd_ok, **change)
        lib.backward(*(a[n] for n in bwd))

    nothing = dict.fromkeys(("x", "w", "y", "r"))
    forward(rows=0, **nothing)  # no rows: no launch, no pointer looked at
    backward(rows=0, **dict.fromkeys(("dy", "x", "w", "r", "dx", "dw", "ws")))
    backward(dx=None, dw=None, **dict.fromkeys(("dy", "x", "r", "ws")))  # neither dx nor dw wanted
    backward(w=None, dx=None, **dict.fromkeys(("dy", "x", "r", "ws")))  # dw without a weight: nothing
    for name in ("y", "r"):
        with pytest.raises(KernelLaunchError, match="null"):
            forward(**{name: None})
    for res, rout in ((p, None), (None, p)):
        with pytest.raises(KernelLaunchError, match="null"):
            add_forward(res, rout)
    with pytest.raises(KernelLaunchError, match="dtype"):
        forward(ydt=7)
    for name in ("dy", "x", "r"):
        with pytest.raises(KernelLaunchError, match="null"):
            backward(**{name: None})
    with pytest.raises(KernelLaunchError, match="block_dim"):
        backward(bd=0)
    for change in ({"dt": bf16, "wdt": f16, "dydt": bf16}, {"dydt": 7}, {"dt": bf16, "wdt": bf16, "dydt": f32}):
        with pytest.raises(KernelLaunchError, match="dtype"):
            backward(**change)

    with pytest.raises(KernelLaunchError, match="shape"):
        lib.plan("forward", f32, f32, -1, 8, 4)
    with pytest.raises(KernelLaunchError, match="block_dim"):
        lib.plan("forward", f32, f32, 2, 8, 65536)
    assert lib.plan("forward", f32, f32, 2, 8, 65535).blocks == 2
    for w_dtype, out_dtype in ((f16, bf16), (bf16, 7), (bf16, f32)):
        with pytest.raises(KernelLaunchError, match="dtype"):
            lib.plan("backward", bf16, w_dtype, 2, 8, 4, out_dtype=out_dtype)
    no_rows, one_row = lib.plan("dw", f32, f32, 0, 8, 4), lib.plan("dw", f32, f32, 1, 8, 4)
    assert no_rows[:7] == one_row[:7] and no_rows.dw_chunks == 0  # no rows: the reduce of one chunk


def test_hidden_above_the_limit_is_a_value_error_naming_it():
    wide = torch.empty(1, kernel_backend.MAX_HIDDEN + 1, device="meta")
    with pytest.raises(ValueError, match=f"hidden size {kernel_backend.MAX_HIDDEN + 1} .* {kernel_backend.MAX_HIDDEN}"):
        kernel_backend.KernelBackend._check_x(wide)
    kernel_backend.KernelBackend._check_x(torch.empty(1, kernel_backend.MAX_HIDDEN, device="meta"))


def test_kernel_constants_are_the_contract():
    src = (emu.KERNELS / "common" / "constants.h").read_text()

    def const(name):
        return int(re.search(rf"{name} = (0x[0-9A-Fa-f]+|\d+)", src).group(1), 0)

    assert const("kTile") == contract.TILE
    assert const("kDwChunkRows") == contract.DW_CHUNK_ROWS
    assert const("kRsqrtMagic") == contract.RSQRT_MAGIC
    assert const("kNewtonSteps") == contract.NEWTON_STEPS
    assert const("kNanBits") == contract.CANONICAL_NAN_BITS[torch.float32]
    assert const("kNanBitsBf16") == contract.CANONICAL_NAN_BITS[torch.bfloat16]
    assert const("kNanBitsHalf") == contract.CANONICAL_NAN_BITS[torch.float16]


# ---- the path table (UB use against the plan: test_emu_planned.py) ---------------------------------


def _path_table() -> dict:
    """The header comment's path table: direction -> {(path, "16-bit"|"fp32"): the largest H on it}."""
    src = (emu.KERNELS / "rmsnorm.asc").read_text()
    out = {}
    for direction in ("forward", "backward"):
        pattern = (
            rf"^//   {direction} +group H <= (\d+) \(16-bit\), (\d+) \(fp32\) \| "
            r"tiled H <= (\d+) \(16-bit\), (\d+) \(fp32\) \| stream above"
        )
        m = re.search(pattern, src, re.M)
        assert m, direction
        g16, g32, t16, t32 = (int(v) for v in m.groups())
        out[direction] = {
            ("group", "16-bit"): g16,
            ("group", "fp32"): g32,
            ("tiled", "16-bit"): t16,
            ("tiled", "fp32"): t32,
        }
    return out


def test_paths_switch_at_the_documented_sizes(emu_lib):
    table = _path_table()
    for direction in ("forward", "backward"):
        for dtype, kind in ((torch.bfloat16, "16-bit"), (torch.float16, "16-bit"), (torch.float32, "fp32")):
            c = contract.DTYPE_CODES[dtype]
            group, tiled = table[direction][("group", kind)], table[direction][("tiled", kind)]
            for rows in (3, 100_000):
                assert emu_lib.plan(direction, c, c, rows, group, 48).path == f"{direction} group"
                assert emu_lib.plan(direction, c, c, rows, group + 1, 48).path == f"{direction} tiled"
                assert emu_lib.plan(direction, c, c, rows, tiled, 48).path == f"{direction} tiled"
                assert emu_lib.plan(direction, c, c, rows, tiled + 1, 48).path == f"{direction} stream"
    # no stream path (x read twice) up to 16384 for 16-bit x, 8192 for fp32
    for direction in ("forward", "backward"):
        assert table[direction][("tiled", "16-bit")] >= 16384 and table[direction][("tiled", "fp32")] >= 8192
    # The row count and the block count never pick the path (the backward's rows per group stay
    # within a dw chunk, whose size depends on the row count).
    bf16 = contract.DTYPE_CODES[torch.bfloat16]
    for direction in ("forward", "backward"):
        for hidden in (100, 4096, 20000, 40000):
            want = emu_lib.plan(direction, bf16, bf16, 3, hidden, 48)
            for rows, blocks in ((1, 1), (7, 7), (64, 48), (100_000, 40)):
                got = emu_lib.plan(direction, bf16, bf16, rows, hidden, blocks)
                if direction == "forward":
                    assert got[:6] == want[:6], (direction, hidden, rows, blocks)
                else:
                    assert got.path == want.path and got.group_rows <= contract.dw_chunk_rows(rows)


def test_plan2_writes_twelve_entries_and_reports_the_dw_accumulators(emu_lib):
    """ABI 7's plan2 fills out[0..11] and nothing after it (every caller passes 12 entries: jit/library.py,
    tests/support/plan_cases.py); out[11] is the backward's dw accumulators, 0 without dw and in the
    other directions, and KernelLibrary.plan reports it as accs (bf16 with a weight and dw at 1024x2048
    lags with two, tiling.h BwdChoose; without dw, 0)."""
    import ctypes

    from ascend_rmsnorm.jit import library

    bf16 = contract.DTYPE_CODES[torch.bfloat16]
    full = library.FLAG_WEIGHT | library.FLAG_DX | library.FLAG_DW
    nodw = full & ~library.FLAG_DW
    for direction, flags, accs in ((1, full, 2), (1, nodw, 0), (0, library.FLAG_WEIGHT, 0), (2, full, 0)):
        out = (ctypes.c_int64 * 13)(*([-7] * 13))
        assert emu_lib._lib.ascend_rmsnorm_plan2(direction, bf16, bf16, bf16, flags, 1024, 2048, 48, out) == 0
        assert out[11] == accs and out[12] == -7, (direction, flags, list(out))
    assert emu_lib.plan("backward", bf16, bf16, 1024, 2048, 48).accs == 2
    assert emu_lib.plan("backward", bf16, bf16, 1024, 2048, 48, flags=nodw).accs == 0


def test_dw_chunks_are_the_contract_and_use_every_core(emu_lib):
    """R = clamp(N // 128, 1, 64) in the kernel and the contract; the backward runs on every core when
    rows >= cores (docs/design.md §3 item 4); with one chunk it writes dw itself (no workspace, no reduce)."""
    f32 = contract.DTYPE_CODES[torch.float32]
    for rows in (*range(1, 600), 8191, 8192, 8193, 1 << 20):
        assert emu_lib.dw_chunk_rows(rows) == contract.dw_chunk_rows(rows), rows
        plan = emu_lib.plan("backward", f32, f32, rows, 4096, 48)
        assert plan.dw_chunks == contract.dw_chunks(rows)
        for cores in (40, 48):
            blocks = emu_lib.plan("backward", f32, f32, rows, 4096, cores).blocks
            assert blocks == min(rows, cores), (rows, cores)
    assert emu_lib.workspace_bytes(1, 4096) == 0 and emu_lib.workspace_bytes(2, 4096) == 2 * 4096 * 4


def test_dw_reduce_takes_the_stack_only_when_a_slice_does_not_fit(emu_lib):
    """The workspace is slice-major (kernels/bwd/dw_workspace.h), so a slice's partials lie back to back
    in GM whatever H is: the reduce reads them at once whenever they fit the UB, even where H is near
    2^31 (the old row-major layout needed a GM gap of (H - slice width) * 4 bytes, which took the stack
    form above 2^32 - 1). The stack form is for chunk counts whose partials do not fit. On the plan (no
    8 GB workspace)."""
    f32, bf16 = contract.DTYPE_CODES[torch.float32], contract.DTYPE_CODES[torch.bfloat16]
    edge = 1 << 30
    for hidden in (4096, edge - 1, edge + 1, kernel_backend.MAX_HIDDEN):
        for rows, code, blocks in ((2, f32, 48), (300, bf16, 40), (8192, f32, 1), (5, bf16, 7)):
            p = emu_lib.plan("dw", code, code, rows, hidden, blocks)
            assert p.ub_bytes <= 188160
            assert not p.slots, (hidden, rows, blocks)  # 2, 150, 128 and 5 chunks: a narrow enough slice fits
    # 2^20 rows: 16384 chunks, whose partials of even an 8-column slice (512 KB) do not fit
    p = emu_lib.plan("dw", f32, f32, 1 << 20, 4096, 48)
    assert p.slots and p.ub_bytes <= 188160


def test_stacked_dw_reduce_spreads_over_the_blocks_and_loads_many_leaves_at_once(emu_lib):
    """The stacked form (chunks whose partials do not fit at once) still gives every block a slice, and
    reads a tree node's leaves (a power of two of them, at least two) in one strided load: before, it
    took 1024-column slices (4 blocks at H 4096, 1 at H <= 1024) and one load per leaf, which made the
    reduce many times the backward at 400000 rows (bench --model)."""
    f32, bf16 = contract.DTYPE_CODES[torch.float32], contract.DTYPE_CODES[torch.bfloat16]
    for rows, hidden, blocks, want_blocks in ((1 << 20, 4096, 48, 47), (400_000, 128, 48, 16), (400_000, 5, 40, 1)):
        for code in (f32, bf16):
            p = emu_lib.plan("dw", code, code, rows, hidden, blocks)
            leaves = p.slots
            assert leaves >= 2 and leaves & (leaves - 1) == 0, (rows, hidden, leaves)
            assert p.blocks == want_blocks and p.ub_bytes <= 188160, (rows, hidden, p)
            assert -(-hidden // p.group_rows) == want_blocks  # a slice per block


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16), ids=KNAME.get)
def test_empty_batch_equals_the_torch_path(emu_lib, dtype):
    """No rows: the kernel backend launches nothing and makes its outputs itself (backends/kernel.py);
    they are the torch path's, bit for bit: empty y, rstd, residual_out and dx, and a dw of +0.0 (the sum
    over no rows), never a -0.0, an unwritten or a stale buffer. Through the public calls too."""
    x = torch.empty(0, 40, dtype=dtype)
    for w in (make_weight(40, dtype), make_weight(40, torch.float32), None):
        for res in (None, torch.empty(0, 40, dtype=dtype)):
            got = emu.BACKEND.forward(x, w, 1e-6, residual=res)
            want = torch_backend.forward(x, w, 1e-6, residual=res)
            for name, a, b in zip(("y", "rstd", "residual_out"), got, want):
                assert_same_bits(a, b, f"empty batch {name}")
        dy = torch.empty(0, 40, dtype=want[0].dtype)
        for need_dx, need_dw in ((True, True), (True, False), (False, True)):
            opts = {"need_dx": need_dx, "need_dw": need_dw}
            got = emu.BACKEND.backward(dy, x, w, want[1], **opts)
            for name, a, b in zip(("dx", "dw"), got, torch_backend.backward(dy, x, w, want[1], **opts)):
                assert_same_bits(a, b, f"empty batch {name} (need_dx={need_dx}, need_dw={need_dw})")
    xi = x.view(0, 2, 20).requires_grad_()
    wi = make_weight(20, torch.float32).requires_grad_()
    y = rms_norm(xi, wi, backend="emu")
    gx, gw = torch.autograd.grad(y.float().sum(), (xi, wi))
    assert gx.shape == xi.shape
    assert_same_bits(gw, torch.zeros(20), "dw of an empty batch through rms_norm")


def test_a_column_taken_as_rows_equals_the_torch_path(emu_lib):
    """H = 1 from a transposed row: x of shape (N, 1) with strides (1, N) is contiguous as it is, so
    ``empty_like`` gives outputs of those strides too, which a byte view (the poison) cannot take; the
    fresh outputs are poisoned through a flat view (backends/kernel.py), bit for bit the torch path."""
    x = make_input(1, 6, torch.bfloat16, seed=17).t()
    w = make_weight(1, torch.bfloat16)
    r = make_input(1, 6, torch.bfloat16, seed=18).t()
    dy = make_input(1, 6, torch.bfloat16, seed=19).t()
    assert x.stride() == (1, 6) and x.is_contiguous()
    got = emu.BACKEND.forward(x, w, 1e-6, residual=r)
    want = torch_backend.forward(x, w, 1e-6, residual=r)
    for name, a, b in zip(("y", "rstd", "residual_out"), got, want):
        assert_same_bits(a, b, f"H = 1 {name}")
    for name, a, b in zip(
        ("dx", "dw"), emu.BACKEND.backward(dy, x, w, want[1]), torch_backend.backward(dy, x, w, want[1])
    ):
        assert_same_bits(a, b, f"H = 1 {name}")
