"""The ``ascend-rmsnorm`` command (also ``python -m ascend_rmsnorm``).

Each sub-command is one ``register_*`` function that adds its parser and sets ``func``, listed in
``COMMANDS``: info, warm, cache, selftest, bench.

Whatever goes wrong, the command ends with a message on stderr and a non-zero exit, never a
traceback (``main``): 2 for a bad command line (argparse, or a ``--device`` that is no device),
1 for everything else, 130 when interrupted. ``ASCEND_RMSNORM_LOG_LEVEL=DEBUG`` adds the traceback of
an unexpected error, which is a bug to report.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

from ..errors import AscendRMSNormError
from .device import check_device, one_line
from .errors import CliError


def _out(line: str = "") -> None:
    print(line, flush=True)


# --------------------------------------------------------------------------------------------------- warm


#: What ``warm`` prints in place of the arch when there is none to build for.
NO_ARCH = "(no-arch)"
NO_ARCH_HINT = (
    "pass --arch dav-2201 to build the Atlas A2/A3 kernels on a host without an NPU (with CANN's bisheng; "
    "or set ASCEND_RMSNORM_ARCH), or --toolchain emu to build the CPU emulation's library"
)


def _warm(args: argparse.Namespace) -> int:
    from ..jit import cache, toolchain

    kind = args.toolchain
    try:
        tc = toolchain.get_toolchain(kind)
    except AscendRMSNormError as err:
        tc, tc_error = None, err
    else:
        tc_error = None
    arches = args.arch
    if not arches and kind == "emu":
        arches = [toolchain.EMU_ARCH]
    elif not arches:  # the arch of this host's NPU; on a host without one, say what to pass instead
        try:
            arches = [toolchain.detect_arch(tc.cann_root if tc else None).arch]
        except AscendRMSNormError as err:
            why = str(err).splitlines()[0].split(". Pass --arch")[0]  # the hint below says what to pass
            _out(f"failed {kind} {NO_ARCH} {why}")
            _out(f"  {NO_ARCH_HINT}")
            if tc_error is not None:
                _out(f"also: {tc_error}")
            return 1
    if tc_error is not None:
        for arch in arches:
            _out(f"failed {kind} {arch} {tc_error}")
        return 1
    failures = 0
    for arch in (toolchain.normalise_arch(a) for a in arches):
        try:  # private_ok=False: a build into a temp dir that vanishes at exit would warm nothing
            status, entry = cache.ensure_built(
                tc, arch, cache_dir=args.cache_dir, private_ok=False, target_only=bool(args.cache_dir)
            )
            problem = _warm_entry_problem(entry, args.cache_dir)
            if problem is not None:
                raise cache.CacheWriteError(problem)
        except AscendRMSNormError as err:
            failures += 1
            first, _, rest = str(err).partition("\n")
            _out(f"failed {kind} {arch} {first}")
            if rest:
                _out(rest)
            continue
        _out(f"{status} {kind} {arch} {entry}")
    return 1 if failures else 0


def _warm_entry_problem(entry, cache_dir: str | None) -> str | None:
    """Why ``entry`` does not count as warmed (None if it does): warm succeeds only when the entry is valid
    and in the cache it was asked to fill (without --cache-dir: in a tier every later run reads, never in
    this process's private temp dir, which vanishes at exit)."""
    from pathlib import Path

    from ..jit import cache

    entry = Path(entry)
    target = cache.cache_root(cache_dir)[0]
    allowed = [target] if cache_dir else [t.path for t in cache.tiers(cache_dir) if t.kind != "private"]
    if not any(entry.is_relative_to(root) for root in allowed):
        return f"the library ended up at {entry}, outside the cache {target} that was to be filled"
    problem = cache.entry_problem(entry)
    if problem is not None:
        return f"the entry {entry} is not valid after building it: {problem}"
    return None


def register_warm(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warm",
        help="build the kernel libraries that are missing from the cache",
        description="Build what is missing (safe to run from many processes and nodes at once). "
        "Prints one line per target: hit|built|failed <toolchain> <arch> <entry or error>.",
    )
    p.add_argument("--arch", action="append", help="target arch, e.g. dav-2201 (repeatable; default: this NPU's)")
    p.add_argument("--toolchain", choices=("npu", "emu"), default="npu", help="bisheng (npu) or host C++ (emu)")
    p.add_argument("--cache-dir", help="writable cache root (default: ASCEND_RMSNORM_CACHE_DIR or the user cache)")
    p.set_defaults(func=_warm)


# --------------------------------------------------------------------------------------------------- cache


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _cache_path(args: argparse.Namespace) -> int:
    from ..jit import cache, locks

    root, is_default = cache.cache_root(args.cache_dir)
    for path in cache.prebuilt_dirs():
        state = "present" if path.is_dir() else "missing"
        _out(f"prebuilt  {path}  (read-only, {state})")
    err = cache.writable_error(root)
    state = "writable" if err is None else f"NOT writable: {cache.describe_os_error(err, root)}"
    _out(f"writable  {root}  ({state}{', default' if is_default else ''})")
    _out(f"locks     {locks.lock_dir() or 'none usable (lockless)'}")
    return 0


def _cache_list(args: argparse.Namespace) -> int:
    from ..jit import admin

    now = time.time()
    entries = list(admin.iter_entries(args.cache_dir))
    if not entries:
        _out("no cache entries")
        return 0
    _out(f"{'tier':9} {'toolchain':9} {'arch':9} {'size':>10} {'age':>5}  key           path")
    for e in entries:
        kind = ((e.manifest or {}).get("key_input") or {}).get("toolchain", {}).get("kind", "?")
        note = f"  INVALID: {e.problem}" if e.problem else ""
        _out(
            f"{e.tier:9} {e.version_dir if kind == 'npu' else kind:9} {e.arch:9} {_human_size(e.size):>10} "
            f"{_human_age(now - e.built_at):>5}  {e.key[:12]}  {e.path}{note}"
        )
    return 0


def _cache_verify(args: argparse.Namespace) -> int:
    from ..jit import admin, cache

    bad = 0
    count = 0
    for entry in admin.iter_entries(args.cache_dir):
        count += 1
        status, problem = admin.verify_entry(entry)
        if status == "ok":
            _out(f"ok   {entry.path}")
            continue
        if status == "untested":
            _out(f"untested {entry.path}: {problem}")
            continue
        if status == "unsafe":
            bad += 1
            _out(f"unsafe {entry.path}: {problem} (not loaded, not moved)")
            continue
        bad += 1
        moved = cache.quarantine(entry.path, problem) if entry.tier != "prebuilt" else None
        where = f" -> moved to {moved}" if moved else ""
        _out(f"bad  {entry.path}: {problem}{where}")
    _out(f"{count} entries, {bad} bad")
    return 1 if bad else 0


def _cache_clean(args: argparse.Namespace) -> int:
    from ..jit import admin

    if not (args.all or args.older_than is not None or args.stale_toolchain):
        _out("cache clean: say what to remove: --all, --older-than DAYS or --stale-toolchain")
        return 2
    result = admin.clean(
        args.cache_dir, everything=args.all, older_than_days=args.older_than, stale_toolchain=args.stale_toolchain
    )
    for path in result.removed:
        _out(f"removed {path}")
    for path, why in result.failed:
        _out(f"NOT removed {path}: {why}")
    for note in result.notes:
        _out(note)
    summary = f"{len(result.removed)} removed"
    if result.failed:
        summary += f", {len(result.failed)} could not be removed"
    _out(summary)
    return 1 if result.failed else 0


def register_cache(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="inspect and tidy the kernel cache")
    actions = p.add_subparsers(dest="action", metavar="{path,list,verify,clean}")
    actions.required = True
    for name, func, text in (
        ("path", _cache_path, "print the cache tiers and whether they are writable"),
        ("list", _cache_list, "list cached kernel libraries"),
        ("verify", _cache_verify, "re-hash and load-test every entry; quarantine bad ones (exit 1 if any)"),
        ("clean", _cache_clean, "remove entries: --all, --older-than DAYS, --stale-toolchain"),
    ):
        q = actions.add_parser(name, help=text, description=text)
        q.add_argument("--cache-dir", help="writable cache root (default: ASCEND_RMSNORM_CACHE_DIR or the user cache)")
        q.set_defaults(func=func)
        if name == "clean":
            group = q.add_mutually_exclusive_group()
            group.add_argument("--all", action="store_true", help="remove the whole writable cache")
            group.add_argument("--older-than", type=float, metavar="DAYS", help="entries built more than DAYS ago")
            group.add_argument(
                "--stale-toolchain", action="store_true", help="entries built by another compiler than today's"
            )


# --------------------------------------------------------------------------------------------------- info


def _info(args: argparse.Namespace) -> int:
    import json

    from . import info

    data = info.gather(import_torch_npu=True)
    _out(json.dumps(data, indent=2) if args.json else info.format_report(data))
    return 0


def register_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="what this host has (NPU, CANN, bisheng, cache tiers) and what backend auto would use",
        description="Package and framework versions, the NPU's SoC/arch/vector cores, the CANN root and version, "
        "bisheng, the cache tiers and whether each is writable, and which backend auto picks and why. "
        "Builds nothing; exits 0.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_info)


# --------------------------------------------------------------------------------------------------- selftest


def _selftest(args: argparse.Namespace) -> int:
    from ..backends import choice
    from . import selftest

    backend = choice.requested_name(args.backend)
    device = check_device(args.device, backend)
    return selftest.main(backend, device, args.json, args.quick, echo=_out)


def register_selftest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selftest",
        help="accuracy and bitwise batch-invariance checks of a backend on this device",
        description="Per dtype: the backend's bits against the torch path on the CPU (the contract), accuracy "
        "against float64, and bitwise invariance over row prefixes, row positions and 3-D vs 2-D inputs. "
        "Prints a pass/fail table; exits 1 if any check fails.",
    )
    p.add_argument("--backend", choices=("auto", "npu", "emu", "torch"), help="default: ASCEND_RMSNORM_BACKEND or auto")
    p.add_argument("--device", help="torch device to run on (default: npu if present, else cpu)")
    p.add_argument("--quick", action="store_true", help="one hidden size instead of three")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=_selftest)


