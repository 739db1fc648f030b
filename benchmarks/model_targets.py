"""The kernel's speed targets (docs/perf-model.md §4), as the performance model predicts them.

For each target: the prediction of the base preset, and the ``floor`` preset's bound (HBM bandwidth
and launches only, every latency and pipe cost 0: the least any kernel moving these bytes per block
in these launches could take in the model). A target whose floor is below it cannot be met by a
kernel with this traffic and these launches, whatever its pipes do.

Targets (fwd+bwd unless named; Ascend910B2, 48 cores, and Ascend910_9362, 40 cores):
  bf16 >= 60 % of the roofline at the seed shapes with H >= 4096;
  bf16 >= 40 % at 32768x128 and 16384x256;
  forward alone >= 70 % at 8192x4096, bf16;
  no seed shape below 40 % in any dtype.

These are predictions of a first-order model (about +-50 % on absolute times), never checked on an
NPU; only ``ascend-rmsnorm bench`` on an NPU host measures the kernel. Prints one line per case and
a summary; always exits 0 (a benchmark, not a test). One to three minutes on this machine.
"""

from __future__ import annotations

import argparse

from ascend_rmsnorm.cli import perfmodel as pm

SOCS = ("Ascend910B2", "Ascend910_9362")
LARGE_H = ((1024, 4096), (8192, 4096), (1024, 8192), (4096, 5120))
SMALL_H = ((32768, 128), (16384, 256))
DTYPES = ("bfloat16", "float16", "float32")


def targets() -> list[tuple[str, int, int, str, str, float]]:
    """(name, rows, hidden, dtype, direction, least % of the roofline) of every target case."""
    out = [("60 % at H >= 4096", r, h, "bfloat16", "fwd+bwd", 60.0) for r, h in LARGE_H]
    out += [("40 % at small H", r, h, "bfloat16", "fwd+bwd", 40.0) for r, h in SMALL_H]
    out.append(("forward 70 %", 8192, 4096, "bfloat16", "fwd", 70.0))
    out += [("40 % in every dtype", r, h, d, "fwd+bwd", 40.0) for r, h in pm.SEED_SHAPES for d in DTYPES]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soc", action="append", help="SoC to model (repeatable; default: both)")
    args = parser.parse_args()
    kernel = pm.ModelKernel.default()
    met = missed = 0
    print(f"{'target':<20} {'soc':<15} {'shape':<10} {'dtype':<9} {'dir':<7} {'goal':>5} {'model':>6} {'floor':>6}")
    for soc in args.soc or SOCS:
        for name, rows, hidden, dtype, direction, goal in targets():
            kw = dict(soc=soc, kernel=kernel, ablate=False)
            pct = pm.model(rows, hidden, dtype, direction, **kw).pct_roofline
            floor = pm.model(rows, hidden, dtype, direction, preset="floor", **kw).pct_roofline
            ok = pct >= goal
            met, missed = met + ok, missed + (not ok)
            verdict = "met" if ok else ("MISSED (floor below the goal)" if floor < goal else "MISSED")
            print(
                f"{name:<20} {soc:<15} {f'{rows}x{hidden}':<10} {dtype:<9} {direction:<7} {goal:>4.0f}% "
                f"{pct:>5.1f}% {floor:>5.1f}%  {verdict}"
            )
    print(f"{met} met, {missed} missed (model predictions, base preset; never checked on an NPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
