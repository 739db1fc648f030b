"""On a CUDA GPU: does the torch path give the CPU's bits, and stay batch-invariant there?

docs/design.md §3 claims the contract uses only correctly rounded operations, so every device gives the
same bits. This script checks that claim on whatever CUDA GPU it runs on (CI has none, so it is
not a unit test): y, rstd, dx and dw computed on the GPU against the same computed on the CPU, bit
for bit, over dtypes and hidden sizes; bitwise invariance on the GPU (row prefixes and positions);
the same counter-example as on the CPU for PyTorch's own mean; and the torch path's cost on the
GPU against F.rms_norm, measured in the same run. Prints a report; --out writes it as JSON.

    PYTHONPATH=. python3 benchmarks/check_cuda_contract.py --out cuda_check.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.cli import selftest
from ascend_rmsnorm.cli.bench import time_median
from ascend_rmsnorm.cli.selftest import Runner, differing, inputs

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
HIDDEN = (1, 7, 100, 1000, 4095, 4096, 4097, 8192, 12288, 65536, 131072)


def run(x, w, dy, device):
    return Runner(torch_backend, device).run(x, w, dy)


def cross_device(device: torch.device) -> list[dict]:
    out = []
    for dtype in DTYPES:
        for hidden in HIDDEN:
            rows = 300 if hidden <= 12288 else 16
            x, w, dy = inputs(rows, hidden, dtype, seed=hidden)
            cpu = run(x, w, dy, torch.device("cpu"))
            gpu = run(x, w, dy, device)
            diffs = {n: differing(a, b) for n, a, b in zip(("y", "rstd", "dx", "dw"), gpu, cpu)}
            out.append({"dtype": str(dtype)[6:], "hidden": hidden, "rows": rows, "differing": diffs})
    return out


def invariance_on(device: torch.device) -> list[dict]:
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        for hidden in (128, 4096, 5000, 65536):
            rows = 300 if hidden <= 5000 else 64
            x, w, dy = inputs(rows, hidden, dtype, seed=7)
            full = run(x, w, dy, device)
            bad = []
            for n in (1, 2, 7, 63, 64, rows - 1):
                part = run(x[:n], w, dy[:n], device)
                bad += [f"{name}[:{n}]" for name, a, b in zip(("y", "rstd", "dx"), part, full) if differing(a, b[:n])]
            for pos in (0, rows // 2, rows - 1):
                xs, dys = x.clone(), dy.clone()
                xs[pos], dys[pos] = x[0], dy[0]
                one, batch = run(x[:1], w, dy[:1], device), run(xs, w, dys, device)
                bad += [
                    f"{name}@{pos}" for name, a, b in zip(("y", "rstd", "dx"), one, batch) if differing(a[0], b[pos])
                ]
            out.append({"dtype": str(dtype)[6:], "hidden": hidden, "rows": rows, "differs": bad})
    return out


def plain_mean_counterexample(device: torch.device) -> dict:
    """PyTorch's own x.pow(2).mean(-1) of one long row, alone vs inside a batch, on this device."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(64, 1 << 17, generator=g).to(device)
    batched = x.pow(2).mean(-1)
    alone = torch.cat([x[i : i + 1].pow(2).mean(-1) for i in range(64)])
    ours_b = torch_backend.forward(x, None, 1e-6)[1].reshape(-1)
    ours_a = torch.cat([torch_backend.forward(x[i : i + 1], None, 1e-6)[1].reshape(-1) for i in range(64)])
    return {
        "rows": 64,
        "hidden": 1 << 17,
        "torch_mean_rows_that_change": differing(batched, alone),
        "ascend_rmsnorm_rows_that_change": differing(ours_b, ours_a),
    }


def timing(device: torch.device) -> list[dict]:
    def median_us(fn):
        return time_median(fn, device, warmup=5, reps=50) * 1e6

    out = []
    for rows, hidden in ((4096, 4096), (1, 32), (16384, 256)):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(rows, hidden, device=device).to(dtype)
            w = torch.randn(hidden, device=device).to(dtype)
            ours = median_us(lambda x=x, w=w: torch_backend.forward(x, w, 1e-6))
            theirs = median_us(lambda x=x, w=w, h=hidden: F.rms_norm(x, (h,), w, 1e-6))
            out.append(
                {
                    "shape": f"{rows}x{hidden}",
                    "dtype": str(dtype)[6:],
                    "torch_path_us": round(ours, 1),
                    "F_rms_norm_us": round(theirs, 1),
                    "cost_ratio": round(ours / theirs, 2),
                }
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the report as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    device = torch.device("cuda")
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    t0 = time.perf_counter()
    report["cross_device"] = cross_device(device)
    report["invariance"] = invariance_on(device)
    report["plain_mean"] = plain_mean_counterexample(device)
    checks = selftest.run_checks(torch_backend, device, hidden_sizes=(128, 4096, 5000))
    report["selftest"] = [{"name": c.name, "dtype": c.dtype, "passed": c.passed, "detail": c.detail} for c in checks]
    report["timing"] = timing(device)
    report["seconds"] = round(time.perf_counter() - t0, 1)

    bad_cross = [c for c in report["cross_device"] if any(c["differing"].values())]
    bad_inv = [c for c in report["invariance"] if c["differs"]]
    print(f"{report['device']}, torch {report['torch']}")
    print(
        f"cross-device (GPU vs CPU, y/rstd/dx/dw): {len(report['cross_device']) - len(bad_cross)} of "
        f"{len(report['cross_device'])} cases bit-identical"
    )
    for c in bad_cross:
        print(f"  differs: {c}")
    print(
        f"invariance on the GPU: {len(report['invariance']) - len(bad_inv)} of {len(report['invariance'])} cases clean"
    )
    for c in bad_inv:
        print(f"  differs: {c}")
    print(f"plain torch mean on the GPU, rows of 2^17: {report['plain_mean']}")
    print(f"selftest --backend torch on cuda: {sum(c.passed for c in checks)} of {len(checks)} passed")
    for t in report["timing"]:
        print(f"  {t}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if not bad_cross and not bad_inv and all(c.passed for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
