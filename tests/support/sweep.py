"""Run planner-drawn kernel cases (tests/support/plan_cases.py) through the emu backend, each bit for bit
against the torch path and, on some rows, the scalar oracle.

The emulation aborts its process on any hardware rule a kernel breaks, so the cases run in worker
processes: a worker reports each case as it starts and ends; when one dies, the case it was on is
a failure with the emulation's message, and a new worker takes the rest. A case still running long
after its cost says it should have ended (``hang_limit``) is hung: its worker is killed, the case
fails as hung, and the rest go on. A kernel slip can loop for good in the emulation as on an NPU
(a zero-length DMA is a legal no-op on both), and one hung case must not hang the whole run.

    python tests/support/sweep.py                 # every case (``make sweep``), on all cores
    python tests/support/sweep.py --sample 60     # the seeded CI sample of about 60 s of work
    python tests/support/sweep.py --worker        # (internal) run JSON cases from stdin
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import plan_cases
from plan_cases import Case

#: The CI sample's seed (ASCEND_RMSNORM_SWEEP_SEED overrides it, to try another draw).
DEFAULT_SEED = 16
EPS = 1e-6


# ---- one case (in a worker) -------------------------------------------------------------------------


def _tensors(case: Case):
    import torch

    from helpers import make_input, make_weight

    dt = getattr(torch, case.family.x)
    x = make_input(case.rows, case.hidden, dt, seed=case.hidden % 997 + case.rows)
    if case.special and case.rows >= 2:
        x[0, case.hidden - 1] = float("nan")  # a NaN in the last tile
        x[1 % case.rows, case.hidden // 2] = float("inf")
    v = case.variant
    w = None if v.weight is None else make_weight(case.hidden, getattr(torch, v.weight), seed=case.rows)
    return x, w


def _check_forward(case: Case, backend, reference, oracle, oracle_check) -> None:
    import torch

    from helpers import assert_same_bits

    x, w = _tensors(case)
    v = case.variant
    res = None
    if case.family.residual:
        from helpers import make_input

        res = make_input(case.rows, case.hidden, x.dtype, seed=case.hidden % 991 + 7, scale_rows=False)
    kw = {"casting_mode": v.mode, "offset": v.offset, "residual": res}
    got = backend.forward(x, w, EPS, **kw)
    want = reference.forward(x, w, EPS, **kw)
    for name, a, b in zip(("y", "rstd", "residual_out"), got, want):
        assert_same_bits(a, b, f"{name} (emu vs torch)")
    for r in plan_cases.oracle_rows(case):
        o = oracle.forward(
            [x[r].float().tolist()], None if w is None else w.double().tolist(), EPS,
            x_dtype=case.family.x, w_dtype=v.weight, casting_mode=v.mode, offset=v.offset,
            residual_rows=None if res is None else [res[r].float().tolist()],
        )  # fmt: skip
        y_bits = oracle_check.ubits(got[0][r])
        if got[0].dtype == torch.float64:
            y_bits = [u & 0xFFFFFFFFFFFFFFFF for u in y_bits]
        assert y_bits == o["y"][0], f"y row {r} differs from the oracle"
        assert oracle_check.ubits(got[1][r : r + 1]) == o["rstd"], f"rstd row {r} differs from the oracle"
        if res is not None:
            assert oracle_check.ubits(got[2][r]) == o["residual_out"][0], f"residual_out row {r} vs the oracle"


def _dy_dtype(case: Case, x, w):
    """y's dtype (the caller's dy), or fp32 for the family whose kernel takes an fp32 dy without a weight."""
    import torch

    from ascend_rmsnorm import contract

    fam = case.family
    if fam.out != fam.x and w is None:
        return torch.float32
    return contract.result_dtype(x.dtype, None if w is None else w.dtype, case.variant.mode)


def _check_backward(case: Case, backend, reference, oracle, oracle_check) -> None:
    import torch

    from helpers import assert_same_bits, make_input

    fam, v = case.family, case.variant
    x, w = _tensors(case)
    rstd = reference.forward(x, w, EPS, casting_mode=v.mode, offset=v.offset)[1]
    dy = make_input(case.rows, case.hidden, torch.float32, seed=case.hidden % 983 + 3, scale_rows=False)
    dy = dy.to(_dy_dtype(case, x, w))
    gro = None
    if fam.residual:
        gro = make_input(case.rows, case.hidden, x.dtype, seed=case.hidden % 977 + 5, scale_rows=False)
        if case.special:
            gro[case.rows - 1, 0] = float("nan")
    kw = {"casting_mode": v.mode, "offset": v.offset, "need_dx": fam.need_dx, "need_dw": fam.need_dw}
    if gro is not None:
        kw["grad_residual"] = gro
    got = backend.backward(dy, x, w, rstd, **kw)
    want = reference.backward(dy, x, w, rstd, **kw)
    for name, a, b in zip(("dx", "dw"), got, want):
        assert_same_bits(a, b, f"{name} (emu vs torch)")
    rows = plan_cases.oracle_rows(case) if fam.need_dx else []
    for r in rows:
        o = oracle.backward(
            [dy[r].float().tolist()], [x[r].float().tolist()], None if w is None else w.double().tolist(),
            [float(rstd[r])], x_dtype=fam.x, w_dtype=v.weight, casting_mode=v.mode, offset=v.offset,
            grad_residual_rows=None if gro is None else [gro[r].float().tolist()],
        )  # fmt: skip
        assert oracle_check.ubits(got[0][r]) == o["dx"][0], f"dx row {r} differs from the oracle"
    if fam.need_dw and w is not None and case.elements <= plan_cases.ORACLE_DW_ELEMENTS:
        o = oracle.backward(
            dy.float().tolist(), x.float().tolist(), w.double().tolist(), [float(r) for r in rstd],
            x_dtype=fam.x, w_dtype=v.weight, casting_mode=v.mode, offset=v.offset,
        )  # fmt: skip
        got_dw = oracle_check.ubits(got[1])
        if got[1].dtype == torch.float64:
            got_dw = [u & 0xFFFFFFFFFFFFFFFF for u in got_dw]
        assert got_dw == o["dw"], "dw differs from the oracle"


def _rules_only(case: Case, backend) -> None:
    """The kernel in the emulation's fast mode: no data, no arithmetic, every rule but GM ordering checked."""
    import torch

    from ascend_rmsnorm.perf import kernel as perf_kernel

    fam, v = case.family, case.variant
    x = torch.empty(case.rows, case.hidden, dtype=getattr(torch, fam.x))
    w = None if v.weight is None else torch.empty(case.hidden, dtype=getattr(torch, v.weight))
    kernel = perf_kernel.ModelKernel.default()
    with kernel.lock:
        kernel.start(fast=True)
        try:
            if fam.direction == "fwd":
                res = torch.empty_like(x) if fam.residual else None
                backend.forward(x, w, EPS, casting_mode=v.mode, offset=v.offset, residual=res)
            else:
                kw = {"grad_residual": torch.empty_like(x)} if fam.residual else {}
                dy = torch.empty(x.shape, dtype=_dy_dtype(case, x, w))
                opts = {"casting_mode": v.mode, "offset": v.offset, "need_dx": fam.need_dx, "need_dw": fam.need_dw}
                backend.backward(dy, x, w, torch.ones(case.rows), **opts, **kw)
        finally:
            kernel.stop()
            kernel.clear()


