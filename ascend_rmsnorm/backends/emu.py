"""The ``emu`` backend: the real ``kernels/rmsnorm.asc`` compiled by the host C++ compiler against
the CPU emulation in ``kernels/emu`` and run on CPU tensors, every block in a shuffled order.

It exists to test and debug the kernel where no NPU is: the emulation enforces the rules the
hardware enforces (or silently breaks), and its results must equal the ``torch`` backend's bit
for bit. A rule violation aborts the process with the rule's name and its documentation page.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import torch

from .._forksafe import renew_in_child
from ..jit.library import KernelLibrary
from .kernel import KernelBackend

#: The arch the emulation models (its UB budget and the A2/A3 API rules).
EMU_ARCH = "dav-2201"
#: Blocks per launch by default: the vector-core count of an Atlas A2 (910B2) or A3 die.
DEFAULT_BLOCK_DIM = 48

_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang
_library: KernelLibrary | None = None
KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def library() -> KernelLibrary:
    """The emu kernel library: from the JIT cache, built there by the host C++ compiler on first use."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                from ..jit import cache, toolchain

                _library = cache.get_library(toolchain.emu_toolchain(), EMU_ARCH)
    return _library


def _cpu_only(x: torch.Tensor) -> None:
    if not x.is_cpu:
        raise ValueError(f"the emu backend runs on CPU tensors; x is on {x.device}")


def _stream(x: torch.Tensor) -> None:
    _cpu_only(x)
    return None


def with_block_dim(block_dim: int) -> KernelBackend:
    """An emu backend that asks for ``block_dim`` blocks (tests use it to vary the launch). Its outputs
    start as 0xFF bytes (``KernelBackend``'s ``poison``), as indeterminate as an NPU's."""
    return KernelBackend("emu", library, _stream, lambda x: block_dim, poison=True)


BACKEND = with_block_dim(DEFAULT_BLOCK_DIM)


def _kernel_stat(symbol: str, kernel: str) -> int:
    """The emulation's uint32 figure ``symbol`` keeps per kernel name since reset_stats() (0: no launch)."""
    fn = library().symbol(symbol)
    fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_char_p]
    return int(fn(kernel.encode()))


def peak_ub(kernel: str) -> int:
    """UB bytes the largest block of ``kernel`` (e.g. "rmsnorm_fwd_bf16_bf16") reserved since reset_stats()."""
    return _kernel_stat("ascend_rmsnorm_emu_peak_ub", kernel)


def last_blocks(kernel: str) -> int:
    """The blocks the last launch of ``kernel`` since reset_stats() ran on (0: none): what the launcher
    made of the block_dim asked for."""
    return _kernel_stat("ascend_rmsnorm_emu_last_blocks", kernel)


def reset_stats() -> None:
    library().symbol("ascend_rmsnorm_emu_reset_stats")()


def device_ns() -> int:
    """Nanoseconds this thread has spent inside emulated kernel launches: what an NPU would spend on the
    device, asynchronously. The host-side cost of a call is its wall time minus this."""
    fn = library().symbol("ascend_rmsnorm_emu_device_ns")
    fn.restype, fn.argtypes = ctypes.c_uint64, []
    return int(fn())
