"""ctypes face of a built kernel library: load it once, check its ABI, declare the launchers.

The C ABI (docs/design.md §4) is plain C types only, so nothing here depends on torch's or the
compiler's C++ ABI. ABI 7:

    int32_t ascend_rmsnorm_abi_version(void);                       // 7
    int32_t ascend_rmsnorm_launch_check_state(void);                // -1 unchecked, 0 checked, else an old error
    int64_t ascend_rmsnorm_max_hidden(void);                        // the largest H the kernels take
    int64_t ascend_rmsnorm_dw_chunk_rows(int64_t rows);             // docs/design.md §3 item 4's R
    int64_t ascend_rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t hidden);
    int32_t ascend_rmsnorm_plan2(int32_t direction, int32_t dtype, int32_t w_dtype, int32_t out_dtype,
                                 int32_t flags, int64_t rows, int64_t hidden, uint32_t block_dim,
                                 int64_t out[12]);
    int32_t ascend_rmsnorm_fwd(void *stream, uint32_t block_dim, int32_t dtype, int32_t w_dtype,
                               int32_t y_dtype, void *x, void *w, void *y, void *rstd, int64_t rows,
                               int64_t hidden, float eps, float inv_h, float offset, int32_t formula);
    int32_t ascend_rmsnorm_add_fwd(void *stream, uint32_t block_dim, int32_t dtype, int32_t w_dtype,
                                   int32_t y_dtype, void *x, void *residual, void *w, void *y, void *rstd,
                                   void *residual_out, int64_t rows, int64_t hidden, float eps, float inv_h,
                                   float offset, int32_t formula);
    int32_t ascend_rmsnorm_bwd(void *stream, uint32_t block_dim, int32_t dtype, int32_t w_dtype,
                               int32_t dy_dtype, void *dy, void *x, void *w, void *rstd, void *grad_residual,
                               void *dx, void *dw, void *workspace, int64_t rows, int64_t hidden, float inv_h,
                               float offset);

A null ``w`` means no weight (w = 1); a null ``dx``/``dw`` is not written. A non-null ``grad_residual``
(add_rms_norm's gradient of residual_out, x's dtype and shape) is added to dx inside the kernel:
dx = cast_x(float(dx in x's dtype) + float(grad_residual)), canonical NaN (ABI 3; ABI 2 had no such
argument). ``w_dtype`` is x's dtype
code or fp32's; ``y_dtype``/``dy_dtype`` x's, or fp32 when the weight is fp32 or absent.

A launcher returns 0, one of ``STATUS_TEXT``'s codes, or, for a kernel launch the runtime refused, the
code that ``aclrtGetLastError`` gave (ACL's codes are 100000 and up; one below 100 becomes 7), once
nothing more is launched (kernels/host/launch_check.h; ABI 5). Launches are checked only where CANN has
the functions and the thread had no error before; ``ascend_rmsnorm_launch_check_state`` says which
(-1: CANN lacks them; 0: checked; else the error an earlier call left on this thread).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import threading
from pathlib import Path
from typing import NamedTuple

from .._forksafe import renew_in_child
from ..errors import KernelLaunchError, LibraryLoadError
from .toolchain import loaded_acl
from .trust import fd_path

#: Bumped whenever a launcher's signature or meaning changes; a library with another number is refused.
ABI_VERSION = 7

#: Launcher status codes (kept in step with the ST_* constants in kernels/host/tiling.h).
STATUS_TEXT = {
    0: "ok",
    1: "bad shape (rows < 0 or hidden < 1)",
    2: "bad dtype code or combination",
    3: "block_dim out of range",
    4: "null pointer",
    5: "hidden above the kernels' limit (ascend_rmsnorm_max_hidden), or no plan fits the UB",
    6: "bad argument (unknown formula)",
    7: "the runtime refused a kernel launch (its error code was not one ACL documents)",
}
#: A launcher status from here up is the ACL error code of a launch the runtime refused; REFUSED_NO_CODE
#: one whose code was below it (kernels/host/launch_check.h kFirstRuntimeCode, kRefusedNoCode).
FIRST_RUNTIME_CODE = 100
REFUSED_NO_CODE = 7

#: The bits of ``plan2``'s ``flags`` (the kernels' kFlag* constants) that the host sets here.
FLAG_WEIGHT, FLAG_DX, FLAG_DW = 4, 16, 32

_c = ctypes
_P = _c.c_void_p
_PROTOTYPES = {
    "ascend_rmsnorm_abi_version": (_c.c_int32, []),
    "ascend_rmsnorm_launch_check_state": (_c.c_int32, []),
    "ascend_rmsnorm_max_hidden": (_c.c_int64, []),
    "ascend_rmsnorm_dw_chunk_rows": (_c.c_int64, [_c.c_int64]),
    "ascend_rmsnorm_bwd_workspace_bytes": (_c.c_int64, [_c.c_int64, _c.c_int64]),
    "ascend_rmsnorm_plan2": (
        _c.c_int32,
        [_c.c_int32] * 5 + [_c.c_int64, _c.c_int64, _c.c_uint32, _c.POINTER(_c.c_int64)],
    ),
    "ascend_rmsnorm_fwd": (
        _c.c_int32,
        [_P, _c.c_uint32] + [_c.c_int32] * 3 + [_P] * 4 + [_c.c_int64, _c.c_int64] + [_c.c_float] * 3 + [_c.c_int32],
    ),
    "ascend_rmsnorm_add_fwd": (
        _c.c_int32,
        [_P, _c.c_uint32] + [_c.c_int32] * 3 + [_P] * 6 + [_c.c_int64, _c.c_int64] + [_c.c_float] * 3 + [_c.c_int32],
    ),
    "ascend_rmsnorm_bwd": (
        _c.c_int32,
        [_P, _c.c_uint32] + [_c.c_int32] * 3 + [_P] * 8 + [_c.c_int64, _c.c_int64, _c.c_float, _c.c_float],
    ),
}


class KernelLibrary:
    """A loaded kernel library with its launchers' prototypes declared.

    It is loaded through the open file ``fd`` (``/proc/self/fd/N``), never by ``path`` (which only names
    it in messages): whatever happens to the path, the inode that runs is the one the caller opened and
    checked. ``identity`` is that inode's (st_dev, st_ino)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = Path(path)
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self._fd, name = unloaded_fd_name(fd)  # kept open while loaded: its number is never reused
        try:
            lib = ctypes.CDLL(name)
        except OSError as err:
            os.close(self._fd)
            raise LibraryLoadError(f"cannot load kernel library {self.path}: {_named(err, name, self.path)}") from err
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as err:
                raise LibraryLoadError(f"kernel library {self.path} lacks the symbol {name}") from err
            fn.restype, fn.argtypes = restype, argtypes
            if name == "ascend_rmsnorm_abi_version":  # first: another ABI's library may lack the rest
                version = fn()
                if version != ABI_VERSION:
                    raise LibraryLoadError(
                        f"kernel library {self.path} has ABI version {version}, this package needs {ABI_VERSION}"
                    )
        self._lib = lib

    # The launchers take their arguments positionally, in the order of the prototypes in this module's
    # docstring; a non-zero status becomes a KernelLaunchError naming the launcher.
    def forward(self, *args) -> None:
        _check("ascend_rmsnorm_fwd", self._lib.ascend_rmsnorm_fwd(*args))

    def add_forward(self, *args) -> None:
        _check("ascend_rmsnorm_add_fwd", self._lib.ascend_rmsnorm_add_fwd(*args))

    def backward(self, *args) -> None:
        _check("ascend_rmsnorm_bwd", self._lib.ascend_rmsnorm_bwd(*args))

    def launch_check_state(self) -> int:
        """Whether a launch the runtime refuses on this thread becomes a KernelLaunchError now
        (kernels/host/launch_check.h): -1 never (CANN lacks the functions), 0 yes, else the error an
        earlier call left on this thread, which keeps its launches unchecked."""
        return int(self._lib.ascend_rmsnorm_launch_check_state())

    def workspace_bytes(self, rows: int, hidden: int) -> int:
        return int(self._lib.ascend_rmsnorm_bwd_workspace_bytes(rows, hidden))

    def max_hidden(self) -> int:
        return int(self._lib.ascend_rmsnorm_max_hidden())

    def dw_chunk_rows(self, rows: int) -> int:
        return int(self._lib.ascend_rmsnorm_dw_chunk_rows(rows))

    def plan(
        self,
        direction: str,
        dtype: int,
        w_dtype: int,
        rows: int,
        hidden: int,
        block_dim: int,
        *,
        out_dtype: int | None = None,
        flags: int = FLAG_WEIGHT | FLAG_DX | FLAG_DW,
    ) -> Plan:
        """The kernels' plan for a shape: path, rows per group (dw: slice width), ring slots, sub-tile,
        whether the fp32 weight is held, blocks, UB bytes per block, dw chunk rows and chunks, dy slots, lag,
        dw accumulators."""
        code = {"forward": 0, "backward": 1, "dw": 2}[direction]
        out = (ctypes.c_int64 * 12)()
        _check(
            "ascend_rmsnorm_plan2",
            self._lib.ascend_rmsnorm_plan2(
                code, dtype, w_dtype, dtype if out_dtype is None else out_dtype, flags, rows, hidden, block_dim, out
            ),
        )
        v = list(out)
        path = "dw reduce" if code == 2 else PATH_NAMES.get(v[0], f"path {v[0]}")
        return Plan(path, v[1], v[6], v[2], v[3], bool(v[4]), v[5], v[7], v[9], v[8], v[10], v[11])

    def symbol(self, name: str):
        """An extra symbol of this library (e.g. the emulator's statistics), or None."""
        return getattr(self._lib, name, None)


