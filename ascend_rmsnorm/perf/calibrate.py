"""Calibrating the performance model (``ascend-rmsnorm bench --calibrate``).

The kernels of ``kernels/calibrate.asc`` each isolate one price of the model's timeline and take a
size. A *runner* gives the µs of one call of a kernel at one size: on an NPU, NPU events around the
launcher (:class:`NpuRunner`); here, the emulation's pipe model replaying that call with a given
:class:`Params` (:class:`EmuRunner`, the closed loop: the fit must give back what was configured).
:func:`fit` draws a least-squares line through each kernel's sizes and derives the ``Params`` fields
from the slopes (the intercepts take whatever is paid once per call: the launch, the first issue,
the last latency).

A fit's parameters are written as a params JSON (``bench --model --params``); an NPU's into the cache
tier as ``calibration-<soc>-<cann>.json``, which ``bench --model`` then uses for that SoC. An
emulation's result is written elsewhere, named ``emu-closed-loop-*.json``: it measures the model, not
a device, and is never picked up as a calibration.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import math
import os
import random
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from .._log import to_stderr
from ..errors import AscendRMSNormError, CacheWriteError
from . import kernel as perf_kernel
from . import model as perf_model
from . import params as perf_params
from . import results as perf_results
from . import soc as perf_soc

#: vec_rate's op classes, in calibrate.asc's order (OpClass); AddApart is Add with its two sources in different
#: UB bank groups (Add's share one, as most of the kernels' do): the two part that read conflict's price
OP_CLASSES = ("Add", "Mul", "Cast", "Compare", "Select", "Gather", "Brcb", "AddApart")
#: The Params fields a calibration fits (hbm_gbps: the bandwidth the kernels reach, all cores busy).
FITTED = (
    "vec_latency_cycles",
    "vec_cycles_per_repeat",
    "dma_burst_cycles",
    "pipe_flag_latency_cycles",
    "launch_us",
    "hbm_gbps",
    "gm_latency_us",
    "bw_boost_max",
    "war_barriers",
)
#: vec_rate's classes that also run at ``Sizes.rate_repeats_large``: their two sizes part a repeat's
#: cost from what each instruction pays once (a barrier before it, where its overwrite of the
#: destination the one before wrote is ordered: ``war_barriers``).
TWO_SIZES = ("Add", "Mul")
#: 2: the flag price over write_chain, bursts from fresh GM bytes, refused fields; 3: the vector latency
#: over vec_spread, net of what an instruction pays once (recorded as vec_once_cycles); 4: the many
#: small bursts lie BURST_PITCH apart in GM (each its own piece of GM traffic, as the kernels' are);
#: 5: a field with 2 standard errors above MAX_SPREAD refused, the raw timings and versions recorded,
#: launches on every core, the L2 flush leaves clean lines; 6: the flag price from flag_pingpong (V <-> MTE3
#: flags alone: two flag latencies a trip), not over write_chain (calibrate.asc kCalibVersion 8); 7: vec_chain
#: and vec_spread at 8, 16, 32 and 64 repeats, the latency from the fewest whose windows the scalar unit's
#: issue did not bound (latency_level), and vec_cycles_per_repeat refused where vec_rate's Add disagrees with
#: vec_chain's growth per repeat (an issue-bound vec_rate); 8: vec_spread's Adds write the UB bank of their sources at
#: 64 repeats too (calibrate.asc kCalibVersion 9; before, two of its four did not, unlike vec_chain's step)
CALIBRATION_VERSION = 8
#: calibrate.asc kBurstPitch: GM bytes from one of dma_bursts' "many" bursts to the next
BURST_PITCH = 512
KERNEL = "calibrate"


class CalibrationError(AscendRMSNormError):
    """A calibration kernel refused its arguments, or a fit had too few points."""


# --------------------------------------------------------------------------------------------------- probes


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes each kernel runs at (three or more per line, so a line has residuals)."""

    chain_steps: tuple[int, ...] = (4, 8, 16)
    chain_repeats: int = 64
    #: vec_chain and vec_spread again at fewer repeats an instruction (steps scaled up by chain_repeats /
    #: these): the latency is a larger share of their slopes there, so less noise in it, but their windows
    #: are the first the scalar unit's issue may bound; the latency is fitted at the fewest whose windows
    #: were the V pipe's (see latency_repeats)
    chain_repeats_low: tuple[int, ...] = (8, 16, 32)
    rate_instrs: tuple[int, ...] = (4, 8, 16)
    rate_repeats: int = 32
    rate_repeats_large: int = 64  # TWO_SIZES again (both sizes' repeats outlast issuing an instruction)
    bursts: int = 64  # "many small": this many 32-byte bursts per DMA; "one large": one burst of the same bytes
    burst_dmas: tuple[int, ...] = (4, 8, 16)
    stream_chunks: tuple[int, ...] = (4, 8, 16)
    chunk_bytes: int = 8192
    dma_chain_steps: tuple[int, ...] = (4, 8, 16)
    dma_chain_bytes: int = 1024
    flag_trips: tuple[int, ...] = (4, 8, 16)
    launches: tuple[int, ...] = (1, 2, 4)


