"""Pooled bandwidth (``bw_pool``, docs/perf-model.md §2): 0 is the static share, bit for bit; pooling is
never slower, and faster where blocks finish unevenly or leave cores idle; bad values are refused.

No timing is measured here: every number compared is a replayed cycle figure or a hand computation.
"""

from __future__ import annotations

import perf_kernels
import pytest
import torch

from ascend_rmsnorm.cli import main as cli_main
from ascend_rmsnorm.perf import calibrate
from ascend_rmsnorm.perf import model as perf_model
from ascend_rmsnorm.perf import params as perf_params

FLOOR = perf_params.PRESETS["floor"]  # bandwidth only: every time below is bytes over a rate


@pytest.fixture(scope="module")
def copy_kernel(tmp_path_factory):
    """tests/support/perf_kernels.cpp's copy kernel, built against kernels/emu with its perf hooks."""
    return perf_kernels.build(tmp_path_factory.mktemp("perf_kernels"))


def test_pooled_finish_by_hand():
    # two blocks on two cores: the one needing 2 share-cycles runs at 1 share until the other ends
    # at 1, then at both shares: 1 + (2 - 1) / 2
    assert perf_model.pooled_finish(2.0, [1.0], capacity=2, pool=1.0) == 1.5
    assert perf_model.pooled_finish(2.0, [1.0], capacity=2, pool=0.0) == 2.0  # the static share
    assert perf_model.pooled_finish(2.0, [1.0], capacity=2, pool=0.5) == 1 + 1 / 1.5
    # the first to finish had company all along; 2 busy blocks of 48 cores draw 24 shares each
    assert perf_model.pooled_finish(1.0, [2.0], capacity=2, pool=1.0) == 1.0
    assert perf_model.pooled_finish(48.0, [5.0], capacity=48, pool=1.0) == 2.0


@pytest.mark.parametrize("boost", (1.0, 2.0))
def test_idle_cores_by_hand(copy_kernel, boost):
    """2 blocks of the copy kernel on 8 cores, bandwidth only: each block loads 4 chunks of 1 KiB and a
    120-byte tail and stores them behind, MTE2 and MTE3 at half the block's rate r each, so it ends
    (1024 + 4 * 1024 + 120) / (r / 2) cycles after it starts. Static r = HBM/8 (x bw_boost_max);
    pooled, the 2 busy blocks draw 1 + f * (capacity - 2) / 2 static shares each."""
    raw, hooks = copy_kernel
    src = torch.zeros(2 * (1024 + 30))
    dst = torch.zeros_like(src)
    share = 1600.0 / 8 / FLOOR.clock_ghz * boost  # bytes per cycle of one block
    capacity = 8 / boost
    for pool in (0.0, 0.5, 1.0):
        launches = perf_model.record(
            hooks, lambda: raw.perf_copy(src.data_ptr(), dst.data_ptr(), 2, 1024, 256, 3, 30, 2), {"src": src},
        )  # fmt: skip
        perf_model.time_launches(hooks, launches, FLOOR.replace(bw_boost_max=boost, bw_pool=pool), 8, 1600.0, False)
        draw = 1 + pool * (capacity - 2) / 2
        assert launches[0].block_cycles == pytest.approx([(5 * 1024 + 120) / (share * draw / 2)] * 2, rel=1e-12)
        if pool == 0:  # the static share exactly, as one replay of the whole launch
            assert launches[0].mte2_bytes_per_cycle == share / 2
            static = perf_model._c_params(FLOOR.replace(bw_boost_max=boost), 8, 1600.0, 2, 1, 1)
            assert launches[0].block_cycles == [row[0] for row in hooks.replay(0, static)]
    hooks.clear()


def test_uneven_blocks_finish_sooner_and_never_later():
    """64x4096 on 48 cores: the blocks with one row (group) end early and leave their share to the rest."""
    sets = {"static": perf_params.PRESETS["base"], "pooled": perf_params.PRESETS["base"].replace(bw_pool=1.0)}
    recs = perf_model.model_presets(64, 4096, "bfloat16", "fwd+bwd", sets, soc="Ascend910B2", ablate=False, pooled=True)
    static, pooled = recs["static"], recs["pooled"]
    assert static.params.bw_pool == 0.0  # the default
    assert static.pooled_us == pytest.approx(pooled.predicted_us, rel=1e-12) and pooled.pooled_us == static.pooled_us
    assert pooled.predicted_us < static.predicted_us
    for s, p in zip(static.launches, pooled.launches):
        assert all(b <= a for a, b in zip(s.block_cycles, p.block_cycles))
        assert len(set(s.block_cycles)) > 1  # uneven in the static replay
        # the slowest block's rate is the average pooled draw over its own lifetime (the fixed point)
        g = p.mte2_bytes_per_cycle / s.mte2_bytes_per_cycle
        others = p.block_cycles[: p.slowest_block] + p.block_cycles[p.slowest_block + 1 :]
        end = perf_model.pooled_finish(p.kernel_cycles * g, others, 48, 1.0)
        assert end == pytest.approx(p.kernel_cycles, rel=1e-3)


def test_pooling_never_draws_more_than_hbm():
    """Bandwidth only, 1000 rows on 48 cores (not divisible): pooled, no launch beats its bytes over HBM."""
    sets = {"static": FLOOR, "pooled": FLOOR.replace(bw_pool=1.0)}
    recs = perf_model.model_presets(1000, 4096, "bfloat16", "bwd", sets, soc="Ascend910B2", ablate=False)
    for s, p in zip(recs["static"].launches, recs["pooled"].launches):
        assert p.gm_bytes / 1.6e6 <= p.kernel_us <= s.kernel_us
    assert recs["pooled"].predicted_us < recs["static"].predicted_us


def test_bad_values_are_refused(capsys):
    for bad in ("1.5", "-0.1", "nan"):
        with pytest.raises(ValueError, match=r"bw_pool=.* must be in \[0, 1\]"):
            perf_params.make_params("base", {"bw_pool": bad})
    assert perf_params.make_params("base", {"bw_pool": "0.25"}).bw_pool == 0.25
    assert cli_main.main(["bench", "--model", "--shape", "8x128", "--param", "bw_pool=2"]) == 2
    assert "must be in [0, 1]" in capsys.readouterr().err
    # the calibration fits the static share: it refuses a pooled closed loop before running anything
    kw = dict(emu=True, preset=None, param_file=None, socs=None, cores=None, as_json=False, out=None)
    assert calibrate.main(param_items=["bw_pool=1"], **kw) == 2
    assert "static share" in capsys.readouterr().err
