"""What the v2 kernel moves and where it runs, counted by the performance model (docs/perf-model.md §1).

Deterministic counts from the emulation's fast mode, never times: GM traffic within 1.05x of the
least the operation needs on every path up to H 16384 (16-bit) and 8192 (fp32), forward and
backward; the weight read once per block wherever the path holds it; the backward on every core
whenever rows >= cores; no dw reduce launch when there is one dw chunk.
"""

from __future__ import annotations

import functools

import pytest
import torch

from ascend_rmsnorm import contract
from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.perf import model as perf_model
from ascend_rmsnorm.perf import results as perf_results

from helpers import make_input, make_weight

SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}

#: The H bound of the traffic claim per x dtype (the module doc: every path up to it, no stream path).
TRAFFIC_BOUND = {"bfloat16": 16384, "float16": 16384, "float32": 8192}
#: A short row on the group path, besides each path's largest H.
SMALL_H = 128


def _rows(direction: str) -> int:
    return 1024 if direction == "fwd" else 4096


def _path(dtype: str, direction: str, hidden: int, rows: int) -> str:
    code = contract.DTYPE_CODES[getattr(torch, dtype)]
    name = {"fwd": "forward", "bwd": "backward"}[direction]
    return emu.library().plan(name, code, code, rows, hidden, 48).path.split()[-1]


@functools.cache
def _traffic_points(dtype: str, direction: str) -> tuple[tuple[int, str], ...]:
    """(H, path): SMALL_H, and every path's largest H up to the bound from the planner at the test's rows
    (a typed list had drifted: fp32's backward group path ends at 6592, not 4096)."""
    largest = {}
    for h in range(1, TRAFFIC_BOUND[dtype] + 1):
        largest[_path(dtype, direction, h, _rows(direction))] = h
    assert "stream" not in largest and "group" in largest, (dtype, direction, largest)
    return ((SMALL_H, "group"), *((h, p) for p, h in largest.items()))


@pytest.mark.parametrize("direction", ("fwd", "bwd"))
@pytest.mark.parametrize("dtype", tuple(TRAFFIC_BOUND))
def test_traffic_is_within_5_percent_of_the_minimum(dtype, direction):
    """At SMALL_H and at every path's largest H up to the bound (``_traffic_points``)."""
    for hidden, path in _traffic_points(dtype, direction):
        _traffic_within_bound(dtype, direction, hidden, path)


def _traffic_within_bound(dtype, direction, hidden, path):
    # 4096 backward rows: 128 dw chunks, whose fp32 partials (written and read once) come on top of
    # the 5 %; on 48 cores the first 32 blocks sum a chunk more, so (group and tiled paths) the heavy
    # blocks shed some rows' dx, and those rows' dy, x and rstd are read twice.
    rows = _rows(direction)
    assert _path(dtype, direction, hidden, rows) == path, (dtype, direction, hidden)
    rec = perf_model.model(rows, hidden, dtype, direction, cores=48, fast=True, ablate=False)
    assert rec.min_bytes == perf_results.min_bytes(rows, hidden, dtype, direction, 48)
    partials = sum(lr.gm["workspace"].read + lr.gm["workspace"].write for lr in rec.launches if "workspace" in lr.gm)
    assert rec.gm_bytes <= 1.05 * rec.min_bytes + partials, (dtype, direction, hidden, rec.gm_bytes, rec.min_bytes)
    main = rec.launches[0]
    n = rows * hidden * SIZE[dtype]
    if direction == "fwd":
        assert main.gm["x"].read == n and main.gm["y"].write == n and main.gm["rstd"].write == 4 * rows
    else:
        twice = main.gm["rstd"].read // 4 - rows  # rows whose dx a light block made
        assert 0 <= twice <= rows // 14 and (twice == 0 or path != "stream"), twice
        assert main.gm["x"].read == main.gm["dy"].read == n + twice * hidden * SIZE[dtype]
        assert main.gm["dx"].write == n
    # the weight once per block (every path here holds it resident)
    for block in main.block:
        assert block.gm["w"].read == hidden * SIZE[dtype], block.idx


def test_the_tiled_backward_frees_a_dy_slot_before_the_dx_of_its_row_is_stored():
    """Where only fewer dy slots than x slots fit (V is done with a dy tile before its dx is stored),
    the plan says so, and the kernel on that plan still gives the torch path's bits."""
    lib = emu.library()
    f32, bf16 = contract.DTYPE_CODES[torch.float32], contract.DTYPE_CODES[torch.bfloat16]
    p = lib.plan("backward", f32, f32, 1024, 8192, 48)
    assert (p.path, p.slots, p.dy_slots) == ("backward tiled", 2, 1)
    p = lib.plan("backward", bf16, bf16, 1024, 8192, 48)
    assert (p.path, p.slots, p.dy_slots) == ("backward tiled", 3, 2)
    p = lib.plan("backward", bf16, bf16, 1024, 4096, 48)
    assert p.path == "backward group" and p.dy_slots == p.slots
    # 130 rows on 2 blocks: the rings wrap many times, 65 dw chunks of 1 row
    x = make_input(130, 8192, torch.float32, seed=5)
    w = make_weight(8192, torch.float32)
    dy = make_input(130, 8192, torch.float32, seed=6, scale_rows=False)
    rstd = torch_backend.forward(x, w, 1e-6)[1]
    for need_dx, need_dw in ((True, True), (False, True)):
        got = emu.with_block_dim(2).backward(dy, x, w, rstd, need_dx=need_dx, need_dw=need_dw)
        want = torch_backend.backward(dy, x, w, rstd, need_dx=need_dx, need_dw=need_dw)
        for a, b in zip(got, want):
            assert (a is None) == (b is None)
            if a is not None:
                assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_the_fused_residual_reads_and_writes_each_tensor_once():
    for hidden in (4096, 16384):
        rec = perf_model.model(512, hidden, "bfloat16", "fwd", cores=48, fast=True, ablate=False, residual=True)
        assert len(rec.launches) == 1
        n = 512 * hidden * 2
        gm = rec.launches[0].gm
        assert gm["x"].read == gm["residual"].read == n and gm["residual_out"].write == gm["y"].write == n
        assert gm["x"].write == gm["residual"].write == gm["y"].read == gm["residual_out"].read == 0
        assert rec.gm_bytes <= 1.05 * perf_results.min_bytes(512, hidden, "bfloat16", "fwd", 48, residual=True)


@pytest.mark.parametrize("cores", (40, 48))
def test_the_backward_runs_on_every_core_when_rows_reach_the_core_count(cores):
    for rows in (cores - 1, cores, cores + 1, 64, 300, 1024):
        rec = perf_model.model(rows, 256, "bfloat16", "bwd", cores=cores, fast=True, ablate=False)
        assert rec.launches[0].blocks == min(rows, cores), rows
        assert [lr.kernel for lr in rec.launches] == ["rmsnorm_bwd_bf16_bf16_bf16", "rmsnorm_dw_bf16"]


def test_one_dw_chunk_needs_no_reduce_launch_and_no_workspace():
    rec = perf_model.model(1, 4096, "float16", "bwd", cores=48, fast=True, ablate=False)
    assert [lr.kernel for lr in rec.launches] == ["rmsnorm_bwd_f16_f16_f16"]
    assert "workspace" not in rec.launches[0].gm or rec.launches[0].gm["workspace"].bytes == 0
    assert rec.launches[0].gm["dw"].write == 4096 * 2
