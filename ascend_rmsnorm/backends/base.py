"""The backend protocol: what every backend (``torch``, ``emu``, ``npu``) gives the registered ops.

Inputs are 2-D (rows x hidden), the contract's dtypes; each backend gives the contract's bits. The
registered ops pick a backend per call (``choice``) and call only these two methods, so a new backend is
any object that satisfies ``Backend`` (a module or an instance alike).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Backend(Protocol):
    #: The name ``backend=`` and ``ASCEND_RMSNORM_BACKEND`` take, and reports show.
    name: str

    def forward(
        self,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        eps: float,
        /,
        *,
        casting_mode: str = "fp32",
        offset: float = 0.0,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(y2d, rstd, residual_out): with ``residual``, x is first replaced by residual_out = x + residual
        (in x's dtype) and y normalises that; residual_out is None without one."""
        ...

    def backward(
        self,
        dy2d: torch.Tensor,
        x2d: torch.Tensor,
        weight: torch.Tensor | None,
        rstd: torch.Tensor,
        /,
        *,
        casting_mode: str = "fp32",
        offset: float = 0.0,
        need_dx: bool = True,
        need_dw: bool = True,
        grad_residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(dx2d, dw), each None when not needed; ``grad_residual`` (add_rms_norm's gradient of
        residual_out) is added to dx here, inside the backend."""
        ...
