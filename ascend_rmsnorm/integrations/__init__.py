"""Ways into unmodified model code: ``batch_invariant_mode`` (dispatcher overrides of aten::rms_norm
and torch_npu's RMSNorm ops) and ``patch_transformers`` (swap Hugging Face RMSNorm classes)."""

from .batch_invariant import batch_invariant_mode, disable, enable, is_enabled
from .transformers import patch_transformers

__all__ = ["batch_invariant_mode", "disable", "enable", "is_enabled", "patch_transformers"]
