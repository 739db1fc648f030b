"""The op layer's cost, as ratios to torch.nn.functional.rms_norm measured in the same run.

Goals:
- eager per-call cost at 1x32: torch path <= 5x F.rms_norm, emu kernel path <= 1.5x (its host side: the
  call minus the time inside the emulated launch, which an NPU runs asynchronously);
- the first torch.compile of forward + backward at 300x4096 bf16 <= 3x F.rms_norm's;
- throughput at 4096x4096 fp32 and bf16 >= 0.8x F.rms_norm (CPU).

Also printed: what the layers above the backends cost (the public call minus a direct backend call),
and the per-call cost of the registration mechanisms themselves on an op with a trivial body
(``torch.library.Library`` + ``impl`` with this package's Autograd kernel, the same with
``torch.library.register_autograd``, and ``torch.library.custom_op``), which is how _ops.py chose.
Timings interleave the contenders round by round and report medians, so a noisy machine moves all
of them alike. First compiles run in fresh subprocesses with an empty Inductor cache (set up on another graph first).
Exit status is always 0 (this is a report).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import ascend_rmsnorm
from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.backends import torch as torch_backend


def _time_once(fn, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def compare(fns: dict, rounds: int, inner: int) -> dict:
    """Median seconds per call of each fn, measured alternately round by round."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_time_once(fn, inner))
    return {name: statistics.median(t) for name, t in times.items()}


def _line(what: str, t: dict, base: str = "F.rms_norm") -> None:
    parts = [f"{name} {sec * 1e6:9.1f} us ({sec / t[base]:4.2f}x)" for name, sec in t.items() if name != base]
    print(f"{what:28s} {base} {t[base] * 1e6:8.1f} us | " + " | ".join(parts))


def emu_host_side(fn, base, rounds: int, inner: int) -> tuple[float, float]:
    """(seconds, ratio to ``base``) per call of ``fn`` (an emu-backend call) spent outside the emulated
    kernel launch: the host-side work an NPU call pays too (checks, dispatch, allocation, the ctypes call,
    the launcher's planning), without the CPU emulation of the device's work. ``base`` is timed in the
    same rounds; the medians of the per-round values are returned."""
    for _ in range(3):
        fn()
        base()
    secs, ratios = [], []
    for _ in range(rounds):
        t_base = _time_once(base, inner)
        dev0, t0 = emu.device_ns(), time.perf_counter()
        for _ in range(inner):
            fn()
        host = (time.perf_counter() - t0 - (emu.device_ns() - dev0) * 1e-9) / inner
        secs.append(host)
        ratios.append(host / t_base)
    return statistics.median(secs), statistics.median(ratios)


def per_call(rounds: int, with_emu: bool) -> None:
    """Eager cost of one small call (1x32), forward without autograd and forward+backward."""
    for dtype in (torch.float32, torch.bfloat16):
        _per_call(dtype, rounds, with_emu)


def _per_call(dtype: torch.dtype, rounds: int, with_emu: bool) -> None:
    x = torch.randn(1, 32, dtype=dtype)
    w = torch.randn(32, dtype=dtype)
    fns = {
        "F.rms_norm": lambda: F.rms_norm(x, (32,), w, 1e-6),
        "torch path": lambda: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="torch"),
        "reference.forward": lambda: torch_backend.forward(x, w, 1e-6),
    }
    if with_emu:
        fns["emu path"] = lambda: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="emu")
        fns["emu.forward"] = lambda: emu.BACKEND.forward(x, w, 1e-6)
    t = compare(fns, rounds, 2000)
    _line(f"1x32 {str(dtype)[6:]} fwd", t)
    if with_emu:
        host, ratio = emu_host_side(
            lambda: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="emu"), fns["F.rms_norm"], rounds, 2000
        )
        print(
            f"{'':28s} emu path, host side {host * 1e6:8.1f} us ({ratio:4.2f}x F.rms_norm in the same rounds): the "
            "call minus the time inside the emulated launch (what an NPU runs asynchronously); goal <= 1.5x"
        )

    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = torch.randn_like(x)

    def grad_of(fn):
        return lambda: torch.autograd.grad(fn(xg, wg), (xg, wg), dy)

    fns = {
        "F.rms_norm": grad_of(lambda a, b: F.rms_norm(a, (32,), b, 1e-6)),
        "torch path": grad_of(lambda a, b: ascend_rmsnorm.rms_norm(a, b, 1e-6, backend="torch")),
    }
    if with_emu:
        fns["emu path"] = grad_of(lambda a, b: ascend_rmsnorm.rms_norm(a, b, 1e-6, backend="emu"))
    _line(f"1x32 {str(dtype)[6:]} fwd+bwd", compare(fns, rounds, 500))


