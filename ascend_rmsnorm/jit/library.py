"""ctypes face of a built kernel library: load it once, check its ABI, declare the launchers.

The C ABI (DESIGN.md §4) is plain C types only, so nothing here depends on torch's or the
compiler's C++ ABI:

    int32_t ascend_rmsnorm_abi_version(void);
    int64_t ascend_rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t hidden);
    int32_t ascend_rmsnorm_plan(int32_t direction, int32_t dtype, int32_t w_dtype, int64_t rows,
                                int64_t hidden, uint32_t block_dim, int32_t *path, int32_t *group_rows,
                                int64_t *ub_bytes);
    int32_t ascend_rmsnorm_fwd(void *stream, uint32_t block_dim, int32_t dtype,
                               void *x, void *w, void *y, void *rstd,
                               int64_t rows, int64_t hidden, float eps, float inv_h, int32_t w_dtype);
    int32_t ascend_rmsnorm_bwd(void *stream, uint32_t block_dim, int32_t dtype,
                               void *dy, void *x, void *w, void *rstd, void *dx, void *dw, void *workspace,
                               int64_t rows, int64_t hidden, float inv_h, int32_t w_dtype);
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import NamedTuple

from ..errors import KernelLaunchError, LibraryLoadError

#: Bumped whenever a launcher's signature or meaning changes; a library with another number is refused.
ABI_VERSION = 1

#: Launcher status codes (kept in step with the ST_* constants in kernels/rmsnorm.asc).
STATUS_TEXT = {
    0: "ok",
    1: "bad shape (rows < 0, hidden < 1 or too large)",
    2: "bad dtype code",
    3: "block_dim out of range",
    4: "null pointer",
}

_c = ctypes
_PROTOTYPES = {
    "ascend_rmsnorm_abi_version": (_c.c_int32, []),
    "ascend_rmsnorm_bwd_workspace_bytes": (_c.c_int64, [_c.c_int64, _c.c_int64]),
    "ascend_rmsnorm_plan": (
        _c.c_int32,
        [_c.c_int32, _c.c_int32, _c.c_int32, _c.c_int64, _c.c_int64, _c.c_uint32]
        + [_c.POINTER(_c.c_int32), _c.POINTER(_c.c_int32), _c.POINTER(_c.c_int64)],
    ),
    "ascend_rmsnorm_fwd": (
        _c.c_int32,
        [_c.c_void_p, _c.c_uint32, _c.c_int32]
        + [_c.c_void_p] * 4
        + [_c.c_int64, _c.c_int64, _c.c_float, _c.c_float, _c.c_int32],
    ),
    "ascend_rmsnorm_bwd": (
        _c.c_int32,
        [_c.c_void_p, _c.c_uint32, _c.c_int32] + [_c.c_void_p] * 7 + [_c.c_int64, _c.c_int64, _c.c_float, _c.c_int32],
    ),
}


class KernelLibrary:
    """A loaded kernel library with its launchers' prototypes declared."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            lib = ctypes.CDLL(str(self.path))
        except OSError as err:
            raise LibraryLoadError(f"cannot load kernel library {self.path}: {err}") from err
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as err:
                raise LibraryLoadError(f"kernel library {self.path} lacks the symbol {name}") from err
            fn.restype, fn.argtypes = restype, argtypes
        version = lib.ascend_rmsnorm_abi_version()
        if version != ABI_VERSION:
            raise LibraryLoadError(
                f"kernel library {self.path} has ABI version {version}, this package needs {ABI_VERSION}"
            )
        self._lib = lib

    def forward(self, stream, block_dim, dtype, x, w, y, rstd, rows, hidden, eps, inv_h, w_dtype) -> None:
        _check(
            "ascend_rmsnorm_fwd",
            self._lib.ascend_rmsnorm_fwd(stream, block_dim, dtype, x, w, y, rstd, rows, hidden, eps, inv_h, w_dtype),
        )

    def backward(self, stream, block_dim, dtype, dy, x, w, rstd, dx, dw, ws, rows, hidden, inv_h, w_dtype) -> None:
        _check(
            "ascend_rmsnorm_bwd",
            self._lib.ascend_rmsnorm_bwd(
                stream, block_dim, dtype, dy, x, w, rstd, dx, dw, ws, rows, hidden, inv_h, w_dtype
            ),
        )

    def workspace_bytes(self, rows: int, hidden: int) -> int:
        return int(self._lib.ascend_rmsnorm_bwd_workspace_bytes(rows, hidden))

    def plan(self, direction: str, dtype: int, w_dtype: int, rows: int, hidden: int, block_dim: int) -> Plan:
        """The kernel's plan for a shape: which path, rows per DMA (or dw slice width), UB bytes per block."""
        code = {"forward": 0, "backward": 1, "dw": 2}[direction]
        path, group, ub = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int64()
        _check(
            "ascend_rmsnorm_plan",
            self._lib.ascend_rmsnorm_plan(
                code, dtype, w_dtype, rows, hidden, block_dim, ctypes.byref(path), ctypes.byref(group), ctypes.byref(ub)
            ),
        )
        return Plan(PATH_NAMES.get(path.value, "dw reduce"), group.value, ub.value)

    def symbol(self, name: str):
        """An extra symbol of this library (e.g. the emulator's statistics), or None."""
        return getattr(self._lib, name, None)


class Plan(NamedTuple):
    path: str
    group_rows: int
    ub_bytes: int


PATH_NAMES = {0: "forward resident", 1: "forward streamed", 2: "backward resident", 3: "backward tiled"}


def _check(name: str, status: int) -> None:
    if status != 0:
        raise KernelLaunchError(f"{name} returned {status}: {STATUS_TEXT.get(status, 'unknown status')}")


_loaded: dict[Path, KernelLibrary] = {}
_lock = threading.Lock()


def load(path: Path) -> KernelLibrary:
    """Load a library once per process (dlopen of a path already loaded would return the old mapping anyway)."""
    path = Path(path).resolve()
    with _lock:
        lib = _loaded.get(path)
        if lib is None:
            lib = _loaded[path] = KernelLibrary(path)
        return lib
