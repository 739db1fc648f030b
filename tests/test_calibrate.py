"""The stress preset and the calibration of the performance model (``bench --calibrate``)."""

from __future__ import annotations

import dataclasses

import pytest

from ascend_rmsnorm.cli import perfmodel as pm


def test_stress_is_base_with_the_five_worst_prices():
    base, stress = dataclasses.asdict(pm.PRESETS["base"]), dataclasses.asdict(pm.PRESETS["stress"])
    changed = {k: v for k, v in stress.items() if base[k] != v}
    assert changed == {
        "vec_latency_cycles": 80.0,
        "vec_cycles_per_repeat": 1.5,
        "dma_burst_cycles": 30.0,
        "hbm_fraction": 0.85,
        "launch_us": 10.0,
    }


def test_hbm_fraction_slows_the_kernel_not_the_roofline():
    shape = (64, 1024, "float32", "fwd")
    full = pm.model(*shape, cores=4, preset="floor", ablate=False)
    slow = pm.model(*shape, cores=4, params=pm.PRESETS["floor"].replace(hbm_fraction=0.5), ablate=False)
    assert slow.roofline_us == full.roofline_us
    kernel = [lr.kernel_us for lr in full.launches], [lr.kernel_us for lr in slow.launches]
    assert kernel[1] == pytest.approx([2 * k for k in kernel[0]])  # floor: bandwidth is all there is
    with pytest.raises(ValueError, match="hbm_fraction must be > 0"):
        pm.make_params("base", {"hbm_fraction": "0"})
