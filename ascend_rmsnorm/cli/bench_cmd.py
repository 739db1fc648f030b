"""``ascend-rmsnorm bench``: its parser and handler. Timing on this device is ``cli.bench``'s, the
performance model ``cli.perfmodel``'s (``--model``), the calibration ``perf.calibrate``'s (``--calibrate``),
the auto-sync log ``jit.sync_log``'s (``--sync-log``)."""

from __future__ import annotations

import argparse

from .device import check_device
from .errors import UsageError
from .output import out

#: (flag, attribute) of every option bench takes, and which job takes which (the job's own switch aside)
_FLAGS = (
    ("--quick", "quick"), ("--json", "json"), ("--device", "device"), ("--emu", "emu"),
    ("--against-measured", "against_measured"), ("--preset", "preset"), ("--soc", "soc"), ("--shape", "shape"),
    ("--dtype", "dtype"), ("--direction", "direction"), ("--param", "param"), ("--params", "params"),
    ("--kernel-source", "kernel_source"), ("--cores", "cores"), ("--out", "out"),
)  # fmt: skip
_TAKES = {
    "--sync-log": set(),
    "--calibrate": {"--json", "--emu", "--preset", "--soc", "--param", "--params", "--cores", "--out"},
    "--model": {
        "--quick", "--json", "--against-measured", "--preset", "--soc", "--shape", "--dtype", "--direction",
        "--param", "--params", "--kernel-source", "--cores", "--out",
    },
    "timing": {"--quick", "--json", "--device", "--emu"},
}  # fmt: skip
#: Which jobs take an option that plain timing does not, for the message that refuses it there.
_TAKEN_BY = {
    "--out": "--model --against-measured or --calibrate --emu",
    "--preset": "--model or --calibrate --emu",
    "--param": "--model or --calibrate --emu",
    "--params": "--model or --calibrate --emu",
    "--soc": "--model or --calibrate",
    "--cores": "--model or --calibrate",
}


def _unset(value) -> bool:
    return value is None or value is False or value == []  # not `in (None, False)`: --cores 0 is given


def _misfit(args: argparse.Namespace) -> str | None:
    """Why the options given do not make one job (None when they do): an option the chosen job would
    ignore is refused, so that a --out that writes nothing or a --device never checked is not a silent 0."""
    given = [flag for flag, attr in _FLAGS if not _unset(getattr(args, attr, None))]
    if args.sync_log and (args.model or args.calibrate):
        return "--sync-log does not go with --model or --calibrate"
    if args.calibrate and args.model:
        return "--calibrate does not go with --model"
    job = "--sync-log" if args.sync_log else "--calibrate" if args.calibrate else "--model" if args.model else "timing"
    extra = [flag for flag in given if flag not in _TAKES[job]]
    if job == "timing" and extra:
        if "--against-measured" in extra:
            return "--against-measured goes with --model"
        where: dict[str, list[str]] = {}
        for flag in extra:
            where.setdefault(_TAKEN_BY.get(flag, "--model only"), []).append(flag)
        return "; ".join(
            f"{', '.join(flags)} {'goes' if len(flags) == 1 else 'go'} with {jobs}" for jobs, flags in where.items()
        )
    if job == "--model" and args.against_measured and args.json:
        return "--json does not go with --against-measured (its JSON goes to the --out file)"
    if job == "--model" and args.out and not args.against_measured:
        return "--out goes with --model only with --against-measured (and with --calibrate --emu)"
    if extra:
        return f"{', '.join(extra)} {'does' if len(extra) == 1 else 'do'} not go with {job}"
    return None


def run(args: argparse.Namespace) -> int:
    """One of four jobs: --sync-log, --calibrate, --model, or timing on this device; 2 for options of another job."""
    misfit = _misfit(args)
    if misfit is not None:
        raise UsageError(misfit)
    if args.sync_log:
        from ..jit import sync_log

        return sync_log.main(args.sync_log, echo=out)
    if args.calibrate:
        from ..perf import calibrate

        return calibrate.main(
            emu=args.emu, preset=args.preset, param_file=args.params, param_items=args.param or (),
            socs=args.soc, cores=args.cores, as_json=args.json, out=args.out, echo=out,
        )  # fmt: skip
    if args.model:
        from . import perfmodel

        quick = args.quick and not (args.shape or args.dtype or args.soc)
        return perfmodel.bench_main(
            as_json=args.json,
            socs=args.soc or (["Ascend910B2"] if quick else None),
            shapes=args.shape or (["1024x4096", "32768x128"] if quick else None),
            dtypes=args.dtype or (["bfloat16"] if quick else None),
            directions=args.direction,
            preset=args.preset,
            param_file=args.params,
            param_items=args.param or (),
            kernel_source=args.kernel_source,
            cores=args.cores,
            echo=out,
            against_measured=args.against_measured,
            out=args.out,
        )
    from . import bench

    args.device = check_device(args.device, None)
    soc = None
    if not args.device or args.device.startswith("npu"):
        from . import info

        soc = info.gather()["npu"].get("soc")
    return bench.main(args.device, args.quick, args.json, args.emu, soc=soc, echo=out)


