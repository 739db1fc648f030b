"""A performance model of the Ascend C kernels, without hardware (``ascend-rmsnorm bench --model``).

The kernel runs in the CPU emulation (``kernels/emu``) with its performance hooks on
(``kernels/emu/emu_perf.h``). That gives two things per launch and per block:

* **exact counts** of what the kernel code does for this shape and launch: GM bytes per tensor and
  direction, DMA instructions and bursts, vector instructions and repeats per API, SetFlag/WaitFlag
  per event, PipeBarriers, TQue operations, scalar UB reads/writes, the UB peak;
* a **trace** of the instructions in program order, replayed on four in-order pipes (scalar S,
  vector V, GM->UB MTE2, UB->GM MTE3) with the latency parameters of :class:`Params`.

Kernel time = the slowest block's finish; predicted time = the sum over launches of (kernel time +
launch cost). The roofline is the least GM traffic the operation needs (``results.min_bytes``) over the
SoC's peak HBM bandwidth. The times are first-order (about +-50 %; never compared with an NPU); the
counts are exact. "Fast" mode skips the arithmetic and data movement in the emulation and gives the
same counts (kernels may not branch on data), so large shapes model in well under a second.

Python use::

    from ascend_rmsnorm.perf import kernel, model
    rec = model.model(8192, 4096, "bfloat16", "fwd", soc="Ascend910B2")
    rec.predicted_us, rec.roofline_us, rec.gm_bytes, rec.min_bytes, rec.dominant
    rec.launches[0].blocks, rec.launches[0].block[0].gm["w"].read
    variant = kernel.ModelKernel.from_source("variant/rmsnorm.asc")  # another source of this ABI
    model.model(1024, 4096, "float32", "bwd", kernel=variant)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import torch

from .kernel import ModelKernel, PerfHooks, PerfHooksMissing
from .notes import collecting
from .params import DIRECTIONS, DTYPE_NAMES, PRESETS, Params
from .results import (
    ABLATION_TERMS,
    ABLATIONS,
    ApiCount,
    BlockCounts,
    LaunchResult,
    ModelRecord,
    Traffic,
    _dtype,
    combine,
    min_bytes,
)
from .soc import SOC_CORES, check_cores, soc_cores, soc_hbm_gbps


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
        overwrites=int(raw.get("overwrites", 0)),
    )


def _boost(p: Params, cores: int, blocks: int) -> float:
    """How many 1/cores shares of HBM each block of a launch of ``blocks`` blocks draws (``bw_boost_max``)."""
    return min(p.bw_boost_max, cores / blocks) if blocks < cores else 1.0


def _c_params(p: Params, cores: int, hbm_gbps: float, blocks: int, read: int, write: int) -> dict[str, float]:
    """The emulation's replay parameters (cycles, bytes/cycle) for one launch, at the static share."""
    share = hbm_gbps / cores / p.clock_ghz * _boost(p, cores, blocks)  # bytes per cycle of one block
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
        "war_barriers": p.war_barriers,
    }


PIPES = ("S", "V", "MTE2", "MTE3")
MTE_RATES = ("mte2_bytes_per_cycle", "mte3_bytes_per_cycle")
#: The pooled replay stops when no block's bandwidth would change by more than this share of it ...
POOL_TOLERANCE = 1e-4
#: ... or after this many rounds.
POOL_ROUNDS = 32


def _draw(n: int, capacity: float, pool: float) -> float:
    """Static shares each of ``n`` busy blocks draws when HBM holds ``capacity`` of them."""
    return 1.0 + pool * max(0.0, capacity - n) / n


def pooled_finish(work: float, others: Sequence[float], capacity: float, pool: float) -> float:
    """When a block that needs ``work`` static-share cycles of bandwidth finishes, if it draws the
    pooled bandwidth (``_draw``) from time 0 while the other blocks finish at ``others``: the T at which
    the draw, integrated from 0, reaches ``work``."""
    t0 = area = 0.0
    busy = 1 + len(others)
    for t in sorted(others):
        rate = _draw(busy, capacity, pool)
        if area + rate * (t - t0) >= work:
            break
        area += rate * (t - t0)
        t0, busy = t, busy - 1
    return t0 + (work - area) / _draw(busy, capacity, pool)