def run_one(case: Case) -> None:
    """Run ``case``; AssertionError on any difference (an emulation rule aborts the process)."""
    from ascend_rmsnorm.backends import emu
    from ascend_rmsnorm.backends import torch as reference

    import oracle
    import oracle_check

    backend = emu.with_block_dim(case.blocks)
    if case.fast:
        _rules_only(case, backend)
    elif case.family.direction == "fwd":
        _check_forward(case, backend, reference, oracle, oracle_check)
    else:
        _check_backward(case, backend, reference, oracle, oracle_check)


#: The prefix of the worker's protocol lines on stdout (``start i`` / ``ok i`` / ``fail i <msg>``); any
#: other line there (a stray print) is passed over.
PROTOCOL = "@sweep "


def worker() -> int:
    """Read JSON cases (one per line) from stdin; print a PROTOCOL line as each starts and ends."""
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        i, case = item["i"], Case.from_json(item["case"])
        print(f"{PROTOCOL}start {i}", flush=True)
        try:
            run_one(case)
        except Exception as err:  # noqa: BLE001 - every failure is reported with its case
            msg = f"{type(err).__name__}: {err}".replace("\n", " | ")
            print(f"{PROTOCOL}fail {i} {msg}", flush=True)
        else:
            print(f"{PROTOCOL}ok {i}", flush=True)
    return 0


