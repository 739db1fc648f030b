"""The ``emu`` backend: the real ``kernels/rmsnorm.asc`` compiled by the host C++ compiler against
the CPU emulation in ``kernels/emu`` and run on CPU tensors, every block in a shuffled order.

It exists to test and debug the kernel where no NPU is: the emulation enforces the rules the
hardware enforces (or silently breaks), and its results must equal the ``torch`` backend's bit
for bit. A rule violation aborts the process with the rule's name and its documentation page.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from .kernel_backend import KernelBackend
from .library import KernelLibrary

#: The arch the emulation models (its UB budget and the A2/A3 API rules).
EMU_ARCH = "dav-2201"
#: Blocks per launch by default: the vector-core count of an Atlas A2 (910B2) or A3 die.
DEFAULT_BLOCK_DIM = 48

_lock = threading.Lock()
_library: KernelLibrary | None = None


def library() -> KernelLibrary:
    """The emu kernel library, built (or taken from the cache) on first use."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                from . import library as _lib

                _library = _lib.load(_simple_build())
    return _library


KERNELS = Path(__file__).resolve().parent / "kernels"


def _simple_build() -> Path:
    """Compile rmsnorm.asc for the emulation into a content-keyed directory (interim; the JIT cache takes over)."""
    cxx = shutil.which(os.environ.get("ASCEND_RMSNORM_CXX", "c++")) or "c++"
    flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-x", "c++", "-ffp-contract=off", "-DASCEND_RMSNORM_EMU=1"]
    digest = hashlib.sha256(" ".join([cxx, *flags]).encode())
    for f in sorted(KERNELS.rglob("*")):
        if f.is_file():
            digest.update(f.relative_to(KERNELS).as_posix().encode() + f.read_bytes())
    root = Path(os.environ.get("ASCEND_RMSNORM_CACHE_DIR") or Path(tempfile.gettempdir()) / "ascend_rmsnorm-emu")
    out = root / "emu-simple" / digest.hexdigest()[:24] / "librmsnorm.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".tmp-{os.getpid()}.so")
        cmd = [cxx, *flags, "-I", str(KERNELS / "emu"), str(KERNELS / "rmsnorm.asc"), "-o", str(tmp)]
        subprocess.run(cmd, check=True)
        os.replace(tmp, out)
    return out


def _cpu_only(x: torch.Tensor) -> None:
    if x.device.type != "cpu":
        raise ValueError(f"the emu backend runs on CPU tensors; x is on {x.device}")


def _stream(x: torch.Tensor) -> None:
    _cpu_only(x)
    return None


BACKEND = KernelBackend("emu", library, _stream, lambda x: DEFAULT_BLOCK_DIM)


def with_block_dim(block_dim: int) -> KernelBackend:
    """An emu backend that asks for ``block_dim`` blocks (tests use it to vary the launch)."""
    return KernelBackend("emu", library, _stream, lambda x: block_dim)


def peak_ub(kernel: str) -> int:
    """UB bytes the largest block of ``kernel`` (e.g. "rmsnorm_fwd_bf16_bf16") reserved since reset_stats()."""
    fn = library().symbol("ascend_rmsnorm_emu_peak_ub")
    fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_char_p]
    return int(fn(kernel.encode()))


def reset_stats() -> None:
    library().symbol("ascend_rmsnorm_emu_reset_stats")()
