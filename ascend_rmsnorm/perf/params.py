"""The perf model's latency parameters (``Params``), their presets and the ``--param`` parsing."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")


@dataclasses.dataclass(frozen=True)
class Params:
    """The timeline's parameters. Cycles are AI-core clock cycles; ``*_us`` are microseconds.

    Defaults are the *base* scenario of docs/perf-model.md; ``PRESETS`` also has
    its *opt* and *pess* brackets, and *floor* (bandwidth and launches only, a lower bound). None
    of these has been measured on a 910B: they are public figures and guesses, to be replaced by an
    NPU owner's measurements (README, "Performance model").
    """

    #: AI core clock (GHz): converts cycles to µs.
    clock_ghz: float = 1.8
    #: HBM bandwidth of the SoC (GB/s); None: the SoC's figure in ``soc.PEAK_HBM``.
    hbm_gbps: float | None = None
    #: The share of that bandwidth the kernels reach (the roofline stays at the full figure).
    hbm_fraction: float = 1.0
    #: An active block may draw up to this many times its 1/cores share of HBM when a launch has
    #: fewer blocks than cores (1: the share stays 1/cores, as in the note's base scenario).
    bw_boost_max: float = 1.0
    #: Pooled bandwidth, a what-if never used for the targets or a calibration (0: the static share
    #: above). With f in (0, 1], fraction f of the share that idle cores leave (cores with no block, and
    #: cores whose block has finished) goes, in equal parts, to the blocks still busy; see ``model._pooled_replay``.
    bw_pool: float = 0.0
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
    #: 1: a ``PipeBarrier<PIPE_V>`` before every vector instruction that writes UB bytes an earlier one
    #: of the same barrier window read or wrote, as bisheng's auto-sync or a pipe that does not keep them
    #: in order would need (docs/design.md §9; the kernels rely on the pipe's order there). 0 in every
    #: preset and for the targets; a calibration measures it (docs/calibration.md).
    war_barriers: float = 0.0

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
    # the single plausible changes that hurt bf16 most, all at once (a robustness target, not a guess)
    "stress": Params(
        vec_latency_cycles=80.0, vec_cycles_per_repeat=1.5, dma_burst_cycles=30.0, hbm_fraction=0.85, launch_us=10.0
    ),
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
    if name == "war_barriers" and v not in (0, 1):
        raise ValueError(
            f"model parameter war_barriers={value!r} must be 0 or 1 (1: a vector barrier before every "
            "same-window overwrite)"
        )
    if name == "bw_pool" and not 0 <= v <= 1:
        raise ValueError(
            f"model parameter bw_pool={value!r} must be in [0, 1] (the fraction of idle cores' bandwidth "
            "that busy blocks share; 0: the static share)"
        )
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"model parameter {name}={value!r} must be finite and >= 0")
    if name in ("clock_ghz", "l2_speedup", "bw_boost_max", "hbm_fraction") and v <= 0:
        raise ValueError(f"model parameter {name} must be > 0")
    return v


def make_params(
    preset: str = "base",
    overrides: Mapping[str, object] | None = None,
    json_file: str | os.PathLike | None = None,
    *,
    option: str | None = "--params",
) -> Params:
    """A preset, then the parameters of a JSON file (an object of name: value, optionally with a
    ``"preset"`` key that picks the starting preset), then ``overrides`` (e.g. from ``--param``).
    ``option``: what the file's errors open with, before its path (None: the path alone, for a caller
    that names the file itself, as a calibration file's does)."""
    named, data = _read_params_file(json_file, option)
    return _params(named or preset, data, overrides)


def load_params(
    preset: str | None, overrides: Mapping[str, object] | None = None, json_file: str | os.PathLike | None = None
) -> tuple[str, Params]:
    """(the preset a run starts from, its parameters), the file read once: ``preset`` (``--preset``), else
    the ``"preset"`` a params file names, else base. A file that names another preset than ``--preset``
    is an error, not a silent winner."""
    named, data = _read_params_file(json_file, "--params")
    if preset is not None and named is not None and named != preset:
        raise ValueError(f'--preset {preset} and {json_file}\'s "preset": {named!r} disagree; drop one')
    start = preset or named or "base"
    return start, _params(start, data, overrides)


def _read_params_file(json_file: str | os.PathLike | None, option: str | None) -> tuple[str | None, dict]:
    """(the preset a params file names or None, its parameters): a JSON object of name: value, whose
    "comment" and "calibration" (what bench --calibrate wrote about itself) are not parameters. Its
    errors open with ``option`` and the path (``option`` None: nothing, the caller names the file)."""
    if json_file is None:
        return None, {}
    try:
        return _parse_params_file(json_file)
    except ValueError as err:
        raise ValueError(f"{option} {json_file}: {err}" if option else str(err)) from None


#: The most bytes of a params file read (one ``bench --calibrate`` writes, raw timings and all: some 100 KB).
MAX_PARAMS_BYTES = 16 << 20


def _parse_params_file(json_file: str | os.PathLike) -> tuple[str | None, dict]:
    from ..jit import trust

    try:
        # opened without blocking, read only if regular: a FIFO someone made at the name is an error, not a hang
        raw = trust.read_regular(json_file, MAX_PARAMS_BYTES + 1)
    except OSError as err:  # missing, a directory, a FIFO, unreadable: named (by _read_params_file), as below
        raise ValueError(f"cannot read it ({err.strerror or err})") from None
    if len(raw) > MAX_PARAMS_BYTES:
        raise ValueError(f"larger than {MAX_PARAMS_BYTES} bytes, which no params file is")
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError or UnicodeDecodeError: name the file, not only the position
        raise ValueError(f"not a JSON file in UTF-8 ({err})") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of parameter: value")
    data = dict(data)
    named = str(data.pop("preset")) if "preset" in data else None
    data.pop("comment", None)
    data.pop("calibration", None)
    # what the file says is checked here, so that its errors name it (_params checks it again: cheap)
    if named is not None and named not in PRESETS:
        raise ValueError(f"unknown preset {named!r}; known: {', '.join(PRESETS)}")
    for name, value in data.items():
        _coerce(name, value)
    return named, data


def _params(preset: str, data: Mapping[str, object], overrides: Mapping[str, object] | None) -> Params:
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