#: Small sizes: the closed loop is exact at any size, and the emulation records every instruction.
EMU_SIZES = Sizes()
#: An NPU's: long enough that a line's slope stands well above the timer's noise, and that a call of
#: the vector probes (about 24 µs at the smallest, under base) outlasts the host's issue of it.
NPU_SIZES = Sizes(
    chain_steps=(1024, 2048, 4096, 8192),
    rate_instrs=(1024, 2048, 4096, 8192),
    burst_dmas=(64, 128, 256, 512),
    stream_chunks=(64, 128, 256, 512),
    chunk_bytes=32768,
    dma_chain_steps=(64, 128, 256, 512),
    flag_trips=(4096, 8192, 16384, 32768),  # a trip: two flags (under base 0.06 µs), no write
    launches=(16, 32, 64, 128),
)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One call of one calibration launcher: ``line`` is the fit it belongs to, ``x`` its size there."""

    line: str
    kernel: str  # launcher: ascend_rmsnorm_calib_<kernel>
    args: tuple[int, ...]  # the int arguments after the GM pointers
    blocks: int
    x: int

    def buffers(self) -> list[tuple[str, int]]:
        """(name, bytes) of the GM pointers the launcher takes, in order."""
        a = self.args
        if self.kernel in ("vec_chain", "vec_spread", "vec_rate", "flag_pingpong"):
            return [("out", 256)]
        if self.kernel == "dma_bursts":  # several bursts lie BURST_PITCH apart (calibrate.asc kBurstPitch)
            return [("src", a[0] * a[1] * (BURST_PITCH if a[1] > 1 else a[2]))]
        if self.kernel == "stream":
            n = self.blocks * a[1] * a[2]
            return [("src", n), ("dst", n)]
        if self.kernel == "dma_chain":
            return [("src", a[0] * a[1])]
        return []


def block_counts(cores: int) -> list[int]:
    """1..cores: 1, then 2, 8, 32, ... (powers of four times two) below ``cores``, then ``cores``."""
    out, b = [1], 2
    while b < cores:
        out.append(b)
        b *= 4
    return sorted({*out, cores})


def chain_levels(sizes: Sizes) -> list[int]:
    """The repeats an instruction vec_chain and vec_spread run at, fewest first."""
    return sorted({*sizes.chain_repeats_low, sizes.chain_repeats})


def chain_line(kernel: str, repeats: int, sizes: Sizes) -> str:
    """``vec_chain`` / ``vec_spread`` at Sizes.chain_repeats; ``<kernel>.r<repeats>`` at the others."""
    return kernel if repeats == sizes.chain_repeats else f"{kernel}.r{repeats}"


def plan(cores: int, sizes: Sizes = EMU_SIZES) -> list[Probe]:
    """Every call a calibration makes, for a SoC of ``cores`` vector cores."""
    s = sizes
    if any(n % SPREAD for n in s.chain_steps):
        raise CalibrationError(f"vec_spread takes multiples of {SPREAD} instructions, not {s.chain_steps}")
    if any(not 0 < r < s.chain_repeats or s.chain_repeats % r for r in s.chain_repeats_low):
        raise CalibrationError(f"chain_repeats_low {s.chain_repeats_low}: divisors of {s.chain_repeats} below it")
    out = []
    for r in chain_levels(s):  # the same time a call at each: chain_repeats / r times the steps
        steps = [n * (s.chain_repeats // r) for n in s.chain_steps]
        out += [Probe(chain_line("vec_chain", r, s), "vec_chain", (n, r), 1, n) for n in steps]
        out += [Probe(chain_line("vec_spread", r, s), "vec_spread", (n, r), 1, n) for n in steps]
    for code, name in enumerate(OP_CLASSES):
        out += [Probe(f"vec_rate.{name}", "vec_rate", (code, n, s.rate_repeats), 1, n) for n in s.rate_instrs]
        if name in TWO_SIZES:
            big = s.rate_repeats_large
            out += [Probe(f"vec_rate.{name}.large", "vec_rate", (code, n, big), 1, n) for n in s.rate_instrs]
    out += [Probe("bursts.many", "dma_bursts", (n, s.bursts, 32), 1, n) for n in s.burst_dmas]
    out += [Probe("bursts.one", "dma_bursts", (n, 1, 32 * s.bursts), 1, n) for n in s.burst_dmas]
    for b in block_counts(cores):
        out += [Probe(f"stream.read.{b}", "stream", (1, n, s.chunk_bytes), b, n) for n in s.stream_chunks]
    out += [Probe("stream.write", "stream", (2, n, s.chunk_bytes), cores, n) for n in s.stream_chunks]
    out += [Probe("stream.both", "stream", (3, n, s.chunk_bytes), cores, n) for n in s.stream_chunks]
    out += [Probe("dma_chain", "dma_chain", (n, s.dma_chain_bytes), 1, n) for n in s.dma_chain_steps]
    out += [Probe("flag_pingpong", "flag_pingpong", (n, 1), 1, n) for n in s.flag_trips]
    out += [Probe("flag_pingpong.two", "flag_pingpong", (n, 2), 1, n) for n in s.flag_trips]
    out += [Probe("launch", "empty", (n,), cores, n) for n in s.launches]  # as the kernels launch: every core
    return out


# --------------------------------------------------------------------------------------------------- the library

_INT = ctypes.c_int32
_ARGC = {"vec_chain": 2, "vec_spread": 2, "vec_rate": 3, "dma_bursts": 3, "stream": 3, "dma_chain": 2,
         "flag_pingpong": 2, "empty": 1}  # fmt: skip
_PTRS = {"vec_chain": 1, "vec_spread": 1, "vec_rate": 1, "dma_bursts": 1, "stream": 2, "dma_chain": 1,
         "flag_pingpong": 1, "empty": 0}  # fmt: skip
#: calibrate.asc kSpread: vec_spread's instructions a barrier window (its sizes are multiples of it)
SPREAD = 4


class CalibrationLibrary:
    """The calibration launchers of a loaded ``calibrate.asc`` library (emu or npu build)."""

    def __init__(self, raw: ctypes.CDLL, path: str | os.PathLike = "?") -> None:
        self.raw, self.path = raw, Path(path)
        raw.ascend_rmsnorm_calibrate_version.restype = _INT
        self.version = int(raw.ascend_rmsnorm_calibrate_version())
        self._fns = {}
        for name, argc in _ARGC.items():
            fn = getattr(raw, f"ascend_rmsnorm_calib_{name}")
            fn.restype = _INT
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint32] + [ctypes.c_void_p] * _PTRS[name] + [_INT] * argc
            self._fns[name] = fn

    def call(self, probe: Probe, pointers: Sequence[int], stream: int | None) -> None:
        st = self._fns[probe.kernel](stream, probe.blocks, *pointers, *probe.args)
        if st == 0:
            return
        name = f"ascend_rmsnorm_calib_{probe.kernel}{probe.args} on {probe.blocks} blocks"
        if st == 1:
            raise CalibrationError(f"{name}: an argument out of range")
        from ..jit.library import refused_launch_text

        raise CalibrationError(refused_launch_text(name, st))


def load_library(tc, arch: str, cache_dir: str | os.PathLike | None = None) -> CalibrationLibrary:
    """Build (once, into the kernel cache: its own entry) and load the calibration library."""
    from ..jit import cache, library

    _, entry = cache.ensure_built(tc, arch, cache_dir=cache_dir, kernel=KERNEL)
    fd = cache.open_library(entry, cache.build_spec(tc, arch, kernel=KERNEL).key)
    try:
        # the checked inode, loaded through an fd name nobody loaded before (as the kernel library is)
        keep, name = library.unloaded_fd_name(fd)
        raw = ctypes.CDLL(name)
    finally:
        os.close(fd)
    lib = CalibrationLibrary(raw, entry / cache.LIB_NAME)
    lib._fd = keep  # open while loaded: its number is never reused for another library
    return lib


_emu_library: CalibrationLibrary | None = None


def emu_library() -> CalibrationLibrary:
    global _emu_library
    if _emu_library is None:
        from ..backends.emu import EMU_ARCH
        from ..jit import toolchain

        _emu_library = load_library(toolchain.emu_toolchain(), EMU_ARCH)
    return _emu_library


# --------------------------------------------------------------------------------------------------- runners

Runner = Callable[[Probe], float]  # µs of one call


class EmuRunner:
    """The closed loop: µs of a call as the emulation's pipe model replays it with ``params``."""

    def __init__(self, params: perf_params.Params, soc: str, cores: int, lib: CalibrationLibrary | None = None) -> None:
        self.params, self.soc, self.cores = params, soc, cores
        self.lib = lib or emu_library()
        self.hooks = perf_kernel.PerfHooks(self.lib.raw, self.lib.path)
        hbm = params.hbm_gbps or perf_soc.soc_hbm_gbps(soc)
        if not hbm:
            raise ValueError(f"no HBM bandwidth known for SoC {soc!r}; set the hbm_gbps parameter")
        self.hbm = float(hbm) * params.hbm_fraction

    def __call__(self, probe: Probe) -> float:
        bufs = {name: torch.empty(max(n, 32), dtype=torch.uint8) for name, n in probe.buffers()}
        ptrs = [t.data_ptr() for t in bufs.values()]
        launches = perf_model.record(self.hooks, lambda: self.lib.call(probe, ptrs, None), bufs, fast=True)
        try:
            perf_model.time_launches(self.hooks, launches, self.params, self.cores, self.hbm, ablate=False)
        finally:
            self.hooks.clear()
        return sum(lr.total_us for lr in launches)


#: Bytes zeroed between two timed calls of a probe that reads or writes GM, so that no call finds its
#: data in the L2 the calls before it left there (192 MB on dav-2201): twice that. Then as many other
#: bytes are read, so that the L2 holds clean lines, not the zeroes: where it writes back, a timed call
#: would otherwise pay for writing up to 192 MB of them back to HBM as its reads evict them, more at
#: its small sizes than its large ones (a bent line). Whether the L2 allocates on write, on read, and
#: writes back is not documented here: the two passes cover each case.
L2_FLUSH_BYTES = 2 * 192 * 2**20
#: A block of back-to-back calls is host-bound when the host took this share of the NPU's time or more to
#: issue it: the NPU may then have waited between calls.
HOST_BOUND = 0.8
#: The launchers whose time is the GM's (bandwidth, bursts, latency), not the L2's.
GM_KERNELS = ("dma_bursts", "stream", "dma_chain")


