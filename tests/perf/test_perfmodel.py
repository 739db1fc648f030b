"""The performance model: exact counts of hand-made kernels, the pipe timeline against hand-computed
times, fast mode == full mode on the real kernel, determinism, parameters, and the CLI's JSON.

No timing is measured here: every number compared is a count or a replayed cycle figure.
"""

from __future__ import annotations

import json

import perf_kernels
import pytest
import torch

from ascend_rmsnorm.backends import emu
from ascend_rmsnorm.cli import main as cli_main
from ascend_rmsnorm.perf import kernel as perf_kernel
from ascend_rmsnorm.perf import model as perf_model
from ascend_rmsnorm.perf import notes as perf_notes
from ascend_rmsnorm.perf import params as perf_params
from ascend_rmsnorm.perf import results as perf_results
from ascend_rmsnorm.perf import soc as perf_soc

# Replay parameters for the hand computations: 1 byte per cycle each way, round latencies.
HAND = {
    "mte2_bytes_per_cycle": 1,
    "mte3_bytes_per_cycle": 1,
    "gm_latency": 100,
    "pipe_flag_latency": 50,
    "queue_latency": 50,
    "s_flag_latency": 900,
    "vec_cycles_per_repeat": 1,
    "vec_latency": 20,
    "issue_vector": 10,
    "issue_dma": 20,
    "issue_sync": 2,
    "scalar_ub_access": 10,
    "scalar_set_extra": 40,
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """tests/support/perf_kernels.cpp built against kernels/emu, with its perf hooks."""
    return perf_kernels.build(tmp_path_factory.mktemp("perf_kernels"))


def _copy(kernels, blocks, n, chunk, rows, tail, buffers=2, fast=False):
    raw, hooks = kernels
    src = torch.arange(blocks * (n + tail), dtype=torch.float32)
    dst = torch.full_like(src, -7.0)
    launches = perf_model.record(
        hooks, lambda: raw.perf_copy(src.data_ptr(), dst.data_ptr(), blocks, n, chunk, rows, tail, buffers),
        {"src": src, "dst": dst}, fast=fast,
    )  # fmt: skip
    return launches, src, dst


# --------------------------------------------------------------------------------------------------- counts


@pytest.mark.parametrize("fast", (False, True), ids=("full", "fast"))
def test_copy_kernel_counts_exactly_its_bytes(kernels, fast):
    blocks, n, chunk, rows, tail = 3, 1024, 256, 3, 30
    (launch,), src, dst = _copy(kernels, blocks, n, chunk, rows, tail, fast=fast)
    assert (launch.kernel, launch.blocks, len(launch.block)) == ("perf_copy", blocks, blocks)
    per = (n + tail) * 4
    steps = n // chunk + 1
    for b in launch.block:
        assert set(b.gm) == {"src", "dst"}
        s, d = b.gm["src"], b.gm["dst"]
        assert (s.read, s.write, d.read, d.write) == (per, 0, 0, per)
        assert (s.read_dmas, s.read_bursts) == (steps, n // chunk + rows)
        assert (d.write_dmas, d.write_bursts) == (steps, n // chunk + rows)
        assert set(b.vector) == {"DataCopy(UB->UB)"}
        pitch = (tail // rows * 4 + 31) // 32 * 32
        copy = b.vector["DataCopy(UB->UB)"]
        assert (copy.instr, copy.repeats) == (steps, n // chunk * (chunk * 4 // 256) + (rows * pitch + 255) // 256)
        assert (b.alloc, b.enque, b.deque, b.free) == (2 * steps,) * 4
        assert b.flags == {} and b.barriers == {} and (b.ub_get, b.ub_set) == (0, 0)
        assert b.ub_peak == 2 * 2 * chunk * 4
        assert b.ops == 11 * steps  # per step: 4 + 4 queue ops, 2 DMAs, 1 vector copy
    assert launch.gm["src"].read == blocks * per and launch.gm_bytes == 2 * blocks * per
    if fast:  # no data moved at all
        assert torch.equal(dst, torch.full_like(dst, -7.0))
    else:
        assert torch.equal(dst, src)


def test_tensors_noted_by_launch_code_keep_their_names(kernels):
    raw, hooks = kernels
    src, dst = torch.ones(64), torch.zeros(64)

    def run():
        perf_notes.note_tensor("x", src)  # as launch code would for a tensor it made itself
        raw.perf_chain(src.data_ptr(), dst.data_ptr(), 0)
        return {"y": dst}

    (launch,) = perf_model.record(hooks, run, {})
    assert set(launch.gm) == {"x", "y"}
    (launch,) = perf_model.record(hooks, lambda: raw.perf_chain(src.data_ptr(), dst.data_ptr(), 0), {"y": dst})
    assert set(launch.gm) == {"workspace", "y"} and launch.gm["workspace"].read == 256
    perf_notes.note_tensor("x", src)  # outside a recording: nothing happens


def test_vector_kernel_counts(kernels):
    raw, hooks = kernels
    (launch,) = perf_model.record(hooks, lambda: raw.perf_vector(2), {})
    assert launch.blocks == 2
    for b in launch.block:
        assert b.gm == {}
        got = {k: (v.instr, v.repeats, v.elements) for k, v in b.vector.items()}
        # fp32 x 1000 = 4000 bytes = 16 repeats; the bf16 <- fp32 Cast runs at fp32 width: 400 bytes, 2 repeats
        assert got == {"Duplicate": (2, 32, 2000), "Add": (1, 16, 1000), "Cast": (1, 2, 100), "Mul": (1, 3, 192)}
        assert (b.vec_instr, b.vec_repeats) == (5, 53)
        assert b.flags == {"V_S": (1, 1), "S_V": (1, 1)} and (b.set_flags, b.wait_flags) == (2, 2)
        assert b.barriers == {"PIPE_V": 2}
        assert (b.ub_get, b.ub_set) == (5, 2)
        assert b.ub_peak == 3 * 4096 and b.ops == 18


@pytest.mark.parametrize(("repeats", "compares"), ((251, ((1, 251),)), (252, ((2, 252),)), (300, ((2, 300),))))
def test_compare_and_select_count_as_dav_c220_issues_them(kernels, repeats, compares):
    """asc-devkit's dav-c220 implementation issues a count-form Compare as one vcmpv per 252 repeats and
    one for the rest (even an empty rest), and a scalar-mode Select as a Duplicate of 32 elements,
    PipeBarrier<V>, set_cmpmask, PipeBarrier<V>, vsel: the record is what the device runs, so the model
    prices the two barriers every Canon pays inside its Select."""
    raw, hooks = kernels
    (launch,) = perf_model.record(hooks, lambda: raw.perf_select(repeats), {})
    (b,) = launch.block
    got = {k: (v.instr, v.repeats) for k, v in b.vector.items()}
    assert got["Compare"] == compares[0]
    assert got["Select"] == (1, repeats)
    assert got["set_cmpmask"] == (1, 1)
    assert got["Duplicate"] == (2, repeats + 1)  # the kernel's own, and the Select's 32 floats (one repeat)
    assert b.barriers == {"PIPE_V": 2 + 2}  # the kernel's two and the Select's two


@pytest.mark.parametrize(("repeats", "compares"), ((251, (1, 251)), (252, (2, 252)), (300, (2, 300))))
def test_canon_takes_the_nan_from_the_register(kernels, repeats, compares):
    """The kernels' Canon reads the NaN that HoldNan loaded into the compare-mask register once, so it
    issues Compare, a barrier, the register form of Select (one vsel in counter mode, nothing before
    it) and a barrier: none of the count form's Duplicate, set_cmpmask and two barriers per call."""
    raw, hooks = kernels
    (launch,) = perf_model.record(hooks, lambda: raw.perf_canon(repeats), {})
    (b,) = launch.block
    got = {k: (v.instr, v.repeats) for k, v in b.vector.items()}
    assert got["Compare"] == compares
    assert got["Select"] == (1, repeats)
    assert got["set_cmpmask"] == (1, 1)  # HoldNan's, once
    assert got["Duplicate"] == (3, repeats + 2)  # the kernel's own and NanBlock's two (its 16-bit and fp32 NaNs)
    assert b.barriers == {"PIPE_V": 1 + 1 + 1 + 2}  # NanBlock's, HoldNan's, the kernel's, Canon's two


# --------------------------------------------------------------------------------------------------- timeline


@pytest.mark.parametrize(("scalar", "want"), ((0, 853), (1, 1357)))
def test_timeline_of_a_dependency_chain(kernels, scalar, want):
    """DMA in -> MTE2_V -> Add -> V_MTE3 -> DMA out (and V_S + GetValue), replayed by hand:
    S issues at 20 (DMA), +2, +2 (flags), +10 (Add), +2, +2, +20 (DMA): S = 58. MTE2 runs 20..276,
    visible at 376; the flag fires at 376 + 50 = 426; Add runs 426..427, visible at 447; V_MTE3 at
    497; the copy out runs 497..753 and lands at 853. With the scalar tail: V_S fires at
    447 + 900 = 1347, S waits for it and reads at +10: 1357."""
    raw, hooks = kernels
    src, dst = torch.ones(64), torch.zeros(64)
    chain = lambda: raw.perf_chain(src.data_ptr(), dst.data_ptr(), scalar)  # noqa: E731
    (launch,) = perf_model.record(hooks, chain, {"x": src, "y": dst})
    ((finish, busy_s, busy_v, busy_mte2, busy_mte3, stall),) = hooks.replay(0, HAND)
    assert finish == want
    assert (busy_s, busy_v, busy_mte2, busy_mte3) == (58 + (2 + 2 + 10 if scalar else 0), 1, 256, 256)
    assert stall == (1347 - 62 if scalar else 0)
    assert launch.gm["x"].read == 256 and launch.gm["y"].write == 256


@pytest.mark.parametrize(("buffers", "want"), ((2, 1111), (1, 1332)))
def test_timeline_of_queues(kernels, buffers, want):
    """Two 256-byte chunks through an in and an out queue (1 block; see the hand computation in
    the test below each line: EnQue fires when the producer's work is visible + 50, DeQue holds the
    consumer until then; FreeTensor likewise frees a buffer for the producer's next AllocTensor).
    Double-buffered, chunk 1's load runs right behind chunk 0's (278..534) and the job ends when
    the second store lands (755 + 256 + 100 = 1111). Single-buffered, chunk 1's load waits for the
    FreeTensor of chunk 0's buffer (499), so its store lands at 976 + 256 + 100 = 1332."""
    (launch,), _, _ = _copy(kernels, 1, 128, 64, 1, 0, buffers=buffers)
    assert launch.block[0].ops == 22
    ((finish, busy_s, busy_v, busy_mte2, busy_mte3, _),) = kernels[1].replay(0, HAND)
    assert finish == want
    assert (busy_s, busy_v, busy_mte2, busy_mte3) == (132, 2, 512, 512)


def test_same_window_overwrites_are_noted_and_priced_as_the_barriers_they_would_need(kernels):
    """A vector instruction that writes what an earlier one of its barrier window read or wrote is
    allowed (docs/design.md §9) and noted; ``war_barriers=1`` replays the kernel as if a barrier stood
    before each, exactly as the same kernel with those barriers written in. By hand: without them the
    four instructions after the first barrier issue back to back (the last Add starts at 83 and is
    visible at 104); with them each waits for the one before to be visible (20 cycles), and S pays
    2 cycles a barrier: the last Add starts at 125, visible at 146."""
    raw, hooks = kernels
    (plain,) = perf_model.record(hooks, lambda: raw.perf_overwrite(0), {})
    assert plain.block[0].overwrites == 3 and plain.block[0].barriers == {"PIPE_V": 2}
    as_written = hooks.replay(0, HAND)
    priced = hooks.replay(0, {**HAND, "war_barriers": 1})
    (fenced,) = perf_model.record(hooks, lambda: raw.perf_overwrite(1), {})
    assert fenced.block[0].overwrites == 0 and fenced.block[0].barriers == {"PIPE_V": 5}
    assert hooks.replay(0, {**HAND, "war_barriers": 1}) == hooks.replay(0, HAND) == priced
    assert (as_written[0][0], priced[0][0]) == (104, 146)
    assert (as_written[0][1], priced[0][1]) == (7 * 10 + 2 * 2, 7 * 10 + 5 * 2)
    with pytest.raises(ValueError, match="war_barriers='2' must be 0 or 1"):
        perf_params.make_params("base", {"war_barriers": "2"})


def test_replay_parameters_are_checked(kernels):
    raw, hooks = kernels
    perf_model.record(hooks, lambda: raw.perf_vector(1), {})
    with pytest.raises(ValueError, match="no_such_latency"):
        hooks.replay(0, {"no_such_latency": 1})
    with pytest.raises(IndexError):
        hooks.replay(5, {})


def test_replay_of_one_block(kernels):
    """``block=`` replays that block alone, as the whole launch's replay has it."""
    _copy(kernels, 3, 128, 64, 1, 0)
    hooks = kernels[1]
    rows = hooks.replay(0, HAND)
    assert [hooks.replay(0, HAND, block=b)[0] for b in range(3)] == rows and len(rows) == 3
    for bad in (3, -1):
        with pytest.raises(IndexError, match=f"no block {bad}"):
            hooks.replay(0, HAND, block=bad)


def test_an_api_without_its_hook_is_reported(kernels):
    raw, hooks = kernels
    with pytest.raises(perf_kernel.PerfHooksMissing, match="1 vector operation"):
        perf_model.record(hooks, raw.perf_unhooked, {})


def test_counting_is_off_outside_a_recording(kernels):
    raw, hooks = kernels
    hooks.clear()
    raw.perf_vector(1)
    assert hooks.counts()["launches"] == []


# --------------------------------------------------------------------------------------------------- the real kernel

CASES = (
    (3, 100, "float32", "fwd"),
    (49, 4097, "bfloat16", "bwd"),
    (130, 128, "bfloat16", "bwd"),
    (7, 12288, "float16", "fwd"),  # streamed forward
    (5, 8192, "float32", "bwd"),  # tiled backward
)


def _counts(rec: perf_results.ModelRecord):
    return [(lr.kernel, lr.blocks, [b.to_dict() for b in lr.block], lr.block_cycles) for lr in rec.launches]


@pytest.mark.parametrize(("rows", "hidden", "dtype", "direction"), CASES)
def test_fast_mode_counts_what_full_mode_counts(rows, hidden, dtype, direction):
    fast = perf_model.model(rows, hidden, dtype, direction, cores=8, fast=True)
    full = perf_model.model(rows, hidden, dtype, direction, cores=8, fast=False)
    assert _counts(fast) == _counts(full)
    assert fast.predicted_us == full.predicted_us and fast.gm_bytes == full.gm_bytes


def test_counts_do_not_depend_on_block_order(monkeypatch):
    runs = []
    for seed in ("1", "2", None):
        if seed is None:
            monkeypatch.delenv("ASCEND_RMSNORM_EMU_SEED", raising=False)
        else:
            monkeypatch.setenv("ASCEND_RMSNORM_EMU_SEED", seed)
        rec = perf_model.model(300, 1000, "bfloat16", "fwd+bwd", cores=7)
        runs.append((_counts(rec), rec.predicted_us, rec.dominant, rec.ablation_us))
    assert runs[0] == runs[1] == runs[2]


def test_only_the_backward_relies_on_the_pipe_order_inside_a_window():
    """docs/design.md §9: the forward's look-ahead starts the next group's sums only after the tail's
    last read of the work buffer, so no forward window overwrites what another of its instructions read;
    the backward's lag (group path) and its staggered pieces (tiled path) do, and ``war_barriers``
    prices the barriers those would need."""
    sets = {"base": perf_params.PRESETS["base"], "fenced": perf_params.PRESETS["base"].replace(war_barriers=1.0)}

    def model(rows, hidden, direction):
        r = perf_model.model_presets(rows, hidden, "bfloat16", direction, sets, soc="Ascend910B2", ablate=False)
        return r, sum(b.overwrites for b in r["base"].launches[0].block)

    for rows, hidden in ((2048, 4096), (4096, 256)):  # look-ahead plans, 2 and 48 rows a group
        r, overwrites = model(rows, hidden, "fwd")
        assert r["base"].path.startswith("group") and overwrites == 0
        assert r["fenced"].predicted_us == r["base"].predicted_us
    for rows, hidden in ((1024, 256), (512, 4096), (40, 8192)):  # group path with the lag; tiled
        r, overwrites = model(rows, hidden, "bwd")
        assert overwrites > 0 and r["fenced"].predicted_us > r["base"].predicted_us


def test_model_record_adds_up():
    rows, hidden = 96, 1000
    rec = perf_model.model(rows, hidden, "bfloat16", "fwd", cores=5)
    assert rec.launch_blocks == [5] and rec.blocks == 5
    # any correct forward writes y and rstd exactly once and touches nothing but its tensors
    assert rec.gm("y").write == rows * hidden * 2 and rec.gm("rstd").write == 4 * rows
    assert rec.gm("x").read >= rows * hidden * 2 and rec.gm("w").read >= 5 * hidden * 2
    assert set(rec.tensors) <= {"x", "w", "y", "rstd"}
    assert rec.gm_bytes == sum(t.bytes for t in rec.tensors.values())
    (launch,) = rec.launches
    assert launch.gm_bytes == sum(b.gm_read + b.gm_write for b in launch.block)
    assert launch.kernel_cycles == max(launch.block_cycles)
    assert rec.predicted_us == pytest.approx(launch.kernel_cycles / 1800 + 5.0)
    assert rec.roofline_us == pytest.approx(rec.min_bytes / 1.6e6)
    assert rec.min_bytes == perf_results.min_bytes(rows, hidden, "bfloat16", "fwd", 5)
    bwd = perf_model.model(rows, hidden, "bfloat16", "bwd", cores=5)
    both = perf_results.combine(rec, bwd)
    assert both.predicted_us == pytest.approx(rec.predicted_us + bwd.predicted_us)
    assert both.min_bytes == rec.min_bytes + bwd.min_bytes and both.launches == rec.launches + bwd.launches


def test_table_columns_stay_aligned_for_long_paths():
    import dataclasses

    from ascend_rmsnorm.cli.perfmodel import format_table

    rec = perf_model.model(96, 1000, "bfloat16", "fwd", cores=5)
    recs = [dataclasses.replace(rec, path=p) for p in ("group(1)", "group(96)/group(32)", "stream(1)/tiled(1)x")]
    head, _, *rows = format_table(recs).splitlines()
    at = head.index("blocks")
    for row, r in zip(rows, recs):
        assert row.index(r.path) < at and row[at - 1] == " " and row[at:].startswith("5 ")


def test_min_bytes_by_hand():
    # fwd bf16 1024x4096 on 48 blocks: x + y + rstd + w per block
    assert perf_results.min_bytes(1024, 4096, "bfloat16", "fwd", 48) == 2 * 1024 * 4096 * 2 + 4 * 1024 + 4096 * 2 * 48
    # bwd fp32 with a bf16 weight on 16 blocks: x + dy + dx + rstd + w per block + fp32 dw row per block
    assert perf_results.min_bytes(1024, 4096, "float32", "bwd", 16, w_dtype="bfloat16") == (
        3 * 1024 * 4096 * 4 + 4 * 1024 + 4096 * 2 * 16 + 4096 * 4 * 16
    )
    min_bytes = perf_results.min_bytes
    assert min_bytes(8, 128, "float16", "fwd+bwd", (8, 1)) == min_bytes(8, 128, "float16", "fwd", 8) + (
        min_bytes(8, 128, "float16", "bwd", 1)
    )


def test_the_floor_preset_is_bandwidth_and_launches_only():
    # 96 rows on 48 cores: one group of 2 rows per block, so with no latency and no pipe work a block
    # loads, then stores; MTE2 and MTE3 split the core's share of HBM in the launch's read:write
    # ratio (the same in every block here), so each takes the block's bytes over the share
    rec = perf_model.model(96, 4096, "bfloat16", "fwd", soc="Ascend910B2", preset="floor", ablate=False)
    (launch,) = rec.launches
    per_block = {sum(t.read + t.write for t in b.gm.values()) for b in launch.block}
    assert len(per_block) == 1
    share = perf_soc.soc_hbm_gbps("Ascend910B2") * 1e3 / 48  # bytes per µs of one core
    assert rec.predicted_us == pytest.approx(5.0 + 2 * per_block.pop() / share, rel=1e-6)
    # many groups per block: loads and stores overlap, and nothing beats the bandwidth
    big = perf_model.model(8192, 4096, "bfloat16", "fwd", soc="Ascend910B2", preset="floor", ablate=False)
    busiest = max(sum(t.read + t.write for t in b.gm.values()) for b in big.launches[0].block)
    assert 5.0 + busiest / share <= big.predicted_us < 5.0 + 1.1 * busiest / share


def test_the_command_line_offers_every_preset_and_no_other(capsys):
    from ascend_rmsnorm.cli.main import build_parser

    for name in perf_params.PRESETS:
        assert build_parser().parse_args(["bench", "--model", "--preset", name]).preset == name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--model", "--preset", "fast"])
    choices = capsys.readouterr().err.split("choose from")[1]
    assert sorted(c.strip(" '\n)") for c in choices.split(",")) == sorted(perf_params.PRESETS)


def test_presets_order_and_overrides(tmp_path):
    shape = (256, 2048, "bfloat16", "bwd")
    t = {n: perf_model.model(*shape, cores=8, preset=n, ablate=False).predicted_us for n in perf_params.PRESETS}
    assert t["floor"] < t["opt"] < t["base"] < t["pess"]  # every latency of opt <= base <= pess, launch cost too
    base = perf_model.model(*shape, cores=8, ablate=False)
    cfg = tmp_path / "measured.json"
    cfg.write_text(json.dumps({"preset": "base", "launch_us": 0, "comment": "no launch cost"}))
    free = perf_model.model(*shape, cores=8, params=perf_params.make_params(json_file=cfg), ablate=False)
    assert free.predicted_us == pytest.approx(base.predicted_us - 5.0 * len(base.launches))
    assert free.preset == "custom"
    # params equal to the named preset are that preset (bench --model passes them explicitly)
    assert perf_model.model(*shape, cores=8, params=perf_params.PRESETS["pess"], preset="pess").preset == "pess"
    slow = perf_params.make_params("base", {"gm_latency_us": "1.5"}, cfg)
    assert (slow.gm_latency_us, slow.launch_us) == (1.5, 0.0)
    cfg.write_text(json.dumps({"preset": "pess", "launch_us": 7}))  # the file's preset is where it starts
    assert perf_params.make_params(json_file=cfg) == perf_params.PRESETS["pess"].replace(launch_us=7.0)
    with pytest.raises(ValueError, match="unknown model parameter"):
        perf_params.make_params("base", {"gm_latncy_us": 1})
    with pytest.raises(ValueError, match="finite and >= 0"):
        perf_params.make_params("base", {"gm_latency_us": "-1"})
    with pytest.raises(ValueError, match="unknown preset"):
        perf_params.make_params("fastest")


def test_from_source_builds_a_given_kernel(tmp_path):
    """A copy of the package's kernel built through from_source counts what the default library counts."""
    source = tmp_path / "copy.asc"
    source.write_bytes((emu.KERNELS / "rmsnorm.asc").read_bytes())
    kernel = perf_kernel.ModelKernel.from_source(source, cache_dir=tmp_path / "builds")
    again = perf_kernel.ModelKernel.from_source(source, cache_dir=tmp_path / "builds")
    assert kernel.path == again.path  # built once per content
    a = perf_model.model(70, 300, "float16", "bwd", cores=4, kernel=kernel)
    b = perf_model.model(70, 300, "float16", "bwd", cores=4)
    assert _counts(a) == _counts(b)


def test_a_folder_named_like_a_header_beside_the_source_is_no_header(tmp_path):
    """``*.h`` beside the source matched folders too, and copying one (``notes.h/``) stopped the build
    with IsADirectoryError; only files are headers."""
    source = tmp_path / "copy.asc"
    source.write_bytes((emu.KERNELS / "rmsnorm.asc").read_bytes())
    (tmp_path / "notes.h").mkdir()
    (tmp_path / "mine.h").write_text("// mine\n")
    found = perf_kernel._kernel_headers(source)
    assert "notes.h" not in found and found["mine.h"] == tmp_path / "mine.h"


# --------------------------------------------------------------------------------------------------- the command


def test_bench_model_json_keys_and_types(capsys):
    argv = ["bench", "--model", "--json", "--shape", "64x256", "--shape", "3x100", "--dtype", "float16"]
    assert cli_main.main([*argv, "--soc", "Ascend910B2", "--soc", "Ascend910_9362"]) == 0
    out = json.loads(capsys.readouterr().out)
    recs = out["records"]
    assert len(recs) == 2 * 2 * 3
    socs, shapes = ("Ascend910B2", "Ascend910_9362"), ((64, 256), (3, 100))
    want = {(soc, r, h, d) for soc in socs for r, h in shapes for d in perf_params.DIRECTIONS}
    assert {(r["soc"], r["rows"], r["hidden"], r["direction"]) for r in recs} == want
    types = {
        "rows": int, "hidden": int, "dtype": str, "direction": str, "soc": str, "cores": int, "blocks": int,
        "predicted_us": float, "pooled_us": float, "roofline_us": float, "gm_bytes": int, "min_bytes": int,
    }  # fmt: skip
    for r in recs:
        for key, typ in types.items():
            assert isinstance(r[key], typ), (key, r[key])
        assert r["dtype"] == "float16" and r["cores"] == {"Ascend910B2": 48, "Ascend910_9362": 40}[r["soc"]]
        assert r["preset"] == out["model"]["preset"] == "base"  # the preset's own prices, named so
        assert r["predicted_us"] > r["roofline_us"] > 0 and r["gm_bytes"] >= r["min_bytes"] * 0.5
        assert r["pooled_us"] <= r["predicted_us"]  # bw_pool=1 beside the static share, never slower
        assert r["dominant"].split(" > ")[0] in perf_results.ABLATION_TERMS
    by = {(r["soc"], r["rows"], r["direction"]): r for r in recs}
    for soc in ("Ascend910B2", "Ascend910_9362"):
        f, b, fb = (by[(soc, 64, d)] for d in perf_params.DIRECTIONS)
        assert fb["predicted_us"] == pytest.approx(f["predicted_us"] + b["predicted_us"])
        assert fb["pooled_us"] == pytest.approx(f["pooled_us"] + b["pooled_us"])
        assert fb["min_bytes"] == f["min_bytes"] + b["min_bytes"] and fb["gm_bytes"] == f["gm_bytes"] + b["gm_bytes"]
    assert out["model"]["params"]["launch_us"] == 5.0


def test_bench_model_text_and_errors(capsys):
    assert cli_main.main(["bench", "--model", "--shape", "8x128", "--dtype", "bfloat16", "--direction", "fwd"]) == 0
    out = capsys.readouterr()
    assert "Ascend910B2" in out.out and "Ascend910_9362" in out.out and "8x128" in out.out
    assert "pooled µs" in out.out.splitlines()[1] and "bw_pool=1" in out.out.splitlines()[-1]
    assert "model [1/2]" in out.err  # progress on stderr
    assert cli_main.main(["bench", "--model", "--shape", "8by128"]) == 2
    assert "ROWSxHIDDEN" in capsys.readouterr().err
    assert cli_main.main(["bench", "--model", "--soc", "Ascend310P"]) == 2
    assert "--cores" in capsys.readouterr().err
    assert cli_main.main(["bench", "--model", "--shape", "8x128", "--param", "nope=1"]) == 2
    assert cli_main.main(["bench", "--model", "--shape", "8x128", "--cores", "0"]) == 2
    assert cli_main.main(["bench", "--model", "--kernel-source", "/nonexistent/rmsnorm.asc"]) == 2
    assert cli_main.main(["bench", "--shape", "8x128"]) == 2  # model-only flag without --model
    assert "--shape goes with --model only" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--param", "hbm_gbps"], "--param wants NAME=VALUE, got 'hbm_gbps'"),
        (["--param", "=3"], "--param wants NAME=VALUE, got '=3'"),
        (["--soc", "Ascend999", "--cores", "4"], "no HBM bandwidth known for SoC 'Ascend999': pass --param hbm_gbps="),
    ],
)
def test_bench_model_options_that_make_no_model_are_a_usage_error_that_says_what_to_pass(argv, says, capsys):
    assert cli_main.main(["bench", "--model", "--shape", "8x128", *argv]) == 2
    err = capsys.readouterr().err
    assert f"ascend-rmsnorm: bench --model: {says}" in err, err