# ---- many cases (in the parent) ----------------------------------------------------------------------


@dataclass
class Failure:
    case: Case
    message: str

    def __str__(self) -> str:
        return f"{self.case.label()}\n    {self.message}"


def _drain(stream, into: list) -> None:
    into.extend(stream)


def _feed(stream, items: list[tuple[int, Case]]) -> None:
    try:
        for i, c in items:
            stream.write(json.dumps({"i": i, "case": c.to_json()}) + "\n")
        stream.close()
    except BrokenPipeError:  # the worker died; the rest goes to the next one
        pass


WORKER = [sys.executable, str(Path(__file__).resolve()), "--worker"]


def _worker_error(err_lines: list[str], rc: int) -> str:
    """What a dead worker said last: the emulation's rule and its detail lines, else stderr's tail."""
    tail = "".join(err_lines).strip().splitlines()
    rule = [ln for ln in tail if "rule violated" in ln or ln.startswith("  ")][:4]
    return " | ".join(ln.strip() for ln in (rule or tail[-4:])) or f"worker exited with {rc}"


def hang_limit(case: Case) -> float:
    """Seconds after which a running case is hung: far above what its cost says, on a loaded machine."""
    return 120.0 + 20.0 * plan_cases.cost(case)


def _kill_hung(proc: subprocess.Popen, hung: threading.Event) -> None:
    hung.set()
    proc.kill()


def _run_chunk(cases: list[tuple[int, Case]], results: dict, lock: threading.Lock, command, limit) -> None:
    """Run ``cases`` in worker processes, one after another, until each has a result in ``results``
    (index -> None when it passed, else the failure's message). A worker that dies in a case fails
    that case, and the next worker takes the rest; one that dies between cases fails the case before
    (its exit belongs to it), or every case left when it finished none. A case still running after
    ``limit(case)`` seconds fails as hung, its worker killed."""
    by_index = dict(cases)
    todo = list(cases)
    while todo:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        err_lines: list[str] = []
        drain = threading.Thread(target=_drain, args=(proc.stderr, err_lines), daemon=True)
        drain.start()
        feeder = threading.Thread(target=_feed, args=(proc.stdin, list(todo)), daemon=True)
        feeder.start()
        current = last = watchdog = None
        hung = threading.Event()
        for line in proc.stdout:
            if not line.startswith(PROTOCOL):
                continue  # a stray print: not the protocol
            kind, _, rest = line[len(PROTOCOL) :].rstrip("\n").partition(" ")
            i_text, _, msg = rest.partition(" ")
            i = int(i_text)
            if watchdog is not None:
                watchdog.cancel()
            if kind == "start":
                current = i
                watchdog = threading.Timer(limit(by_index[i]), _kill_hung, (proc, hung))
                watchdog.daemon = True
                watchdog.start()
                continue
            current, last = None, i
            with lock:
                results[i] = msg if kind == "fail" else None
        if watchdog is not None:
            watchdog.cancel()
        rc = proc.wait()
        drain.join()
        feeder.join()
        if current is not None or rc != 0 or last is None:
            msg = _worker_error(err_lines, rc)
            with lock:
                if current is not None and hung.is_set():
                    results[current] = f"hung: no result after {limit(by_index[current]):.0f} s, its worker killed"
                elif current is not None:
                    results[current] = f"aborted ({rc}): {msg}"
                elif hung.is_set():  # killed as its case ended, which then passed: a new worker takes the rest
                    pass
                elif last is not None:
                    results[last] = results[last] or f"the worker exited with {rc} after this case: {msg}"
                else:  # it finished none: none would run in the next one either
                    for i, _ in todo:
                        results[i] = f"the worker exited with {rc} before this case: {msg}"
        todo = [(i, c) for i, c in todo if i not in results]


