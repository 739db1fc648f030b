"""Check the performance model of the package's kernel against a committed baseline.

``perf_model_baseline.json`` (beside this script) holds what the model said for the package's own kernel
when it was last re-baselined: for the seed shapes (bf16 and fp32, fwd and bwd, 48 cores) the plan,
the blocks per launch and the GM bytes (counts of what the kernel code does: exact) and the predicted
µs of the opt/base/pess presets with the dominant term, plus a few sensitivity runs. This script models
the same cases again (``--source FILE``: another ``rmsnorm.asc`` of this ABI instead) and compares:

* a count (plan, blocks, GM bytes) that differs fails: the kernel moves other data or launches
  otherwise than it did;
* a predicted µs more than ``--tolerance`` (default 1 %) away from the baseline fails: the kernel's
  instruction stream or the model's timeline changed.

Either may be intended (a kernel change, a calibration): then ``--update`` writes the current values
as the new baseline, to be committed with that change and its reason. Prints one line per case and a
summary; exit status 1 on any difference (0 with ``--update``). Runs in well under a minute (fast mode).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ascend_rmsnorm.cli import perfmodel as pm

BASELINE = Path(__file__).resolve().with_name("perf_model_baseline.json")
CORES = 48
PRESETS = ("opt", "base", "pess")
CASES = tuple(
    (rows, hidden, dtype, direction)
    for dtype in ("bfloat16", "float32")
    for rows, hidden in pm.SEED_SHAPES
    for direction in ("fwd", "bwd")
)
# Sensitivity runs: (rows, hidden, dtype, direction, parameter, values); "cores" varies the launch instead.
SENSITIVITY = (
    (8192, 4096, "bfloat16", "fwd", "s_flag_latency_us", (0, 0.1, 0.5, 1)),
    (8192, 4096, "bfloat16", "bwd", "s_flag_latency_us", (0, 0.1, 0.5, 1)),
    (8192, 4096, "float32", "fwd", "s_flag_latency_us", (0, 0.1, 0.5, 1)),
    (32768, 128, "bfloat16", "fwd", "vec_latency_cycles", (0, 10, 20, 40)),
    (8192, 4096, "bfloat16", "fwd", "cores", (40,)),
)


def _key(*parts) -> str:
    return " ".join(str(p) for p in parts)


def measure(kernel: pm.ModelKernel | None) -> dict:
    """What the model says now, in the baseline's form."""
    cases = {}
    for case in CASES:
        got = {p: pm.model(*case, cores=CORES, preset=p, kernel=kernel, ablate=p == "base") for p in PRESETS}
        base = got["base"]
        cases[_key(*case)] = {
            "path": base.path,
            "blocks": base.launch_blocks,
            "gm_bytes": base.gm_bytes,
            "us": {p: round(got[p].predicted_us, 3) for p in PRESETS},
            "dominant": base.dominant,
        }
    sensitivity = {}
    for rows, hidden, dtype, direction, name, values in SENSITIVITY:
        for value in values:
            if name == "cores":
                rec = pm.model(rows, hidden, dtype, direction, cores=int(value), kernel=kernel, ablate=False)
            else:
                params = pm.make_params("base", {name: value})
                rec = pm.model(rows, hidden, dtype, direction, cores=CORES, params=params, kernel=kernel, ablate=False)
            sensitivity[_key(rows, hidden, dtype, direction, f"{name}={value}")] = round(rec.predicted_us, 3)
    return {"cores": CORES, "cases": cases, "sensitivity": sensitivity}


def _us_off(ours: float, want: float, tolerance: float) -> bool:
    return abs(ours - want) > tolerance * max(abs(want), 1e-9)


def compare(now: dict, want: dict, tolerance: float) -> list[str]:
    """One line per disagreement (empty: the model agrees with the baseline); prints the table."""
    bad = []
    missing = sorted(set(want["cases"]) ^ set(now["cases"]))
    missing += sorted(set(want["sensitivity"]) ^ set(now["sensitivity"]))
    bad += [f"{k}: in only one of the baseline and this run" for k in missing]
    head = (
        f"{'case':<26} {'path':<10} {'blocks':<8} {'GM MB':>8} "
        + " ".join(f"{p + ' µs':>9}/{'base':<9}" for p in PRESETS)
        + "  dominant"
    )
    print(head)
    print("-" * len(head))
    for key, ours in now["cases"].items():
        ref = want["cases"].get(key)
        if ref is None:
            continue
        flags = [f for f in ("path", "blocks", "gm_bytes", "dominant") if ours[f] != ref[f]]
        flags += [f"{p} µs" for p in PRESETS if _us_off(ours["us"][p], ref["us"][p], tolerance)]
        blocks = "+".join(str(b) for b in ours["blocks"])
        print(
            f"{key:<26} {ours['path'] or '-':<10} {blocks:<8} {ours['gm_bytes'] / 1e6:>8.2f} "
            + " ".join(f"{ours['us'][p]:>9.1f}/{ref['us'][p]:<9.1f}" for p in PRESETS)
            + f"  {ours['dominant']}"
            + (f"  <- {', '.join(flags)}" if flags else "")
        )
        if flags:
            bad.append(f"{key}: {', '.join(flags)}")
    print("\nsensitivity: ours / baseline µs")
    for key, ours in now["sensitivity"].items():
        ref = want["sensitivity"].get(key)
        if ref is None:
            continue
        off = _us_off(ours, ref, tolerance)
        print(f"  {key:<52} {ours:>9.1f}/{ref:<9.1f}" + ("  <- µs" if off else ""))
        if off:
            bad.append(f"{key}: µs")
    return bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="another rmsnorm.asc (this ABI) to model instead of the package's kernel")
    parser.add_argument("--tolerance", type=float, default=0.01, help="relative µs tolerance (default 0.01)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help=f"baseline file (default {BASELINE.name})")
    parser.add_argument("--update", action="store_true", help="write this run as the new baseline")
    args = parser.parse_args(argv)
    kernel = pm.ModelKernel.from_source(args.source) if args.source else None
    print(f"kernel: {args.source or 'ascend_rmsnorm/kernels/rmsnorm.asc'}, {CORES} cores")
    now = measure(kernel)
    if args.update:
        args.baseline.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.baseline} ({len(now['cases'])} cases, {len(now['sensitivity'])} sensitivity runs)")
        return 0
    if not args.baseline.is_file():
        print(f"no baseline at {args.baseline}: run with --update first", file=sys.stderr)
        return 1
    want = json.loads(args.baseline.read_text())
    if want.get("cores") != CORES:
        print(f"{args.baseline} was made for {want.get('cores')} cores, this check runs {CORES}", file=sys.stderr)
        return 1
    bad = compare(now, want, args.tolerance)
    if bad:
        print(f"\n{len(bad)} difference(s) from the baseline:\n  " + "\n  ".join(bad))
        print("if the change is intended, re-baseline with --update and commit the file with its reason")
        return 1
    print(f"\nall {len(now['cases'])} cases' counts equal the baseline and every µs is within {args.tolerance:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
