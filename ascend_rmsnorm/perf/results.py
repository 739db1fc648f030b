"""The perf model's results: traffic, API counts, per-block counts, launches, the model record, and the
least GM traffic an operation needs (``min_bytes``, the roofline's numerator)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from .params import DIRECTIONS, DTYPES, Params


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
    #: vector instructions that write UB bytes an earlier one of the same barrier window read or wrote
    #: (the emulation allows it: docs/design.md §9; ``war_barriers`` prices a barrier before each)
    overwrites: int = 0

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
    mte2_bytes_per_cycle: float = 0.0  # of the slowest block (every block's, at the static share)
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
    #: The prediction with these parameters but bw_pool=1 (pooled bandwidth, never used for the targets);
    #: None where it was not asked for (``model(..., pooled=True)``).
    pooled_us: float | None = None

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
            "pooled_us": self.pooled_us,
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
    """fwd+bwd: the launches of both, the minimum bytes of both, the ablation savings and pooled µs added."""
    rec = dataclasses.replace(
        fwd,
        direction="fwd+bwd",
        launches=[*fwd.launches, *bwd.launches],
        min_bytes=fwd.min_bytes + bwd.min_bytes,
        path="/".join(p for p in (fwd.path, bwd.path) if p) or None,
        ablation_us={k: fwd.ablation_us.get(k, 0.0) + bwd.ablation_us.get(k, 0.0) for k in fwd.ablation_us},
        pooled_us=None if fwd.pooled_us is None or bwd.pooled_us is None else fwd.pooled_us + bwd.pooled_us,
    )
    return rec
