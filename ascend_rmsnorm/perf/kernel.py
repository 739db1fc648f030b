"""The kernel library the perf model runs: the emu build with its performance hooks (``PerfHooks``),
of the shipped source (``ModelKernel.default()``) or another source of the same ABI."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

import torch

from ..contract import DTYPE_CODES
from ..errors import AscendRMSNormError, KernelLaunchError
from ..jit.library import KernelLibrary


class PerfHooksMissing(AscendRMSNormError):
    """The kernel library was built without kernels/emu/emu_perf.h."""


class PerfHooks:
    """The emulation's performance entry points in a loaded library (any library built against
    ``kernels/emu``, e.g. a test's hand-made kernels): start/stop a recording, its counts, replays."""

    def __init__(self, raw: ctypes.CDLL, path: str | os.PathLike = "?") -> None:
        if not hasattr(raw, "ascend_rmsnorm_emu_perf_start"):
            raise PerfHooksMissing(f"{path} has no performance hooks (not built against kernels/emu/emu_perf.h)")
        self._raw = raw
        for name, restype, argtypes in (
            ("ascend_rmsnorm_emu_perf_version", ctypes.c_int32, []),
            ("ascend_rmsnorm_emu_perf_start", ctypes.c_int32, [ctypes.c_int32]),
            ("ascend_rmsnorm_emu_perf_stop", None, []),
            ("ascend_rmsnorm_emu_perf_clear", None, []),
            ("ascend_rmsnorm_emu_perf_counts", ctypes.c_int64, [ctypes.c_char_p, ctypes.c_int64]),
            (
                "ascend_rmsnorm_emu_perf_replay",
                ctypes.c_int64,
                [ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64],
            ),
        ):
            fn = getattr(raw, name)
            fn.restype, fn.argtypes = restype, argtypes
        self.version = int(raw.ascend_rmsnorm_emu_perf_version())
        self.lock = threading.Lock()

    def start(self, fast: bool) -> None:
        """Record on this thread from now on (``fast``: skip the arithmetic); drops earlier records."""
        if self._raw.ascend_rmsnorm_emu_perf_start(2 if fast else 1) != 0:
            raise AscendRMSNormError("ascend_rmsnorm_emu_perf_start refused")

    def stop(self) -> None:
        self._raw.ascend_rmsnorm_emu_perf_stop()

    def clear(self) -> None:
        """Stop and free the records (traces can be large)."""
        self._raw.ascend_rmsnorm_emu_perf_clear()

    def counts(self) -> dict:
        """The raw counts of every launch recorded (see emu_perf.h, CountsJson)."""
        n = self._raw.ascend_rmsnorm_emu_perf_counts(None, 0)
        buf = ctypes.create_string_buffer(int(n) + 1)
        self._raw.ascend_rmsnorm_emu_perf_counts(buf, n + 1)
        return json.loads(buf.value.decode())

    def replay(self, launch: int, params: Mapping[str, float], block: int | None = None) -> list[list[float]]:
        """Replay recorded launch ``launch`` with the emulation's parameters (cycles; see ``_c_params``),
        every block or only ``block``. Per block: [finish, busy S, busy V, busy MTE2, busy MTE3, S stalled],
        in cycles."""
        if block is not None:
            if block < 0:
                raise IndexError(f"launch {launch} has no block {block}")
            params = {**params, "block": block}
        text = " ".join(f"{k}={float(v)!r}" for k, v in params.items()).encode()
        cap = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = self._raw.ascend_rmsnorm_emu_perf_replay(launch, text, buf, cap)
            if n == -1:
                raise ValueError(f"the emulation does not know the timeline parameter {buf.value.decode()!r}")
            if n < 0:
                raise IndexError(f"no recorded launch {launch}")
            if n < cap:
                rows = json.loads(buf.value.decode())["blocks"]
                if block is not None and not rows:
                    raise IndexError(f"launch {launch} has no block {block}")
                return rows
            cap = int(n) + 1


