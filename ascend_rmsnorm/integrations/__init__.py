"""Ways into unmodified model code: ``batch_invariant_mode`` (dispatcher overrides of aten::rms_norm
and torch_npu's RMSNorm ops) and ``patch_transformers`` (swap Hugging Face RMSNorm classes)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .batch_invariant import batch_invariant_mode, disable, enable, is_enabled


def patch_transformers(
    model: nn.Module | None = None,
    *,
    casting_mode: str | None = None,
    families: Sequence[str] | None = None,
):
    """Swap Hugging Face RMSNorm layers for this package's ``RMSNorm``, each with its class's formula
    (or ``casting_mode``'s, "fp32" or "llama", keeping each class's offset); returns a ``PatchReport``.
    See ``ascend_rmsnorm.integrations.transformers.patch_transformers`` (imported on first use, so
    ``import ascend_rmsnorm`` does not pay for it)."""
    from .transformers import patch_transformers as _patch

    return _patch(model, casting_mode=casting_mode, families=families)


__all__ = ["batch_invariant_mode", "disable", "enable", "is_enabled", "patch_transformers"]