def mechanisms(rounds: int) -> None:
    """Per-call cost of three ways to register an op with autograd, on a trivial body (no grad)."""
    from torch.library import Library

    from ascend_rmsnorm import _ops

    lib = Library("ascend_rmsnorm_bench", "FRAGMENT")
    schema = "(Tensor x, Tensor? w, float eps) -> (Tensor, Tensor)"
    empty = torch.empty(0)

    def body(x, w, eps):
        return torch.empty_like(x), empty

    for name in ("lean", "registered"):
        lib.define(name + schema)
        lib.impl(name, body, "CPU")
    lean = torch.ops.ascend_rmsnorm_bench.lean.default
    after = torch._C._after_autograd_keyset

    def lean_autograd(keyset, x, w, eps):  # the shape of _ops._rms_norm_autograd
        if _ops._autograd_wanted(x, w):
            raise AssertionError("not timed")
        return lean.redispatch(keyset & after, x, w, eps)

    lib.impl("lean", lean_autograd, "Autograd", with_keyset=True)
    torch.library.register_autograd(
        "ascend_rmsnorm_bench::registered", lambda ctx, a, b: (a, None, None), setup_context=lambda *a: None, lib=lib
    )

    @torch.library.custom_op("ascend_rmsnorm_bench::decorated", mutates_args=())
    def decorated(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(x), empty

    decorated.register_autograd(lambda ctx, a, b: (a, None, None), setup_context=lambda *a: None)
    x, w = torch.randn(1, 32), torch.randn(32)
    registered = torch.ops.ascend_rmsnorm_bench.registered.default
    fns = {
        "body": lambda: body(x, w, 1e-6),
        "Library+own Autograd kernel": lambda: lean(x, w, 1e-6),
        "Library+register_autograd": lambda: registered(x, w, 1e-6),
        "custom_op": lambda: decorated(x, w, 1e-6),
    }
    _line("registration (trivial body)", compare(fns, rounds, 2000), base="body")


def throughput(rounds: int) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        _throughput(dtype, rounds)


def _throughput(dtype: torch.dtype, rounds: int) -> None:
    x = torch.randn(4096, 4096, dtype=dtype)
    w = torch.randn(4096, dtype=dtype)
    t = compare(
        {
            "F.rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-6),
            "torch path": lambda: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="torch"),
        },
        rounds,
        1,
    )
    print(
        f"{'4096x4096 ' + str(dtype)[6:] + ' fwd':28s} F.rms_norm {t['F.rms_norm'] * 1e3:8.2f} ms | torch path "
        f"{t['torch path'] * 1e3:8.2f} ms: throughput {t['F.rms_norm'] / t['torch path']:4.2f}x F.rms_norm"
    )


_COMPILE_CHILD = r"""
import json, sys, time, torch, torch.nn.functional as F
which = sys.argv[1]
import ascend_rmsnorm
x = torch.randn(300, 4096, dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(4096, dtype=torch.bfloat16, requires_grad=True)
if which == "ours":
    fn = lambda x, w: ascend_rmsnorm.rms_norm(x, w, 1e-6, backend="torch")
else:
    fn = lambda x, w: F.rms_norm(x, (4096,), w, 1e-6)
# Pay Inductor's one-time set-up in this fresh cache (its C++ toolchain checks) on an unrelated graph
warm_x = torch.randn(8, 8, requires_grad=True)
torch.compile(lambda a: (a * 3 + 1).sin(), fullgraph=True)(warm_x).sum().backward()
cf = torch.compile(fn, fullgraph=True)
t0 = time.perf_counter()
y = cf(x, w)
t1 = time.perf_counter()
y.float().sum().backward()
t2 = time.perf_counter()
print(json.dumps({"fwd": t1 - t0, "bwd": t2 - t1}))
"""


def first_compile() -> None:
    """First torch.compile of forward + backward, 300x4096 bf16: a fresh process and Inductor cache each,
    whose one-time set-up is paid on an unrelated graph first (else F.rms_norm, compiled to C++, would
    pay it and our op, an extern call, would not)."""
    out = {}
    for which in ("F.rms_norm", "ours"):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0")
            proc = subprocess.run(
                [sys.executable, "-c", _COMPILE_CHILD, which], capture_output=True, text=True, env=env, check=False
            )
        if proc.returncode != 0:
            print(f"first compile ({which}) failed:\n{proc.stderr[-2000:]}")
            return
        out[which] = json.loads(proc.stdout.strip().splitlines()[-1])
    theirs, ours = out["F.rms_norm"], out["ours"]
    total_t, total_o = theirs["fwd"] + theirs["bwd"], ours["fwd"] + ours["bwd"]
    print(
        f"{'first compile 300x4096 bf16':28s} F.rms_norm {theirs['fwd']:.2f} s + {theirs['bwd']:.2f} s | torch path "
        f"{ours['fwd']:.2f} s + {ours['bwd']:.2f} s: {total_o / total_t:4.2f}x F.rms_norm"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-emu", action="store_true", help="skip the emu kernel path (builds it otherwise)")
    parser.add_argument("--no-compile", action="store_true", help="skip the first-compile measurement")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ascend_rmsnorm {ascend_rmsnorm.__version__}")
    per_call(args.rounds, not args.no_emu)
    mechanisms(args.rounds)
    throughput(max(5, args.rounds // 3))
    if not args.no_compile:
        first_compile()


if __name__ == "__main__":
    main()
