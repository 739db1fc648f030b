"""A backend that runs the Ascend C kernels through their ``extern "C"`` launchers.

The same class serves ``npu`` (the library bisheng built, tensors on the NPU, launched on the
current stream) and ``emu`` (the same source built by the host C++ compiler against
``kernels/emu``, tensors on the CPU). It owns the tensor plumbing: contiguity, the all-ones
weight for ``weight=None``, output and workspace allocation, dtype codes.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Callable

import torch

from ..contract import DTYPE_CODES, inv_hidden, resolve_mode, to_f32
from ..jit.library import KernelLibrary

#: The largest hidden size the kernels take (kMaxHidden in kernels/rmsnorm.asc; a test checks the two
#: agree). backends/choice.py refuses wider rows for explicit emu/npu and falls back under auto.
MAX_HIDDEN = 1 << 20


class KernelBackend:
    """forward/backward of the backend protocol on top of a kernel library.

    Args:
        name: ``"npu"`` or ``"emu"``, for messages.
        library: returns the loaded library (built or fetched from the cache on first use).
        stream: returns the stream handle to launch on, read right before each launch.
        block_dim: returns the number of blocks to ask for (the launcher caps it by the work).
        guard: returns a context manager that makes x's device current around the launch.
    """

    def __init__(
        self,
        name: str,
        library: Callable[[], KernelLibrary],
        stream: Callable[[torch.Tensor], object],
        block_dim: Callable[[torch.Tensor], int],
        guard: Callable[[torch.Tensor], AbstractContextManager] = lambda x: contextlib.nullcontext(),
    ) -> None:
        self.name = name
        self._library = library
        self._stream = stream
        self._block_dim = block_dim
        self._guard = guard

    def _weight(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        if weight is None:
            return torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
        if weight.dtype not in (x.dtype, torch.float32):  # any floating weight: widened to fp32 (contract)
            return weight.to(torch.float32).contiguous()
        return weight.contiguous()

    @staticmethod
    def _not_yet(casting_mode: str, offset: float, residual: torch.Tensor | None) -> None:
        """Modes, offset and the fused residual are issue 10's kernel work; refused until they land."""
        formula, offset = resolve_mode(casting_mode, offset)
        if formula != "fp32" or offset != 0.0 or residual is not None:
            raise NotImplementedError(
                f"the kernels do not implement casting_mode={casting_mode!r}, offset={offset!r}"
                f"{', residual' if residual is not None else ''} yet"
            )

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
        self._not_yet(casting_mode, offset, residual)
        lib = self._library()
        x = x2d.contiguous()
        w = self._weight(x, weight)
        rows, hidden = x.shape
        y = torch.empty_like(x)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        with self._guard(x):
            self._launch_forward(lib, x, w, y, rstd, eps)
        return y, rstd, None

    def _launch_forward(self, lib, x, w, y, rstd, eps) -> None:
        rows, hidden = x.shape
        lib.forward(
            self._stream(x),
            self._block_dim(x),
            DTYPE_CODES[x.dtype],
            x.data_ptr(),
            w.data_ptr(),
            y.data_ptr(),
            rstd.data_ptr(),
            rows,
            hidden,
            to_f32(eps),
            inv_hidden(hidden),
            DTYPE_CODES[w.dtype],
        )

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
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        self._not_yet(casting_mode, offset, None)
        lib = self._library()
        x = x2d.contiguous()
        dy = dy.to(x.dtype).contiguous()
        rstd = rstd.reshape(-1).contiguous()
        w = self._weight(x, weight)
        rows, hidden = x.shape
        dx = torch.empty_like(x)
        dw = ws = None
        if need_dw and weight is not None:
            dw = torch.empty(hidden, dtype=w.dtype, device=x.device)
            ws = torch.empty(lib.workspace_bytes(rows, hidden) // 4, dtype=torch.float32, device=x.device)
        with self._guard(x):
            self._launch_backward(lib, dy, x, w, rstd, dx, dw, ws)
        if dw is not None and dw.dtype != weight.dtype:
            dw = dw.to(weight.dtype)
        return (dx if need_dx else None), dw

    def _launch_backward(self, lib, dy, x, w, rstd, dx, dw, ws) -> None:
        rows, hidden = x.shape
        lib.backward(
            self._stream(x),
            self._block_dim(x),
            DTYPE_CODES[x.dtype],
            dy.data_ptr(),
            x.data_ptr(),
            w.data_ptr(),
            rstd.data_ptr(),
            dx.data_ptr(),
            dw.data_ptr() if dw is not None else None,
            ws.data_ptr() if ws is not None else None,
            rows,
            hidden,
            inv_hidden(hidden),
            DTYPE_CODES[w.dtype],
        )
