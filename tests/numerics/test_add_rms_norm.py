"""``add_rms_norm`` on the torch path (docs/design.md §3 item 3b): bit for bit the two calls apart, bitwise
batch-invariant, autograd through both outputs."""

from __future__ import annotations

import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm import add_rms_norm, rms_norm

from helpers import DTYPES, assert_same_bits, bits, emu_kernel, kernels_run_on, make_input, make_weight

MODES = ("fp32", "llama", "gemma")


def _apart(x, r, w, mode):
    r_out = x + r  # torch's own add in x's dtype: one fp32 add, rounded (CPU)
    return rms_norm(r_out, w, 1e-6, casting_mode=mode, return_rstd=True), r_out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", (1, 7, 64, 100, 4097))
def test_equals_the_two_calls_apart(dtype, hidden):
    rows = 9 if hidden < 4097 else 3
    x = make_input(rows, hidden, dtype, seed=1)
    r = make_input(rows, hidden, dtype, seed=2)
    for mode in MODES:
        for w in (make_weight(hidden, dtype), make_weight(hidden, torch.float32), None):
            y, r_out, rstd = add_rms_norm(x, r, w, 1e-6, casting_mode=mode, return_rstd=True)
            (y2, rstd2), r_out2 = _apart(x, r, w, mode)
            assert_same_bits(r_out, r_out2, "residual_out")
            assert_same_bits(y, y2, f"y ({mode})")
            assert_same_bits(rstd, rstd2, "rstd")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_autograd_through_both_outputs_equals_the_two_calls_apart(dtype):
    hidden = 300
    x0, r0 = make_input(70, hidden, dtype, seed=3), make_input(70, hidden, dtype, seed=4)
    w0 = make_weight(hidden, dtype)
    dy, dr = make_input(70, hidden, dtype, seed=5), make_input(70, hidden, dtype, seed=6)
    for mode in MODES:
        x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
        y, r_out = add_rms_norm(x, r, w, 1e-6, casting_mode=mode)
        got = torch.autograd.grad((y, r_out), (x, r, w), (dy, dr))
        x, r, w = (t.clone().requires_grad_() for t in (x0, r0, w0))
        (y2, _), r_out2 = _apart(x, r, w, mode)
        want = torch.autograd.grad((y2, r_out2), (x, r, w), (dy, dr))
        for name, a, b in zip(("dx", "dresidual", "dw"), got, want):
            assert_same_bits(a, b, f"{name} ({mode})")
        # only one output used: the other's gradient is absent, not zero-filled wrongly
        x, r = (t.clone().requires_grad_() for t in (x0, r0))
        y, _ = add_rms_norm(x, r, w0, 1e-6, casting_mode=mode)
        gx, gr = torch.autograd.grad(y, (x, r), dy)
        assert_same_bits(gx, gr, "d(x) == d(residual)")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_invariance_prefixes_positions_and_3d(dtype):
    hidden = 1000
    x = make_input(300, hidden, dtype, seed=7)
    r = make_input(300, hidden, dtype, seed=8)
    w = make_weight(hidden, dtype)
    dy = make_input(300, hidden, dtype, seed=9)

    def run(xs, rs, dys):
        xs, rs = xs.clone().requires_grad_(), rs.clone().requires_grad_()
        y, r_out, rstd = add_rms_norm(xs, rs, w, 1e-6, casting_mode="llama", return_rstd=True)
        (gx,) = torch.autograd.grad((y, r_out), (xs,), (dys, dys))
        return y, r_out, rstd, gx

    full = run(x, r, dy)
    names = ("y", "residual_out", "rstd", "dx")
    for n in (1, 2, 7, 64, 255, 256):
        for name, a, b in zip(names, run(x[:n], r[:n], dy[:n]), full):
            assert_same_bits(a, b[:n], f"{name}, first {n} rows")
    alone = run(x[100:101], r[100:101], dy[100:101])
    for pos in (0, 150, 299):
        xs, rs, dys = x.clone(), r.clone(), dy.clone()
        xs[pos], rs[pos], dys[pos] = x[100], r[100], dy[100]
        for name, a, b in zip(names, alone, run(xs, rs, dys)):
            assert_same_bits(a[0], b[pos], f"{name} at position {pos}")
    three = run(x.view(4, 75, hidden), r.view(4, 75, hidden), dy.view(4, 75, hidden))
    for name, a, b in zip(names, three, full):
        assert_same_bits(a.reshape(b.shape), b, f"{name}, 3-D vs 2-D")