class NpuRunner:
    """µs of a call on this NPU, by NPU events, after ``warmup`` calls (torch_npu only here).

    A probe of the vector unit or of flags or launches: ``reps`` calls back to back between one pair of
    events (a launch's cost is what back-to-back launches pay), the median of ``blocks`` such blocks;
    a block the host issued about as slowly as the NPU ran it marks its line host-bound. A probe of GM
    (``GM_KERNELS``): the median of ``reps`` calls each between its own events, with L2_FLUSH_BYTES
    zeroed before each, so the fit reads HBM bandwidth and latency rather than the L2's.

    torch_npu queues event records and its own ops (the flush) on a task queue that another thread
    submits; a ctypes launch goes to the stream at once. Reading ``stream.npu_stream`` empties that
    queue, so it is read after the records and the flush and before the launches they must precede."""

    def __init__(
        self, lib: CalibrationLibrary, device: torch.device, warmup: int = 3, reps: int = 20, blocks: int = 3
    ) -> None:
        import torch_npu  # noqa: F401 - only an NPU runner needs it

        from ..backends import npu  # the raw stream, read as the kernels' launches read it

        self._npu = npu
        self.lib, self.device, self.warmup, self.reps, self.blocks = lib, device, warmup, reps, blocks
        self._flush: torch.Tensor | None = None
        self._clean: torch.Tensor | None = None
        #: Lines with a back-to-back probe whose calls the host issued about as slowly as the NPU ran them
        #: (then the events time the host): ``assess`` writes no field computed from them.
        self.host_bound: set[str] = set()

    def __call__(self, probe: Probe) -> float:
        npu = torch.npu  # type: ignore[attr-defined]
        bufs = [torch.zeros(max(n, 32), dtype=torch.uint8, device=self.device) for _, n in probe.buffers()]
        ptrs = [t.data_ptr() for t in bufs]
        stream = npu.current_stream(self.device)
        raw = self._submitted(stream)
        for _ in range(self.warmup):
            self.lib.call(probe, ptrs, raw)
        npu.synchronize(self.device)
        if probe.kernel not in GM_KERNELS:
            per_call = []
            for _ in range(self.blocks):  # the median of a few blocks: one preempted block is not the price
                start, end = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
                start.record(stream)
                raw = self._submitted(stream)  # the start event is on the stream before the first launch
                t0 = time.perf_counter()
                for _ in range(self.reps):
                    self.lib.call(probe, ptrs, raw)
                issued_us = (time.perf_counter() - t0) * 1e6
                end.record(stream)
                end.synchronize()
                device_us = start.elapsed_time(end) * 1e3  # ms -> µs
                if issued_us >= HOST_BOUND * device_us and probe.kernel != "empty":
                    self.host_bound.add(probe.line)  # (an empty launch's price is the host's issue too)
                per_call.append(device_us / self.reps)
            return sorted(per_call)[len(per_call) // 2]
        if self._flush is None:
            self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=self.device)
            self._clean = torch.zeros(L2_FLUSH_BYTES, dtype=torch.uint8, device=self.device)
        pairs = []
        for _ in range(self.reps):
            self._flush.zero_()  # evicts the call before's data (an L2 that allocates on write)
            self._clean.amax()  # leaves clean lines (an L2 that allocates on read), no dirty zeroes
            start, end = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
            start.record(stream)
            self.lib.call(probe, ptrs, self._submitted(stream))  # after the flush and the start event
            end.record(stream)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        times = sorted(start.elapsed_time(end) * 1e3 for start, end in pairs)
        return times[len(times) // 2]

    def _submitted(self, stream) -> int:
        return self._npu.submitted(stream, self.device)


def measure(
    runner: Runner, probes: Sequence[Probe], progress: Callable[[str], None] | None = None
) -> list[tuple[Probe, float]]:
    out = []
    for i, probe in enumerate(probes):
        if progress and (i % 10 == 0 or i == len(probes) - 1):
            progress(f"[{i + 1}/{len(probes)}] {probe.line} x={probe.x}")
        out.append((probe, float(runner(probe))))
    return out


# --------------------------------------------------------------------------------------------------- the fit


@dataclasses.dataclass(frozen=True)
class Line:
    """y = intercept + slope * x by least squares, with the points' residuals."""

    intercept: float
    slope: float
    residuals: tuple[float, ...]

    @property
    def rms(self) -> float:
        return math.sqrt(sum(r * r for r in self.residuals) / len(self.residuals))


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Line:
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise CalibrationError(f"a line needs two or more distinct sizes, got {list(xs)}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    icpt = my - slope * mx
    return Line(icpt, slope, tuple(y - (icpt + slope * x) for x, y in zip(xs, ys)))


@dataclasses.dataclass
class Fit:
    """What a calibration found: fitted Params fields, their residuals (µs, rms over the lines each came
    from), the lines themselves, and what the model has no field for (per-class repeat cost, bandwidth
    per block count, how MTE2 and MTE3 share a core)."""

    fitted: dict[str, float]
    residuals: dict[str, float]
    lines: dict[str, Line]
    repeat_cycles: dict[str, float]
    gbps_by_blocks: dict[int, float]
    mte_sharing: float
    vec_once_cycles: float  # what a vector instruction pays once on the V pipe beyond its repeats (no model field)
    clock_ghz: float = perf_params.Params().clock_ghz  # cycles per ns the slopes were turned into cycles at
    spread: dict[str, float] = dataclasses.field(default_factory=dict)  # see assess()
    stderr: dict[str, float] = dataclasses.field(default_factory=dict)  # see assess()
    points: list[dict] = dataclasses.field(default_factory=list)  # the raw timings it was fitted from
    refused: dict[str, str] = dataclasses.field(default_factory=dict)  # field -> why it is not written
    #: flag_pingpong's trip with two chains interleaved over one chain's: 1 where the flags' latency bounds
    #: the trips, 2 where the scalar unit's issue of their flag instructions does (see assess)
    flag_chain_ratio: float = math.nan
    #: the vector latency from the vec_chain / vec_spread pair at each repeats an instruction (chain_levels)
    vec_latency_by_repeats: dict[int, float] = dataclasses.field(default_factory=dict)
    #: the repeats whose pair gave vec_latency_cycles (latency_level), and why no pair could (None: one did)
    latency_repeats: int = 0
    latency_unchecked: str | None = None
    #: vec_chain's step growth per repeat between its two most-repeats lines (an Add's repeat, where the V
    #: pipe bounds the chain), and vec_rate's Add repeat price less that (see assess)
    chain_cycles_per_repeat: float = math.nan
    rate_chain_gap: float = math.nan


def fitted_from(cores: int, sizes: Sizes = EMU_SIZES) -> dict[str, tuple[str, ...]]:
    """The lines each fitted field is computed from (the vector latency: each pair, one or two of them)."""
    pairs = tuple(chain_line(k, r, sizes) for r in chain_levels(sizes) for k in ("vec_chain", "vec_spread"))
    return {
        "vec_latency_cycles": pairs,
        "vec_cycles_per_repeat": ("vec_rate.Add", "vec_rate.Mul", "vec_rate.Add.large", "vec_rate.Mul.large"),
        "dma_burst_cycles": ("bursts.many", "bursts.one"),
        "pipe_flag_latency_cycles": ("flag_pingpong", "flag_pingpong.two"),
        "launch_us": ("launch",),
        "hbm_gbps": (f"stream.read.{cores}", "bursts.many", "bursts.one"),
        "gm_latency_us": ("dma_chain", "stream.read.1"),
        "bw_boost_max": ("stream.read.1", f"stream.read.{cores}"),
        "war_barriers": (
            "vec_rate.Add",
            "vec_rate.Mul",
            "vec_rate.Add.large",
            "vec_rate.Mul.large",
            *pairs,
        ),
    }


#: vec_cycles_per_repeat is written only where vec_rate's Add repeat price is within this share (of
#: vec_chain's step growth per repeat, or of SCALE where that is larger), or within twice its jackknife
#: standard error, of that growth: a vec_rate line the scalar unit's issue bound at its fewer repeats grows
#: by more than its repeats from there, which reads the price low
RATE_TOLERANCE = 0.15
#: A pair's latency is taken only where the pair at the next more repeats reads it at most this share
#: (of the latency, or of SCALE where that is larger) higher: windows the scalar unit's issue bounds read
#: it lower, and the fewer repeats they have the lower.
ISSUE_TOLERANCE = 0.1
#: ... and where vec_spread's instruction grew, from those repeats to the next, by at least this share of
#: what vec_chain's step grew by (both grow by the added repeats' price where the V pipe bounds them; a
#: window the issue bounds does not grow at all)
SPREAD_GROWTH = 0.5


def pair_latency(chain: float, spread: float) -> float:
    """The vector latency from vec_chain's step and vec_spread's instruction (cycles, same repeats): the
    step pays a latency, the instruction a quarter of one, both the same repeats and once-paid price."""
    return (chain - spread) * SPREAD / (SPREAD - 1)


def latency_level(chain: Mapping[int, float], spread: Mapping[int, float]) -> tuple[int, str | None]:
    """The fewest repeats an instruction whose vec_chain / vec_spread windows were the V pipe's, by the
    pair at the next more repeats (``chain``: vec_chain's step, ``spread``: vec_spread's instruction, in
    cycles, by repeats), and None; or the most repeats and why no pair could be checked so.

    A window the scalar unit issues more slowly than the V pipe runs it costs the issue's time, which does
    not grow with the repeats: vec_spread's windows (four instructions a latency) become so before
    vec_chain's (one), and at fewer repeats before more; the latency then reads low. So a pair is taken
    where, to the next, vec_spread's instruction grew with the repeats as vec_chain's step did, vec_chain's
    step grew at all (both issue-bound read the same low latency, an issue_sync) and the latency read no
    more than ISSUE_TOLERANCE higher there."""
    levels = sorted(chain)
    why = "no pair at more repeats to check it against"
    for r, up in zip(levels, levels[1:]):
        grew, spread_grew = (chain[up] - chain[r]) / (up - r), (spread[up] - spread[r]) / (up - r)
        lat, lat_up = pair_latency(chain[r], spread[r]), pair_latency(chain[up], spread[up])
        if not grew >= SANE["vec_cycles_per_repeat"][0]:
            why = (
                f"vec_chain's step grew by {grew:.3g} cycles a repeat from {r} to {up} repeats an instruction: "
                "bound by the scalar unit's issue of its instructions, not by the V pipe"
            )
        elif not spread_grew >= SPREAD_GROWTH * grew:
            why = (
                f"vec_spread's instruction grew by {spread_grew:.3g} cycles a repeat from {r} to {up} repeats, "
                f"vec_chain's step by {grew:.3g}: its windows were bound by the scalar unit's issue of their "
                "instructions, not by the V pipe"
            )
        elif not lat_up - lat <= ISSUE_TOLERANCE * max(abs(lat_up), SCALE["vec_latency_cycles"]):
            why = (
                f"{lat:.3g} at {r} repeats an instruction, {lat_up:.3g} at {up}: vec_spread's windows at {r} "
                "were partly bound by the scalar unit's issue of their instructions"
            )
        else:
            return r, None
    return levels[-1], why


def fit(
    points: Sequence[tuple[Probe, float]],
    cores: int,
    clock_ghz: float,
    sizes: Sizes = EMU_SIZES,
    latency_repeats: int | None = None,
) -> Fit:
    """The Params fields from the measured µs of every probe of :func:`plan` (see the module docstring).
    ``latency_repeats``: the vec_chain / vec_spread pair the vector latency comes from (default: by
    :func:`latency_level`).

    Slopes are in cycles per unit of size (µs x clock), except the launch line's (µs per launch)."""
    by_line: dict[str, list[tuple[float, float]]] = {}
    for probe, us in points:
        by_line.setdefault(probe.line, []).append((probe.x, us))
    lines = {name: fit_line([x for x, _ in pts], [y for _, y in pts]) for name, pts in by_line.items()}
    cyc = clock_ghz * 1e3  # cycles per µs

    def slope(name: str) -> float:
        if name not in lines:
            raise CalibrationError(f"no measurements for the {name} line")
        return lines[name].slope * cyc

    s = sizes
    # vec_rate's instructions each overwrite the destination the one before wrote, in one barrier window:
    # an instruction costs its repeats plus, where that overwrite is ordered, a barrier's wait (`once`)
    extra = s.rate_repeats_large - s.rate_repeats
    per_repeat = {n: (slope(f"vec_rate.{n}.large") - slope(f"vec_rate.{n}")) / extra for n in TWO_SIZES}
    once = sum(slope(f"vec_rate.{n}") - s.rate_repeats * per_repeat[n] for n in TWO_SIZES) / len(TWO_SIZES)
    repeat_cycles = {name: (slope(f"vec_rate.{name}") - once) / s.rate_repeats for name in OP_CLASSES}
    cpr = sum(per_repeat.values()) / len(per_repeat)  # the binary arithmetic: the kernels' bulk
    # vec_chain pays, a step, repeats + what an instruction pays once on the V pipe + the latency;
    # vec_spread the same but a latency every SPREAD instructions: the two part the latency from that.
    # At fewer repeats the latency is a larger share of the slopes (less noise in it), at more the windows
    # outlast the scalar unit's issue of their instructions by more (latency_level)
    chain = {r: slope(chain_line("vec_chain", r, s)) for r in chain_levels(s)}
    spread = {r: slope(chain_line("vec_spread", r, s)) for r in chain}
    lat_by = {r: pair_latency(chain[r], spread[r]) for r in chain}
    if latency_repeats is None:
        level, unchecked = latency_level(chain, spread)
    else:  # assess's left-out fits: the full fit's pair, already checked
        level, unchecked = latency_repeats, None
    below, top = chain_levels(s)[-2:]  # vec_chain's windows outlast the issue most there
    chain_cpr = (chain[top] - chain[below]) / (top - below)
    vec_lat = lat_by[level]
    vec_once = chain[level] - vec_lat - level * per_repeat["Add"]
    once -= vec_once  # what vec_rate's instructions pay once beyond that: the ordered overwrite's wait
    burst = (slope("bursts.many") - slope("bursts.one")) / (s.bursts - 1)

    def share(name: str) -> float:  # bytes per cycle of one block
        return s.chunk_bytes / (slope(name) - burst)

    blocks = block_counts(cores)
    gbps = {b: b * share(f"stream.read.{b}") * clock_ghz for b in blocks}
    share_all, share_one = share(f"stream.read.{cores}"), share("stream.read.1")
    hbm = cores * share_all * clock_ghz
    mte_sharing = (slope("stream.both") - burst) / (slope(f"stream.read.{cores}") - burst)
    gm_lat = slope("dma_chain") - s.dma_chain_bytes / share_one - burst
    # a trip of flag_pingpong is two flags (V -> MTE3, MTE3 -> V) and nothing else: no other price enters it
    trip = slope("flag_pingpong")
    fitted = {
        "vec_latency_cycles": vec_lat,
        "vec_cycles_per_repeat": cpr,
        "dma_burst_cycles": burst,
        "pipe_flag_latency_cycles": trip / 2,
        "launch_us": lines["launch"].slope if "launch" in lines else float("nan"),
        "hbm_gbps": hbm,
        "gm_latency_us": gm_lat / cyc,
        "bw_boost_max": share_one / share_all,
        "war_barriers": once / vec_lat if vec_lat > 0 else float("nan"),  # 0: no wait, 1: a barrier's
    }
    sources = fitted_from(cores, s)
    residuals = {k: max(lines[n].rms for n in names if n in lines) for k, names in sources.items()}
    raw = [
        {"line": p.line, "kernel": p.kernel, "args": list(p.args), "blocks": p.blocks, "x": p.x, "us": us}
        for p, us in points
    ]
    ratio = slope("flag_pingpong.two") / trip if trip else math.nan
    return Fit(
        fitted, residuals, lines, repeat_cycles, gbps, mte_sharing, vec_once, clock_ghz, points=raw,
        flag_chain_ratio=ratio, vec_latency_by_repeats=lat_by, latency_repeats=level, latency_unchecked=unchecked,
        chain_cycles_per_repeat=chain_cpr, rate_chain_gap=per_repeat["Add"] - chain_cpr,
    )  # fmt: skip


def fit_record(fitres: Fit) -> dict:
    """What the ``--json`` object and a calibration file both say of a fit beyond its fitted numbers: how
    well each is pinned and why one is refused, the checks' readings, and what a refit needs (every timing,
    µs of one call per probe, and each line's intercept, slope in µs per unit of size, and residuals).
    Non-finite values stay as they are: ``dumps_strict`` writes them as null."""
    return {
        "residuals": fitres.residuals,
        "spread": fitres.spread,
        "stderr": fitres.stderr,
        "refused": fitres.refused,
        "vec_once_cycles": fitres.vec_once_cycles,
        "flag_chain_ratio": fitres.flag_chain_ratio,
        "vec_latency_by_repeats": {str(r): v for r, v in fitres.vec_latency_by_repeats.items()},
        "vec_latency_repeats": fitres.latency_repeats,
        "points": fitres.points,
        "lines": {
            name: {"intercept_us": ln.intercept, "slope_us": ln.slope, "residuals_us": list(ln.residuals)}
            for name, ln in fitres.lines.items()
        },
    }


def configured(p: perf_params.Params, soc: str, cores: int) -> dict[str, float]:
    """The values a closed loop with ``p`` must give back (hbm_gbps: what the kernels reach)."""
    hbm = p.hbm_gbps or perf_soc.soc_hbm_gbps(soc) or float("nan")
    return {
        "vec_latency_cycles": p.vec_latency_cycles,
        "vec_cycles_per_repeat": p.vec_cycles_per_repeat,
        "dma_burst_cycles": p.dma_burst_cycles,
        "pipe_flag_latency_cycles": p.pipe_flag_latency_cycles,
        "launch_us": p.launch_us,
        "hbm_gbps": hbm * p.hbm_fraction,
        "gm_latency_us": p.gm_latency_us,
        "bw_boost_max": min(p.bw_boost_max, float(cores)),
        "war_barriers": p.war_barriers,
    }


def relative_errors(conf: Mapping[str, float], got: Mapping[str, float]) -> dict[str, float]:
    """|fitted - configured| / configured per field; where configured is 0, the absolute difference."""
    return {k: abs(got[k] - v) / abs(v) if v else abs(got[k]) for k, v in conf.items()}


#: The plausible range the seeded random sets are drawn from (uniform), around base..stress.
PLAUSIBLE = {
    "vec_latency_cycles": (10.0, 100.0),
    "vec_cycles_per_repeat": (0.5, 2.0),
    "dma_burst_cycles": (0.0, 50.0),
    "pipe_flag_latency_cycles": (10.0, 200.0),
    "launch_us": (2.0, 20.0),
    "hbm_fraction": (0.6, 1.0),
    "gm_latency_us": (0.2, 1.5),
    "s_flag_latency_us": (0.1, 1.5),
    "bw_boost_max": (1.0, 2.0),
}


def random_params(seed: int) -> perf_params.Params:
    """A parameter set drawn inside :data:`PLAUSIBLE` (everything else base), reproducibly."""
    rng = random.Random(seed)
    return perf_params.PRESETS["base"].replace(**{k: rng.uniform(lo, hi) for k, (lo, hi) in PLAUSIBLE.items()})


#: What no NPU of this family could show: a fitted value outside is a bad measurement, not a price.
SANE = {
    "vec_latency_cycles": (1.0, 1000.0),
    "vec_cycles_per_repeat": (0.1, 16.0),
    "dma_burst_cycles": (-1.25, 1000.0),  # a true 0 fits a little either side (written as 0)
    "pipe_flag_latency_cycles": (-2.5, 5000.0),
    "launch_us": (0.1, 500.0),
    "hbm_fraction": (0.05, 1.1),  # of the SoC's figure (hbm_gbps where the figure is unknown: > 0)
    "gm_latency_us": (0.01, 20.0),
    "bw_boost_max": (0.9, math.inf),  # at most the core count
    "war_barriers": (-0.2, 1.2),  # and within 0.2 of 0 or of 1: in between is neither
}
#: A field is written only if leaving out any one measurement moves it by at most this share of its
#: value (or of SCALE, where the value is smaller), so one outlier or a noisy line cannot set a price,
#: and if twice its standard error is within that share too: the noise of every line it comes from at
#: once (several prices are small remainders of large slopes), which no single left-out point shows.
MAX_SPREAD = 0.25
SCALE = {
    "vec_latency_cycles": 10.0,
    "vec_cycles_per_repeat": 0.5,
    "dma_burst_cycles": 5.0,
    "pipe_flag_latency_cycles": 10.0,
    "launch_us": 1.0,
    "hbm_gbps": 100.0,
    "gm_latency_us": 0.1,
    "bw_boost_max": 1.0,
    "war_barriers": 1.0,
}


def assess(
    points: Sequence[tuple[Probe, float]],
    cores: int,
    clock_ghz: float,
    sizes: Sizes,
    soc: str,
    host_bound: Sequence[str] = (),
) -> Fit:
    """The fit, with each field's spread (the most it moves when one measurement is left out), its
    standard error (the jackknife's: the root of the sum of the squares of those moves, every point's
    noise at once) and the fields not to write, with why: not finite, outside SANE, a spread or twice
    the standard error above MAX_SPREAD, or computed from a line with host-bound points (the NPU may
    have waited for Python, so the time is the host's)."""

    def values(f: Fit) -> dict[str, float]:  # the fitted fields and the once-paid price beside them
        return {**f.fitted, "vec_once_cycles": f.vec_once_cycles}

    fitres = fit(points, cores, clock_ghz, sizes)
    level = fitres.latency_repeats  # every left-out fit takes the latency from the same pair
    full = values(fitres)
    spread = dict.fromkeys(full, 0.0)
    squares = dict.fromkeys(full, 0.0)
    gap_squares = 0.0
    for j in range(len(points)):
        try:
            left = fit([*points[:j], *points[j + 1 :]], cores, clock_ghz, sizes, level)
        except CalibrationError:  # its line needs every point it has
            continue
        gap_squares += (left.rate_chain_gap - fitres.rate_chain_gap) ** 2
        for k, v in values(left).items():
            move = abs(v - full[k]) if math.isfinite(v) and math.isfinite(full[k]) else math.inf
            spread[k] = max(spread[k], move)
            squares[k] += move * move
    fitres.spread = spread
    fitres.stderr = stderr = {k: math.sqrt(v) for k, v in squares.items()}
    figure = perf_soc.soc_hbm_gbps(soc)
    sources = fitted_from(cores, sizes)
    for k, v in fitres.fitted.items():
        name, value = (k, v)
        if k == "hbm_gbps":
            name, value = ("hbm_fraction", v / figure) if figure else (k, v)
        lo, hi = SANE.get(name, (0.0, math.inf))
        hi = min(hi, float(cores)) if k == "bw_boost_max" else hi
        slow = sorted(set(sources[k]) & set(host_bound))
        if not math.isfinite(v):
            fitres.refused[k] = "not a number (a line it needs is missing or flat)"
        elif k == "vec_latency_cycles" and value < lo:  # vec_spread cost what vec_chain did
            fitres.refused[k] = (
                f"{value:.3g}: vec_spread's windows cost as much as vec_chain's steps, so they were not whole "
                "(bisheng's auto-sync may have put barriers in them: bench --sync-log shows where)"
            )
        elif not lo <= value <= hi:
            fitres.refused[k] = f"{name} {value:.4g} outside [{lo:g}, {hi:g}]: not a plausible price"
        elif k == "war_barriers" and 0.2 < v < 0.8:
            fitres.refused[k] = f"{v:.2f}: neither 0 (no wait) nor 1 (a barrier's): the model has no such case"
        elif spread[k] > MAX_SPREAD * max(abs(v), SCALE[k]):
            fitres.refused[k] = f"moves by {spread[k]:.3g} when one measurement is left out: too noisy"
        elif 2 * stderr[k] > MAX_SPREAD * max(abs(v), SCALE[k]):
            fitres.refused[k] = (
                f"standard error {stderr[k]:.3g} (the noise of all its lines at once): "
                "these timings cannot pin it down; too noisy"
            )
        elif slow:
            fitres.refused[k] = f"host-bound points in {', '.join(slow)}: the NPU may have waited for Python"
    # two interleaved ping-pongs wait the same two flag latencies a trip but issue twice the flag
    # instructions: dearer trips were bound by that issue, and the slope is not the flags' latency
    ratio = fitres.flag_chain_ratio
    if not abs(ratio - 1) <= MAX_SPREAD:
        fitres.refused.setdefault(
            "pipe_flag_latency_cycles",
            f"flag_pingpong's trips cost {ratio:.3g}x as much with two chains interleaved as with one: bound by "
            "issuing the flag instructions (or the chains did not overlap), not by the flags' latency",
        )
    # the latency from windows that the scalar unit's issue may have bounded reads low (latency_level)
    if fitres.latency_unchecked is not None:
        for k in ("vec_latency_cycles", "war_barriers"):
            fitres.refused.setdefault(k, f"{fitres.latency_unchecked}; the latency would read low")
    # vec_rate's instructions the scalar unit's issue bound at its fewer repeats read the repeat price low;
    # vec_chain's, a latency longer, outlast the issue: where the two disagree beyond tolerance and noise
    gap, chain_cpr = fitres.rate_chain_gap, fitres.chain_cycles_per_repeat
    allowed = max(RATE_TOLERANCE * max(chain_cpr, SCALE["vec_cycles_per_repeat"]), 2 * math.sqrt(gap_squares))
    if not abs(gap) <= allowed:
        fitres.refused.setdefault(
            "vec_cycles_per_repeat",
            f"vec_rate's Add costs {chain_cpr + gap:.3g} cycles a repeat, vec_chain's step grew by {chain_cpr:.3g} "
            f"a repeat: vec_rate at {sizes.rate_repeats} repeats was bound by the scalar unit's issue of its "
            "instructions, not by the V pipe; the price would read low",
        )
    # a negative once-paid price beyond its noise: vec_spread cheaper than a window of four could be, so
    # the two lines disagree (noise they do not show, or windows not as claimed)
    once, once_spread = fitres.vec_once_cycles, spread["vec_once_cycles"]
    if once < -max(3 * once_spread, MAX_SPREAD * SCALE["vec_latency_cycles"]):
        for k in ("vec_latency_cycles", "war_barriers"):
            fitres.refused.setdefault(
                k, f"vec_spread and vec_chain disagree (a once-paid price of {once:.3g} cycles an instruction)"
            )
    return fitres


# --------------------------------------------------------------------------------------------------- results


def result(fitres: Fit, conf: Mapping[str, float] | None) -> dict:
    """The ``--json`` object: configured (null on an NPU), fitted and residuals, plus the extras."""
    return {
        "configured": dict(conf) if conf is not None else None,
        "fitted": fitres.fitted,
        "repeat_cycles": fitres.repeat_cycles,
        "gbps_by_blocks": {str(b): v for b, v in fitres.gbps_by_blocks.items()},
        "mte_sharing": fitres.mte_sharing,
        **fit_record(fitres),
    }


def params_file(fitres: Fit, soc: str, source: str, cann: str | None, environment: Mapping | None = None) -> dict:
    """A ``bench --model --params`` file: base, with the fitted fields that ``assess`` did not refuse (HBM
    as a share of the SoC's figure, so that the roofline stays at the figure). Within SANE a value is
    written as fitted, but for the model's own domain: no price below 0, bw_boost_max at least 1,
    war_barriers 0 or 1."""
    figure = perf_soc.soc_hbm_gbps(soc)
    f = fitres.fitted
    params: dict[str, float] = {"clock_ghz": fitres.clock_ghz}  # what the cycles were counted at
    params.update({k: max(0.0, f[k]) for k in FITTED if k != "hbm_gbps" and k not in fitres.refused})
    if "bw_boost_max" in params:
        params["bw_boost_max"] = max(1.0, params["bw_boost_max"])
    if "war_barriers" in params:
        params["war_barriers"] = 1.0 if params["war_barriers"] >= 0.5 else 0.0
    if "hbm_gbps" not in fitres.refused:
        if figure:
            params["hbm_fraction"] = f["hbm_gbps"] / figure
        else:
            params["hbm_gbps"] = f["hbm_gbps"]
    return {
        "preset": "base",
        "comment": f"bench --calibrate ({source}) on {soc}" + (f", CANN {cann}" if cann else ""),
        "calibration": {
            "version": CALIBRATION_VERSION,
            "source": source,
            "soc": soc,
            "cann": cann,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "war_barriers_fitted": f["war_barriers"],
            "environment": dict(environment or {}),
            **fit_record(fitres),  # "refused": not written, the model keeps base's value
        },
        **params,
    }


def dumps_strict(data: object) -> str:
    """``json.dumps`` of ``data`` with every non-finite float as null, at any depth: Python's own dumps
    writes ``NaN`` and ``Infinity``, which strict JSON readers (jq, JavaScript, Go) refuse."""

    def clean(v: object) -> object:
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(data), indent=1, allow_nan=False)


#: What a results file's ``CacheWriteError`` says to do when its name is someone else's.
OUT_FIX = "give --out a path of your own"


def write_json(path: Path, data: dict, *, fix: str = OUT_FIX) -> Path:
    """Write atomically (a temp file renamed over ``path``): a crash never leaves half a file.

    The directory passes the cache's trust walk first (created if missing, never group- or world-writable)
    and the file is created and renamed through its fd: a results file in a tree someone else controls
    could be swapped for theirs before anyone reads it. ``CacheWriteError`` says why it cannot be written
    (``fix``: what to do when the name is someone else's)."""
    from ..jit import trust
    from ..jit.layout import describe_os_error

    path = Path(os.path.abspath(path))
    text = (dumps_strict(data) + "\n").encode()
    tmp = f".{path.name}.{os.getpid()}-{random.getrandbits(48):012x}"
    dir_fd = _open_results_dir(path, fix)
    try:
        trust.create_file(dir_fd, tmp, text, 0o644, shown=path.parent / tmp)
        try:
            _put_in_place(dir_fd, tmp, path, fix)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
    except OSError as err:
        raise CacheWriteError(f"cannot write {path}: {describe_os_error(err, path)}") from err
    finally:
        os.close(dir_fd)
    return path


def _put_in_place(dir_fd: int, tmp: str, path: Path, fix: str = OUT_FIX) -> None:
    """Give the written file ``tmp`` the name ``path.name``, replacing only a file of this user's there.

    The results directory passes the trust walk sticky too (``/tmp``, a team dir), where anyone may make
    the name first: replacing hers would delete a file of another user's (only root can; anyone else
    fails, after the whole run). A hard link makes a missing name without ever replacing one; a name that
    is there is replaced only when it is this user's, which nobody else can remove or swap in such a
    directory. Where hard links are refused (some filesystems), the same test, then the rename."""
    try:
        os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        pass
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV):
            raise
    else:
        os.unlink(tmp, dir_fd=dir_fd)
        return
    _refuse_foreign(dir_fd, path, fix)
    os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _refuse_foreign(dir_fd: int, path: Path, fix: str = OUT_FIX) -> None:
    """``CacheWriteError`` when ``path.name`` in ``dir_fd`` is there and not this user's (``_fs.mine``),
    with ``fix``."""
    from ..jit._fs import others_uid
    from ..jit.trust import owner_name

    uid = others_uid(path.name, dir_fd)
    if uid is not None:
        raise CacheWriteError(
            f"cannot write {path}: it belongs to {owner_name(uid)}, not to you (anyone may make a name "
            f"in a directory such as /tmp); {fix}"
        )


