"""tests/support/perf_kernels.cpp built against kernels/emu with its perf hooks: the small kernels whose
counts and replayed times the perf tests compute by hand."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.perf import kernel as perf_kernel

SOURCE = Path(__file__).resolve().parent / "perf_kernels.cpp"
CXX = shutil.which(os.environ.get("ASCEND_RMSNORM_CXX", "c++")) or "c++"


def build(out_dir: Path) -> tuple[ctypes.CDLL, perf_kernel.PerfHooks]:
    """Compile the kernels into ``out_dir``; the library with its entry points declared, and its hooks."""
    out = Path(out_dir) / "libperf_kernels.so"
    done = subprocess.run(
        [CXX, "-std=c++17", "-O1", "-fPIC", "-shared", "-I", str(emu.KERNELS / "emu"), str(SOURCE), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    raw = ctypes.CDLL(str(out))
    raw.perf_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint32] * 6
    raw.perf_vector.argtypes = [ctypes.c_uint32]
    raw.perf_select.argtypes = [ctypes.c_uint32]
    raw.perf_canon.argtypes = [ctypes.c_uint32]
    raw.perf_chain.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    raw.perf_overwrite.argtypes = [ctypes.c_int32]
    raw.perf_unhooked.argtypes = []
    return raw, perf_kernel.PerfHooks(raw, out)
