"""``ascend-rmsnorm bench``: forward and forward+backward times of the backends on this device.

On an NPU: the npu kernel, the torch path and ``torch_npu.npu_rms_norm`` (with its backward);
elsewhere: the torch path (and the emu kernel with ``--emu``) against ``F.rms_norm``. Each case
is warmed up, timed with the device synchronised around every repetition, and reported as the
median in µs, effective GB/s (bytes the op must move at least, over the time), % of the SoC's
peak HBM bandwidth where known, and speed-ups against the torch path.

Every implementation of this package is labelled ``ascend_rmsnorm (<backend>)``, so that its torch
path does not read as plain PyTorch beside ``F.rms_norm``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .._log import to_stderr
from ..backends import choice
from ..perf.soc import peak_for
from .calls import apply

#: How the bench and the notebook label this package's backends (the reference is TORCH_PATH).
TORCH_PATH = "ascend_rmsnorm (torch path)"
NPU_KERNEL = "ascend_rmsnorm (npu kernel)"
EMU_KERNEL = "ascend_rmsnorm (emu kernel)"

#: The shapes of the seed project's benchmark (T x H).
SHAPES = ((1024, 4096), (8192, 4096), (1024, 8192), (4096, 5120), (32768, 128), (16384, 256))
QUICK_SHAPES = ((1024, 4096), (32768, 128))


@dataclasses.dataclass
class Row:
    shape: str
    dtype: str
    mode: str
    impl: str
    us: float
    gbps: float
    peak_pct: float | None
    speedup_vs_torch_path: float | None


def _sync(device: torch.device) -> None:
    """Wait for `device` itself: without it both wait for the current device only."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def time_median(fn: Callable[[], object], device: torch.device, warmup: int, reps: int) -> float:
    """Median seconds of fn(), the device synchronised before and after each repetition."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bytes_moved(rows: int, hidden: int, dtype: torch.dtype, mode: str) -> int:
    """The least traffic: forward reads x, writes y and rstd; backward also reads dy, x, rstd, writes dx, dw."""
    s = torch.tensor([], dtype=dtype).element_size()
    fwd = 2 * rows * hidden * s + hidden * s + rows * 4
    bwd = 3 * rows * hidden * s + hidden * s * 2 + rows * 4
    return fwd if mode == "fwd" else fwd + bwd


def _contenders(device: torch.device, with_emu: bool) -> dict[str, Callable]:
    """name -> fn(x, w, eps) returning y with autograd; the reference entry is TORCH_PATH."""
    out: dict[str, Callable] = {}
    probe = torch.empty(1, 8, device=device)
    if device.type == "npu":
        npu = choice.resolve("npu", probe)
        out[NPU_KERNEL] = lambda x, w, eps, impl=npu: apply(impl, x, w, eps)
    out[TORCH_PATH] = lambda x, w, eps: apply(choice.resolve("torch", probe), x, w, eps)
    if with_emu and device.type == "cpu":
        emu = choice.resolve("emu", probe)
        out[EMU_KERNEL] = lambda x, w, eps, impl=emu: apply(impl, x, w, eps)
    if device.type == "npu":
        import torch_npu  # noqa: F401  (present: the tensor is on an NPU)

        out["torch_npu.npu_rms_norm"] = lambda x, w, eps: torch.ops.npu.npu_rms_norm(x, w, eps)[0]
    else:
        out["F.rms_norm"] = lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)
    return out


def run(
    device: torch.device,
    shapes=SHAPES,
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    modes=("fwd", "fwd+bwd"),
    warmup: int = 3,
    reps: int = 10,
    with_emu: bool = False,
    soc: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    peak, _ = peak_for(soc)
    contenders = _contenders(device, with_emu)
    rows_out: list[Row] = []
    total = len(shapes) * len(dtypes) * len(modes)
    done = 0
    for rows, hidden in shapes:
        for dtype in dtypes:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(rows, hidden, generator=g).to(dtype=dtype, device=device)
            w = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype=dtype, device=device)
            dy = torch.randn(rows, hidden, generator=g).to(dtype=dtype, device=device)
            for mode in modes:
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {rows}x{hidden} {str(dtype)[6:]} {mode}")
                results = {}
                for name, fn in contenders.items():
                    if mode == "fwd":

                        def step(fn=fn, x=x, w=w):
                            with torch.no_grad():
                                fn(x, w, 1e-6)

                    else:
                        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

                        def step(fn=fn, xg=xg, wg=wg, dy=dy):
                            torch.autograd.grad(fn(xg, wg, 1e-6), (xg, wg), dy)

                    results[name] = time_median(step, device, warmup, reps)
                nbytes = bytes_moved(rows, hidden, dtype, mode)
                for name, sec in results.items():
                    gbps = nbytes / sec / 1e9
                    rows_out.append(
                        Row(
                            f"{rows}x{hidden}",
                            str(dtype).replace("torch.", ""),
                            mode,
                            name,
                            round(sec * 1e6, 1),
                            float(f"{gbps:.3g}"),  # significant digits: a slow emu run is not 0 GB/s
                            round(100 * gbps / peak, 1) if peak else None,
                            round(results[TORCH_PATH] / sec, 2),
                        )
                    )
    return rows_out


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'shape':<11} {'dtype':<8} {'mode':<8} {'implementation':<28} "
        f"{'µs':>10} {'GB/s':>8} {'%peak':>6} {'vs torch path':>13}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        pct = f"{r.peak_pct:.1f}" if r.peak_pct is not None else "-"
        lines.append(
            f"{r.shape:<11} {r.dtype:<8} {r.mode:<8} {r.impl:<28} {r.us:>10.1f} {r.gbps:>8.1f} {pct:>6} "
            f"{r.speedup_vs_torch_path:>12.2f}x"
        )
    return "\n".join(lines)


def main(device: str | None, quick: bool, as_json: bool, with_emu: bool, soc: str | None = None, echo=print) -> int:
    import json

    from .device import check_device

    dev = torch.device(device or check_device(None, None))
    shapes = QUICK_SHAPES if quick else SHAPES
    dtypes = (torch.bfloat16,) if quick else (torch.bfloat16, torch.float16, torch.float32)
    warmup, reps = (1, 3) if quick else (3, 10)
    peak, source = peak_for(soc)

    def progress(msg: str) -> None:
        to_stderr(f"  bench {msg} ...")

    rows = run(dev, shapes, dtypes, warmup=warmup, reps=reps, with_emu=with_emu, soc=soc, progress=progress)
    if as_json:
        echo(
            json.dumps(
                {
                    "device": str(dev),
                    "soc": soc,
                    "peak_gbps": peak,
                    "peak_source": source,
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "rows": [dataclasses.asdict(r) for r in rows],
                },
                indent=2,
            )
        )
    else:
        echo(f"bench on {dev} (torch {torch.__version__}, {torch.get_num_threads()} threads)")
        echo(format_table(rows))
        echo(
            f"{TORCH_PATH} is this package's pure-PyTorch backend (the same bits as its kernels); "
            "F.rms_norm is PyTorch's own norm, which is not batch-invariant"
        )
        if peak:
            echo(f"% of peak: against {peak:.0f} GB/s ({source})")
        else:
            echo("% of peak: no HBM peak figure for this device")
    return 0
