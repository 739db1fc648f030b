"""``ascend-rmsnorm bench --model``: the perf model (``ascend_rmsnorm.perf``) over SoCs, shapes, dtypes and
directions, as a table or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .._log import to_stderr
from ..perf.kernel import ModelKernel, source_problem
from ..perf.model import model
from ..perf.params import DIRECTIONS, DTYPE_NAMES, Params, load_params, parse_assignments
from ..perf.results import ModelRecord, _dtype, combine
from ..perf.soc import DEFAULT_SOCS, SOC_CORES, check_cores, soc_cores, soc_hbm_gbps
from .output import say

#: The seed project's shapes, then the note's extra ones.
SEED_SHAPES = ((1024, 4096), (8192, 4096), (1024, 8192), (4096, 5120), (32768, 128), (16384, 256))
MODEL_SHAPES = (*SEED_SHAPES, (1, 4096), (64, 4096), (4096, 16384), (1024, 32768))

#: The most elements the model's tensors can have: torch sizes a storage in int64 bytes, and the model
#: widens every dtype to 4-byte float32.
MAX_ELEMENTS = (2**63 - 1) // 4


def parse_shape(text: str) -> tuple[int, int]:
    rows, sep, hidden = text.lower().partition("x")
    try:
        r, h = int(rows), int(hidden)
    except ValueError:
        raise ValueError(f"--shape wants ROWSxHIDDEN (e.g. 8192x4096), got {text!r}") from None
    if not sep or r < 1 or h < 1:
        raise ValueError(f"--shape wants ROWSxHIDDEN with both >= 1, got {text!r}")
    if r * h > MAX_ELEMENTS:
        raise ValueError(f"--shape {text!r} has {r * h} elements, more than a tensor can hold ({MAX_ELEMENTS})")
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
    params_by_soc: Mapping[str, Params] | None = None,
) -> list[ModelRecord]:
    """Model every (soc, shape, dtype) once per direction needed; fwd+bwd is combined from fwd and bwd.
    ``params_by_soc`` overrides ``params`` for the SoCs it names (e.g. their calibration files). Each
    record also has ``pooled_us``, its time with bw_pool=1 (never used for %roof or the targets)."""
    out = []
    total = len(socs) * len(shapes) * len(dtypes)
    done = 0
    for soc in socs:
        for rows, hidden in shapes:
            for dt in dtypes:
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {soc} {rows}x{hidden} {dt}")
                p = (params_by_soc or {}).get(soc, params)
                kw = dict(soc=soc, cores=cores, params=p, preset=preset, kernel=kernel, pooled=True)
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
    # the path and blocks columns grow with their longest entry ("group(96)/group(32)", "48+48+47")
    pw = max([18, *(len(r.path or "-") for r in records)])
    blocks = ["+".join(str(b) for b in r.launch_blocks) for r in records]
    bw = max([9, *(len(b) for b in blocks)])
    head = (
        f"{'soc':<15} {'shape':<11} {'dtype':<8} {'dir':<7} {'path':<{pw}} {'blocks':<{bw}} {'GM MB/min (x)':<19} "
        f"{'µs':>8} {'pooled µs':>9} {'roof µs':>8} {'%roof':>6}  dominant"
    )
    lines = [head, "-" * len(head)]
    for r, b in zip(records, blocks):
        gm = f"{r.gm_bytes / 1e6:.1f}/{r.min_bytes / 1e6:.1f} ({r.traffic_ratio:.2f})"
        pooled = "-" if r.pooled_us is None else f"{r.pooled_us:.1f}"
        lines.append(
            f"{r.soc:<15} {f'{r.rows}x{r.hidden}':<11} {r.dtype:<8} {r.direction:<7} {(r.path or '-'):<{pw}} "
            f"{b:<{bw}} {gm:<19} {r.predicted_us:>8.1f} {pooled:>9} {r.roofline_us:>8.1f} {r.pct_roofline:>5.0f}%  "
            f"{r.dominant}"
        )
    return "\n".join(lines)


def bench_main(
    *,
    as_json: bool = False,
    socs: Sequence[str] | None = None,
    shapes: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    directions: Sequence[str] | None = None,
    preset: str | None = None,
    param_file: str | None = None,
    param_items: Sequence[str] = (),
    kernel_source: str | None = None,
    cores: int | None = None,
    echo: Callable[[str], None] = print,
    against_measured: bool = False,
    out: str | None = None,
) -> int:
    """``ascend-rmsnorm bench --model``: the model's predictions; returns the exit status.

    Without ``preset``, ``param_file`` and ``param_items``, a SoC with a calibration file in the cache
    (``bench --calibrate`` on an NPU) is modelled with it, the others with base."""
    from ..perf import calibrate

    explicit = preset is not None or bool(param_file) or bool(param_items)
    try:
        # the preset the header names is the one that runs
        preset, params = load_params(preset, parse_assignments(param_items), param_file)
        if against_measured:
            device = calibrate.require_npu("bench --model --against-measured")
            socs = socs or [calibrate.device_soc(device)]
            shapes = shapes or [f"{r}x{h}" for r, h in SEED_SHAPES]
            directions = list(DIRECTIONS)
        shape_list = [parse_shape(s) for s in shapes] if shapes else list(MODEL_SHAPES)
        dtype_list = [DTYPE_NAMES[_dtype(d)] for d in dtypes] if dtypes else ["bfloat16", "float16", "float32"]
        dirs = list(directions) if directions else list(DIRECTIONS)
        for d in dirs:
            if d not in DIRECTIONS:
                raise ValueError(f"--direction must be one of {', '.join(DIRECTIONS)}, got {d!r}")
        soc_list = list(socs) if socs else list(DEFAULT_SOCS)
        check_cores(cores, "--cores")
        for soc in soc_list:
            if cores is None and soc_cores(soc) is None:
                known = ", ".join(SOC_CORES)
                raise ValueError(f"no vector core count known for SoC {soc!r}: pass --cores (known: {known})")
            if params.hbm_gbps is None and soc_hbm_gbps(soc) is None:
                raise ValueError(f"no HBM bandwidth known for SoC {soc!r}: pass --param hbm_gbps=...")
        if kernel_source and not Path(kernel_source).is_file():
            raise ValueError(f"--kernel-source {kernel_source}: no such file")
        if kernel_source and (problem := source_problem(kernel_source)) is not None:
            raise ValueError(f"--kernel-source {kernel_source} is not safe to build and load: {problem}")
        calibrated = {} if explicit else calibrate.model_params(soc_list)
    except calibrate.NoNpu as err:  # not a bad command line: this host lacks what it needs
        say(f"bench --model: {err}")
        return 1
    except (ValueError, OSError) as err:
        say(f"bench --model: {err}")
        return 2
    kernel = ModelKernel.from_source(kernel_source) if kernel_source else None  # a compile error raises

    def progress(msg: str) -> None:
        to_stderr(f"  model {msg} ...")

    records = bench(
        shape_list, dtype_list, dirs, soc_list, params=params, preset=preset, kernel=kernel, cores=cores,
        progress=progress, params_by_soc={soc: p for soc, (p, _) in calibrated.items()},
    )  # fmt: skip
    if calibrated:
        named = "; ".join(f"{soc}: calibration file {path}" for soc, (_, path) in calibrated.items())
        rest = [soc for soc in soc_list if soc not in calibrated]
        scenario = named + (f"; {', '.join(rest)}: {preset} preset" if rest else "")
    else:
        scenario = f"{preset} preset{', adjusted' if param_items or param_file else ''}"
    if against_measured:
        return calibrate.against_measured_main(records, device, out, echo)
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
                        "calibration": {soc: str(path) for soc, (_, path) in calibrated.items()},
                        # what those SoCs' records used instead of "params"
                        "calibrated_params": {soc: p.to_dict() for soc, (p, _) in calibrated.items()},
                        "note": "first-order model (about +-50 % on times; counts exact); never compared with an NPU",
                    },
                    "records": [r.to_dict() for r in records],
                },
                indent=1,
            )
        )
    else:
        on_preset = not calibrated or len(calibrated) < len(soc_list)  # some records priced by a preset
        times = "times first-order" + (", about +-50 % on a preset" if on_preset else "")
        times += ", prices from the calibration file(s) named" if calibrated else ""
        echo(f"performance model ({scenario}; counts exact, {times}, never compared with an NPU's kernel times)")
        echo(format_table(records))
        echo(
            "GM MB/min: bytes the kernel moved / the least the operation needs; roof µs: that least over the "
            "SoC's peak HBM bandwidth; pooled µs: the same parameters with bw_pool=1 (busy blocks share the "
            "bandwidth of idle cores; %roof and the targets use µs); dominant: the terms whose removal saves "
            "the most (ablation)"
        )
    return 0