def register_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time forward and forward+backward against the alternatives on this device; --model predicts the "
        "kernels' time, --calibrate fits the model on an NPU",
        description="T x H in {1024x4096, 8192x4096, 1024x8192, 4096x5120, 32768x128, 16384x256} per dtype. "
        "On an NPU: the npu kernel vs the torch path vs torch_npu.npu_rms_norm; elsewhere the torch path "
        "(and --emu) vs F.rms_norm. Medians in µs, GB/s, % of peak HBM bandwidth, speed-ups.",
    )
    p.add_argument("--quick", action="store_true", help="two shapes, bf16 only, few repetitions")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--device", help="torch device (default: npu if present, else cpu)")
    p.add_argument("--emu", action="store_true", help="also time the emu kernel (CPU only; slow, for completeness)")
    m = p.add_argument_group(
        "performance model (--model)",
        "Predict instead of timing: the kernel runs in the CPU emulation, its counts (exact) are replayed on "
        "an in-order S/V/MTE2/MTE3 pipe model (first-order, about +-50 %; never compared with an NPU). "
        "Default: 10 shapes x 3 dtypes x fwd/bwd/fwd+bwd on Ascend910B2 (48 cores) and Ascend910_9362 (40).",
    )
    m.add_argument("--model", action="store_true", help="predict with the performance model (no hardware needed)")
    m.add_argument("--soc", action="append", help="SoC to model, e.g. Ascend910B2 (repeatable)")
    m.add_argument("--shape", action="append", metavar="RxH", help="rows x hidden, e.g. 8192x4096 (repeatable)")
    m.add_argument("--dtype", action="append", choices=("bfloat16", "float16", "float32"), help="(repeatable)")
    m.add_argument("--direction", action="append", choices=("fwd", "bwd", "fwd+bwd"), help="(repeatable)")
    m.add_argument(
        "--preset",
        choices=("base", "opt", "pess", "stress", "floor"),
        help="latency scenario (default: this SoC's calibration file if the cache has one, else base; stress: the "
        "worst plausible prices at once; floor: HBM bandwidth and launches only, a lower bound)",
    )
    m.add_argument("--param", action="append", metavar="NAME=VALUE", help="override one model parameter")
    m.add_argument("--params", metavar="FILE", help="JSON object of model parameters (e.g. measured latencies)")
    m.add_argument("--kernel-source", metavar="FILE", help="model this rmsnorm.asc instead of the package's")
    m.add_argument("--cores", type=int, help="vector cores (default: the SoC's)")
    m.add_argument(
        "--against-measured",
        action="store_true",
        help="NPU only: predicted vs measured µs per seed shape, fwd, bwd and fwd+bwd, into one JSON file (--out)",
    )
    c = p.add_argument_group(
        "calibration (--calibrate)",
        "time the calibration kernels (kernels/calibrate.asc) on this NPU, fit the model's parameters, write "
        "calibration-<soc>-<cann>.json into the cache for bench --model; with --emu: the closed loop through the "
        "emulation's pipe model, configured by --preset/--params/--param (it must give them back)",
    )
    c.add_argument("--calibrate", action="store_true", help="fit the performance model's prices (see above)")
    c.add_argument("--out", metavar="FILE", help="where --calibrate --emu / --against-measured write their JSON")
    s = p.add_argument_group(
        "auto-sync log (--sync-log)",
        "build the kernels with bisheng's --cce-auto-sync-log (needs CANN, not an NPU; never into the cache) and "
        "print every synchronisation the compiler put in our kernel files (docs/design.md §9)",
    )
    s.add_argument("--sync-log", metavar="DIR", help="where the logs, libraries and build output go")
    p.set_defaults(func=run)