class Plan(NamedTuple):
    path: str
    group_rows: int  # rows per group (1 off the group path); dw reduce: the column slice
    ub_bytes: int
    slots: int = 1  # ring slots in flight; dw reduce: the stacked form's tree leaves per load (0: all at once)
    sub_tile: int = 0  # fp32 work elements at once
    wide_weight: bool = False  # the fp32 weight (+ offset) is held for the whole row
    blocks: int = 0
    dw_chunk_rows: int = 0
    dw_chunks: int = 0
    dy_slots: int = 0  # backward: slots of dy rows (fewer than `slots` where V frees them before dx is stored)
    #: backward group path: whether a group's steps after its tree (c, dx) share the next group's barrier
    #: windows: 0 no, 1 with a widened dy per group, 2 with one for both (the kernels' PlanLag)
    lag: int = 0
    #: backward: dw accumulators (2: a chunk's partial is stored while the next one adds up; 0 without dw)
    accs: int = 0


#: Path codes of ascend_rmsnorm_plan2 (the kernels' PATH_* constants).
PATH_NAMES = {
    0: "forward group",
    1: "forward stream",
    2: "backward group",
    3: "backward stream",
    4: "forward tiled",
    5: "backward tiled",
}


def _check(name: str, status: int) -> None:
    if status == 0:
        return
    if status == REFUSED_NO_CODE or status >= FIRST_RUNTIME_CODE:
        raise KernelLaunchError(refused_launch_text(name, status))
    raise KernelLaunchError(f"{name} returned {status}: {STATUS_TEXT.get(status, 'unknown status')}")


