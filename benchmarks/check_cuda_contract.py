"""On a CUDA GPU: does the torch path give the CPU's bits, and stay batch-invariant there?

docs/design.md §3 claims the contract uses only correctly rounded operations, so every device gives the
same bits. This script checks that claim on whatever CUDA GPU it runs on (CI has none, so it is
not a unit test): y, rstd, dx and dw computed on the GPU against the same computed on the CPU, bit
for bit, over dtypes and hidden sizes; the same for every casting mode, an offset, no weight, a weight
of another dtype, the residual variant (residual_out, and dx with the residual's gradient) and the
edge-value probes, at row counts that take the CPU's host-side paths (at most 4 rows) as well as its
tensor path; bitwise invariance on the GPU (row prefixes and positions); torch.compile's bits against
eager ones on the GPU (Inductor, and mode="reduce-overhead"); that a torch.cuda.graph capture of the
torch path works and replays with eager's bits, Inf/NaN rows included; the same counter-example as on
the CPU for PyTorch's own mean; and the torch path's cost on the GPU against F.rms_norm, measured in
the same run. Prints a report; --out writes it as JSON.

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
from ascend_rmsnorm.cli.selftest import PROBE_HINTS, Runner, differing, inputs, probe_inputs

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


#: (casting_mode, offset, weight dtype or None for no weight or "x" for x's dtype) the variants run.
VARIANTS = (
    ("fp32", 0.0, "x"),
    ("llama", 0.0, "x"),
    ("llama", 0.0, torch.float32),  # bf16/fp16 x with an fp32 weight: y is float32
    ("gemma", 1.0, "x"),
    ("fp32", 0.5, torch.float64),  # a weight widened by RNE from float64, plus an offset
    ("fp32", 0.0, None),
)


def _variant_run(x, w, dy, r, mode, offset, device, eps=1e-6):
    """y, rstd, residual_out, dx (with the residual's gradient) and dw of one variant, on the CPU."""
    xd, dyd, rd = (t.to(device) for t in (x, dy, r))
    wd = None if w is None else w.to(device)
    y, rstd, r_out = torch_backend.forward(xd, wd, eps, casting_mode=mode, offset=offset, residual=rd)
    dx, dw = torch_backend.backward(dyd, r_out, wd, rstd, casting_mode=mode, offset=offset, grad_residual=rd)
    outs = (y, rstd.reshape(-1), r_out, dx) + ((dw,) if dw is not None else ())
    return tuple(t.cpu() for t in outs)


def modes_cross_device(device: torch.device) -> list[dict]:
    """Every casting mode, offset, weight kind and the residual variant, GPU against CPU, bit for bit,
    on ordinary inputs (3 rows, which the CPU computes on the host, and 65, tensor ops there) and on
    the edge-value probes (subnormals, Inf/NaN, overflow: what FTZ/DAZ or saturating casts would change)."""
    names = ("y", "rstd", "residual_out", "dx", "dw")
    out = []
    for dtype in DTYPES:
        for mode, offset, wkind in VARIANTS:
            cases = []
            for rows, hidden in ((3, 64), (3, 5000), (65, 5000)):
                x, w, dy = inputs(rows, hidden, dtype, seed=rows + hidden)
                cases.append((f"{rows}x{hidden}", x, w, dy, 1e-6, dy.flip(0) * 0.5))
            for kind in PROBE_HINTS:  # a zero residual, which keeps the probe's values in residual_out
                x, w, dy, eps, _ = probe_inputs(kind, dtype)
                cases.append((f"probe {kind}", x, w, dy, eps, torch.zeros_like(x)))
            for label, x, w, dy, eps, r in cases:
                weight = None if wkind is None else w.to(dtype if wkind == "x" else wkind)
                cpu = _variant_run(x, weight, dy, r, mode, offset, torch.device("cpu"), eps)
                gpu = _variant_run(x, weight, dy, r, mode, offset, device, eps)
                diffs = {n: differing(a, b) for n, a, b in zip(names, gpu, cpu)}
                out.append({
                    "dtype": str(dtype)[6:], "mode": mode, "offset": offset,
                    "weight": "none" if wkind is None else str(weight.dtype)[6:], "case": label, "differing": diffs,
                })  # fmt: skip
    return out


def compiled_vs_eager(device: torch.device) -> list[dict]:
    """torch.compile of the public functions, forward and backward, against eager, bit for bit
    (Inductor must keep the ops opaque on this device too), then mode="reduce-overhead" (CUDA graphs
    that capture the ops, which read nothing back to the host): its bits, or the error it raised. Inductor
    does not raise where it declines to make a CUDA graph (a CPU tensor, a mutated input, an op it deems
    unsafe): it logs, counts the skip and runs the graph as default would, with the same bits. So a
    reduce-overhead run that skipped a CUDA graph is reported as such (``cudagraph_skips``), not clean."""
    from torch._dynamo.utils import counters

    import ascend_rmsnorm

    def step(x, r, w):
        y, r_out = ascend_rmsnorm.add_rms_norm(x, r, w, 1e-6, casting_mode="llama")
        z = ascend_rmsnorm.rms_norm(y * 2, w, 1e-6)
        return z, r_out

    def run(fn, x, r, w, dz):
        leaves = [t.detach().clone().requires_grad_() for t in (x, r, w)]
        z, r_out = fn(*leaves)
        (z.float() * dz.float()).sum().add_(r_out.float().sum()).backward()
        return (z.detach(), r_out.detach()) + tuple(t.grad for t in leaves)

    out = []
    for dtype in (torch.float32, torch.bfloat16):
        x, w, dz = (t.to(device) for t in inputs(64, 4096, dtype, seed=5))
        r = dz.flip(0)
        eager = run(step, x, r, w, dz)
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            skips = counters["inductor"]["cudagraph_skips"]
            try:
                compiled = torch.compile(step, mode=mode)
                got = [run(compiled, x, r, w, dz) for _ in range(3)][-1]  # reduce-overhead records on a later call
                result = {n: differing(a, b) for n, a, b in zip(("z", "r_out", "dx", "dr", "dw"), got, eager)}
                if mode == "reduce-overhead":  # forward and backward graphs: each one skipped counts
                    result["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips
            except Exception as err:  # noqa: BLE001 (reported, not hidden)
                result = {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
            out.append({"dtype": str(dtype)[6:], "mode": mode, "result": result})
    torch._dynamo.reset()
    return out


def compile_case_failed(case: dict) -> bool:
    """Whether a ``compiled_vs_eager`` case fails: an error, a differing output, or a skipped CUDA graph."""
    return "error" in case["result"] or any(case["result"].values())


def _graph(step, device: torch.device):
    """(outputs, replay) of ``step`` captured in a CUDA graph, after a warm-up call on a side stream (as
    torch.cuda.graph asks; the torch path makes its constants there). Off CUDA (a dry run of this script)
    a stand-in: replay reruns ``step`` into the same outputs."""
    if device.type != "cuda":
        static = step()
        return static, lambda: [static[k].copy_(v) for k, v in step().items()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    return static, graph.replay


def cuda_graph_capture(device: torch.device) -> list[dict]:
    """A torch.cuda.graph capture of the torch path per dtype, at 4 rows (the CPU's host paths) and 65:
    forward (eps = 0), add_rms_norm in the llama mode and its backward (dx with the residual's gradient,
    dw). It must capture (off the CPU the path reads nothing back to the host), and each replay must give
    eager's bits: on the inputs it was captured with, then with +inf, NaN, overflowing and zero rows
    (eps = 0: rstd NaN) written into them, whose fix-ups the captured call must run too."""
    out = []
    for dtype in DTYPES:
        for rows in (4, 65):
            x, w, dy = (t.to(device) for t in inputs(rows, 1024, dtype, seed=9))
            r = (dy.flip(0) * 0.5).to(dtype)

            def step(x=x, w=w, dy=dy, r=r):
                y0, rstd0, _ = torch_backend.forward(x, w, 0.0)
                y, rstd, r_out = torch_backend.forward(x, w, 1e-6, casting_mode="llama", residual=r)
                dx, dw = torch_backend.backward(dy, r_out, w, rstd, casting_mode="llama", grad_residual=r)
                return {"y eps=0": y0, "rstd eps=0": rstd0, "y": y, "rstd": rstd, "residual_out": r_out,
                        "dx": dx, "dw": dw}  # fmt: skip

            case = {"dtype": str(dtype)[6:], "rows": rows}
            try:
                static, replay = _graph(step, device)
            except Exception as err:  # noqa: BLE001 (reported)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                out.append({**case, "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"})
                continue
            for label in ("as captured", "Inf/NaN/overflow/zero rows"):
                if label != "as captured":
                    x[0, 3], x[1, 5] = float("inf"), float("nan")
                    x[2] = 3e19 if dtype != torch.float16 else torch.finfo(dtype).max
                    x[-1] = 0.0
                replay()
                want = step()
                diffs = {k: differing(static[k], v) for k, v in want.items()}
                out.append({**case, "inputs": label, "differing": diffs})
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
    report["modes"] = modes_cross_device(device)
    report["invariance"] = invariance_on(device)
    report["compile"] = compiled_vs_eager(device)
    report["cuda_graph"] = cuda_graph_capture(device)
    report["plain_mean"] = plain_mean_counterexample(device)
    checks = selftest.run_checks(torch_backend, device, hidden_sizes=(128, 4096, 5000))
    report["selftest"] = [{"name": c.name, "dtype": c.dtype, "passed": c.passed, "detail": c.detail} for c in checks]
    report["timing"] = timing(device)
    report["seconds"] = round(time.perf_counter() - t0, 1)

    bad_cross = [c for c in report["cross_device"] if any(c["differing"].values())]
    bad_inv = [c for c in report["invariance"] if c["differs"]]
    bad_modes = [c for c in report["modes"] if any(c["differing"].values())]
    bad_compile = [c for c in report["compile"] if compile_case_failed(c)]
    bad_graph = [c for c in report["cuda_graph"] if "error" in c or any(c["differing"].values())]
    print(f"{report['device']}, torch {report['torch']}")
    print(
        f"cross-device (GPU vs CPU, y/rstd/dx/dw): {len(report['cross_device']) - len(bad_cross)} of "
        f"{len(report['cross_device'])} cases bit-identical"
    )
    for c in bad_cross:
        print(f"  differs: {c}")
    print(
        f"modes, residual, probes (GPU vs CPU): {len(report['modes']) - len(bad_modes)} of "
        f"{len(report['modes'])} cases bit-identical"
    )
    for c in bad_modes:
        print(f"  differs: {c}")
    print(
        f"invariance on the GPU: {len(report['invariance']) - len(bad_inv)} of {len(report['invariance'])} cases clean"
    )
    for c in bad_inv:
        print(f"  differs: {c}")
    n_compile = len(report["compile"])
    print(f"torch.compile vs eager on the GPU: {n_compile - len(bad_compile)} of {n_compile} clean")
    for c in bad_compile:
        print(f"  {c}")
    n_graph = len(report["cuda_graph"])
    print(f"torch.cuda.graph capture and replay vs eager on the GPU: {n_graph - len(bad_graph)} of {n_graph} clean")
    for c in bad_graph:
        print(f"  {c}")
    print(f"plain torch mean on the GPU, rows of 2^17: {report['plain_mean']}")
    print(f"selftest --backend torch on cuda: {sum(c.passed for c in checks)} of {len(checks)} passed")
    for t in report["timing"]:
        print(f"  {t}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    clean = not (bad_cross or bad_modes or bad_inv or bad_compile or bad_graph)
    return 0 if clean and all(c.passed for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