# --------------------------------------------------------------------------------------------------- bench


def _bench(args: argparse.Namespace) -> int:
    if args.calibrate:
        from ..perf import calibrate

        if args.model or args.against_measured:
            print("ascend-rmsnorm bench: --calibrate does not go with --model", file=sys.stderr)
            return 2
        return calibrate.main(
            emu=args.emu, preset=args.preset, param_file=args.params, param_items=args.param or (),
            socs=args.soc, cores=args.cores, as_json=args.json, out=args.out, echo=_out,
        )  # fmt: skip
    if args.against_measured and not args.model:
        print("ascend-rmsnorm bench: --against-measured goes with --model", file=sys.stderr)
        return 2
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
            echo=_out,
            against_measured=args.against_measured,
            out=args.out,
        )
    model_only = [
        flag
        for flag, value in (
            ("--soc", args.soc),
            ("--shape", args.shape),
            ("--dtype", args.dtype),
            ("--direction", args.direction),
            ("--param", args.param),
            ("--params", args.params),
            ("--kernel-source", args.kernel_source),
            ("--cores", args.cores),
            ("--out", args.out),
        )
        if value
    ]
    if model_only:
        print(f"ascend-rmsnorm bench: {', '.join(model_only)} only work with --model", file=sys.stderr)
        return 2
    from . import bench

    args.device = check_device(args.device, None)
    soc = None
    if not args.device or args.device.startswith("npu"):
        from . import info

        soc = info.gather()["npu"].get("soc")
    return bench.main(args.device, args.quick, args.json, args.emu, soc=soc, echo=_out)