def refused_launch_text(name: str, status: int) -> str:
    """What a user needs when the runtime refused one of ``name``'s launches (status as the launcher
    returned it): the ACL code, ACL's own message for this thread, that the outputs are not to be used,
    and where the runtime's side is logged."""
    code = f"ACL error {status}" if status >= FIRST_RUNTIME_CODE else "no ACL error code"
    recent = recent_acl_message()
    said = f": {recent}" if recent else ""
    return (
        f"{name}: the runtime refused a kernel launch ({code}{said}); nothing after it was launched, and this "
        "call's outputs are not all written. The CANN logs have the runtime's side (ASCEND_PROCESS_LOG_PATH, "
        "else ~/ascend/log)"
    )


def recent_acl_message() -> str:
    """``aclGetRecentErrMsg()`` of the libascendcl.so this process has loaded (this thread's latest ACL
    error text), or "" where none is loaded or it has nothing to say."""
    acl = loaded_acl()
    try:
        fn = acl.aclGetRecentErrMsg  # type: ignore[union-attr]
        fn.restype, fn.argtypes = ctypes.c_char_p, []
        text = fn()
    except AttributeError:  # none loaded, or it has no such function
        return ""
    return os.fsdecode(text).strip() if text else ""


def _named(err: OSError, name: str, path: Path) -> str:
    """dlopen's message with the fd's name swapped for the path it stands for."""
    return str(err).replace(name, str(path))


