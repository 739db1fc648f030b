"""A backend that runs the Ascend C kernels through their ``extern "C"`` launchers.

The same class serves ``npu`` (the library bisheng built, tensors on the NPU, launched on the
current stream) and ``emu`` (the same source built by the host C++ compiler against
``kernels/emu``, tensors on the CPU). It owns the tensor plumbing: contiguity, output and
workspace allocation, dtype codes, and the few dtype cases the kernels leave to the host:

- a weight whose dtype is neither x's nor fp32 (fp64, fp8, the other 16-bit type) is widened to
  fp32 first, exactly as the contract widens every weight (``weight.to(float32)``), and its dw is
  computed in fp32 and cast to the weight's dtype at the end, as the torch path does;
- a y (or dy) dtype other than x's and fp32 (fp64: llama with an fp64 weight) is the fp32 result
  widened (resp. dy rounded to fp32 first, as the torch path's ``dy.to(float32)`` does).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from ..contract import (
    DTYPE_CODES,
    FORMULA_CODES,
    canonical_nan_bits,
    check_grad_residual,
    check_residual,
    inv_hidden,
    resolve_mode,
    result_dtype,
    to_f32,
)
from ..jit.library import KernelLibrary
from ..perf.notes import note_tensor
from .base import Backend

#: The largest hidden size the kernels take (kMaxHidden in kernels/common/constants.h, H is an int32 there;
#: a test checks the two agree). The streamed paths have no other bound. backends/choice.py refuses
#: wider rows for explicit emu/npu and falls back under auto.
MAX_HIDDEN = (1 << 31) - 1

#: The dtypes of x the kernels take.
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _note_widened_weight(w: torch.Tensor) -> None:
    """Tell the performance model (when a recording runs) that this host-made tensor is the weight."""
    note_tensor("w", w)


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """Host casts to dtypes the kernels do not write (fp64, fp8): every NaN gets its canonical bits."""
    if t.numel() == 0 or not bool(torch.isnan(t).any()):
        return t
    nan = torch.tensor(canonical_nan_bits(t.dtype), dtype=_BITS[t.element_size()]).view(t.dtype)
    return torch.where(torch.isnan(t), nan.to(t.device), t)


#: The context a launch runs in where the backend has no device to make current (one shared object).
_NO_GUARD = contextlib.nullcontext()

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@functools.lru_cache(maxsize=256)
def _forward_plan(x_dtype, w_dtype, casting_mode: str, hidden: int):
    """What a forward launch needs besides the tensors and the float scalars, memoised per (dtypes,
    mode, H), which repeat call after call: (y's dtype, the dtype the kernel writes y in, its code,
    the formula's code, float32(1/H)). eps and offset stay out of the key: a cache keyed by value
    would treat -0.0 as +0.0."""
    formula, _ = resolve_mode(casting_mode, 0.0)
    out_dtype = result_dtype(x_dtype, w_dtype, casting_mode)
    y_kernel = x_dtype if out_dtype == x_dtype else torch.float32
    return out_dtype, y_kernel, DTYPE_CODES[y_kernel], FORMULA_CODES[formula], inv_hidden(hidden)


def _ptr(t: torch.Tensor | None):
    return t.data_ptr() if t is not None else None


class KernelBackend(Backend):
    """``base.Backend`` on top of a kernel library.

    Args:
        name: ``"npu"`` or ``"emu"``, for messages.
        library: returns the loaded library (built or fetched from the cache on first use).
        stream: returns the stream handle to launch on, read right before each launch.
        block_dim: returns the number of blocks to ask for (the launcher caps it by the work).
        guard: returns a context manager that makes x's device current around the launch, or None
            where there is no device to make current (emu: no context manager on the per-call path).
        plain: returns a tensor the kernels are to read with its bytes in row-major order (npu: one in a
            torch_npu internal format cast to ND), or None where every tensor is so already (emu).
        poison: fill every output and workspace with 0xFF bytes before the launch (emu). On an NPU they
            hold whatever the allocator's memory held; on the CPU a freed buffer of an earlier identical
            call often holds the very bits a kernel was to write, so a store it missed would not show.
    """

    def __init__(
        self,
        name: str,
        library: Callable[[], KernelLibrary],
        stream: Callable[[torch.Tensor], object],
        block_dim: Callable[[torch.Tensor], int],
        guard: Callable[[torch.Tensor], AbstractContextManager] | None = None,
        plain: Callable[[torch.Tensor], torch.Tensor] | None = None,
        poison: bool = False,
    ) -> None:
        self.name = name
        self._library = library
        self._stream = stream
        self._block_dim = block_dim
        self._guard = guard
        self._plain = plain
        self._poison = poison
        self.workspace: torch.Tensor | None = None  # the last backward's dw workspace (the model names it)

    def _row_major(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """``t`` as the kernels read it: contiguous, and in row-major bytes (``plain``)."""
        if t is None:
            return None
        if self._plain is not None:
            t = self._plain(t)
        return t.contiguous()

    def _fresh(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """A new output or workspace of a launch, as the kernels find it: indeterminate (``poison``). Through a
        flat view: an ``empty_like`` of an (N, 1) x with strides (1, N) has those strides, which a byte view
        of the 2-D tensor refuses (the bytes are row-major all the same)."""
        if self._poison and t is not None:
            t.view(-1).view(torch.uint8).fill_(0xFF)
        return t

    @staticmethod
    def _check_x(x: torch.Tensor) -> None:
        if x.dtype not in KERNEL_DTYPES:
            raise TypeError(f"the kernels take float32, bfloat16 or float16 x, got {x.dtype}")
        if x.shape[-1] > MAX_HIDDEN:
            raise ValueError(f"hidden size {x.shape[-1]} is above the kernels' limit of {MAX_HIDDEN}")

    def _kernel_weight(self, x: torch.Tensor, weight: torch.Tensor | None, wide: bool) -> torch.Tensor | None:
        """The weight as the kernels read it: x's dtype or fp32 (``wide``: fp32 in any case)."""
        if weight is None:
            return None
        weight = self._row_major(weight)
        if weight.dtype == torch.float32 or (weight.dtype == x.dtype and not wide):
            return weight
        w = weight.to(torch.float32).contiguous()  # exact from 16/8-bit floats, RNE from fp64: the contract's widening
        _note_widened_weight(w)
        return w

    def forward(
        self,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        eps: float,
        *,
        casting_mode: str = "fp32",
        offset: float = 0.0,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        _, offset = resolve_mode(casting_mode, offset)  # checks the mode and offset; gemma's is 1
        self._check_x(x2d)
        x = self._row_major(x2d)
        rows, hidden = x.shape
        plan = _forward_plan(x.dtype, weight.dtype if weight is not None else None, casting_mode, hidden)
        out_dtype, y_kernel, y_code, formula_code, inv_h = plan
        scalars = (to_f32(eps), inv_h, to_f32(offset))
        w = self._kernel_weight(x, weight, wide=y_kernel != x.dtype)
        y = torch.empty_like(x) if y_kernel == x.dtype else torch.empty((rows, hidden), dtype=y_kernel, device=x.device)
        y, rstd = self._fresh(y), self._fresh(x.new_empty(rows, dtype=torch.float32))
        res = res_out = None
        if residual is not None:
            check_residual(residual, x)
            res = self._row_major(residual)
            res_out = self._fresh(torch.empty_like(x))
        if rows:
            lib = self._library()
            codes = (DTYPE_CODES[x.dtype], DTYPE_CODES[w.dtype] if w is not None else DTYPE_CODES[x.dtype], y_code)
            with self._guard(x) if self._guard is not None else _NO_GUARD:
                stream, blocks = self._stream(x), self._block_dim(x)
                if res is None:
                    lib.forward(stream, blocks, *codes, x.data_ptr(), _ptr(w), y.data_ptr(), rstd.data_ptr(),
                                rows, hidden, *scalars, formula_code)  # fmt: skip
                else:
                    lib.add_forward(stream, blocks, *codes, x.data_ptr(), res.data_ptr(), _ptr(w), y.data_ptr(),
                                    rstd.data_ptr(), res_out.data_ptr(), rows, hidden, *scalars,
                                    formula_code)  # fmt: skip
        if y.dtype != out_dtype:
            y = y.to(out_dtype)  # fp64: the fp32 result widened (exact; the canonical NaN stays canonical)
        return y, rstd, res_out

    def backward(
        self,
        dy: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        rstd: torch.Tensor,
        *,
        casting_mode: str = "fp32",
        offset: float = 0.0,
        need_dx: bool = True,
        need_dw: bool = True,
        grad_residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        _, offset = resolve_mode(casting_mode, offset)  # every formula has the same backward
        self.workspace = None  # this call's, or none: never the one an earlier call left
        self._check_x(x2d)
        x = self._row_major(x2d)
        rows, hidden = x.shape
        gro = None
        if grad_residual is not None and need_dx:  # added to dx by the kernel (add_rms_norm's backward)
            check_grad_residual(grad_residual, x)
            gro = self._row_major(grad_residual)
        want_dw = need_dw and weight is not None
        if rows == 0 or not (need_dx or want_dw):
            dx = torch.empty((rows, hidden), dtype=x.dtype, device=x.device) if need_dx else None
            return dx, (torch.zeros(hidden, dtype=weight.dtype, device=weight.device) if want_dw else None)
        dy_k = self._row_major(dy)
        if dy_k.dtype not in (x.dtype, torch.float32):
            dy_k = dy_k.to(torch.float32).contiguous()  # as the torch path rounds it
        rstd = self._row_major(rstd).reshape(-1).to(torch.float32).contiguous()
        w = self._kernel_weight(x, weight, wide=dy_k.dtype != x.dtype)
        dx = self._fresh(torch.empty_like(x)) if need_dx else None
        dw = ws = None
        lib = self._library()
        if want_dw:
            dw = self._fresh(torch.empty(hidden, dtype=w.dtype, device=x.device))
            size = lib.workspace_bytes(rows, hidden)
            ws = self._fresh(torch.empty(size // 4, dtype=torch.float32, device=x.device)) if size else None
        self.workspace = ws
        w_code = DTYPE_CODES[w.dtype] if w is not None else DTYPE_CODES[x.dtype]
        with self._guard(x) if self._guard is not None else _NO_GUARD:
            lib.backward(
                self._stream(x),
                self._block_dim(x),
                DTYPE_CODES[x.dtype],
                w_code,
                DTYPE_CODES[dy_k.dtype],
                _ptr(dy_k),
                _ptr(x),
                _ptr(w),
                _ptr(rstd),
                _ptr(gro),
                _ptr(dx),
                _ptr(dw),
                _ptr(ws),
                rows,
                hidden,
                inv_hidden(hidden),
                to_f32(offset),
            )
        if dw is not None and dw.dtype != weight.dtype:
            dw = _canonical(dw.to(weight.dtype))
        return dx, dw
