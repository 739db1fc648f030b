"""``RMSNorm``: an ``nn.Module`` over ``rms_norm``, state-dict compatible with torch/HF RMSNorm layers."""

from __future__ import annotations

import torch
from torch import nn

from .functional import rms_norm


class RMSNorm(nn.Module):
    """Batch-invariant RMSNorm over the last dimension; the scale parameter is named ``weight``."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"RMSNorm: hidden_size must be a positive int, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.backend = backend
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    @property
    def variance_epsilon(self) -> float:
        """The name Hugging Face RMSNorm layers use for eps."""
        return self.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, backend=self.backend)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