def test_non_contiguous_inputs_equal_contiguous_ones():
    x = make_input(80, 64, torch.bfloat16, seed=10).t()
    r = make_input(64, 80, torch.bfloat16, seed=11)
    w = make_weight(80, torch.bfloat16)
    assert not x.is_contiguous()
    a = add_rms_norm(x, r, w)
    b = add_rms_norm(x.contiguous(), r, w)
    for name, u, v in zip(("y", "residual_out"), a, b):
        assert_same_bits(u, v, name)
    assert a[1].is_contiguous()


def test_exported():
    assert ascend_rmsnorm.add_rms_norm is add_rms_norm


@pytest.mark.parametrize("backend", ("torch", "emu"))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_through_both_outputs_gives_canonical_nans_whatever_the_rows(backend, dtype):
    """The residual's gradient is added to dx inside the backend (one fp32 add, rounded to x's dtype),
    so a NaN row's dx and d(residual) hold the canonical NaN, and a row's bits do not depend on how
    many rows ride along (torch's own bf16 add writes 0xFFFF from its vector body, 0x7FC0 from its tail)."""
    from ascend_rmsnorm import contract

    nan = contract.canonical_nan_bits(dtype)
    width = torch.finfo(dtype).bits

    def grads(x0, w0):
        x, r = x0.clone().requires_grad_(), torch.zeros_like(x0).requires_grad_()
        y, r_out = add_rms_norm(x, r, w0, 1e-6, backend=backend)
        return torch.autograd.grad((y, r_out), (x, r), (torch.ones_like(y), torch.ones_like(r_out)))

    x = torch.ones(1, 32, dtype=dtype)
    x[0, 0] = float("nan")
    with kernels_run_on(backend, emu_kernel("bwd", dtype)):  # the torch path gives these bits too
        nan_grads = grads(x, None)
    for g in nan_grads:
        got = {int(v) & ((1 << width) - 1) for v in g.view(-1).view(torch.int16 if width == 16 else torch.int32)}
        assert got == {nan}, [hex(v) for v in got]
    w = make_weight(20, dtype)
    rows = make_input(2, 20, dtype, seed=12)
    rows[1, 3] = float("nan")
    one, two = grads(rows[1:], w), grads(rows, w)
    for a, b in zip(one, two):
        assert_same_bits(a[0], b[1], "the NaN row alone and after another row")


@pytest.mark.parametrize("backend", ("torch", "emu"))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_nan_in_the_residual_gradient_alone_gives_the_canonical_nan(backend, dtype):
    """Every row of x finite, but the gradient of residual_out holds a NaN of another pattern (sign bit
    and payload set): the sum added into dx is NaN there, and it must be the canonical NaN, not the
    pattern the add carried through; the other rows stay as they are."""
    from ascend_rmsnorm import contract

    width = torch.finfo(dtype).bits
    mask = (1 << width) - 1
    nan = contract.canonical_nan_bits(dtype)
    odd = nan | (1 << (width - 1)) | 1  # a NaN, but not the canonical one
    x0 = make_input(3, 24, dtype, seed=5)
    gro = torch.zeros_like(x0)
    bits(gro)[0, 3] = odd - (1 << width)  # as a signed integer of that width (bits() is a view of gro)
    x, r = x0.clone().requires_grad_(), torch.zeros_like(x0).requires_grad_()
    with kernels_run_on(backend, emu_kernel("fwd", dtype), emu_kernel("bwd", dtype)):  # torch gives these bits too
        y, r_out = add_rms_norm(x, r, None, 1e-6, backend=backend)
        dx, dr = torch.autograd.grad((y, r_out), (x, r), (torch.ones_like(y), gro))
    for g in (dx, dr):
        raw = int(bits(g)[0, 3]) & mask
        assert raw == nan, hex(raw)
        assert int(torch.isnan(g).sum()) == 1