class _DlPhdrInfo(ctypes.Structure):
    _fields_ = [("dlpi_addr", ctypes.c_void_p), ("dlpi_name", ctypes.c_char_p)]  # the leading fields only


_DL_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_DlPhdrInfo), ctypes.c_size_t, ctypes.c_void_p)


def loaded_names() -> set[str]:
    """The names of the objects the dynamic linker has loaded in this process (``dl_iterate_phdr``)."""
    names: set[str] = set()

    def note(info, size, data):
        raw = info.contents.dlpi_name
        if raw:
            names.add(os.fsdecode(raw))
        return 0

    try:
        ctypes.CDLL(None).dl_iterate_phdr(_DL_CALLBACK(note), None)
    except (AttributeError, OSError):  # pragma: no cover - no dl_iterate_phdr: the kept fds still hold
        pass
    return names


def unloaded_fd_name(fd: int) -> tuple[int, str]:
    """A duplicate of ``fd`` and its ``/proc/self/fd/N`` name, one the dynamic linker has not loaded yet:
    the name to pass to ``ctypes.CDLL`` for loading the checked file ``fd`` (the kernel library here, the
    calibration library in ``perf.calibrate``).

    glibc's dlopen returns an already loaded object when the *name* matches, before it opens anything:
    ``/proc/self/fd/7`` loaded once (and fd 7 closed and reused since) would hand back the old library.
    A name nobody has loaded makes dlopen open our fd; the only sharing left is by inode, which is the
    same file. The caller owns the duplicate and keeps it open while the library is loaded, so that its
    number (and so the name) is never reused for another file; ``fd`` stays the caller's too."""
    loaded = loaded_names()
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    while fd_path(new) in loaded:
        higher = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, new + 1)
        os.close(new)
        new = higher
    return new, fd_path(new)


_loaded: dict[tuple[int, int], KernelLibrary] = {}
_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang


def load_fd(fd: int, path: Path) -> KernelLibrary:
    """Load the open library file ``fd`` (``path`` names it in messages), once per inode and process.

    The caller keeps ``fd`` (the library holds a duplicate)."""
    st = os.fstat(fd)
    with _lock:
        lib = _loaded.get((st.st_dev, st.st_ino))
        if lib is None:
            lib = KernelLibrary(path, fd)
            _loaded[lib.identity] = lib
        return lib


def load(path: Path) -> KernelLibrary:
    """Load the library file ``path`` that the caller names explicitly (the performance model's
    ``--library``): it is opened once and loaded through that fd. The cache never calls this: it loads
    what ``trust`` has walked and checked, with ``load_fd``."""
    fd = os.open(Path(path), os.O_RDONLY | os.O_CLOEXEC)
    try:
        return load_fd(fd, Path(path))
    finally:
        os.close(fd)
