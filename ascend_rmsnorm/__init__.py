"""Batch-invariant RMSNorm for Huawei Ascend NPUs, with the same bits in plain PyTorch elsewhere.

    import ascend_rmsnorm
    y = ascend_rmsnorm.rms_norm(x, weight, eps=1e-6)

With an NPU and CANN on this host, importing the package makes sure the kernel library for the
NPU's arch is built (ASCEND_RMSNORM_JIT=import, the default; a cache hit is silent and fast).
"""

from ._version import __version__
from .functional import add_rms_norm, rms_norm
from .integrations import batch_invariant_mode, patch_transformers
from .modules import RMSNorm


def warmup(backend: "str | None" = None) -> str:
    """Build (or fetch from the cache) and load the kernel library ``backend`` needs; returns what is ready.

    ``None`` is what ``rms_norm(backend=None)`` runs: ``ASCEND_RMSNORM_BACKEND``, else ``auto``.
    ``auto`` prepares the npu kernels when this host has an NPU and does nothing otherwise.
    Raises the build's error (ToolchainNotFoundError, KernelCompileError, ...) so a job can fail early.
    """
    from .backends import choice, emu, npu

    try:
        name = choice.requested_name(backend)
    except (TypeError, ValueError) as err:
        raise type(err)(f"warmup: {err}") from None
    if name == "emu":
        return f"emu kernels loaded from {emu.library().path}"
    if name == "npu" or (name == "auto" and npu.npu_present()):
        return f"npu kernels loaded from {npu.library().path}"
    return "nothing to build: the torch path needs no kernels"


def info() -> dict:
    """What this host has and what the auto backend would use (the `ascend-rmsnorm info --json` data)."""
    from .cli import info as host_info

    return host_info.gather()


__all__ = [
    "RMSNorm",
    "__version__",
    "add_rms_norm",
    "batch_invariant_mode",
    "info",
    "patch_transformers",
    "rms_norm",
    "warmup",
]


def _build_on_import() -> None:
    from .backends import npu

    npu.build_on_import()


_build_on_import()