def test_every_backend_refuses_a_residual_of_another_dtype_or_shape():
    """The kernels read the residual in x's dtype: a float32 residual for a bfloat16 x would be read as
    twice as many bfloat16s. Every backend refuses it, directly and through the op, so the same call
    does not work on the CPU's torch path and fail on an NPU."""
    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as torch_backend

    x = make_input(6, 40, torch.bfloat16)
    w = make_weight(40, torch.bfloat16)
    for r in (torch.zeros(6, 40, dtype=torch.float32), torch.zeros(6, 41, dtype=torch.bfloat16)):
        for forward in (emu.BACKEND.forward, torch_backend.forward):
            with pytest.raises(ValueError, match="residual must have x's shape and dtype"):
                forward(x, w, 1e-6, residual=r)
        for backend in ("emu", "torch"):
            with pytest.raises(ValueError, match="residual must have x's shape and dtype"):
                torch.ops.ascend_rmsnorm.add_rms_norm(x, r, w, 1e-6, "fp32", 0.0, backend)


def test_a_non_contiguous_2d_x_through_the_kernels_equals_the_contiguous_one():
    """A transposed (non-contiguous) 2-D x reaches the backend as it is; the kernels read rows from
    its pointer, so the backend must lay it out first."""
    x = make_input(80, 64, torch.bfloat16, seed=10).t()
    r = make_input(64, 80, torch.bfloat16, seed=11)
    w = make_weight(80, torch.bfloat16)
    assert not x.is_contiguous()
    got = []
    for call in (lambda: rms_norm(x, w, backend="emu"), lambda: add_rms_norm(x, r, w, backend="emu")):
        with kernels_run_on("emu", emu_kernel("fwd", torch.bfloat16)):  # the kernels read x, not the torch path
            got.append(call())
    assert_same_bits(got[0], rms_norm(x.contiguous(), w, backend="emu"), "y")
    for name, u, v in zip(("y", "residual_out"), got[1], add_rms_norm(x.contiguous(), r, w, backend="emu")):
        assert_same_bits(u, v, name)


@pytest.mark.parametrize("backend", ("torch", "emu"))
def test_a_residual_gradient_of_another_shape_or_dtype_is_refused(backend):
    """The op and every backend refuse a grad_residual_out that cannot be added to dx in x's dtype."""
    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as torch_backend

    be = {"torch": torch_backend, "emu": emu.BACKEND}[backend]
    x = make_input(6, 40, torch.bfloat16)
    w = make_weight(40, torch.bfloat16)
    rstd = torch_backend.forward(x, w, 1e-6)[1]
    for gro in (torch.zeros(6, 41, dtype=torch.bfloat16), torch.zeros(6, 40, dtype=torch.float32)):
        with pytest.raises(ValueError, match="grad_residual_out must have x's shape and dtype"):
            be.backward(x, x, w, rstd, grad_residual=gro)
        with pytest.raises(ValueError, match=r"grad_residual_out must have x's shape and dtype \(\(2, 3, 40\)"):
            torch.ops.ascend_rmsnorm.rms_norm_backward(
                x.view(2, 3, 40), x.view(2, 3, 40), w, rstd.view(2, 3), gro.view(2, 3, -1), 1e-6, "fp32", 0.0, True,
                True, backend,
            )  # fmt: skip
