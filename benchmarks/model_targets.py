"""The kernel's speed targets, as the performance model predicts them under base, pess and stress.

One row per seed shape, dtype and SoC (fwd+bwd; Ascend910B2, 48 cores, and Ascend910_9362, 40 cores):
the % of the roofline under ``base``, ``pess`` and ``stress`` side by side, the ``floor`` preset's
bound (HBM bandwidth and launches only, every latency and pipe cost 0), stress time over base time,
and every target that applies to the row, met or MISSED. A miss is printed, never hidden. The
``pooled`` column is base with bw_pool=1 (busy blocks share the bandwidth idle cores leave), for
reference only: every target is judged on the static share. Each stress-over-base miss is then
taken apart: its stress time with the vector latency at 0 (every other stress price kept), and the
share of the latency's cost a kernel would have to hide to meet the target.

Targets, bf16 and fp16 fwd+bwd on 48 and 40 cores:
  base:   >= 60 % at 8192x4096 and 4096x5120; >= 40 % at 32768x128 and 16384x256; the 1024-row shapes
          are launch-bound and judged against their floor: >= 85 % of what ``floor`` allows;
  stress: >= 40 % at 8192x4096 and 4096x5120, >= 25 % at every seed shape;
  robust: no seed shape's stress time above 1.6x its base time.
fp32 is printed for reference (its rule, "never slower in base", compares two commits, not one run).

These are predictions of a first-order model (about +-50 % on absolute times), never checked on an
NPU; only ``ascend-rmsnorm bench`` on an NPU host measures the kernel (and ``bench --calibrate`` there
fits the model's prices). Always exits 0 (a benchmark, not a test). Each shape runs once in the
emulation and its trace is replayed per preset: about a minute on this machine.
"""

from __future__ import annotations

import argparse

from ascend_rmsnorm.cli import perfmodel as perfmodel_cli
from ascend_rmsnorm.perf import kernel as perf_kernel
from ascend_rmsnorm.perf import model as perf_model
from ascend_rmsnorm.perf import params as perf_params

SOCS = ("Ascend910B2", "Ascend910_9362")
PRESETS = ("base", "pess", "stress")
TARGET_DTYPES = ("bfloat16", "float16")
LARGE = ((8192, 4096), (4096, 5120))
SMALL_H = ((32768, 128), (16384, 256))
LAUNCH_BOUND = ((1024, 4096), (1024, 8192))
STRESS_OVER_BASE = 1.6
POOLED = "base, bw_pool=1"  # a reference column: no target reads it
NO_VEC_LATENCY = "stress, vec_latency_cycles=0"  # what a stress-over-base miss is made of: no target reads it


def targets(shape: tuple[int, int], dtype: str) -> list[tuple[str, str, float]]:
    """(name, what it reads, bound) of the targets that apply to one seed shape and dtype.

    ``what`` is a preset's % of the roofline, "base/floor" (base % over floor %, as a %) or
    "stress/base" (time ratio, an upper bound)."""
    if dtype not in TARGET_DTYPES:
        return []
    out = []
    if shape in LARGE:
        out += [("base >= 60 %", "base", 60.0), ("stress >= 40 %", "stress", 40.0)]
    elif shape in SMALL_H:
        out.append(("base >= 40 %", "base", 40.0))
    elif shape in LAUNCH_BOUND:
        out.append(("base >= 85 % of floor", "base/floor", 85.0))
    out.append(("stress >= 25 %", "stress", 25.0))
    out.append((f"stress <= {STRESS_OVER_BASE}x base", "stress/base", STRESS_OVER_BASE))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soc", action="append", help="SoC to model (repeatable; default: both)")
    parser.add_argument("--dtype", action="append", help="dtype (repeatable; default: bf16, fp16, fp32)")
    args = parser.parse_args()
    kernel = perf_kernel.ModelKernel.default()
    met = missed = 0
    misses: list[str] = []
    latency_rows: list[str] = []
    head = (
        f"{'soc':<15} {'shape':<10} {'dtype':<9} {'base':>6} {'pess':>6} {'stress':>7} {'floor':>6} "
        f"{'st/base':>7} {'pooled':>7}  targets"
    )
    print(head)
    print("-" * len(head))
    for soc in args.soc or SOCS:
        for rows, hidden in perfmodel_cli.SEED_SHAPES:
            for dtype in args.dtype or ("bfloat16", "float16", "float32"):
                sets = {p: perf_params.PRESETS[p] for p in (*PRESETS, "floor")}
                sets[POOLED] = perf_params.PRESETS["base"].replace(bw_pool=1.0)
                sets[NO_VEC_LATENCY] = perf_params.PRESETS["stress"].replace(vec_latency_cycles=0.0)
                recs = perf_model.model_presets(
                    rows, hidden, dtype, "fwd+bwd", sets, soc=soc, kernel=kernel, ablate=False
                )
                pct = {p: r.pct_roofline for p, r in recs.items()}
                value = {
                    **pct,
                    "base/floor": 100.0 * pct["base"] / pct["floor"],
                    "stress/base": recs["stress"].predicted_us / recs["base"].predicted_us,
                }
                verdicts = []
                for name, what, bound in targets((rows, hidden), dtype):
                    ok = value[what] <= bound if what == "stress/base" else value[what] >= bound
                    met, missed = met + ok, missed + (not ok)
                    verdicts.append(f"{name}: {'met' if ok else 'MISSED'}")
                    if not ok:
                        misses.append(f"{soc} {rows}x{hidden} {dtype}: {name} (got {value[what]:.2f})")
                        if what == "stress/base":
                            latency_rows.append(latency_share(f"{soc} {rows}x{hidden} {dtype}", recs))
                print(
                    f"{soc:<15} {f'{rows}x{hidden}':<10} {dtype:<9} {pct['base']:>5.1f}% {pct['pess']:>5.1f}% "
                    f"{pct['stress']:>6.1f}% {pct['floor']:>5.1f}% {value['stress/base']:>6.2f}x {pct[POOLED]:>6.1f}%  "
                    + ("; ".join(verdicts) or "(reference)")
                )
    print(f"\n{met} met, {missed} missed (model predictions, % of the roofline, fwd+bwd; never checked on an NPU)")
    print("pooled: base with bw_pool=1 (idle cores' bandwidth shared by the busy blocks), not used for any target")
    for line in misses:
        print(f"  MISSED {line}")
    if latency_rows:
        print(
            f"\nwhat each stress <= {STRESS_OVER_BASE}x base miss is made of: stress's time, the same with the vector "
            "latency at 0 (every other stress price kept), and the share of the latency's cost a kernel would "
            "have to hide to meet the target"
        )
        for line in latency_rows:
            print(f"  {line}")
    return 0


def latency_share(label: str, recs: dict) -> str:
    """One line: how much of a stress-over-base miss is the vector latency the barriers expose."""
    base, stress = recs["base"].predicted_us, recs["stress"].predicted_us
    flat = recs[NO_VEC_LATENCY].predicted_us
    need = (stress - STRESS_OVER_BASE * base) / (stress - flat) if stress > flat else float("inf")
    return (
        f"{label}: stress {stress:.1f} µs, {flat:.1f} without the vector latency ({flat / base:.2f}x base); "
        f"hide {100 * need:.0f} % of the latency's {stress - flat:.1f} µs to meet it"
    )


if __name__ == "__main__":
    raise SystemExit(main())
