"""``ascend-rmsnorm selftest``: accuracy and bitwise batch invariance of one backend on one device.

Checks, per dtype:
- contract: the backend's y, rstd, dx and dw equal, bit for bit, the torch path computed on the
  CPU from the same inputs (on an NPU this is the cross-device agreement the contract promises);
- accuracy: y and dx against a float64 textbook RMSNorm, within the dtype's rounding;
- invariance: the same rows give the same bits in row prefixes of 1..300, at any position in
  the batch, and as [B, S, H] vs [B*S, H] (y, rstd, dx); dw is the same on a second run;
- probes of what hardware may do differently from the contract, each its own line, each the
  backend's bits against the CPU torch path: subnormal inputs (x*x below 2**-126, and inputs that are
  subnormal in their own dtype: a vector unit may flush them to zero), Inf/NaN rows (the A2/A3
  saturation mode of casts turns inf into +-max and NaN into 0), and rows whose sum of squares or
  output overflows;
- on an NPU, its own line for the device's float overflow mode: saturation fails it (the Inf/NaN rules
  cannot hold there), INF/NaN passes, a mode that cannot be read is a SKIP (not a pass).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from .._log import to_stderr
from ..backends import choice
from ..backends import torch as torch_backend
from ..contract import SUPPORTED_DTYPES
from .calls import apply

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
#: Relative error allowed against float64, per output dtype (a few units in the last place).
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2**-7, torch.float16: 2**-9}
PREFIXES = (1, 2, 7, 64, 255, 256, 300)


@dataclasses.dataclass
class Check:
    name: str
    dtype: str
    passed: bool | None  # None: could not be checked here (SKIP; neither a pass nor a failure)
    detail: str


def inputs(rows: int, hidden: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (rows scaled from 1e-2 to 1e2), w and dy for a check, made on the CPU from a seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g) * torch.logspace(-2, 2, rows).unsqueeze(-1)
    w = 1.0 + 0.25 * torch.randn(hidden, generator=g)
    dy = torch.randn(rows, hidden, generator=g)
    return x.to(dtype), w.to(dtype), dy.to(dtype)


def _raw_bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many elements of a and b (same shape) differ in their bits."""
    return int((_raw_bits(a) != _raw_bits(b)).sum())


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_raw_bits(a), _raw_bits(b))


class Runner:
    """Forward and backward of one backend on one device, results on the CPU."""

    def __init__(self, impl, device: torch.device) -> None:
        self.impl, self.device = impl, device

    def run(self, x, w, dy, eps=1e-6):
        xd, wd, dyd = (t.to(self.device) for t in (x, w, dy))
        y, rstd, _ = self.impl.forward(xd, wd, eps)
        dx, dw = self.impl.backward(dyd, xd, wd, rstd)
        return y.cpu(), rstd.reshape(-1).cpu(), dx.cpu(), dw.cpu()

    def forward_nd(self, x, w, eps=1e-6):
        """y through the public entry's shape handling (leading dims flattened), on the CPU."""
        return apply(self.impl, x.to(self.device), w.to(self.device), eps).cpu()


def _cpu_reference(x, w, dy, eps=1e-6):
    """y, rstd, dx, dw of the torch path on the CPU: what the contract says every backend gives."""
    y, rstd, _ = torch_backend.forward(x, w, eps)
    dx, dw = torch_backend.backward(dy, x, w, rstd)
    return y, rstd.reshape(-1), dx, dw


def _contract(r: Runner, dtype, hidden) -> Check:
    x, w, dy = inputs(65, hidden, dtype, seed=1)
    got = r.run(x, w, dy)
    want = _cpu_reference(x, w, dy)
    bad = [
        f"{n}: {differing(a, b)} differ" for n, a, b in zip(("y", "rstd", "dx", "dw"), got, want) if not same_bits(a, b)
    ]
    detail = "y, rstd, dx, dw equal the CPU torch path bit for bit" if not bad else "; ".join(bad)
    return Check(f"contract (H={hidden})", DTYPE_NAMES[dtype], not bad, detail)


#: Hidden size of the probes: two tiles (4096 + 904), so a special value meets the tile partial sum too.
PROBE_HIDDEN = 5000

#: What hardware may do to each probe's rows, said next to a difference.
PROBE_HINTS = {
    "subnormal inputs": "a vector unit that flushes subnormals to zero gives such differences",
    "Inf/NaN rows": "the A2/A3 saturation mode of casts (inf -> +-max, NaN -> 0) gives such differences",
    "overflowing rows": "saturating casts or a different overflow order give such differences",
}