def _open_results_dir(path: Path, fix: str) -> int:
    """The fd of ``path``'s directory, created if missing, once it passed the trust walk (``write_json``).
    A folder of someone else's on the way gets ``fix`` added to the walk's advice (``Untrusted.advised``)."""
    from ..jit import trust
    from ..jit.layout import describe_os_error

    try:
        return trust.open_path(path.parent, create=True, directory=True)
    except trust.Untrusted as err:
        problem = err.advised(f"or {fix}")
        raise CacheWriteError(f"cannot write {path}: not safe to write into: {problem}") from err
    except OSError as err:
        raise CacheWriteError(f"cannot write {path}: {describe_os_error(err, path.parent)}") from err


def _write_measured(path: Path, data: dict, *, fix: str = OUT_FIX) -> tuple[Path | None, CacheWriteError | None]:
    """``write_json`` of what minutes on an NPU measured, after ``_check_writable`` passed: (the path, None),
    or (None, the error) where the place was made unwritable meanwhile, for the caller to print the results
    all the same (``_nothing_written``)."""
    try:
        return write_json(path, data, fix=fix), None
    except CacheWriteError as err:
        return None, err


def _nothing_written(failed: CacheWriteError, data: dict) -> str:
    return f"NOTHING WRITTEN: {failed}; the file it would have been:\n{dumps_strict(data)}"