def run(cases: list[Case], jobs: int | None = None, progress=None, command=WORKER, limit=hang_limit) -> list[Failure]:
    """Run every case in ``jobs`` worker processes at a time (``command`` starts one); the failures, in
    case order. A case the harness got no result for is a failure too (with what went wrong), and so is
    one still running after ``limit(case)`` seconds."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cases) or 1))
    indexed = list(enumerate(cases))
    # interleave by cost so every worker gets a similar share
    order = sorted(indexed, key=lambda ic: -plan_cases.cost(ic[1]))
    chunks = [order[k::jobs] for k in range(jobs)]
    results: dict[int, str | None] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def chunk(ch) -> None:
        try:
            _run_chunk(ch, results, lock, command, limit)
        except Exception as err:  # noqa: BLE001 - its cases then have no result: failures, with this
            with lock:
                errors.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=chunk, args=(ch,)) for ch in chunks]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=5)
        if progress is not None:
            with lock:
                progress(len(results), len(cases), sum(m is not None for m in results.values()))
    why = "no result: " + ("; ".join(errors) or "the harness lost it")
    return [Failure(c, results[i] if i in results else why) for i, c in indexed if results.get(i, why) is not None]


def planned_cases():
    """Every planner-drawn case, from the emu backend's library."""
    from ascend_rmsnorm.backends import emu

    return plan_cases.Cases(plan_cases.Planner(emu.library())).all()


#: ASCEND_RMSNORM_SWEEP_SEED as the run began: read at import (pytest collects test_emu_planned.py, which
#: imports this, before any test runs), since tests/conftest.py clears every ASCEND_RMSNORM_* variable
#: before each test.
_SEED_TEXT = os.environ.get("ASCEND_RMSNORM_SWEEP_SEED", "")


def sample_seed() -> int:
    text = _SEED_TEXT.strip()
    return int(text) if text.isdigit() else DEFAULT_SEED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sample", type=float, metavar="SECONDS", help="run the seeded sample of about this much work")
    ap.add_argument("--seed", type=int, default=None, help=f"the sample's seed (default {DEFAULT_SEED})")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    args = ap.parse_args(argv)
    if args.worker:
        return worker()
    t0 = time.monotonic()
    cases = planned_cases()
    if args.sample is not None:
        cases = plan_cases.sample(cases, sample_seed() if args.seed is None else args.seed, args.sample)
    est = sum(plan_cases.cost(c) for c in cases)
    print(f"sweep: {len(cases)} cases drawn from the planner in {time.monotonic() - t0:.1f} s "
          f"(about {est / 60:.0f} min of work)", flush=True)  # fmt: skip
    if args.list:
        for c in cases:
            print(c.label())
        return 0
    last = [0.0]

    def progress(done, total, failed):
        now = time.monotonic()
        if now - last[0] >= 30 or done == total:
            last[0] = now
            el = now - t0
            # the costliest cases run first, so this over-estimates early; with none done there is no rate yet
            left = f"~{el / done * (total - done) / 60:.1f} min left" if done else "the first cases still running"
            print(f"sweep: {done}/{total} cases, {failed} failed, {el / 60:.1f} min, {left}", flush=True)

    failures = run(cases, args.jobs, progress)
    for f in failures:
        print(f"FAIL {f}")
    print(f"sweep: {len(cases)} cases, {len(failures)} failed, {(time.monotonic() - t0) / 60:.1f} min")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
