"""A performance model of the Ascend C kernels, without hardware (``ascend-rmsnorm bench --model``).

The kernel runs in the CPU emulation (``kernels/emu``) with its performance hooks on
(``kernels/emu/emu_perf.h``). That gives two things per launch and per block:

* **exact counts** of what the kernel code does for this shape and launch: GM bytes per tensor and
  direction, DMA instructions and bursts, vector instructions and repeats per API, SetFlag/WaitFlag
  per event, PipeBarriers, TQue operations, scalar UB reads/writes, the UB peak;
* a **trace** of the instructions in program order, replayed on four in-order pipes (scalar S,
  vector V, GM->UB MTE2, UB->GM MTE3) with the latency parameters of :class:`Params`.

Kernel time = the slowest block's finish; predicted time = the sum over launches of (kernel time +
launch cost). The roofline is the least GM traffic the operation needs (:func:`min_bytes`) over the
SoC's peak HBM bandwidth. The times are first-order (about +-50 %; never compared with an NPU); the
counts are exact. "Fast" mode skips the arithmetic and data movement in the emulation and gives the
same counts (kernels may not branch on data), so large shapes model in well under a second.

Python use::

    from ascend_rmsnorm.cli import perfmodel
    rec = perfmodel.model(8192, 4096, "bfloat16", "fwd", soc="Ascend910B2")
    rec.predicted_us, rec.roofline_us, rec.gm_bytes, rec.min_bytes, rec.dominant
    rec.launches[0].blocks, rec.launches[0].block[0].gm["w"].read
    kernel = perfmodel.ModelKernel.from_source("old_rmsnorm.asc")  # another kernel source
    perfmodel.model(1024, 4096, "float32", "bwd", kernel=kernel)
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch

from ..contract import DTYPE_CODES, inv_hidden, to_f32
from ..errors import AscendRMSNormError, KernelLaunchError

# --------------------------------------------------------------------------------------------------- parameters

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")


@dataclasses.dataclass(frozen=True)
class Params:
    """The timeline's parameters. Cycles are AI-core clock cycles; ``*_us`` are microseconds.

    Defaults are the *base* scenario (docs/perf-model.md §2); ``PRESETS`` also has
    its *opt* and *pess* brackets, and *floor* (bandwidth and launches only, a lower bound). None
    of these has been measured on a 910B: they are public figures and guesses, to be replaced by an
    NPU owner's measurements (docs/perf-model.md §5).
    """

    #: AI core clock (GHz): converts cycles to µs.
    clock_ghz: float = 1.8
    #: HBM bandwidth of the SoC (GB/s); None: the SoC's figure in ``bench.PEAK_HBM``.
    hbm_gbps: float | None = None
    #: An active block may draw up to this many times its 1/cores share of HBM when a launch has
    #: fewer blocks than cores (1: the share stays 1/cores, as in the note's base scenario).
    bw_boost_max: float = 1.0
    #: Vector pipe occupancy per 256-byte repeat.
    vec_cycles_per_repeat: float = 1.0
    #: A vector result is visible this long after its instruction leaves the pipe (what a
    #: PipeBarrier<PIPE_V> or a flag from V waits for).
    vec_latency_cycles: float = 20.0
    #: Extra MTE occupancy per DMA burst (0: only bytes count).
    dma_burst_cycles: float = 0.0
    #: A DMA's data is visible this long after its last byte moved.
    gm_latency_us: float = 0.5
    #: One way, a flag with the scalar unit at either end (V_S, S_V, S_MTE2, MTE2_S, S_MTE3, MTE3_S).
    s_flag_latency_us: float = 0.5
    #: A flag between two of V, MTE2, MTE3.
    pipe_flag_latency_cycles: float = 50.0
    #: TQue EnQue -> DeQue and FreeTensor -> AllocTensor.
    queue_latency_cycles: float = 50.0
    #: Scalar cycles to issue one vector instruction / one DMA / one flag, barrier or queue op.
    issue_vector_cycles: float = 10.0
    issue_dma_cycles: float = 20.0
    issue_sync_cycles: float = 2.0
    #: Scalar cycles per LocalTensor GetValue/SetValue.
    scalar_ub_access_cycles: float = 10.0
    #: Scalar work charged per SetValue, for the math that made the value (e.g. Newton steps).
    scalar_set_extra_cycles: float = 40.0
    #: Per core, reads of GM bytes the same core read within its last ``l2_bytes`` hit L2 and move
    #: ``l2_speedup`` times faster (0: no L2 model).
    l2_bytes: float = 0.0
    l2_speedup: float = 4.0
    #: Cost of one kernel launch.
    launch_us: float = 5.0

    def replace(self, **changes: float) -> Params:
        return dataclasses.replace(self, **changes)

    def cycles(self, us: float) -> float:
        return us * self.clock_ghz * 1e3

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PRESETS: dict[str, Params] = {
    "base": Params(),
    "opt": Params(s_flag_latency_us=0.1, gm_latency_us=0.3, vec_latency_cycles=10.0, l2_bytes=2 * 1024 * 1024),
    "pess": Params(s_flag_latency_us=1.0, gm_latency_us=1.0, vec_latency_cycles=40.0, launch_us=10.0),
    # HBM bandwidth and launches only: the least a kernel with these bytes per block and these
    # launches could take in this model, whatever its pipes did (a bound, not a scenario)
    "floor": Params(
        vec_cycles_per_repeat=0.0,
        vec_latency_cycles=0.0,
        gm_latency_us=0.0,
        s_flag_latency_us=0.0,
        pipe_flag_latency_cycles=0.0,
        queue_latency_cycles=0.0,
        issue_vector_cycles=0.0,
        issue_dma_cycles=0.0,
        issue_sync_cycles=0.0,
        scalar_ub_access_cycles=0.0,
        scalar_set_extra_cycles=0.0,
    ),
}

PARAM_NAMES = tuple(f.name for f in dataclasses.fields(Params))


def _coerce(name: str, value) -> float | None:
    if name not in PARAM_NAMES:
        raise ValueError(f"unknown model parameter {name!r}; known: {', '.join(PARAM_NAMES)}")
    if value is None:
        if name != "hbm_gbps":
            raise ValueError(f"model parameter {name} cannot be null")
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"model parameter {name}={value!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"model parameter {name}={value!r} must be finite and >= 0")
    if name in ("clock_ghz", "l2_speedup", "bw_boost_max") and v <= 0:
        raise ValueError(f"model parameter {name} must be > 0")
    return v


def make_params(
    preset: str = "base", overrides: Mapping[str, object] | None = None, json_file: str | os.PathLike | None = None
) -> Params:
    """A preset, then the parameters of a JSON file (an object of name: value, optionally with a
    ``"preset"`` key that picks the starting preset), then ``overrides`` (e.g. from ``--param``)."""
    data: dict = {}
    if json_file is not None:
        with open(json_file, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"{json_file}: expected a JSON object of parameter: value")
        data = dict(data)
        preset = str(data.pop("preset", preset))
        data.pop("comment", None)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    changes = {k: _coerce(k, v) for k, v in data.items()}
    changes.update({k: _coerce(k, v) for k, v in (overrides or {}).items()})
    return PRESETS[preset].replace(**changes)


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["gm_latency_us=0.7", ...]`` -> ``{"gm_latency_us": "0.7"}``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--param wants NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


# --------------------------------------------------------------------------------------------------- SoCs

#: Vector (AIV) cores per SoC (prefix match, longest first): 910B1/B2/B2C and 910_9381-9392 have 48,
#: 910B3/B4 and 910_9362/9372 have 40 (docs/perf-model.md §2).
SOC_CORES = {
    "Ascend910B1": 48,
    "Ascend910B2": 48,
    "Ascend910B2C": 48,
    "Ascend910B3": 40,
    "Ascend910B4": 40,
    "Ascend910_9381": 48,
    "Ascend910_9382": 48,
    "Ascend910_9391": 48,
    "Ascend910_9392": 48,
    "Ascend910_9362": 40,
    "Ascend910_9372": 40,
}
DEFAULT_SOCS = ("Ascend910B2", "Ascend910_9362")


def soc_cores(soc: str) -> int | None:
    for prefix, cores in sorted(SOC_CORES.items(), key=lambda kv: -len(kv[0])):
        if soc.startswith(prefix):
            return cores
    return None


def soc_hbm_gbps(soc: str) -> float | None:
    from .bench import peak_for

    return peak_for(soc)[0]


# --------------------------------------------------------------------------------------------------- minimum bytes


def min_bytes(
    rows: int,
    hidden: int,
    dtype: str | torch.dtype,
    direction: str,
    blocks: int | Sequence[int],
    *,
    w_dtype: str | torch.dtype | None = None,
    with_dw: bool = True,
    residual: bool = False,
) -> int:
    """The least GM traffic of the operation, for the roofline (the note's definition).

    fwd: read x, write y, write 4 bytes of rstd per row, read the weight once per block (plus, with
    ``residual``, read the residual and write residual_out). bwd: read x, dy and rstd, read the
    weight once per block, write dx, and with dw one fp32 row of dw partials per block. ``blocks``
    is the block count of the direction's main kernel (for "fwd+bwd": the pair (fwd, bwd)).
    """
    t = _dtype(dtype)
    s = t.itemsize
    sw = _dtype(w_dtype or t).itemsize
    n = rows * hidden
    if direction == "fwd+bwd":
        bf, bb = blocks if isinstance(blocks, Sequence) else (blocks, blocks)
        kw = {"w_dtype": w_dtype, "with_dw": with_dw, "residual": residual}
        return min_bytes(rows, hidden, t, "fwd", bf, **kw) + min_bytes(rows, hidden, t, "bwd", bb, **kw)
    b = int(blocks[0] if isinstance(blocks, Sequence) else blocks)
    if direction == "fwd":
        return 2 * n * s + 4 * rows + hidden * sw * b + (2 * n * s if residual else 0)
    if direction == "bwd":
        return 3 * n * s + 4 * rows + hidden * sw * b + (4 * hidden * b if with_dw else 0)
    raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def _dtype(d: str | torch.dtype) -> torch.dtype:
    if isinstance(d, torch.dtype):
        return d
    key = {"bf16": "bfloat16", "fp16": "float16", "f16": "float16", "fp32": "float32", "f32": "float32"}.get(d, d)
    if key not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {d!r}")
    return DTYPES[key]


# --------------------------------------------------------------------------------------------------- records


@dataclasses.dataclass
class Traffic:
    """GM traffic of one tensor: bytes, DMA instructions and bursts per direction, scalar accesses."""

    read: int = 0
    write: int = 0
    read_dmas: int = 0
    write_dmas: int = 0
    read_bursts: int = 0
    write_bursts: int = 0
    scalar_reads: int = 0
    scalar_writes: int = 0

    def add(self, other: Traffic) -> Traffic:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    @property
    def bytes(self) -> int:
        return self.read + self.write


@dataclasses.dataclass
class ApiCount:
    instr: int = 0
    repeats: int = 0
    elements: int = 0


@dataclasses.dataclass
class BlockCounts:
    """Everything one block did, counted by the emulation's hooks (exact for this shape and launch)."""

    idx: int
    gm: dict[str, Traffic]
    vector: dict[str, ApiCount]
    flags: dict[str, tuple[int, int]]  # HardEvent name -> (SetFlag, WaitFlag)
    barriers: dict[str, int]  # PIPE_V / PIPE_MTE2 / PIPE_MTE3 / PIPE_ALL -> count
    alloc: int
    enque: int
    deque: int
    free: int
    ub_get: int
    ub_set: int
    ub_peak: int
    ops: int  # instructions in the trace

    @property
    def vec_instr(self) -> int:
        return sum(c.instr for c in self.vector.values())

    @property
    def vec_repeats(self) -> int:
        return sum(c.repeats for c in self.vector.values())

    @property
    def dma_in(self) -> int:
        return sum(t.read_dmas for t in self.gm.values())

    @property
    def dma_out(self) -> int:
        return sum(t.write_dmas for t in self.gm.values())

    @property
    def bursts_in(self) -> int:
        return sum(t.read_bursts for t in self.gm.values())

    @property
    def bursts_out(self) -> int:
        return sum(t.write_bursts for t in self.gm.values())

    @property
    def gm_read(self) -> int:
        return sum(t.read for t in self.gm.values())

    @property
    def gm_write(self) -> int:
        return sum(t.write for t in self.gm.values())

    @property
    def set_flags(self) -> int:
        return sum(s for s, _ in self.flags.values())

    @property
    def wait_flags(self) -> int:
        return sum(w for _, w in self.flags.values())

    @property
    def queue_ops(self) -> int:
        return self.alloc + self.enque + self.deque + self.free

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["flags"] = {k: list(v) for k, v in self.flags.items()}
        return d


@dataclasses.dataclass
class LaunchResult:
    """One kernel launch: its counts per block and its replayed time."""

    kernel: str
    blocks: int
    block: list[BlockCounts]
    gm: dict[str, Traffic]  # per tensor, summed over blocks
    kernel_cycles: float = 0.0
    kernel_us: float = 0.0
    launch_us: float = 0.0
    slowest_block: int = 0
    block_cycles: list[float] = dataclasses.field(default_factory=list)
    busy_cycles: dict[str, float] = dataclasses.field(default_factory=dict)  # of the slowest block, per pipe
    mte2_bytes_per_cycle: float = 0.0
    mte3_bytes_per_cycle: float = 0.0

    @property
    def gm_bytes(self) -> int:
        return sum(t.bytes for t in self.gm.values())

    @property
    def total_us(self) -> float:
        return self.kernel_us + self.launch_us

    def to_dict(self, blocks: bool = True) -> dict:
        d = {
            "kernel": self.kernel,
            "blocks": self.blocks,
            "gm": {k: dataclasses.asdict(v) for k, v in self.gm.items()},
            "gm_bytes": self.gm_bytes,
            "kernel_cycles": self.kernel_cycles,
            "kernel_us": self.kernel_us,
            "launch_us": self.launch_us,
            "slowest_block": self.slowest_block,
            "busy_cycles": self.busy_cycles,
            "mte2_bytes_per_cycle": self.mte2_bytes_per_cycle,
            "mte3_bytes_per_cycle": self.mte3_bytes_per_cycle,
        }
        if blocks:
            d["block"] = [b.to_dict() for b in self.block]
            d["block_cycles"] = self.block_cycles
        return d


#: The terms of the "dominant term": each is re-timed with these replay parameters zeroed (0 bytes/cycle
#: means unlimited bandwidth), and the term that saves the most dominates. The terms overlap (issuing a
#: vector instruction is both "vector" and "scalar" work) and are not additive: on a serial chain,
#: removing either of two links saves a lot.
ABLATIONS: dict[str, dict[str, float]] = {
    "sync": {"s_flag_latency": 0, "pipe_flag_latency": 0, "queue_latency": 0},
    "GM-lat": {"gm_latency": 0, "gm_scalar_access": 0},
    "DMA-bw": {"mte2_bytes_per_cycle": 0, "mte3_bytes_per_cycle": 0, "dma_burst_cycles": 0},
    "vector": {"vec_cycles_per_repeat": 0, "vec_latency": 0, "issue_vector": 0},
    "scalar": {"issue_vector": 0, "issue_dma": 0, "issue_sync": 0, "scalar_ub_access": 0, "scalar_set_extra": 0},
}
ABLATION_TERMS = (*ABLATIONS, "launch")


@dataclasses.dataclass
class ModelRecord:
    """The model's answer for one (shape, dtype, direction, SoC)."""

    rows: int
    hidden: int
    dtype: str
    w_dtype: str
    direction: str
    soc: str
    cores: int
    launches: list[LaunchResult]
    min_bytes: int
    hbm_gbps: float
    params: Params
    preset: str = "base"
    path: str | None = None  # the kernel's plan name(s), where the library reports one
    ablation_us: dict[str, float] = dataclasses.field(default_factory=dict)  # term -> µs saved when zeroed

    @property
    def blocks(self) -> int:
        """The most blocks any launch used (``launch_blocks`` has them in order)."""
        return max((lr.blocks for lr in self.launches), default=0)

    @property
    def launch_blocks(self) -> list[int]:
        return [lr.blocks for lr in self.launches]

    @property
    def gm_bytes(self) -> int:
        return sum(lr.gm_bytes for lr in self.launches)

    def gm(self, name: str) -> Traffic:
        """One tensor's traffic summed over launches and blocks (zero if it was never touched)."""
        out = Traffic()
        for lr in self.launches:
            if name in lr.gm:
                out.add(lr.gm[name])
        return out

    @property
    def tensors(self) -> dict[str, Traffic]:
        names = sorted({n for lr in self.launches for n in lr.gm})
        return {n: self.gm(n) for n in names}

    @property
    def predicted_us(self) -> float:
        return sum(lr.total_us for lr in self.launches)

    @property
    def roofline_us(self) -> float:
        return self.min_bytes / (self.hbm_gbps * 1e3)

    @property
    def pct_roofline(self) -> float:
        return 100.0 * self.roofline_us / self.predicted_us if self.predicted_us > 0 else 0.0

    @property
    def traffic_ratio(self) -> float:
        return self.gm_bytes / self.min_bytes if self.min_bytes else 0.0

    @property
    def dominant(self) -> str:
        """The term whose removal saves the most time, and the runner-up ("DMA-bw > sync")."""
        ranked = sorted(self.ablation_us.items(), key=lambda kv: -kv[1])
        return " > ".join(name for name, _ in ranked[:2]) if ranked else ""

    def to_dict(self, blocks: bool = False) -> dict:
        """The ``bench --model --json`` record (``blocks=True`` adds the per-block counts)."""
        return {
            "rows": self.rows,
            "hidden": self.hidden,
            "dtype": self.dtype,
            "w_dtype": self.w_dtype,
            "direction": self.direction,
            "soc": self.soc,
            "cores": self.cores,
            "blocks": self.blocks,
            "launch_blocks": self.launch_blocks,
            "launches": len(self.launches),
            "path": self.path,
            "predicted_us": self.predicted_us,
            "roofline_us": self.roofline_us,
            "pct_roofline": self.pct_roofline,
            "gm_bytes": self.gm_bytes,
            "min_bytes": self.min_bytes,
            "traffic_ratio": self.traffic_ratio,
            "gm": {k: dataclasses.asdict(v) for k, v in self.tensors.items()},
            "dominant": self.dominant,
            "ablation_us": self.ablation_us,
            "hbm_gbps": self.hbm_gbps,
            "preset": self.preset,
            "kernels": [lr.to_dict(blocks=blocks) for lr in self.launches],
        }


def combine(fwd: ModelRecord, bwd: ModelRecord) -> ModelRecord:
    """fwd+bwd: the launches of both, the minimum bytes of both, the ablation savings added."""
    rec = dataclasses.replace(
        fwd,
        direction="fwd+bwd",
        launches=[*fwd.launches, *bwd.launches],
        min_bytes=fwd.min_bytes + bwd.min_bytes,
        path="/".join(p for p in (fwd.path, bwd.path) if p) or None,
        ablation_us={k: fwd.ablation_us.get(k, 0.0) + bwd.ablation_us.get(k, 0.0) for k in fwd.ablation_us},
    )
    return rec


# --------------------------------------------------------------------------------------------------- the library


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

    def replay(self, launch: int, params: Mapping[str, float]) -> list[list[float]]:
        """Replay recorded launch ``launch`` with the emulation's parameters (cycles; see ``_c_params``).
        Per block: [finish, busy S, busy V, busy MTE2, busy MTE3, S stalled], in cycles."""
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
                return json.loads(buf.value.decode())["blocks"]
            cap = int(n) + 1


class ModelKernel(PerfHooks):
    """A kernel library built for the emulation, with the perf hooks, and how to call its launchers.

    ``ModelKernel.default()`` is the package's own kernel (the ``emu`` backend's library);
    ``ModelKernel.from_source(path)`` compiles another ``rmsnorm.asc`` against the current emu
    headers. Libraries of today's ABI are driven through ``backends.kernel.KernelBackend`` (so the
    model follows the launch code as it changes); ABI 1 (the kernel at commit 1ebd6fe) has its own
    small adapter here.
    """

    def __init__(self, path: Path, label: str) -> None:
        from ..jit.library import ABI_VERSION

        self.path = Path(path)
        self.label = label
        raw = ctypes.CDLL(str(self.path))
        super().__init__(raw, self.path)
        raw.ascend_rmsnorm_abi_version.restype = ctypes.c_int32
        self.abi = int(raw.ascend_rmsnorm_abi_version())
        if self.abi == ABI_VERSION:
            from ..backends.kernel import KernelBackend
            from ..jit import library as jit_library

            lib = jit_library.load(self.path)
            self._backend_for = lambda cores: KernelBackend("emu", lambda: lib, lambda x: None, lambda x: cores)
        elif self.abi == 1:
            self._backend_for = lambda cores: _Abi1Backend(raw, cores)
        else:
            raise AscendRMSNormError(
                f"{self.path}: kernel ABI {self.abi}; the model drives ABI {ABI_VERSION} (this package) and 1"
            )

    _default: ModelKernel | None = None

    @classmethod
    def default(cls) -> ModelKernel:
        """The package's kernel, from the emu backend's library (JIT cache)."""
        if cls._default is None:
            from ..backends import emu

            cls._default = cls(emu.library().path, "ascend_rmsnorm/kernels/rmsnorm.asc")
        return cls._default

    @classmethod
    def from_source(cls, source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> ModelKernel:
        """Compile ``source`` (an rmsnorm.asc) against the current ``kernels/emu`` headers, once per content."""
        return cls(build_from_source(Path(source), cache_dir), str(source))

    def backend(self, cores: int):
        """An object with the backend protocol's forward/backward that launches with ``cores`` blocks at most."""
        return self._backend_for(cores)

    def plan(self, direction: str, dtype: torch.dtype, w_dtype: torch.dtype, rows: int, hidden: int, cores: int):
        """The kernel's plan name for a shape ("forward resident", ...) where the library reports one."""
        from ..jit.library import ABI1_PATH_NAMES, PATH_NAMES

        fn = getattr(self._raw, "ascend_rmsnorm_plan", None)
        if fn is None:
            return None
        c = ctypes
        fn.restype = c.c_int32
        fn.argtypes = [c.c_int32, c.c_int32, c.c_int32, c.c_int64, c.c_int64, c.c_uint32] + [
            c.POINTER(c.c_int32),
            c.POINTER(c.c_int32),
            c.POINTER(c.c_int64),
        ]
        path, group, ub = c.c_int32(), c.c_int32(), c.c_int64()
        code = {"fwd": 0, "bwd": 1}[direction]
        args = (code, DTYPE_CODES[dtype], DTYPE_CODES[w_dtype], rows, hidden, cores)
        st = fn(*args, c.byref(path), c.byref(group), c.byref(ub))
        if st != 0:
            return None
        names = ABI1_PATH_NAMES if self.abi == 1 else PATH_NAMES
        name = names.get(path.value, f"path{path.value}").split()[-1]
        short = {"resident": "res", "streamed": "stream"}.get(name, name)
        return f"{short}({group.value})"


class _Abi1Backend:
    """forward/backward of ABI 1 (``ascend_rmsnorm_fwd``/``_bwd`` of commit 1ebd6fe): frozen, like that ABI."""

    def __init__(self, raw: ctypes.CDLL, cores: int) -> None:
        c = ctypes
        self._fwd = raw.ascend_rmsnorm_fwd
        self._fwd.restype = c.c_int32
        self._fwd.argtypes = [c.c_void_p, c.c_uint32, c.c_int32] + [c.c_void_p] * 4 + [
            c.c_int64,
            c.c_int64,
            c.c_float,
            c.c_float,
            c.c_int32,
        ]
        self._bwd = raw.ascend_rmsnorm_bwd
        self._bwd.restype = c.c_int32
        self._bwd.argtypes = [c.c_void_p, c.c_uint32, c.c_int32] + [c.c_void_p] * 7 + [
            c.c_int64,
            c.c_int64,
            c.c_float,
            c.c_int32,
        ]
        self._ws = raw.ascend_rmsnorm_bwd_workspace_bytes
        self._ws.restype, self._ws.argtypes = c.c_int64, [c.c_int64, c.c_int64]
        self.cores = cores
        self.workspace: torch.Tensor | None = None

    def forward(self, x, w, eps):
        rows, hidden = x.shape
        y = torch.empty_like(x)
        rstd = torch.empty(rows, dtype=torch.float32)
        st = self._fwd(
            None, self.cores, DTYPE_CODES[x.dtype], x.data_ptr(), w.data_ptr(), y.data_ptr(), rstd.data_ptr(),
            rows, hidden, to_f32(eps), inv_hidden(hidden), DTYPE_CODES[w.dtype],
        )  # fmt: skip
        if st != 0:
            raise KernelLaunchError(f"ascend_rmsnorm_fwd (ABI 1) returned {st}")
        return y, rstd

    def backward(self, dy, x, w, rstd, need_dw=True):
        rows, hidden = x.shape
        dx = torch.empty_like(x)
        dw = torch.empty(hidden, dtype=w.dtype) if need_dw else None
        ws = torch.empty(max(1, int(self._ws(rows, hidden)) // 4), dtype=torch.float32) if need_dw else None
        self.workspace = ws
        st = self._bwd(
            None, self.cores, DTYPE_CODES[x.dtype], dy.data_ptr(), x.data_ptr(), w.data_ptr(), rstd.data_ptr(),
            dx.data_ptr(), dw.data_ptr() if dw is not None else None, ws.data_ptr() if ws is not None else None,
            rows, hidden, inv_hidden(hidden), DTYPE_CODES[w.dtype],
        )  # fmt: skip
        if st != 0:
            raise KernelLaunchError(f"ascend_rmsnorm_bwd (ABI 1) returned {st}")
        return dx, dw


def _kernel_headers(source: Path) -> dict[str, Path]:
    """The kernel's own headers (e.g. rmsnorm_plan.h): the package's, overridden by any beside ``source``."""
    from ..backends.emu import KERNELS

    found = {p.name: p for p in sorted(KERNELS.glob("*.h"))}
    found.update({p.name: p for p in sorted(source.parent.glob("*.h"))})
    return found


def _source_key(source: Path, emu_dir: Path, argv: Sequence[str], fingerprint: object) -> str:
    h = hashlib.sha256()
    h.update(source.read_bytes())
    for name, p in sorted(_kernel_headers(source).items()):
        h.update(b"kernel/" + name.encode() + b"\0" + p.read_bytes())
    for p in sorted(emu_dir.glob("*.h")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(json.dumps([list(argv), fingerprint], sort_keys=True, default=str).encode())
    return h.hexdigest()[:24]


def build_from_source(source: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """Build ``source`` with the emu toolchain against this package's ``kernels/emu``; reuse a build of the same
    content. Returns the library's path (under ``cache_dir``, default a per-user temp directory)."""
    from ..backends.emu import EMU_ARCH, KERNELS
    from ..jit import build, toolchain

    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"kernel source {source} not found")
    tc = toolchain.emu_toolchain()
    argv = build.compile_command(tc, EMU_ARCH, "rmsnorm.asc", "librmsnorm.so")  # the emu build is one command
    if "kAbiVersion = 1;" in source.read_text(errors="replace"):
        # the ABI-1 kernel stages GM copies in VECCALC buffers, which the emulation now refuses
        # (DataCopyPad's documented paths are VECIN/VECOUT); replay it as it was measured
        argv.insert(argv.index("-ffp-contract=off") + 1, "-DASCEND_RMSNORM_EMU_UNCHECKED_DATA_PATHS=1")
    emu_dir = KERNELS / "emu"
    key = _source_key(source, emu_dir, argv, tc.fingerprint())
    root = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / f"ascend_rmsnorm-perfmodel-{os.getuid()}"
    final = root / key
    lib = final / "librmsnorm.so"
    if lib.is_file():
        return lib
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        shutil.copyfile(source, work / "rmsnorm.asc")
        for name, header in _kernel_headers(source).items():
            shutil.copyfile(header, work / name)
        shutil.copytree(emu_dir, work / "emu")
        build.run_compiler(argv, work, work / "build.log", what=f"the kernel source {source} (perf model)")
        try:
            os.rename(work, final)
        except OSError:
            if not lib.is_file():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return lib


# --------------------------------------------------------------------------------------------------- running


def _named_ranges(tensors: Mapping[str, torch.Tensor | None]) -> list[tuple[int, int, str]]:
    out = []
    for name, t in tensors.items():
        if t is None or t.numel() == 0:
            continue
        start = t.untyped_storage().data_ptr()
        out.append((start, start + t.untyped_storage().nbytes(), name))
    return out


def _name_of(addr: int, ranges: list[tuple[int, int, str]]) -> str:
    for lo, hi, name in ranges:
        if lo <= addr < hi:
            return name
    return "workspace"


def _check_hooked(kernel: str, raw: dict, counts: BlockCounts) -> None:
    """Every emulated API issues one op on its pipe; each must also have reported to the counters."""
    issued = raw.get("issued")
    if issued is None:
        return
    counted = (counts.ub_get + counts.ub_set, counts.vec_instr, counts.dma_in, counts.dma_out)
    pipes = ("scalar UB", "vector", "MTE2", "MTE3")
    missing = [f"{i - c} {pipe}" for pipe, i, c in zip(pipes, issued, counted) if i != c]
    if missing:
        raise PerfHooksMissing(
            f"kernel {kernel}, block {counts.idx}: {', '.join(missing)} operation(s) issued by an emulated API that "
            "did not report to the performance counters; give that API its hook (kernels/emu/emu_perf.h)"
        )


def _block_counts(raw: dict, ranges) -> BlockCounts:
    gm: dict[str, Traffic] = {}
    for base, _size, *vals in raw["gm"]:
        name = _name_of(int(base), ranges)
        gm.setdefault(name, Traffic()).add(Traffic(*[int(v) for v in vals]))
    alloc, enque, deque, free = raw["queue"]
    ub_get, ub_set = raw["scalar"]
    return BlockCounts(
        idx=int(raw["idx"]),
        gm=gm,
        vector={k: ApiCount(*v) for k, v in raw["vector"].items()},
        flags={k: (v[0], v[1]) for k, v in raw["flags"].items()},
        barriers=dict(raw["barriers"]),
        alloc=alloc,
        enque=enque,
        deque=deque,
        free=free,
        ub_get=ub_get,
        ub_set=ub_set,
        ub_peak=int(raw["ub_peak"]),
        ops=int(raw["ops"]),
    )


def _c_params(p: Params, cores: int, hbm_gbps: float, blocks: int, read: int, write: int) -> dict[str, float]:
    """The emulation's replay parameters (cycles, bytes/cycle) for one launch."""
    share = hbm_gbps / cores / p.clock_ghz  # bytes per cycle of one core's 1/cores share
    if blocks < cores:
        share *= min(p.bw_boost_max, cores / blocks)
    total = read + write
    return {
        "vec_cycles_per_repeat": p.vec_cycles_per_repeat,
        "vec_latency": p.vec_latency_cycles,
        "mte2_bytes_per_cycle": share * read / total if total else 0.0,
        "mte3_bytes_per_cycle": share * write / total if total else 0.0,
        "dma_burst_cycles": p.dma_burst_cycles,
        "gm_latency": p.cycles(p.gm_latency_us),
        "s_flag_latency": p.cycles(p.s_flag_latency_us),
        "pipe_flag_latency": p.pipe_flag_latency_cycles,
        "queue_latency": p.queue_latency_cycles,
        "issue_vector": p.issue_vector_cycles,
        "issue_dma": p.issue_dma_cycles,
        "issue_sync": p.issue_sync_cycles,
        "scalar_ub_access": p.scalar_ub_access_cycles,
        "scalar_set_extra": p.scalar_set_extra_cycles,
        "gm_scalar_access": p.cycles(p.gm_latency_us),
        "l2_bytes": p.l2_bytes,
        "l2_speedup": p.l2_speedup,
    }


PIPES = ("S", "V", "MTE2", "MTE3")


def time_launches(
    kernel: PerfHooks, launches: list[LaunchResult], p: Params, cores: int, hbm_gbps: float, ablate: bool
) -> dict[str, float]:
    """Replay every launch with ``p`` (filling in times), and with each ablation; returns µs saved per term."""
    saved = dict.fromkeys(ABLATION_TERMS, 0.0) if ablate else {}
    for i, lr in enumerate(launches):
        read = sum(t.read for t in lr.gm.values())
        write = sum(t.write for t in lr.gm.values())
        cp = _c_params(p, cores, hbm_gbps, lr.blocks, read, write)
        rows = kernel.replay(i, cp)
        finishes = [r[0] for r in rows]
        slow = max(range(len(rows)), key=lambda b: finishes[b])
        lr.block_cycles = finishes
        lr.slowest_block = slow
        lr.kernel_cycles = finishes[slow]
        lr.kernel_us = finishes[slow] / (p.clock_ghz * 1e3)
        lr.launch_us = p.launch_us
        lr.busy_cycles = dict(zip(PIPES, rows[slow][1:5]))
        lr.busy_cycles["S stalled"] = rows[slow][5]
        lr.mte2_bytes_per_cycle, lr.mte3_bytes_per_cycle = cp["mte2_bytes_per_cycle"], cp["mte3_bytes_per_cycle"]
        if ablate:
            for term, zero in ABLATIONS.items():
                alt = max(r[0] for r in kernel.replay(i, {**cp, **zero}))
                saved[term] += (lr.kernel_cycles - alt) / (p.clock_ghz * 1e3)
            saved["launch"] += p.launch_us
    return saved


def _make_inputs(rows: int, hidden: int, dtype: torch.dtype, w_dtype: torch.dtype, fast: bool, seed: int):
    if fast:  # never read: the emulation moves no data in fast mode
        x = torch.empty(rows, hidden, dtype=dtype)
        w = torch.empty(hidden, dtype=w_dtype)
        dy = torch.empty(rows, hidden, dtype=dtype)
        rstd = torch.empty(rows, dtype=torch.float32)
        residual = torch.empty(rows, hidden, dtype=dtype)
    else:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, hidden, generator=g).to(dtype)
        w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(w_dtype)
        dy = torch.randn(rows, hidden, generator=g).to(dtype)
        rstd = 0.5 + torch.rand(rows, generator=g)
        residual = torch.randn(rows, hidden, generator=g).to(dtype)
    return x, w, dy, rstd, residual


_local = threading.local()


def note_tensor(name: str, tensor: torch.Tensor) -> None:
    """Name a GM tensor that launch code made itself (e.g. a widened copy of the weight: call
    ``note_tensor("w", w32)``), so its traffic is not reported as "workspace". A no-op unless a
    model recording runs on this thread."""
    names = getattr(_local, "names", None)
    if names is not None:
        names[name] = tensor


def record(
    kernel: PerfHooks,
    fn: Callable[[], Mapping[str, torch.Tensor | None]],
    inputs: Mapping[str, torch.Tensor | None],
    fast: bool = True,
) -> list[LaunchResult]:
    """Run ``fn`` (which launches kernels of ``kernel``) with the counters on; name GM regions by the
    tensors of ``inputs``, of :func:`note_tensor` calls and of the mapping ``fn`` returns (regions of
    none of them are "workspace")."""
    with kernel.lock:
        _local.names = noted = {}
        kernel.start(fast)
        try:
            outputs = fn()
        finally:
            kernel.stop()
            _local.names = None
        ranges = _named_ranges({**inputs, **noted, **(outputs or {})})
        raw = kernel.counts()
        launches = []
        for lr in raw["launches"]:
            blocks = [_block_counts(b, ranges) for b in lr["block"]]
            for b, rb in zip(blocks, lr["block"]):
                _check_hooked(lr["kernel"], rb, b)
            gm: dict[str, Traffic] = {}
            for b in blocks:
                for name, t in b.gm.items():
                    gm.setdefault(name, Traffic()).add(t)
            launches.append(LaunchResult(lr["kernel"], int(lr["blocks"]), blocks, gm))
        return launches


def model(
    rows: int,
    hidden: int,
    dtype: str | torch.dtype = "bfloat16",
    direction: str = "fwd",
    *,
    soc: str = "Ascend910B2",
    cores: int | None = None,
    w_dtype: str | torch.dtype | None = None,
    params: Params | None = None,
    preset: str = "base",
    kernel: ModelKernel | None = None,
    fast: bool = True,
    ablate: bool = True,
    with_dw: bool = True,
    residual: bool = False,
    eps: float = 1e-6,
    seed: int = 0,
    **kernel_options,
) -> ModelRecord:
    """Run one shape through the emu kernel in model mode and predict its time on ``soc``.

    ``cores`` defaults to the SoC's vector cores (``SOC_CORES``); ``params`` to ``PRESETS[preset]``.
    ``fast=False`` runs the real arithmetic on random data (same counts, slower). ``residual`` and
    ``kernel_options`` (e.g. ``casting_mode="llama"``) are passed to the backend's forward where its
    launch code accepts them. The result's launches keep their trace in the library until the next
    recording, so call :func:`model` again rather than holding on to the library's state.
    """
    if direction == "fwd+bwd":
        kw = dict(
            soc=soc, cores=cores, w_dtype=w_dtype, params=params, preset=preset, kernel=kernel, fast=fast,
            ablate=ablate, with_dw=with_dw, residual=residual, eps=eps, seed=seed, **kernel_options,
        )  # fmt: skip
        return combine(model(rows, hidden, dtype, "fwd", **kw), model(rows, hidden, dtype, "bwd", **kw))
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if rows < 1 or hidden < 1:
        raise ValueError(f"the model needs rows >= 1 and hidden >= 1, got {rows}x{hidden}")
    t, tw = _dtype(dtype), _dtype(w_dtype or dtype)
    if cores is not None and not 1 <= cores <= 65535:
        raise ValueError(f"cores must be in [1, 65535], got {cores}")
    if cores is None:
        cores = soc_cores(soc)
        if cores is None:
            raise ValueError(f"no vector core count known for SoC {soc!r}; pass cores= (known: {', '.join(SOC_CORES)})")
    p = params or PRESETS[preset]
    hbm = p.hbm_gbps or soc_hbm_gbps(soc)
    if not hbm:
        raise ValueError(f"no HBM bandwidth known for SoC {soc!r}; set the hbm_gbps parameter")
    kernel = kernel or ModelKernel.default()
    backend = kernel.backend(cores)
    x, w, dy, rstd, res = _make_inputs(rows, hidden, t, tw, fast, seed)
    extra = dict(kernel_options)
    if residual:
        extra["residual"] = res
    inputs = {"x": x, "w": w, "residual": res if residual else None}

    if direction == "fwd":

        def run():
            out = backend.forward(x, w, eps, **extra)
            names = ("y", "rstd", "residual_out")
            return dict(zip(names, out))

    else:
        inputs.update({"dy": dy, "rstd": rstd})

        def run():
            dx, dw = backend.backward(dy, x, w, rstd, need_dw=with_dw, **kernel_options)
            out = {"dx": dx, "dw": dw}
            ws = getattr(backend, "workspace", None)
            if ws is not None:
                out["workspace"] = ws
            return out

    launches = record(kernel, run, inputs, fast)
    saved = time_launches(kernel, launches, p, cores, hbm, ablate)
    kernel.clear()
    main_blocks = launches[0].blocks if launches else 0
    return ModelRecord(
        rows=rows,
        hidden=hidden,
        dtype=DTYPE_NAMES[t],
        w_dtype=DTYPE_NAMES[tw],
        direction=direction,
        soc=soc,
        cores=cores,
        launches=launches,
        min_bytes=min_bytes(rows, hidden, t, direction, main_blocks, w_dtype=tw, with_dw=with_dw, residual=residual),
        hbm_gbps=float(hbm),
        params=p,
        preset=preset if params is None else "custom",
        path=kernel.plan(direction, t, tw, rows, hidden, cores),
        ablation_us=saved,
    )


# --------------------------------------------------------------------------------------------------- bench --model

#: The seed project's shapes, then the note's extra ones.
SEED_SHAPES = ((1024, 4096), (8192, 4096), (1024, 8192), (4096, 5120), (32768, 128), (16384, 256))
MODEL_SHAPES = (*SEED_SHAPES, (1, 4096), (64, 4096), (4096, 16384), (1024, 32768))


def parse_shape(text: str) -> tuple[int, int]:
    rows, sep, hidden = text.lower().partition("x")
    try:
        r, h = int(rows), int(hidden)
    except ValueError:
        raise ValueError(f"--shape wants ROWSxHIDDEN (e.g. 8192x4096), got {text!r}") from None
    if not sep or r < 1 or h < 1:
        raise ValueError(f"--shape wants ROWSxHIDDEN with both >= 1, got {text!r}")
    return r, h


def bench(
    shapes: Sequence[tuple[int, int]] = MODEL_SHAPES,
    dtypes: Sequence[str] = ("bfloat16", "float16", "float32"),
    directions: Sequence[str] = DIRECTIONS,
    socs: Sequence[str] = DEFAULT_SOCS,
    *,
    params: Params | None = None,
    preset: str = "base",
    kernel: ModelKernel | None = None,
    cores: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ModelRecord]:
    """Model every (soc, shape, dtype) once per direction needed; fwd+bwd is combined from fwd and bwd."""
    out = []
    total = len(socs) * len(shapes) * len(dtypes)
    done = 0
    for soc in socs:
        for rows, hidden in shapes:
            for dt in dtypes:
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {soc} {rows}x{hidden} {dt}")
                kw = dict(soc=soc, cores=cores, params=params, preset=preset, kernel=kernel)
                got: dict[str, ModelRecord] = {}
                if "fwd" in directions or "fwd+bwd" in directions:
                    got["fwd"] = model(rows, hidden, dt, "fwd", **kw)
                if "bwd" in directions or "fwd+bwd" in directions:
                    got["bwd"] = model(rows, hidden, dt, "bwd", **kw)
                if "fwd+bwd" in directions:
                    got["fwd+bwd"] = combine(got["fwd"], got["bwd"])
                out.extend(got[d] for d in DIRECTIONS if d in directions)
    return out


def format_table(records: Sequence[ModelRecord]) -> str:
    head = (
        f"{'soc':<15} {'shape':<11} {'dtype':<8} {'dir':<7} {'path':<18} {'blocks':<9} {'GM MB/min (x)':<19} "
        f"{'µs':>8} {'roof µs':>8} {'%roof':>6}  dominant"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        gm = f"{r.gm_bytes / 1e6:.1f}/{r.min_bytes / 1e6:.1f} ({r.traffic_ratio:.2f})"
        blocks = "+".join(str(b) for b in r.launch_blocks)
        lines.append(
            f"{r.soc:<15} {f'{r.rows}x{r.hidden}':<11} {r.dtype:<8} {r.direction:<7} {(r.path or '-'):<18} "
            f"{blocks:<9} {gm:<19} {r.predicted_us:>8.1f} {r.roofline_us:>8.1f} {r.pct_roofline:>5.0f}%  {r.dominant}"
        )
    return "\n".join(lines)


def bench_main(
    *,
    as_json: bool = False,
    socs: Sequence[str] | None = None,
    shapes: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    directions: Sequence[str] | None = None,
    preset: str = "base",
    param_file: str | None = None,
    param_items: Sequence[str] = (),
    kernel_source: str | None = None,
    cores: int | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """``ascend-rmsnorm bench --model``: the model's predictions; returns the exit status."""
    try:
        params = make_params(preset, parse_assignments(param_items), param_file)
        shape_list = [parse_shape(s) for s in shapes] if shapes else list(MODEL_SHAPES)
        dtype_list = [DTYPE_NAMES[_dtype(d)] for d in dtypes] if dtypes else ["bfloat16", "float16", "float32"]
        dirs = list(directions) if directions else list(DIRECTIONS)
        for d in dirs:
            if d not in DIRECTIONS:
                raise ValueError(f"--direction must be one of {', '.join(DIRECTIONS)}, got {d!r}")
        soc_list = list(socs) if socs else list(DEFAULT_SOCS)
        if cores is not None and not 1 <= cores <= 65535:
            raise ValueError(f"--cores must be in [1, 65535], got {cores}")
        for soc in soc_list:
            if cores is None and soc_cores(soc) is None:
                known = ", ".join(SOC_CORES)
                raise ValueError(f"no vector core count known for SoC {soc!r}: pass --cores (known: {known})")
            if params.hbm_gbps is None and soc_hbm_gbps(soc) is None:
                raise ValueError(f"no HBM bandwidth known for SoC {soc!r}: pass --param hbm_gbps=...")
        if kernel_source and not Path(kernel_source).is_file():
            raise ValueError(f"--kernel-source {kernel_source}: no such file")
    except (ValueError, OSError) as err:
        print(f"ascend-rmsnorm bench --model: {err}", file=sys.stderr)
        return 2
    kernel = ModelKernel.from_source(kernel_source) if kernel_source else None  # a compile error raises

    def progress(msg: str) -> None:
        print(f"  model {msg} ...", file=sys.stderr, flush=True)

    records = bench(
        shape_list, dtype_list, dirs, soc_list, params=params, preset=preset, kernel=kernel, cores=cores,
        progress=progress,
    )  # fmt: skip
    if as_json:
        from .._version import __version__

        echo(
            json.dumps(
                {
                    "model": {
                        "package": __version__,
                        "kernel": kernel.label if kernel else "ascend_rmsnorm/kernels/rmsnorm.asc",
                        "preset": preset,
                        "params": params.to_dict(),
                        "note": "first-order model (about +-50 % on times; counts exact); never compared with an NPU",
                    },
                    "records": [r.to_dict() for r in records],
                },
                indent=1,
            )
        )
    else:
        echo(
            f"performance model ({preset} preset{', adjusted' if param_items or param_file else ''}; "
            "counts exact, times first-order, about +-50 %, never checked on an NPU)"
        )
        echo(format_table(records))
        echo(
            "GM MB/min: bytes the kernel moved / the least the operation needs; roof µs: that least over the "
            "SoC's peak HBM bandwidth; dominant: the terms whose removal saves the most (ablation)"
        )
    return 0