def _pooled_replay(
    kernel: PerfHooks, launch: int, cp: Mapping[str, float], rows: list[list[float]], capacity: float, pool: float
) -> tuple[list[list[float]], list[dict[str, float]]]:
    """Replay each block of ``launch`` at its pooled bandwidth, from the static replay's ``rows``.

    Each round, a block replayed at ``g`` static shares that finished at T needed T * g share-cycles of
    bandwidth; it is replayed again at the average draw over [0, T') where T' = ``pooled_finish`` of that
    work among the other blocks' last finishes. ``g`` starts at 1 (the static share), never falls below
    it, and settles at the self-consistent value (the average draw over the lifetime its own replay
    gives); a block bound by bandwidth alone gets it in one round. Returns the rows and each block's
    replay parameters."""
    scales = [1.0] * len(rows)
    cps = [dict(cp) for _ in rows]
    for _ in range(POOL_ROUNDS):
        finishes = [r[0] for r in rows]
        again = []
        for b, (g, row) in enumerate(zip(scales, rows)):
            others = finishes[:b] + finishes[b + 1 :]
            end = pooled_finish(row[0] * g, others, capacity, pool)
            new = row[0] * g / end if end > 0 else g
            if abs(new - g) > POOL_TOLERANCE * g:
                scales[b] = new
                again.append(b)
        if not again:
            break
        for b in again:
            cps[b] = {**cp, **{k: cp[k] * scales[b] for k in MTE_RATES}}
            rows[b] = kernel.replay(launch, cps[b], block=b)[0]
    return rows, cps


def time_launches(
    kernel: PerfHooks, launches: list[LaunchResult], p: Params, cores: int, hbm_gbps: float, ablate: bool
) -> dict[str, float]:
    """Replay every launch with ``p`` (filling in times), and with each ablation; returns µs saved per term.
    With ``p.bw_pool`` > 0 each block is replayed at its pooled bandwidth (``_pooled_replay``), the
    ablations too (at the same per-block bandwidth)."""
    saved = dict.fromkeys(ABLATION_TERMS, 0.0) if ablate else {}
    for i, lr in enumerate(launches):
        read = sum(t.read for t in lr.gm.values())
        write = sum(t.write for t in lr.gm.values())
        cp = _c_params(p, cores, hbm_gbps, lr.blocks, read, write)
        rows = kernel.replay(i, cp)
        block_cps = None
        if p.bw_pool > 0 and rows:
            rows, block_cps = _pooled_replay(kernel, i, cp, rows, cores / _boost(p, cores, lr.blocks), p.bw_pool)
        finishes = [r[0] for r in rows]
        slow = max(range(len(rows)), key=lambda b: finishes[b])
        lr.block_cycles = finishes
        lr.slowest_block = slow
        lr.kernel_cycles = finishes[slow]
        lr.kernel_us = finishes[slow] / (p.clock_ghz * 1e3)
        lr.launch_us = p.launch_us
        lr.busy_cycles = dict(zip(PIPES, rows[slow][1:5]))
        lr.busy_cycles["S stalled"] = rows[slow][5]
        slow_cp = cp if block_cps is None else block_cps[slow]
        lr.mte2_bytes_per_cycle, lr.mte3_bytes_per_cycle = (slow_cp[k] for k in MTE_RATES)
        if ablate:
            for term, zero in ABLATIONS.items():
                if block_cps is None:
                    alt = max(r[0] for r in kernel.replay(i, {**cp, **zero}))
                else:
                    alt = max(kernel.replay(i, {**c, **zero}, block=b)[0][0] for b, c in enumerate(block_cps))
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


def record(
    kernel: PerfHooks,
    fn: Callable[[], Mapping[str, torch.Tensor | None]],
    inputs: Mapping[str, torch.Tensor | None],
    fast: bool = True,
) -> list[LaunchResult]:
    """Run ``fn`` (which launches kernels of ``kernel``) with the counters on; name GM regions by the
    tensors of ``inputs``, of ``notes.note_tensor`` calls and of the mapping ``fn`` returns (regions of
    none of them are "workspace")."""
    with kernel.lock:
        with collecting() as noted:
            kernel.start(fast)
            try:
                outputs = fn()
            finally:
                kernel.stop()
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
    params: Params | None = None,
    preset: str = "base",
    **kwargs,
) -> ModelRecord:
    """Run one shape through the emu kernel in model mode and predict its time on ``soc``.

    ``cores`` defaults to the SoC's vector cores (``SOC_CORES``); ``params`` to ``PRESETS[preset]``.
    ``fast=False`` runs the real arithmetic on random data (same counts, slower). ``residual`` and
    ``kernel_options`` (e.g. ``casting_mode="llama"``) are passed to the backend's forward where its
    launch code accepts them. The result's launches keep their trace in the library until the next
    recording, so call :func:`model` again rather than holding on to the library's state. Takes the
    keyword arguments of :func:`model_presets` (``pooled=True``: also ``pooled_us``, the time at bw_pool=1).
    """
    sets = {preset: PRESETS[preset] if params is None else params}  # model_presets names the record
    return model_presets(rows, hidden, dtype, direction, sets, **kwargs)[preset]


