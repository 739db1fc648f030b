"""The torch path's cost as a ratio to torch.nn.functional.rms_norm, measured in the same run.

Goals: throughput >= 0.8x F.rms_norm at 4096x4096; per-call cost at 1x32 <= 5x F.rms_norm.
Timings interleave the two functions round by round and report medians, so a noisy machine
moves both sides alike. Prints one line per case; exit status is always 0 (this is a report).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import ascend_rmsnorm

CASES = ((4096, 4096), (1, 32))


def _time_once(fn, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def compare(fn_a, fn_b, rounds: int, inner: int) -> tuple[float, float]:
    """Median seconds per call of fn_a and fn_b, measured alternately."""
    for _ in range(2):
        fn_a()
        fn_b()
    a, b = [], []
    for _ in range(rounds):
        a.append(_time_once(fn_a, inner))
        b.append(_time_once(fn_b, inner))
    return statistics.median(a), statistics.median(b)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--grad", action="store_true", help="time forward+backward instead of forward")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ascend_rmsnorm {ascend_rmsnorm.__version__}")
    for dtype in (torch.float32, torch.bfloat16):
        for rows, hidden in CASES:
            x = torch.randn(rows, hidden, dtype=dtype, requires_grad=args.grad)
            w = torch.randn(hidden, dtype=dtype, requires_grad=args.grad)
            dy = torch.randn(rows, hidden, dtype=dtype)

            def ours(x=x, w=w, dy=dy):
                y = ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="torch")
                if args.grad:
                    torch.autograd.grad(y, (x, w), dy)

            def theirs(x=x, w=w, dy=dy, hidden=hidden):
                y = F.rms_norm(x, (hidden,), w, 1e-6)
                if args.grad:
                    torch.autograd.grad(y, (x, w), dy)

            inner = 1 if rows * hidden >= 1 << 20 else 2000
            t_ours, t_theirs = compare(ours, theirs, args.rounds, inner)
            what = "fwd+bwd" if args.grad else "fwd"
            print(
                f"{str(dtype).replace('torch.', ''):9s} {rows:5d}x{hidden:<5d} {what:7s} "
                f"ours {t_ours * 1e6:10.1f} us   F.rms_norm {t_theirs * 1e6:10.1f} us   "
                f"throughput ratio {t_theirs / t_ours:5.2f}x   cost ratio {t_ours / t_theirs:5.2f}x"
            )


if __name__ == "__main__":
    main()
