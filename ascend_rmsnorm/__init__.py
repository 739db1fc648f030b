"""Batch-invariant RMSNorm for Huawei Ascend NPUs, with the same bits in plain PyTorch elsewhere."""

from ._version import __version__
from .modules import RMSNorm
from .ops import rms_norm

__all__ = ["RMSNorm", "__version__", "rms_norm"]