def register_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time forward and forward+backward against the alternatives on this device",
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
    p.set_defaults(func=_bench)


# --------------------------------------------------------------------------------------------------- main

COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_info,
    register_warm,
    register_cache,
    register_selftest,
    register_bench,
]


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(prog="ascend-rmsnorm", description="Batch-invariant RMSNorm for Ascend NPUs.")
    parser.add_argument("--version", action="version", version=f"ascend-rmsnorm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in COMMANDS:
        register(sub)
    return parser


def _say(text: str) -> None:
    try:
        print(f"ascend-rmsnorm: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr itself is gone: the exit status still tells


def _tolerant_output() -> None:
    """Paths are bytes on Linux: print non-UTF-8 ones as the bytes they are instead of dying on them."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="surrogateescape" if stream is sys.stdout else "backslashreplace")
            except (ValueError, OSError):
                pass


def _leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command ``args`` chose, so that its usage is what a mistake prints."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, or exit 2 with the usage of the command that was given (``info --bogus``
    prints info's usage, not the top-level one)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _leaf_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Never lets a traceback out (see the module doc)."""
    args = parse(argv)
    _tolerant_output()
    command = getattr(args, "command", None) or "ascend-rmsnorm"
    try:
        return int(args.func(args) or 0)
    except CliError as err:
        _say(f"{command}: {err}")
        return err.code
    except AscendRMSNormError as err:
        _say(str(err))
        return 1
    except KeyboardInterrupt:
        _say(f"{command}: interrupted")
        return 130
    except BrokenPipeError:
        try:  # the reader went away (`| head`): no complaint at exit about flushing stdout
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (ValueError, TypeError, OSError, RuntimeError, NotImplementedError) as err:
        text = str(err).strip().splitlines()
        plain = isinstance(err, (ValueError, TypeError)) and text
        _say(f"{command}: {text[0] if plain else one_line(err)}")
        return 1
    except Exception as err:  # noqa: BLE001 - the last resort: a bug, still no traceback unless asked
        from .. import _env

        level = _env.read(_env.LOG_LEVEL)[0]
        if level is not None and level <= 10:
            import traceback

            traceback.print_exc()
        _say(
            f"{command}: unexpected {one_line(err)}. This is a bug; please report it with the output of "
            "`ascend-rmsnorm info` (ASCEND_RMSNORM_LOG_LEVEL=DEBUG shows the traceback)"
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
