"""The torch path gives the same bits whatever vector instructions the CPU has.

Hosts differ: an AVX-512 training node, an AVX2 rollout box, an ARM login node. torch picks its CPU
kernels by the instructions it finds, and some of its ops give other bits on each (``torch.add`` with
``alpha``, ``addcmul`` and ``lerp`` fuse a multiply-add only in their vector kernels). The torch path
must use none of those. This runs its cases in fresh processes told by ``ATEN_CPU_CAPABILITY`` to use
narrower kernels than this CPU has, and compares their bits with this process's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import isa_worker
import pytest
import torch

from ascend_rmsnorm.backends.torch import HOST_TAIL_MAX_ROWS, LANES, SMALL_HIDDEN
from ascend_rmsnorm.contract import DW_MIN_CHUNKS, TILE

from helpers import assert_same_bits, make_input, make_weight, same_bits

WORKER = Path(isa_worker.__file__)

#: The torch path's own limits: one row, the most rows whose tail runs on the host and one more, and
#: two rows per dw chunk with a short last chunk.
ROWS = (1, HOST_TAIL_MAX_ROWS, HOST_TAIL_MAX_ROWS + 1, 2 * DW_MIN_CHUNKS + 1)
#: Short of the lanes, past them, the small host rows' limit and past it, a full tile and a tail.
HIDDEN = (LANES - 1, LANES + 1, SMALL_HIDDEN, SMALL_HIDDEN + 1, TILE + LANES + 3)
#: Each dtype once with each casting mode's formula.
DTYPE_MODES = ((torch.float32, "fp32"), (torch.bfloat16, "llama"), (torch.float16, "gemma"), (torch.bfloat16, "fp32"))

#: ATEN_CPU_CAPABILITY's values narrower than each capability torch reports.
NARROWER = {"AVX512": ("avx2", "default"), "AVX2": ("default",)}
#: What torch then reports ("NO AVX": torch 2.8's name for its scalar kernels on x86).
RUNS_AS = {"avx2": ("AVX2",), "default": ("DEFAULT", "NO AVX")}


def _cases() -> list[dict]:
    cases = []
    for dtype, mode in DTYPE_MODES:
        for rows in ROWS:
            for hidden in HIDDEN:
                x = make_input(rows, hidden, dtype, seed=41)
                if rows > 2:  # a row with an inf and one of zeros: the bad-row and zero-sum paths
                    x[1, hidden // 2] = float("inf")
                    x[2].zero_()
                cases.append(
                    {
                        "mode": mode,
                        "x": x,
                        "w": make_weight(hidden, dtype),
                        "dy": make_input(rows, hidden, dtype, seed=42, scale_rows=False),
                        "residual": make_input(rows, hidden, dtype, seed=43),
                    }
                )
    return cases


def test_narrower_cpu_kernels_give_the_same_bits(tmp_path):
    native = torch.backends.cpu.get_cpu_capability()
    narrower = NARROWER.get(native, ("default",) if native not in RUNS_AS["default"] else ())
    if not narrower:
        pytest.skip(f"torch runs its scalar CPU kernels here ({native}): nothing narrower to compare with")
    cases = _cases()
    canary_in = (make_input(1, 1000, torch.float32, seed=44)[0], make_input(1, 1000, torch.float32, seed=45)[0])
    torch.save({"cases": cases, "canary": canary_in}, tmp_path / "in.pt")
    expected = [isa_worker.run_case(case) for case in cases]
    for capability in narrower:
        out = tmp_path / f"{capability}.pt"
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
        done = subprocess.run(
            [sys.executable, str(WORKER), str(tmp_path / "in.pt"), str(out)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        got = torch.load(out)
        assert got["capability"] in RUNS_AS[capability], f"asked for {capability}, torch ran {got['capability']}"
        if capability == "default":  # the scalar loop: no fused multiply-add (AVX2 and AVX-512 both fuse)
            assert not same_bits(got["canary"], isa_worker.canary(*canary_in)), (
                f"torch.add(alpha=) gave {native}'s bits under {capability}: the setting did not reach torch's kernels"
            )
        for case, want, have in zip(cases, expected, got["outputs"]):
            where = f"{capability} vs {native}, {case['x'].dtype} {case['mode']} {tuple(case['x'].shape)}"
            for name in want:
                assert_same_bits(have[name], want[name], f"{name}, {where}")
