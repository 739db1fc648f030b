"""The ``npu`` backend: kernels built by CANN's bisheng for this device's arch, launched on the
current NPU stream through the ``extern "C"`` launchers (docs/design.md §2).

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

from .._forksafe import renew_in_child
from .._log import get_logger
from ..errors import AscendRMSNormError, KernelCompileError, KernelLaunchError, LibraryLoadError
from ..jit.library import KernelLibrary
from . import acl_thread_error
from .kernel import KernelBackend

#: Blocks to ask for when the vector core count is unknown (the smallest A2 part, 910B3/B4, has 40).
FALLBACK_VECTOR_CORES = 40
#: vector_cores' source when no count was found (FALLBACK_VECTOR_CORES is a guess, not the device's)
VECTOR_CORES_UNKNOWN = "fallback (vector core count unknown)"

_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang
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


#: Failures of a build that ran, remembered for the process (until ``reset``): the same sources and compiler
#: fail the same way, and a build takes minutes, during which the node's other ranks wait for the lock.
#: Without this a failed build ran twice per process: at import (``build_on_import``) and at the first call.
REMEMBERED_FAILURES = (KernelCompileError, LibraryLoadError)


def library() -> KernelLibrary:
    """The npu kernel library, from the cache (or built into it once); the result is memoised, and so is
    a failed build (``REMEMBERED_FAILURES``)."""
    lib = _state.get("library")
    if lib is None:
        with _lock:
            lib = _state.get("library")
            if lib is None:
                failed = _state.get("failed")
                if failed is not None:
                    raise failed  # type: ignore[misc]
                from ..jit import cache

                tc, arch = _target()
                try:
                    lib = cache.get_library(tc, arch.arch)
                except REMEMBERED_FAILURES as err:
                    _state["failed"] = err
                    raise
                _state["library"] = lib
                _state["arch"] = arch
    return lib  # type: ignore[return-value]


def _stream(x: torch.Tensor) -> int:
    """The raw ``aclrtStream`` of x's device's current stream, read right before the launch."""
    return submitted(torch.npu.current_stream(x.device), x.device)


def submitted(stream, device: torch.device) -> int:
    """``stream``'s raw ``aclrtStream``, once torch_npu has submitted what it queued for it (reading
    ``npu_stream`` drains its task queue: event records and its own ops go before a ctypes launch).

    torch_npu returns 0 (a null pointer) when draining its task queue failed (``NPUStream::stream()``);
    launching on 0 would run on the default stream, unordered against the ops that made the inputs, so a 0
    stream is an error and nothing is launched.
    """
    raw = stream.npu_stream
    if not raw:
        raise KernelLaunchError(
            f"torch_npu returned a null stream for {device}: draining its task queue failed (see the "
            "torch_npu/CANN error reported before this one, and the CANN logs under ~/ascend/log). Nothing was "
            "launched: on the default stream the kernel would run unordered against the ops that made its inputs"
        )
    return raw


def _device_index(device: torch.device) -> int:
    if device.index is not None:
        return int(device.index)
    try:
        return int(torch.npu.current_device())
    except Exception:  # noqa: BLE001
        return 0


def vector_cores(device: torch.device) -> tuple[int, str]:
    """(vector cores of ``device``, where the number came from), memoised per device.

    ``torch.npu.get_device_properties(d).vector_core_num`` first (the running device itself), then the
    SoC's platform ini under the CANN root, then the built-in table, then ``FALLBACK_VECTOR_CORES``.
    """
    index = _device_index(device)
    memo = _state.setdefault("vector_cores", {})
    found = memo.get(index)  # type: ignore[union-attr]
    if found is not None:
        return found
    found = _count_vector_cores(device)
    memo[index] = found  # type: ignore[index]
    return found


def _count_vector_cores(device: torch.device) -> tuple[int, str]:
    try:
        n = int(getattr(torch.npu.get_device_properties(device), "vector_core_num", 0) or 0)
        if n > 0:
            return n, "torch.npu.get_device_properties"
    except Exception:  # noqa: BLE001 - older torch_npu has no such property
        pass
    arch = _state.get("arch")
    n = getattr(arch, "vector_cores", None)
    if n:
        return int(n), f"{getattr(arch, 'source', 'the arch detection')}"
    try:  # the arch came from ASCEND_RMSNORM_ARCH: ask the SoC's ini or the table by the device's name
        from ..jit import toolchain

        soc = str(torch.npu.get_device_name(device))
        cann = toolchain.find_cann()
        info = toolchain.soc_arch(soc, cann.root if cann else None)
        if info.vector_cores:
            return int(info.vector_cores), f"{soc} {info.source}"
    except Exception:  # noqa: BLE001
        pass
    return FALLBACK_VECTOR_CORES, VECTOR_CORES_UNKNOWN


def stream_core_limit(device: torch.device) -> int | None:
    """The vector-core limit set on the current stream (``torch.npu.set_stream_limit`` or the device
    limit behind it), or None when none is set or this torch_npu cannot tell. Read at every launch: a
    limit may be set at any time."""
    get_limit = getattr(torch.npu, "get_stream_limit", None)
    if get_limit is None or _state.get("no_stream_limit"):
        return None
    # Until one read has worked, a failed read's thread error is ours to take (acl_thread_error.py)
    probe = None if _state.get("stream_limit_read") else acl_thread_error.watch()
    try:
        limits = get_limit(torch.npu.current_stream(device))
        n = int((limits or {}).get("vector_core_num", 0) or 0)
    except Exception:  # noqa: BLE001 - unsupported here: stop asking
        _state["no_stream_limit"] = True
        if probe is not None:
            probe.failed()
        return None
    _state["stream_limit_read"] = True
    return n if n > 0 else None


def _block_dim(x: torch.Tensor) -> int:
    """Blocks to ask for: the device's vector cores, capped by the current stream's core limit."""
    cores, _ = vector_cores(x.device)
    limit = stream_core_limit(x.device)
    return max(1, min(cores, limit) if limit else cores)


def _guard(x: torch.Tensor):
    return torch.npu.device(x.device)


#: torch_npu storage formats whose bytes are the tensor's row-major order, which the kernels read (CANN
#: ``include/acl/acl_base.h``: ACL_FORMAT_NCHW 0, ACL_FORMAT_ND 2, ACL_FORMAT_NCDHW 30; torch_npu gives
#: these to ordinary tensors). Any other (FRACTAL_NZ 29, NC1HWC0 3, NHWC 1, ...) is laid out otherwise.
ROW_MAJOR_FORMATS = frozenset({0, 2, 30})
ACL_FORMAT_ND = 2


def nd(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its bytes in row-major order: a tensor in a torch_npu internal format is cast to ND.

    Such a tensor (``torch_npu.npu_format_cast(t, 29)``: FRACTAL_NZ) is ``contiguous()`` as it is and its
    ``data_ptr`` holds tiled bytes; torch_npu's ``empty_like`` would even give y that format. The cast moves
    the values, never changes one, so the contract's bits are kept; ND tensors cost one format query."""
    torch_npu = sys.modules.get("torch_npu")
    if torch_npu is None:  # no torch_npu, no NPU tensor (and no storage format to ask about)
        return t
    if torch_npu.get_npu_format(t) in ROW_MAJOR_FORMATS:
        return t
    return torch_npu.npu_format_cast(t, ACL_FORMAT_ND)


BACKEND = KernelBackend("npu", library, _stream, _block_dim, _guard, nd)


def forget_failure() -> None:
    """Let the next ``library()`` build again after a remembered failure (the environment was fixed)."""
    with _lock:
        _state.pop("failed", None)


def reset() -> None:
    """Forget the loaded library, a remembered failed build and the device facts (tests; after changing CANN)."""
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