class ModelKernel(PerfHooks):
    """A kernel library built for the emulation, with the perf hooks, and how to call its launchers.

    ``ModelKernel.default()`` is the package's own kernel (the ``emu`` backend's library);
    ``ModelKernel.from_source(path)`` compiles another ``rmsnorm.asc`` against the current emu
    headers. It must have this package's ABI: it is driven through ``backends.kernel.KernelBackend``
    (so the model follows the launch code as it changes).
    """

    def __init__(self, lib: KernelLibrary, label: str) -> None:
        """``lib`` is a library the cache has already checked and loaded through its fd (its ABI included):
        the hooks are read from that very handle, never from a second load by path."""
        self.path = lib.path
        self.label = label
        super().__init__(lib._lib, self.path)
        from ..backends.kernel import KernelBackend

        self._lib = lib
        self._backend_for = lambda cores: KernelBackend("emu", lambda: lib, lambda x: None, lambda x: cores)

    _default: ModelKernel | None = None

    @classmethod
    def default(cls) -> ModelKernel:
        """The package's kernel, from the emu backend's library (JIT cache)."""
        if cls._default is None:
            from ..backends import emu

            cls._default = cls(emu.library(), "ascend_rmsnorm/kernels/rmsnorm.asc")
        return cls._default

    @classmethod
    def from_source(cls, source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> ModelKernel:
        """Compile ``source`` (an rmsnorm.asc) against the current ``kernels/emu`` headers, once per content."""
        return cls(build_from_source(Path(source), cache_dir), str(source))

    def backend(self, cores: int):
        """An object with the backend protocol's forward/backward that launches with ``cores`` blocks at most."""
        return self._backend_for(cores)

    def plan(self, direction: str, dtype: torch.dtype, w_dtype: torch.dtype, rows: int, hidden: int, cores: int):
        """The kernel's plan for a shape, as "path(rows per group)" ("group(2)", "stream(1)"), or None if refused."""
        try:
            plan = self._lib.plan(
                {"fwd": "forward", "bwd": "backward"}[direction], DTYPE_CODES[dtype], DTYPE_CODES[w_dtype], rows,
                hidden, cores,
            )  # fmt: skip
        except KernelLaunchError:
            return None
        return f"{plan.path.split()[-1]}({plan.group_rows})"


def source_problem(source: str | os.PathLike) -> str | None:
    """Why the kernel source ``source`` may not be built (None if it may): it is compiled into a library
    this process loads, so it passes the ownership test as a cached library does (``jit/trust.py``)."""
    from ..jit import trust

    problem = trust.unsafe_reason(Path(os.path.abspath(source)))
    if problem is None:
        return None
    return f"{trust.without_fix(problem)}; fix: keep it in a directory only you (or root) can write"


def _kernel_headers(source: Path) -> dict[str, Path]:
    """The kernel's own headers by path under ``kernels/`` (e.g. ``common/ub_plan.h``; not ``emu/``): the
    package's, each overridden by a file at the same relative path beside ``source``, plus any ``*.h`` there.

    A file beside ``source`` is taken only if it passes the ownership test (``source_problem``): in a shared
    dir such as /tmp anyone can add one, and it would be built into a library this process loads. Nor is
    one taken from a folder others may add names to (``/tmp`` itself): a host that lets anyone hard-link a
    file they do not own lets them give any file of yours or root's a header's name there, and it passes
    the ownership test. One that fails is passed over with a warning naming it (the package's header is
    used where there is one)."""
    from .._log import warn_once
    from ..backends.emu import KERNELS
    from ..jit import trust

    def usable(p: Path) -> bool:
        problem = source_problem(p)
        if problem is None and (shared := trust.unsafe_reason(p.parent, searched=True)) is not None:
            problem = f"{trust.without_fix(shared)}; fix: keep the source and its headers where only you can write"
        if problem is not None:
            warn_once(f"kernel-source-header:{p}", "passed over %s beside the kernel source: %s", p, problem)
        return problem is None

    rel = (p.relative_to(KERNELS) for p in KERNELS.rglob("*.h"))
    names = sorted(r.as_posix() for r in rel if r.parts[0] != "emu")
    # os.path.isfile: a place you may not look into (a folder of mode 000 someone made there) holds no override
    found = {n: (source.parent / n if os.path.isfile(source.parent / n) and usable(source.parent / n) else KERNELS / n)
             for n in names}  # fmt: skip
    found.update({p.name: p for p in sorted(source.parent.glob("*.h"))  # and any of its own beside it
                  if os.path.isfile(p) and usable(p)})  # fmt: skip
    return found


def build_from_source(source: Path, cache_dir: str | os.PathLike | None = None) -> KernelLibrary:
    """Build ``source`` with the emu toolchain against this package's ``kernels/emu``, through the JIT cache
    (its key, lock, publish and trust rules): the source, its headers and the emu headers are staged as a
    kernels directory, so a build of the same content is reused. Returns the library, loaded as the cache
    loads (trust walk, hash, load through the fd).

    The source must pass the ownership test (``ValueError`` otherwise), and so must the temp dir the files
    are staged in (``CacheWriteError``): in one others may write without the sticky bit, they could rename
    the staging dir and put their own kernels in its place before the build reads them."""
    from ..backends.emu import EMU_ARCH, KERNELS
    from ..errors import CacheWriteError
    from ..jit import cache, toolchain, trust

    source = Path(os.path.abspath(source))
    if not source.is_file():
        raise FileNotFoundError(f"kernel source {source} not found")
    problem = source_problem(source)
    if problem is not None:
        raise ValueError(f"kernel source {source} is not safe to build and load: {problem}")
    tc = toolchain.emu_toolchain()
    tmp = tempfile.gettempdir()
    try:
        os.close(trust.open_path(tmp, directory=True))
    except OSError as err:
        why = err.problem if isinstance(err, trust.Untrusted) else (err.strerror or str(err))
        raise CacheWriteError(
            f"the temp dir {tmp} is not safe for staging the kernel sources: {why}; or set TMPDIR to a "
            "directory of your own"
        ) from err
    with tempfile.TemporaryDirectory(prefix="ascend_rmsnorm-perf-source-", dir=tmp) as staging:
        staged = Path(staging) / "kernels"
        staged.mkdir()
        shutil.copyfile(source, staged / cache.MAIN_SOURCE)
        for name, header in _kernel_headers(source).items():
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(header, staged / name)
        shutil.copytree(KERNELS / "emu", staged / "emu")
        _, entry = cache.ensure_built(tc, EMU_ARCH, cache_dir=cache_dir, kernels_dir=staged)
    return cache.load_entry(entry)