def model_presets(
    rows: int,
    hidden: int,
    dtype: str | torch.dtype,
    direction: str,
    params: Mapping[str, Params],
    *,
    soc: str = "Ascend910B2",
    cores: int | None = None,
    w_dtype: str | torch.dtype | None = None,
    kernel: ModelKernel | None = None,
    fast: bool = True,
    ablate: bool = True,
    with_dw: bool = True,
    residual: bool = False,
    eps: float = 1e-6,
    seed: int = 0,
    pooled: bool = False,
    **kernel_options,
) -> dict[str, ModelRecord]:
    """:func:`model` for several parameter sets (name -> ``Params``; a set named after a preset and equal
    to it is reported as that preset, any other as "custom"): the kernel runs once, its trace is replayed
    per set.
    ``pooled``: each record also gets ``pooled_us``, its set's time with bw_pool=1 (no ablation)."""
    if direction == "fwd+bwd":
        kw = dict(
            soc=soc, cores=cores, w_dtype=w_dtype, kernel=kernel, fast=fast, ablate=ablate, with_dw=with_dw,
            residual=residual, eps=eps, seed=seed, pooled=pooled, **kernel_options,
        )  # fmt: skip
        fwd = model_presets(rows, hidden, dtype, "fwd", params, **kw)
        bwd = model_presets(rows, hidden, dtype, "bwd", params, **kw)
        return {name: combine(fwd[name], bwd[name]) for name in params}
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if rows < 1 or hidden < 1:
        raise ValueError(f"the model needs rows >= 1 and hidden >= 1, got {rows}x{hidden}")
    t, tw = _dtype(dtype), _dtype(w_dtype or dtype)
    check_cores(cores)
    if cores is None:
        cores = soc_cores(soc)
        if cores is None:
            raise ValueError(f"no vector core count known for SoC {soc!r}; pass cores= (known: {', '.join(SOC_CORES)})")
    hbm_of = {}
    for name, p in params.items():
        hbm_of[name] = p.hbm_gbps or soc_hbm_gbps(soc)
        if not hbm_of[name]:
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

    recorded = record(kernel, run, inputs, fast)
    main_blocks = recorded[0].blocks if recorded else 0
    path = kernel.plan(direction, t, tw, rows, hidden, cores)
    least = min_bytes(rows, hidden, t, direction, main_blocks, w_dtype=tw, with_dw=with_dw, residual=residual)
    out = {}
    try:
        for name, p in params.items():
            hbm = hbm_of[name] * p.hbm_fraction
            launches = [copy.copy(lr) for lr in recorded]  # each set fills in its own times
            saved = time_launches(kernel, launches, p, cores, hbm, ablate)
            pooled_us = None
            if pooled:
                at_one = launches
                if p.bw_pool != 1.0:
                    at_one = [copy.copy(lr) for lr in recorded]
                    time_launches(kernel, at_one, p.replace(bw_pool=1.0), cores, hbm, ablate=False)
                pooled_us = sum(lr.total_us for lr in at_one)
            out[name] = ModelRecord(
                rows=rows,
                hidden=hidden,
                dtype=DTYPE_NAMES[t],
                w_dtype=DTYPE_NAMES[tw],
                direction=direction,
                soc=soc,
                cores=cores,
                launches=launches,
                min_bytes=least,
                hbm_gbps=float(hbm_of[name]),
                params=p,
                preset=name if name in PRESETS and p == PRESETS[name] else "custom",
                path=path,
                ablation_us=saved,
                pooled_us=pooled_us,
            )
    finally:
        kernel.clear()
    return out
