"""The ``npu`` backend: kernels built by CANN's bisheng for this device's arch, launched on the
current NPU stream through the ``extern "C"`` launchers (DESIGN.md §2).

Nothing here imports ``torch_npu``: an NPU tensor can only exist once the user has imported it.
The stream is read right before each launch (reading ``npu_stream`` drains torch_npu's task queue,
so the kernel cannot overtake the ops that produced its inputs), never cached.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import torch

from .._log import get_logger
from ..errors import AscendRMSNormError
from ..jit.library import KernelLibrary
from .kernel import KernelBackend

#: Blocks to ask for when the vector core count is unknown (the smallest A2 part, 910B3/B4, has 40).
FALLBACK_VECTOR_CORES = 40

_lock = threading.Lock()
_state: dict[str, object] = {}


def npu_present() -> bool:
    """Whether this host has an Ascend NPU, without importing torch_npu (so without slowing anything)."""
    if "torch_npu" in sys.modules:
        try:
            return bool(torch.npu.is_available())
        except Exception:  # noqa: BLE001 - a broken driver install must not break callers
            return False
    return os.path.exists("/dev/davinci0") or os.path.exists("/dev/davinci_manager")


def _target():
    """(toolchain, ArchInfo) for this host; raises AscendRMSNormError subclasses that say what to fix."""
    from ..jit import toolchain

    tc = toolchain.npu_toolchain()
    return tc, toolchain.detect_arch(tc.cann_root)


def library() -> KernelLibrary:
    """The npu kernel library, from the cache (or built into it once); the result is memoised."""
    lib = _state.get("library")
    if lib is None:
        with _lock:
            lib = _state.get("library")
            if lib is None:
                from ..jit import cache

                tc, arch = _target()
                lib = cache.get_library(tc, arch.arch)
                _state["library"] = lib
                _state["arch"] = arch
    return lib  # type: ignore[return-value]


def _stream(x: torch.Tensor) -> int:
    return torch.npu.current_stream(x.device).npu_stream


def _block_dim(x: torch.Tensor) -> int:
    cores = _state.get("vector_cores")
    if cores is None:
        arch = _state.get("arch")
        cores = getattr(arch, "vector_cores", None)
        if not cores:
            try:
                cores = int(torch.npu.get_device_properties(x.device).vector_core_num)
            except Exception:  # noqa: BLE001 - older torch_npu has no such property
                cores = FALLBACK_VECTOR_CORES
        _state["vector_cores"] = cores
    return int(cores)  # type: ignore[arg-type]


def _guard(x: torch.Tensor):
    return torch.npu.device(x.device)


BACKEND = KernelBackend("npu", library, _stream, _block_dim, _guard)


def reset() -> None:
    """Forget the loaded library and the device facts (tests; after changing CANN)."""
    with _lock:
        _state.clear()


def build_on_import() -> None:
    """``ASCEND_RMSNORM_JIT=import``: with an NPU and CANN here, make sure the library is built.

    Never raises: a failure is logged and the first call reports it again (and falls back or raises
    as ``backend`` and ``ASCEND_RMSNORM_STRICT`` say). A cache hit is silent. Without an NPU this
    costs two stat() calls and imports nothing more.
    """
    try:
        if not npu_present():
            return
        from ..jit import cache

        if cache.jit_mode() != "import":
            return
        start = time.perf_counter()
        library()
        took = time.perf_counter() - start
        if took > 1.0:
            get_logger().info("kernel library ready in %.1f s", took)
    except AscendRMSNormError as err:
        first = str(err).split("\n")[0]
        get_logger().warning("npu kernels unavailable at import (%s); the first call will say more", first)
    except Exception as err:  # noqa: BLE001 - import must never fail because of a build
        get_logger().warning("npu kernel set-up at import failed: %r", err)
