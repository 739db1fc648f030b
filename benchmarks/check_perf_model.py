"""Check the performance model against an independent estimate's predictions for the kernel at 1ebd6fe.

That estimate (its numbers are carried below) was made with an instrumented copy
of the emulation and a four-pipe timeline of its own. This script builds the kernel source of commit
1ebd6fe (``git show 1ebd6fe:ascend_rmsnorm/kernels/rmsnorm.asc``, or ``--source FILE``) against the
*current* ``kernels/emu`` headers, runs the seed shapes through ``ascend_rmsnorm.cli.perfmodel``
(bf16 and fp32, fwd and bwd, 48 cores) and compares with the note's numbers: blocks and GM MB (counts,
which should agree exactly up to the note's rounding) and the predicted µs of the base scenario
(the goal: within +-25 %), plus the opt/pess brackets and the dominant term for information.

Prints one line per case and a summary; exit status 1 if a base prediction is outside +-25 % or a
count disagrees, else 0. Runs in a few seconds (fast mode).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from ascend_rmsnorm.cli import perfmodel as pm

COMMIT = "1ebd6fe"
REPO = Path(__file__).resolve().parents[1]

# The note's table (48 cores): (rows, hidden, dtype, direction) ->
#   (blocks "fwd" or "bwd+dw", GM MB moved, base µs, opt µs, pess µs, dominant)
NOTE = {
    (1024, 4096, "bfloat16", "fwd"): ("48", 17.2, 42, 29, 65, "DMA-bw > sync"),
    (1024, 4096, "bfloat16", "bwd"): ("16+16", 25.8, 156, 116, 231, "DMA-bw > sync"),
    (8192, 4096, "bfloat16", "fwd"): ("48", 135, 268, 178, 411, "sync > DMA-bw"),
    (8192, 4096, "bfloat16", "bwd"): ("48+16", 206, 468, 341, 691, "DMA-bw > sync"),
    (1024, 8192, "bfloat16", "fwd"): ("48", 34.3, 74, 51, 114, "DMA-bw > sync"),
    (1024, 8192, "bfloat16", "bwd"): ("16+32", 102, 488, 395, 624, "DMA-bw > GM-lat"),
    (4096, 5120, "bfloat16", "fwd"): ("48", 84.4, 157, 111, 231, "DMA-bw > sync"),
    (4096, 5120, "bfloat16", "bwd"): ("48+20", 129, 466, 312, 736, "sync > vector"),
    (32768, 128, "bfloat16", "fwd"): ("48", 16.9, 158, 112, 259, "vector > scalar"),
    (32768, 128, "bfloat16", "bwd"): ("48+1", 25.8, 409, 294, 709, "GM-lat > vector"),
    (16384, 256, "bfloat16", "fwd"): ("48", 16.9, 95, 63, 158, "vector > scalar"),
    (16384, 256, "bfloat16", "bwd"): ("48+1", 25.8, 251, 182, 419, "vector > GM-lat"),
    (1024, 4096, "float32", "fwd"): ("48", 34.3, 68, 45, 107, "DMA-bw > sync"),
    (1024, 4096, "float32", "bwd"): ("16+16", 51.1, 246, 174, 369, "DMA-bw > sync"),
    (8192, 4096, "float32", "fwd"): ("48", 269, 467, 293, 733, "sync > DMA-bw"),
    (8192, 4096, "float32", "bwd"): ("48+16", 408, 738, 516, 1103, "DMA-bw > sync"),
    (1024, 8192, "float32", "fwd"): ("48", 68.7, 94, 71, 134, "DMA-bw > sync"),
    (1024, 8192, "float32", "bwd"): ("16+32", 203, 863, 715, 1062, "DMA-bw > GM-lat"),
    (4096, 5120, "float32", "fwd"): ("48", 169, 266, 179, 403, "DMA-bw > sync"),
    (4096, 5120, "float32", "bwd"): ("48+20", 507, 1239, 985, 1631, "DMA-bw > GM-lat"),
    (32768, 128, "float32", "fwd"): ("48", 33.7, 145, 101, 234, "scalar > vector"),
    (32768, 128, "float32", "bwd"): ("48+1", 51.0, 409, 295, 683, "GM-lat > vector"),
    (16384, 256, "float32", "fwd"): ("48", 33.7, 97, 70, 156, "scalar > sync"),
    (16384, 256, "float32", "bwd"): ("48+1", 51.0, 271, 195, 436, "GM-lat > vector"),
}
TOLERANCE = 0.25

# The note's sensitivity runs: (rows, hidden, dtype, direction, cores, parameter, values, note µs per value)
SENSITIVITY = (
    (8192, 4096, "bfloat16", "fwd", 48, "s_flag_latency_us", (0, 0.1, 0.5, 1), (183, 199, 268, 355)),
    (8192, 4096, "bfloat16", "bwd", 48, "s_flag_latency_us", (0, 0.1, 0.5, 1), (373, 391, 468, 565)),
    (8192, 4096, "float32", "fwd", 48, "s_flag_latency_us", (0, 0.1, 0.5, 1), (297, 329, 467, 638)),
    (32768, 128, "bfloat16", "fwd", 48, "vec_latency_cycles", (0, 10, 20, 40), (116, 118, 158, 242)),
    (8192, 4096, "bfloat16", "fwd", 40, "cores", (40,), (302,)),
)


def old_source(out_dir: Path) -> Path:
    text = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{COMMIT}:ascend_rmsnorm/kernels/rmsnorm.asc"],
        check=True,
        capture_output=True,
    ).stdout
    path = out_dir / f"rmsnorm-{COMMIT}.asc"
    path.write_bytes(text)
    return path


def _mb_agrees(ours: float, note: float) -> bool:
    """The note prints 3 significant figures (1 decimal below 100 MB)."""
    return abs(ours - note) <= (0.05 if note < 100 else 0.5) + 1e-9


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help=f"the kernel source to model (default: git show {COMMIT}:...)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(args.source) if args.source else old_source(Path(tmp))
        kernel = pm.ModelKernel.from_source(source)
    print(f"kernel: {args.source or f'{COMMIT}:ascend_rmsnorm/kernels/rmsnorm.asc'} (ABI {kernel.abi}), 48 cores")
    head = (
        f"{'shape':<11} {'dtype':<8} {'dir':<4} {'blocks':>6}/{'note':<6} {'GM MB':>7}/{'note':<6} "
        f"{'base µs':>8} {'note':>6} {'ratio':>6}  {'opt':>5}/{'note':<5} {'pess':>5}/{'note':<5}  "
        f"{'dominant':<17} note"
    )
    print(head)
    print("-" * len(head))
    bad, ratios, dominant_same = [], [], 0
    for (rows, hidden, dtype, direction), (nblk, nmb, nbase, nopt, npess, ndom) in NOTE.items():
        case = (rows, hidden, dtype, direction)
        got = {p: pm.model(*case, cores=48, preset=p, kernel=kernel, ablate=p == "base") for p in pm.PRESETS}
        base = got["base"]
        blocks = "+".join(str(b) for b in base.launch_blocks)
        mb = base.gm_bytes / 1e6
        ratio = base.predicted_us / nbase
        ratios.append(ratio)
        dominant_same += base.dominant == ndom
        flags = []
        if blocks != nblk:
            flags.append("BLOCKS")
        if not _mb_agrees(mb, nmb):
            flags.append("GM")
        if abs(ratio - 1) > TOLERANCE:
            flags.append("TIME")
        if flags:
            bad.append((rows, hidden, dtype, direction, flags))
        print(
            f"{f'{rows}x{hidden}':<11} {dtype:<8} {direction:<4} {blocks:>6}/{nblk:<6} {mb:>7.1f}/{nmb:<6} "
            f"{base.predicted_us:>8.1f} {nbase:>6} {ratio:>6.3f}  {got['opt'].predicted_us:>5.0f}/{nopt:<5} "
            f"{got['pess'].predicted_us:>5.0f}/{npess:<5}  {base.dominant:<17} {ndom}"
            + (f"  <- {', '.join(flags)}" if flags else "")
        )
    lo, hi = min(ratios), max(ratios)
    print(f"\nbase µs ours/note: {lo:.3f} .. {hi:.3f} over {len(ratios)} cases (goal: within 1 +- {TOLERANCE})")
    print(f"dominant terms (first and second) as in the note: {dominant_same} of {len(ratios)}")
    print("\nsensitivity (the note's section of that name): ours / note µs")
    for rows, hidden, dtype, direction, cores, name, values, want in SENSITIVITY:
        cells = []
        for value, note_us in zip(values, want):
            if name == "cores":
                rec = pm.model(rows, hidden, dtype, direction, cores=int(value), kernel=kernel, ablate=False)
            else:
                params = pm.make_params("base", {name: value})
                rec = pm.model(rows, hidden, dtype, direction, cores=cores, params=params, kernel=kernel, ablate=False)
            ratio = rec.predicted_us / note_us
            if abs(ratio - 1) > TOLERANCE:
                bad.append((rows, hidden, dtype, direction, [f"{name}={value}"]))
            cells.append(f"{value}: {rec.predicted_us:.0f}/{note_us}")
        print(f"  {rows}x{hidden} {dtype} {direction} {name:<19} " + "  ".join(cells))
    if bad:
        print(f"{len(bad)} case(s) disagree: " + "; ".join(f"{r}x{h} {d} {di} {'/'.join(f)}" for r, h, d, di, f in bad))
        return 1
    print("all blocks and GM bytes agree with the note, and every base prediction is within +-25 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