def _check_writable(path: Path, *, fix: str = OUT_FIX) -> None:
    """``CacheWriteError`` unless ``write_json(path, ...)`` can write there: the directory passes the trust
    walk (created if missing), a file can be created in it (a probe, removed again: a folder you may not
    write, a read-only file system) and nothing but a file or a link holds ``path``'s name (a rename onto a
    directory fails, for root too)."""
    from ..jit import trust
    from ..jit.layout import describe_os_error

    path = Path(os.path.abspath(path))
    dir_fd = _open_results_dir(path, fix)
    try:
        trust.probe_write(dir_fd, path.parent)
        try:
            st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        _refuse_foreign(dir_fd, path, fix)
    except OSError as err:
        raise CacheWriteError(f"cannot write {path}: {describe_os_error(err, path)}") from err
    finally:
        os.close(dir_fd)


def emu_result_path(label: str, soc: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where an emulation's closed loop writes by default: ``emu-closed-loop/`` under the writable cache
    root, yours alone (a fixed name in a shared temp dir is one that someone else can make first), and
    never its ``calibration/``, so ``bench --model`` does not take it for a calibration."""
    from ..jit import layout

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{label}-{soc}")
    return layout.cache_root(cache_dir)[0] / "emu-closed-loop" / f"emu-closed-loop-{safe}.json"


# --------------------------------------------------------------------------------------------------- calibration files


def calibration_name(soc: str, cann: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cann)
    return f"calibration-{soc}-{safe}.json"


def calibration_dirs(cache_dir: str | os.PathLike | None = None) -> list[Path]:
    """``calibration/`` of every cache tier, in the tiers' search order (prebuilt first)."""
    from ..jit import cache

    return [t.path / "calibration" for t in cache.tiers(cache_dir)]


def find_calibration(soc: str, cann: str | None = None, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The calibration file for ``soc`` in the cache tiers: for CANN ``cann`` if given and present, else
    the newest for that SoC.

    In a ``calibration/`` others may add names to (a team cache's, sticky and world-writable), a file is
    taken only where its name is the one ``bench --calibrate`` gave it (``_names_itself``): the ownership
    test alone passes any file of yours there, and on a host that lets anyone hard-link a file they do not
    own (``fs.protected_hardlinks=0``) anyone can give any file of yours this SoC's calibration name."""
    from ..jit import trust

    def usable(p: Path, shared: bool) -> bool:  # a file nobody else could have written (it steers bench --model)
        # os.path.isfile: a folder you may not look into (someone else's, mode 000) holds none, not an error
        return os.path.isfile(p) and trust.unsafe_reason(p) is None and _names_itself(p, soc, strict=shared)

    found: list[Path] = []
    for d in calibration_dirs(cache_dir):
        shared = trust.unsafe_reason(d, searched=True) is not None  # others may add names there (or it is not there)
        if cann is not None and usable(d / calibration_name(soc, cann), shared):
            return d / calibration_name(soc, cann)
        try:
            found += [p for p in d.glob(f"calibration-{soc}-*.json") if usable(p, shared)]
        except OSError:  # below a folder you may not search (someone else's, mode 000): none there for you
            continue
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _names_itself(path: Path, soc: str, *, strict: bool = True) -> bool:
    """Whether the file ``path`` says it is the one ``bench --calibrate`` on an NPU wrote for ``soc`` and
    the CANN version its name holds (its ``calibration`` record: source, SoC, CANN); one warning naming
    it when it does not. Not ``strict`` (a folder only you can write): a file without a record passes (one
    made by hand), but never one whose record says it is the emulation's (``--calibrate --emu --out``
    there) or another SoC's or CANN's (one copied in under this name)."""
    from .._log import warn_once
    from ..jit import trust

    try:
        data = json.loads(trust.read_regular(path, perf_params.MAX_PARAMS_BYTES))  # a calibration is a params file
    except (OSError, ValueError):
        data = None
    record = data.get("calibration") if isinstance(data, dict) else None
    if not strict and (not isinstance(record, dict) or "source" not in record):
        return True  # what it holds, bench --model judges (and names the file where it is wrong)
    if data is None:
        why = "it cannot be read as JSON"
    elif not isinstance(record, dict):
        why = "it holds no calibration record"
    elif record.get("source") != "npu events":
        why = f"it was not measured on an NPU (source {record.get('source')!r})"
    elif record.get("soc") != soc or path.name != calibration_name(soc, str(record.get("cann"))):
        why = f"it is the calibration of {record.get('soc')!r}, CANN {record.get('cann')!r}"
    else:
        return True
    if strict:
        fix = (
            ", and in a folder others may add names to, a file of yours can be given that name by anyone (a "
            "hard link); fix: remove it, or keep calibrations in a cache only you can write"
        )
    elif record.get("source") != "npu events":
        fix = "; fix: remove it (bench --calibrate --emu writes a closed loop's result, never a calibration)"
    else:
        fix = "; fix: remove it, or give it the name its record gives (bench --calibrate on that SoC writes it)"
    warn_once(f"calibration-name:{path}", "passed over %s: %s%s", path, why, fix)
    return False


def model_params(
    socs: Sequence[str], cache_dir: str | os.PathLike | None = None
) -> dict[str, tuple[perf_params.Params, Path]]:
    """SoC -> (params, file) for each of ``socs`` with a calibration file in the cache tiers (for this
    host's CANN version where one is known and its file present)."""
    cann = _cann_version()
    out = {}
    for soc in socs:
        path = find_calibration(soc, cann, cache_dir)
        if path is not None:
            try:
                out[soc] = (perf_params.make_params(json_file=path, option=None), path)
            except ValueError as err:
                raise ValueError(
                    f"calibration file {path}: {err}; remove it (or run bench --calibrate again), "
                    "or pass --preset to ignore it"
                ) from None
    return out


def _cann_version() -> str | None:
    from ..jit import toolchain

    try:
        found = toolchain.find_cann()
    except Exception:  # noqa: BLE001 - no CANN, or an unreadable one: any calibration file of the SoC will do
        return None
    return found.version if found is not None else None


# --------------------------------------------------------------------------------------------------- bench --calibrate

TOLERANCE = 0.05  # the closed loop's bound on each fitted field's relative error


def format_table(conf: Mapping[str, float] | None, fitres: Fit) -> str:
    head = f"{'parameter':<26} {'configured':>12} {'fitted':>12} {'±':>9} {'s.e.':>9} {'error':>9} {'residual µs':>12}"
    lines = [head, "-" * len(head)]
    err = relative_errors(conf, fitres.fitted) if conf is not None else {}
    for k in FITTED:
        c = f"{conf[k]:>12.4g}" if conf is not None else f"{'-':>12}"
        e = (f"{100 * err[k]:>8.3g}%" if conf[k] else f"{err[k]:>8.2g}a") if conf is not None else f"{'-':>9}"
        pm = f"{fitres.spread[k]:>9.3g}" if k in fitres.spread else f"{'-':>9}"
        pm += f" {fitres.stderr[k]:>9.3g}" if k in fitres.stderr else f" {'-':>9}"
        mark = "  NOT WRITTEN" if k in fitres.refused else ""
        lines.append(f"{k:<26} {c} {fitres.fitted[k]:>12.4g} {pm} {e} {fitres.residuals[k]:>12.3g}{mark}")
    lines.append(
        "±: the most the field moves when any one measurement is left out; s.e.: its standard error (jackknife, "
        "every measurement's noise at once); a field is written only if both ± and 2 s.e. are within 25 % of it"
    )
    for k, why in fitres.refused.items():
        lines.append(f"NOT WRITTEN {k}: {why} (the model keeps base's value)")
    extra = ", ".join(f"{k} {v:.3g}" for k, v in fitres.repeat_cycles.items())
    lines.append(f"cycles per 256-byte repeat by op class: {extra}")
    rc = fitres.repeat_cycles
    if "Add" in rc and "AddApart" in rc:
        lines.append(
            f"Add with its two sources in one UB bank group (as most of the kernels' Adds): {rc['Add']:.3g} cycles a "
            f"repeat; in different groups: {rc['AddApart']:.3g} (the model has no bank-conflict term)"
        )
    once = f"{fitres.vec_once_cycles:.3g} ± {fitres.spread.get('vec_once_cycles', math.nan):.3g}"
    lines.append(f"cycles a vector instruction pays once on the V pipe, beyond its repeats: {once} (no model field)")
    lines.append(
        f"flag_pingpong's trip with two chains interleaved over one chain's: {fitres.flag_chain_ratio:.3g} "
        "(1: the flags' latency bounds it; 2: issuing the flag instructions does)"
    )
    by = ", ".join(f"{r}: {v:.3g}" for r, v in fitres.vec_latency_by_repeats.items())
    lines.append(
        f"vector latency from vec_chain / vec_spread by repeats an instruction: {by}; fitted from "
        f"{fitres.latency_repeats} (the fewest whose windows the scalar unit's issue did not bound)"
    )
    bw = ", ".join(f"{b}: {v:.0f}" for b, v in fitres.gbps_by_blocks.items())
    lines.append(f"GM->UB GB/s by blocks: {bw}; MTE2+MTE3 at once take {fitres.mte_sharing:.3g}x one alone")
    return "\n".join(lines)


def calibrate_emu(
    params: perf_params.Params, soc: str, cores: int, label: str, out: str | os.PathLike | None, as_json: bool, echo
) -> int:
    """``bench --calibrate --emu``: the closed loop; exit 1 if a field is off by more than 5 %."""
    runner = EmuRunner(params, soc, cores)
    fitres = assess(measure(runner, plan(cores), _progress), cores, params.clock_ghz, EMU_SIZES, soc)
    conf = configured(params, soc, cores)
    data = params_file(fitres, soc, "emulation", None)
    try:
        path = write_json(Path(out) if out else emu_result_path(label, soc), data)
    except CacheWriteError as err:
        if out:
            raise
        raise CacheWriteError(f"{err}; pass --out FILE to write the result elsewhere") from err
    err = relative_errors(conf, fitres.fitted)
    bad = sorted(k for k, e in err.items() if e > TOLERANCE)
    if as_json:
        echo(dumps_strict({**result(fitres, conf), "written": str(path), "source": "emulation"}))
    else:
        echo(
            f"calibration closed loop through the emulation's pipe model ({label}, {soc}, {cores} cores): "
            "the fit must give back what was configured; this measures the model, not an NPU"
        )
        echo(format_table(conf, fitres))
        echo("error: |fitted - configured| / configured (a: absolute, where configured is 0)")
        echo(f"wrote {path} (an emulation result, not a calibration: bench --model never picks it up)")
        echo(f"closed loop: {'every field within 5 %' if not bad else 'OFF by more than 5 %: ' + ', '.join(bad)}")
    return 1 if bad else 0


def calibrate_npu(
    runner: Runner,
    soc: str,
    cores: int,
    cann: str,
    clock_ghz: float,
    as_json: bool,
    echo,
    cache_dir: str | os.PathLike | None = None,
    sizes: Sizes = NPU_SIZES,
    environment: Mapping | None = None,
) -> int:
    """``bench --calibrate`` on an NPU: time, fit, print, write ``calibration-<soc>-<cann>.json`` into the
    writable cache tier."""
    from ..jit import cache

    target = cache.cache_root(cache_dir)[0] / "calibration" / calibration_name(soc, cann)
    fix = f"set {cache.ENV_CACHE_DIR} to a cache of your own (--out is the emulation's), or have it removed"
    _check_writable(target, fix=fix)  # a place it cannot be written fails before minutes of measuring
    points = measure(runner, plan(cores, sizes), _progress)
    fitres = assess(points, cores, clock_ghz, sizes, soc, sorted(getattr(runner, "host_bound", ())))
    env = {**(environment or {}), "clock_ghz": clock_ghz, "cores": cores, "sizes": dataclasses.asdict(sizes)}
    env.update({k: getattr(runner, k) for k in ("warmup", "reps", "blocks") if hasattr(runner, k)})
    data = params_file(fitres, soc, "npu events", cann, env)
    path, failed = _write_measured(target, data, fix=fix)
    if as_json:
        written = {"written": str(path)} if failed is None else {"written": None, "error": str(failed), "file": data}
        echo(dumps_strict({**result(fitres, None), **written, "source": "npu events", "environment": env}))
    else:
        echo(f"calibration on {soc} ({cores} cores, CANN {cann}; NPU events; cycles at {clock_ghz} GHz)")
        echo(format_table(None, fitres))
        if failed is None:
            echo(f"wrote {path}: bench --model now uses it for {soc} (--preset/--params override it)")
        else:
            echo(_nothing_written(failed, data))
        if fitres.refused:
            n = len(fitres.refused)
            echo(f"{n} field(s) NOT WRITTEN (above); run it again on an idle device and send both outputs")
        echo("please send back: this output, that file, and `ascend-rmsnorm bench --model --against-measured` JSON")
    return 1 if fitres.refused or failed is not None else 0


def _progress(msg: str) -> None:
    to_stderr(f"  calibrate {msg} ...")


def main(
    *,
    emu: bool,
    preset: str | None,
    param_file: str | None,
    param_items: Sequence[str],
    socs: Sequence[str] | None,
    cores: int | None,
    as_json: bool,
    out: str | None,
    echo=print,
) -> int:
    """``ascend-rmsnorm bench --calibrate [--emu]``; returns the exit status."""

    try:
        if len(socs or ()) > 1:
            raise ValueError("--calibrate takes one --soc")
        perf_soc.check_cores(cores, "--cores")  # as bench --model; 0 is not "the SoC's"
        if emu:
            soc = socs[0] if socs else perf_soc.DEFAULT_SOCS[0]
            preset, params = perf_params.load_params(preset, perf_params.parse_assignments(param_items), param_file)
            if params.bw_pool:
                raise ValueError("bw_pool is a what-if of bench --model; a calibration fits the static share (0)")
            n = cores or perf_soc.soc_cores(soc)
            if n is None:
                raise ValueError(f"no vector core count known for SoC {soc!r}: pass --cores")
            if not (params.hbm_gbps or perf_soc.soc_hbm_gbps(soc)):
                raise ValueError(f"no HBM bandwidth known for SoC {soc!r}: pass --param hbm_gbps=...")
            custom = param_file or param_items
            label = "custom" if custom else preset
            return calibrate_emu(params, soc, n, label, out, as_json, echo)
        if preset or param_file or param_items or out:
            raise ValueError("--preset, --params, --param and --out go with --calibrate --emu (an NPU measures)")
        return _calibrate_on_npu(socs, cores, as_json, echo)
    except NoNpu as err:  # not a bad command line: this host lacks what it needs
        to_stderr(f"ascend-rmsnorm: bench --calibrate: {err}")
        return 1
    except (ValueError, OSError) as err:
        to_stderr(f"ascend-rmsnorm: bench --calibrate: {err}")
        return 2


class NoNpu(ValueError):
    """This command needs an NPU and there is none."""


def require_npu(what: str) -> torch.device:
    """The current NPU device, or NoNpu saying that ``what`` needs one (torch_npu imported only here)."""
    from ..backends import npu

    if not npu.npu_present():
        raise NoNpu(f"{what} needs an Ascend NPU (a device and torch_npu); none on this host")
    try:
        import torch_npu  # noqa: F401
    except ImportError as err:
        raise NoNpu(f"{what} needs torch_npu, which does not import here: {err}") from None
    if not torch.npu.is_available():  # type: ignore[attr-defined]
        raise NoNpu(f"{what} needs an Ascend NPU; torch_npu sees none")
    return torch.device("npu", torch.npu.current_device())  # type: ignore[attr-defined]


def _calibrate_on_npu(socs: Sequence[str] | None, cores: int | None, as_json: bool, echo) -> int:
    from ..backends import npu

    try:
        device = require_npu("bench --calibrate")
    except NoNpu as err:
        raise NoNpu(f"{err}; `bench --calibrate --emu` runs the closed loop in the emulation instead") from None
    have, source = npu.vector_cores(device)
    if cores is not None and cores > have and source != npu.VECTOR_CORES_UNKNOWN:
        # blocks above the core count run in waves: stream.read.<cores> and the launch line would not be
        # that many cores' bandwidth and launches; refused before minutes of measuring
        raise ValueError(f"--cores {cores}: this NPU has {have} vector cores ({source})")
    tc, arch = npu._target()
    soc = (socs[0] if socs else None) or arch.soc or str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]
    n = cores or have
    lib = load_library(tc, arch.arch)
    cann = tc.cann_version or "unknown"
    clock = ini_clock_ghz(tc.cann_root, soc)
    return calibrate_npu(
        NpuRunner(lib, device), soc, n, cann, clock, as_json, echo, environment=npu_environment(device)
    )


def npu_environment(device: torch.device) -> dict:
    """What a reader of a calibration needs besides the SoC and CANN: the versions of this package, torch,
    torch_npu and the NPU driver (``<Ascend>/driver/version.info``'s ``Version=``, as CANN's asys tool
    reads it; None where absent), and where the clock came from (the platform ini's nominal figure, not a
    reading of the AI core's clock)."""
    from .._version import __version__

    try:
        import torch_npu

        tnpu = getattr(torch_npu, "__version__", None)
    except ImportError:
        tnpu = None
    return {
        "package": __version__,
        "torch": torch.__version__,
        "torch_npu": tnpu,
        "driver": driver_version(),
        "device": str(device),
        "device_name": str(torch.npu.get_device_name(device)),  # type: ignore[attr-defined]
        "clock_source": "platform ini (nominal; the AI core's actual clock is not read)",
    }


#: Where the driver installer records its install path (``Driver_Install_Path_Param=``), which CANN's own
#: scripts read to find the driver (runtime/script/common_func.inc, get_driver_install_path).
ASCEND_INSTALL_INFO = "/etc/ascend_install.info"


def _key_value(path: str | os.PathLike, wanted: str) -> str | None:
    """The value of the first ``wanted=value`` line of a small text file (key compared without case), or
    None: no such file, unreadable, not a regular file or over a MB (``toolchain.read_small_text``, the
    reader CANN discovery's version files go through), or no such line. Never raises."""
    from ..jit import toolchain

    try:
        text = toolchain.read_small_text(Path(path))
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == wanted.lower() and value.strip():
            return value.strip().strip("\"'")
    return None


def driver_version(root: str | os.PathLike | None = None) -> str | None:
    """``Version=`` of ``<root>/driver/version.info`` (the NPU driver package), or None. Without ``root``,
    the driver's install path from ASCEND_INSTALL_INFO (a driver installed with ``--install-path``), else
    ``/usr/local/Ascend``, the installer's default."""
    installed = _key_value(ASCEND_INSTALL_INFO, "Driver_Install_Path_Param")
    roots = [root] if root is not None else [installed, "/usr/local/Ascend"]
    for r in roots:
        if r:
            version = _key_value(Path(r) / "driver" / "version.info", "Version")
            if version is not None:
                return version
    return None


def ini_clock_ghz(cann_root: Path | None, soc: str) -> float:
    """The vector core's clock from the SoC's platform ini (``[VectorCoreSpec] vec_freq``, else
    ``[AICoreSpec] cube_freq``, in MHz: 1800 on a 910B2, 1500 on a 910B4), else the model's default.
    Cycles are fitted at this clock and the file records it, so the model turns them back into the µs
    that were measured."""
    from ..jit import toolchain

    ini = toolchain.read_platform_ini(cann_root, soc) or {}
    for section, key in (("VectorCoreSpec", "vec_freq"), ("AICoreSpec", "cube_freq")):
        mhz = ini.get(section, {}).get(key, "")
        if mhz.isdigit() and int(mhz) > 0:
            return int(mhz) / 1000
    return perf_params.Params().clock_ghz


# --------------------------------------------------------------------------------------------------- --against-measured


def device_soc(device: torch.device) -> str:
    return str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class Measured:
    """µs per call as the NPU's events saw it, and whether the device may have waited for the host
    (then ``us`` is the host's pace, an upper bound of the kernels' time)."""

    us: float
    host_bound: bool = False
    host_us: float | None = None  # the host's µs to issue a call


Measure = Callable[[int, int, str, str], Measured]  # (rows, hidden, dtype, "fwd" | "fwd+bwd")


def against_measured(records: Sequence[perf_results.ModelRecord], measure: Measure) -> list[dict]:
    """Predicted vs measured µs per record (fwd, bwd, fwd+bwd); bwd is measured as fwd+bwd minus fwd."""
    got: dict[tuple, Measured] = {}
    out = []
    for r in records:
        key = (r.rows, r.hidden, r.dtype)
        for d in ("fwd", "fwd+bwd"):
            if key + (d,) not in got:
                got[key + (d,)] = measure(r.rows, r.hidden, r.dtype, d)
        fwd, both = got[key + ("fwd",)], got[key + ("fwd+bwd",)]
        m = {"fwd": fwd, "fwd+bwd": both}.get(r.direction)
        measured = m.us if m else both.us - fwd.us
        host_bound = m.host_bound if m else fwd.host_bound or both.host_bound
        out.append(
            {
                "soc": r.soc,
                "shape": f"{r.rows}x{r.hidden}",
                "dtype": r.dtype,
                "direction": r.direction,
                "predicted_us": r.predicted_us,
                "measured_us": measured,
                "measured_over_predicted": measured / r.predicted_us if r.predicted_us > 0 else None,
                "host_bound": host_bound,
                "host_us_per_call": m.host_us if m else None,
                "path": r.path,
            }
        )
    return out


#: The buffer a device-side delay zeroes before the timed calls (as many times as it takes, up to
#: MAX_DELAY_STEPS: a delay that gains the device so little is flagged host-bound instead).
DELAY_BYTES = 64 * 2**20
MAX_DELAY_STEPS = 10_000


def npu_measure(
    device: torch.device, warmup: int = 3, reps: int = 20, busy: Callable[[], object] | None = None
) -> Measure:
    """µs of the npu kernel's forward, or forward and backward, timed with NPU events (torch_npu present).

    A call issues several launches and torch ops from Python; at small shapes the host takes longer to
    issue it than the NPU to run it, and events around back-to-back calls would time the host. So the
    device is first kept busy (a buffer zeroed, as often as twice the host's issue time of the calls
    needs) while the host issues the timed calls behind it; the result says whether the delay outlasted
    the issue (if not, the device may have waited and the figure is flagged host-bound). ``busy``: one
    step of that delay (default: DELAY_BYTES zeroed)."""
    from ..backends import npu as npu_backend
    from ..functional import rms_norm

    npu = torch.npu  # type: ignore[attr-defined]
    if busy is None:
        busy = torch.empty(DELAY_BYTES, dtype=torch.uint8, device=device).zero_

    def device_s(start, end) -> float:
        return start.elapsed_time(end) / 1e3  # ms -> s

    def run(rows: int, hidden: int, dtype: str, direction: str) -> Measured:
        t = perf_params.DTYPES[dtype]
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, hidden, generator=g).to(dtype=t, device=device)
        w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype=t, device=device)
        dy = torch.randn(rows, hidden, generator=g).to(dtype=t, device=device)
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

        def step():
            if direction == "fwd":
                with torch.no_grad():
                    rms_norm(x, w, 1e-6, backend="npu")
            else:
                torch.autograd.grad(rms_norm(xg, wg, 1e-6, backend="npu"), (xg, wg), dy)

        def issue() -> float:
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            return time.perf_counter() - t0

        for _ in range(warmup):
            step()
        npu.synchronize(device)
        issue_s = issue()
        npu.synchronize(device)
        a, b = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        busy()
        busy_host_s = time.perf_counter() - t0
        b.record()
        b.synchronize()
        # a step's device time (a..b also holds the host's issue of it, the device idle meanwhile), less
        # its host time: what each step of the delay puts the device ahead of the host
        gain = (device_s(a, b) - busy_host_s) - busy_host_s
        zeros = min(MAX_DELAY_STEPS, max(1, math.ceil(2 * issue_s / gain))) if gain > 0 else 1
        mark, start, end = (npu.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        mark.record()
        for _ in range(zeros):
            busy()
        start.record()
        issued_s = issue()
        npu_backend.submitted(npu.current_stream(device), device)  # torch_npu submits what it queued
        host_s = time.perf_counter() - t0  # from the delay's first op to the last call submitted
        end.record()
        end.synchronize()
        return Measured(
            us=device_s(start, end) * 1e6 / reps,
            host_bound=device_s(mark, start) < host_s,
            host_us=issued_s * 1e6 / reps,
        )

    return run


def against_measured_main(
    records: Sequence[perf_results.ModelRecord],
    device: torch.device,
    out: str | None,
    echo,
    measure: Measure | None = None,
) -> int:
    """``bench --model --against-measured``: one JSON file of predicted vs measured µs."""
    from .._version import __version__

    soc = device_soc(device)
    cann = _cann_version() or "unknown"
    target = Path(out) if out else Path.cwd() / f"against-measured-{soc}-{cann}.json"
    _check_writable(target)  # a place it cannot be written fails before minutes of measuring
    rows = against_measured(records, measure or npu_measure(device))
    params = {r.soc: r.params.to_dict() for r in records}
    data = {"package": __version__, "soc": soc, "cann": cann, "device": str(device), "params": params, "records": rows}
    path, failed = _write_measured(target, data)
    head = f"{'shape':<11} {'dtype':<9} {'dir':<8} {'predicted µs':>12} {'measured µs':>12} {'meas/pred':>9}"
    echo(f"predicted vs measured on {soc} (CANN {cann}; NPU events)")
    echo(head)
    echo("-" * len(head))
    for r in rows:
        ratio = f"{r['measured_over_predicted']:.2f}" if r["measured_over_predicted"] is not None else "-"
        echo(
            f"{r['shape']:<11} {r['dtype']:<9} {r['direction']:<8} {r['predicted_us']:>12.1f} "
            f"{r['measured_us']:>12.1f} {ratio:>9}" + (" host-bound" if r["host_bound"] else "")
        )
    if any(r["host_bound"] for r in rows):
        echo("host-bound: the NPU may have waited for Python to issue the calls; that figure is an upper bound")
    if failed is not None:
        echo(_nothing_written(failed, data))
        return 1
    echo(f"wrote {path} (attach it to a report)")
    return 0
