"""Compare the torch backend's outputs with the scalar oracle (tests/support/oracle.py), bit for bit.

``check_forward`` / ``check_backward`` take torch tensors, run ``reference`` (or any backend object with
the protocol's ``forward``/``backward``) and the oracle on the same values, and assert every output's
bits and dtype. The kernel tests can pass their own backend.
"""

from __future__ import annotations

import torch

from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import torch as torch_backend

import oracle

NAME = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float64: "float64",
}
#: A weight dtype other than x's and float32, per x dtype.
OTHER_W = {torch.float32: torch.float64, torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}
MODES = contract.CASTING_MODES


def ubits(t: torch.Tensor) -> list:
    """Raw bits as non-negative Python ints (rows of lists for 2-D)."""
    t = t.contiguous()
    width = t.element_size() * 8
    view = {16: torch.int16, 32: torch.int32, 64: torch.int64}[width]
    return (t.view(view).to(torch.int64) & ((1 << width) - 1) if width < 64 else t.view(view)).tolist()


def _u64(v: int) -> int:
    return v & 0xFFFFFFFFFFFFFFFF


def _weight_values(w):
    return None if w is None else w.double().tolist()


def check_forward(x, w, eps, mode="fp32", offset=0.0, residual=None, backend=torch_backend):
    """backend.forward against the oracle: y (bits and dtype), rstd, residual_out. Returns both."""
    y, rstd, r_out = backend.forward(x, w, eps, casting_mode=mode, offset=offset, residual=residual)
    want = oracle.forward(
        x.float().tolist(),
        _weight_values(w),
        eps,
        x_dtype=NAME[x.dtype],
        w_dtype=NAME[w.dtype] if w is not None else None,
        casting_mode=mode,
        offset=offset,
        residual_rows=residual.float().tolist() if residual is not None else None,
    )
    assert NAME[y.dtype] == oracle.result_dtype(NAME[x.dtype], NAME[w.dtype] if w is not None else None, mode)
    assert y.shape == x.shape and y.is_contiguous() and rstd.shape == (x.shape[0],) and rstd.dtype == torch.float32
    got_y = ubits(y)
    if y.dtype == torch.float64:
        got_y = [[_u64(v) for v in row] for row in got_y]
    assert got_y == want["y"], f"y differs ({mode}, w {None if w is None else w.dtype}, offset {offset})"
    assert ubits(rstd) == want["rstd"], "rstd differs"
    if residual is None:
        assert r_out is None
    else:
        assert r_out.dtype == x.dtype and r_out.is_contiguous()
        assert ubits(r_out) == want["residual_out"], "residual_out differs"
    return (y, rstd, r_out), want


def check_backward(dy, x, w, rstd_values, mode="fp32", offset=0.0, need_dx=True, need_dw=True, backend=torch_backend):
    """backend.backward against the oracle: dx and dw (bits, dtype, None where not asked for)."""
    rstd = torch.tensor([float(v) for v in rstd_values], dtype=torch.float32)
    dx, dw = backend.backward(dy, x, w, rstd, casting_mode=mode, offset=offset, need_dx=need_dx, need_dw=need_dw)
    want = oracle.backward(
        dy.float().tolist(),
        x.float().tolist(),
        _weight_values(w),
        rstd_values,
        x_dtype=NAME[x.dtype],
        w_dtype=NAME[w.dtype] if w is not None else None,
        casting_mode=mode,
        offset=offset,
    )
    if need_dx:
        assert dx.dtype == x.dtype and dx.shape == x.shape
        assert ubits(dx) == want["dx"], f"dx differs ({mode}, w {None if w is None else w.dtype})"
    else:
        assert dx is None
    if need_dw and w is not None:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        got = ubits(dw)
        if dw.dtype == torch.float64:
            got = [_u64(v) for v in got]
        assert got == want["dw"], "dw differs"
    else:
        assert dw is None
    return dx, dw