def probe_inputs(kind: str, dtype: torch.dtype, hidden: int = PROBE_HIDDEN):
    """(x, w, dy, eps, row labels) for one probe, made on the CPU. Ordinary rows sit among the special
    ones, so a probe also shows that a special row does not leak into its neighbours."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, hidden, generator=g)
    w = 1.0 + 0.25 * torch.randn(hidden, generator=g)
    dy = torch.randn(6, hidden, generator=g)
    info = torch.finfo(dtype)
    eps = 1e-6
    if kind == "subnormal inputs":
        eps = 0.0  # an eps would hide the sum of squares: a = ms + eps
        if dtype == torch.float16:
            tiny = 2.0**-20  # fp16's own subnormals (below 2**-14); their squares are normal in fp32
            labels = ["fp16-subnormal row", "ordinary", "fp16-subnormals beside a normal value", "zeros (a = 0)"]
        else:
            tiny = 2.0**-70  # x normal, x*x (about 2**-140) subnormal in fp32
            labels = ["x*x subnormal", "ordinary", "subnormal inputs beside a normal value", "zeros (a = 0)"]
        x[0] *= tiny
        x[2] *= 2.0**-130 if dtype != torch.float16 else tiny
        x[2, ::7] = 1.0
        x[3] = 0.0
        x, dy = x[:4], dy[:4]
    elif kind == "Inf/NaN rows":
        x[0, 3] = float("inf")
        x[1, 4100] = float("-inf")  # in the second tile
        x[2, 0] = float("nan")
        x[3, 10], x[3, 20] = float("inf"), float("-inf")
        labels = ["+inf", "-inf in tile 2", "NaN", "+inf and -inf", "ordinary", "ordinary"]
    elif kind == "overflowing rows":
        if dtype == torch.float16:
            x[0] = info.max  # 65504**2 * H stays finite in fp32: fp16 rows cannot overflow the sum
        else:
            x[0, :2] = torch.tensor([1e20, -2e20])  # the sum of squares overflows fp32
            x[1] = 3e19  # every square is finite, their sum is not
        x[2] = 0.0
        x[2, 0] = 1.0  # y[2, 0] = sqrt(H) * w[0], beyond the dtype's range:
        w[0] = float(info.max) / 2
        labels = ["sum of squares overflows", "sum overflows in the tree", "y beyond the dtype", "ordinary"]
        x, dy = x[:4], dy[:4]
        if dtype == torch.float16:
            labels[0], labels[1] = "fp16 max in every element", "ordinary"
    else:
        raise ValueError(f"unknown probe {kind!r}")
    return x.to(dtype), w.to(dtype), dy.to(dtype), eps, labels


def _first_difference(a: torch.Tensor, b: torch.Tensor, labels) -> str:
    ia, ib = _raw_bits(a), _raw_bits(b)
    where = (ia != ib).nonzero()[0].tolist()
    width = 8 if a.dtype == torch.float32 else 4
    mask = (1 << (4 * width)) - 1
    row = f" ({labels[where[0]]})" if a.dim() == 2 and where[0] < len(labels) else ""
    at = ",".join(str(i) for i in where)
    return f"first at [{at}]{row}: {int(ia[tuple(where)]) & mask:0{width}x} vs {int(ib[tuple(where)]) & mask:0{width}x}"


def _probe(r: Runner, dtype, kind: str) -> Check:
    x, w, dy, eps, labels = probe_inputs(kind, dtype)
    got = r.run(x, w, dy, eps)
    want = _cpu_reference(x, w, dy, eps)
    bad = []
    for name, a, b in zip(("y", "rstd", "dx", "dw"), got, want):
        if not same_bits(a, b):
            shape_ok = a.shape == b.shape and a.dtype == b.dtype
            bad.append(f"{name}: {differing(a, b)} differ, {_first_difference(a, b, labels)}" if shape_ok else name)
    if not bad:
        detail = "y, rstd, dx, dw equal the CPU torch path bit for bit"
    else:
        where = "on an NPU, " if r.device.type == "npu" else "off an NPU this is a bug; on an NPU, "
        detail = "; ".join(bad) + f" (the CPU torch path's bits are the contract; {where}{PROBE_HINTS[kind]})"
    return Check(f"probe: {kind} (H={x.shape[-1]})", DTYPE_NAMES[dtype], not bad, detail)


def _accuracy(r: Runner, dtype, hidden) -> Check:
    x, w, dy = inputs(33, hidden, dtype, seed=2)
    y, _, dx, _ = r.run(x, w, dy)
    x64 = x.double().requires_grad_()
    w64 = w.double()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    errs = []
    for got, want in ((y, y64.detach()), (dx, dx64)):
        scale = want.abs().amax(-1, keepdim=True).clamp_min(1e-30)
        errs.append(float(((got.double() - want).abs() / scale).max()))
    tol = TOLERANCE[dtype]
    ok = max(errs) <= tol
    return Check(
        f"accuracy vs float64 (H={hidden})",
        DTYPE_NAMES[dtype],
        ok,
        f"max error y {errs[0]:.2e}, dx {errs[1]:.2e} of the row's largest value (limit {tol:.1e})",
    )


def _invariance(r: Runner, dtype, hidden) -> list[Check]:
    x, w, dy = inputs(300, hidden, dtype, seed=3)
    full = r.run(x, w, dy)
    checks = []
    bad = []
    for n in PREFIXES:
        part = r.run(x[:n], w, dy[:n])
        bad += [f"{name}[:{n}]" for name, a, b in zip(("y", "rstd", "dx"), part, full) if not same_bits(a, b[:n])]
    checks.append(
        Check(
            f"prefixes 1..300 (H={hidden})",
            DTYPE_NAMES[dtype],
            not bad,
            "differs: " + ", ".join(bad) if bad else "y, rstd, dx equal",
        )
    )
    bad = []
    single = r.run(x[:1], w, dy[:1])
    for pos in (0, 150, 299):
        xs, dys = x.clone(), dy.clone()
        xs[pos], dys[pos] = x[0], dy[0]
        batch = r.run(xs, w, dys)
        bad += [
            f"{name}@{pos}" for name, a, b in zip(("y", "rstd", "dx"), single, batch) if not same_bits(a[0], b[pos])
        ]
    checks.append(
        Check(
            f"row position (H={hidden})",
            DTYPE_NAMES[dtype],
            not bad,
            "differs: " + ", ".join(bad) if bad else "equal at 0, 150, 299",
        )
    )
    y3 = r.forward_nd(x.view(3, 100, hidden), w)
    ok3d = same_bits(y3.reshape(300, hidden), full[0])
    checks.append(
        Check(f"[3,100,H] vs [300,H] (H={hidden})", DTYPE_NAMES[dtype], ok3d, "equal" if ok3d else "y differs")
    )
    again = r.run(x, w, dy)
    ok = same_bits(again[3], full[3])
    checks.append(
        Check(f"dw run to run (H={hidden})", DTYPE_NAMES[dtype], ok, "equal" if ok else "dw differs between runs")
    )
    return checks


def device_checks(device) -> list[Check]:
    """Checks of the device's own state (an NPU's float overflow mode); none for other devices."""
    if getattr(device, "type", None) != "npu":
        return []
    from ..backends import overflow_mode

    index = device.index if device.index is not None else int(torch.npu.current_device())
    found = overflow_mode.of_device(index)
    passed = None if found.mode == overflow_mode.UNKNOWN else not found.saturating
    detail = found.describe()
    if found.mode == overflow_mode.UNKNOWN:
        detail += "; the Inf/NaN probe lines show what the device does"
    return [Check(f"device: float overflow mode (npu:{index})", "-", passed, detail)]


def launch_checks(impl) -> list[Check]:
    """Whether the NPU kernels report a launch the runtime refuses (docs/design.md §4, "A refused
    launch"); nothing for other backends."""
    if getattr(impl, "name", None) != "npu":
        return []
    from ..backends import npu

    state = npu.library().launch_check_state()
    if state == 0:
        return [Check("kernels: refused launches reported", "-", True, "aclrtGetLastError after each launch")]
    if state < 0:
        detail = (
            "not checked: this CANN's libascendcl.so has no aclrtPeekAtLastError/aclrtGetLastError, so a launch "
            "the runtime refuses leaves its outputs unwritten without an error (the contract lines would show it)"
        )
    else:
        detail = (
            f"not checked on this thread: an earlier call left runtime error {state} on it, which is not ours to "
            "take, so its launches go unchecked until its owner takes it (aclrtGetLastError)"
        )
    return [Check("kernels: refused launches reported", "-", None, detail)]


def run_checks(
    impl,
    device: torch.device,
    hidden_sizes=(4096, 5000),
    dtypes=SUPPORTED_DTYPES,
    progress: Callable[[str], None] | None = None,
    probes: bool = True,
) -> list[Check]:
    """All checks for one backend object on one device (``probes``: also the special-value probes)."""
    r = Runner(impl, device)
    out: list[Check] = device_checks(device) + launch_checks(impl)
    for dtype in dtypes:
        for hidden in hidden_sizes:
            if progress:
                progress(f"{DTYPE_NAMES[dtype]} H={hidden}")
            out.append(_contract(r, dtype, hidden))
            out.append(_accuracy(r, dtype, hidden))
            out.extend(_invariance(r, dtype, hidden))
        if probes:
            if progress:
                progress(f"{DTYPE_NAMES[dtype]} probes")
            out.extend(_probe(r, dtype, kind) for kind in PROBE_HINTS)
    return out


RESULT = {True: "PASS", False: "FAIL", None: "SKIP"}


def format_table(checks: list[Check]) -> str:
    w1 = max(len(c.name) for c in checks)
    lines = [f"{'check':<{w1}}  dtype  result  detail"]
    for c in checks:
        lines.append(f"{c.name:<{w1}}  {c.dtype:<5}  {RESULT[c.passed]:<6}  {c.detail}")
    return "\n".join(lines)


#: Checks that compare the backend with the CPU torch path: for the torch path on the CPU, itself.
SELF_COMPARED = ("contract", "probe: ")


def cpu_backend(name: str) -> tuple[str, str | None]:
    """(backend to check, note for the report) on the CPU. ``auto`` there is the torch path, which the
    contract checks would compare with itself: so the default is ``emu`` (the kernels built by the host
    C++ compiler, against the torch path) when a compiler is present, and a plain note when not."""
    if name not in ("auto", "torch"):
        return name, None
    why = "--backend torch was asked for"
    if name == "auto":
        from ..errors import AscendRMSNormError
        from ..jit import toolchain

        try:
            toolchain.emu_toolchain()
        except AscendRMSNormError as err:
            why = str(err).splitlines()[0]  # no host C++ compiler ...; install g++ ... or set ASCEND_RMSNORM_CXX
        else:
            return "emu", None
    return "torch", (
        f"ONLY THE TORCH PATH WAS EXERCISED ({why}): its contract and probe checks compare it with itself and "
        "show nothing; accuracy and invariance are real checks of the torch path. On an NPU host selftest "
        "checks the NPU kernels; here --backend emu checks the kernels' CPU emulation."
    )


def main(backend: str | None, device: str | None, as_json: bool, quick: bool, echo=print) -> int:
    """The CLI entry: resolve, run, print; 0 when every check passes."""
    import json

    def progress(msg: str) -> None:
        if not as_json:
            to_stderr(f"  checking {msg} ...")

    name = choice.requested_name(backend)
    from .device import check_device

    dev = torch.device(device or check_device(None, name))
    note = None
    if dev.type == "cpu":
        name, note = cpu_backend(name)
    if name == "emu":
        from ..backends import emu

        if not as_json:
            to_stderr("  loading the emu kernels (the first time, the host C++ compiler builds them) ...")
        emu.library()
    probe = torch.empty(1, 8, device=dev)
    impl = choice.resolve(name, probe)
    impl_name = choice.describe(impl)
    start = time.perf_counter()
    hidden = (4096,) if quick else (128, 4096, 5000)
    checks = run_checks(impl, dev, hidden_sizes=hidden, progress=progress)
    if impl is torch_backend and dev.type == "cpu":
        for c in checks:
            if c.name.startswith(SELF_COMPARED):  # they could not fail: not a pass
                c.passed = None
                c.detail = "the torch path against itself on the CPU: nothing to compare (no other backend ran)"
    passed = all(c.passed is not False for c in checks)
    if as_json:
        echo(
            json.dumps(
                {
                    "backend": impl_name,
                    "requested": name,
                    "device": str(dev),
                    "passed": passed,
                    "seconds": round(time.perf_counter() - start, 2),
                    "note": note,
                    "checks": [dataclasses.asdict(c) for c in checks],
                },
                indent=2,
            )
        )
    else:
        echo(f"selftest: backend {impl_name} on {dev}" + (" against the torch path" if impl_name == "emu" else ""))
        if note:
            echo(f"note: {note}")
        echo(format_table(checks))
        n_bad = sum(c.passed is False for c in checks)
        n_skip = sum(c.passed is None for c in checks)
        skipped = f", {n_skip} skipped" if n_skip else ""
        echo(f"{len(checks) - n_bad - n_skip} passed, {n_bad} failed{skipped} in {time.perf_counter() - start:.1f} s")
        if note:
            echo(f"note: {note}")
    return 0 if passed else 1
