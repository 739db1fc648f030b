"""What the perf model knows of each SoC: AI-core counts and peak HBM bandwidth (with sources)."""

from __future__ import annotations

#: Vector (AIV) cores per SoC (prefix match, longest first): 910B1/B2/B2C and 910_9381-9392 have 48,
#: 910B3/B4 and 910_9362/9372 have 40 (docs/perf-model.md).
SOC_CORES = {
    "Ascend910B1": 48,
    "Ascend910B2": 48,
    "Ascend910B2C": 48,
    "Ascend910B3": 40,
    "Ascend910B4": 40,
    "Ascend910_9381": 48,
    "Ascend910_9382": 48,
    "Ascend910_9391": 48,
    "Ascend910_9392": 48,
    "Ascend910_9362": 40,
    "Ascend910_9372": 40,
}
DEFAULT_SOCS = ("Ascend910B2", "Ascend910_9362")


def check_cores(cores: int | None, name: str = "cores") -> None:
    """ValueError unless ``cores`` is None (the SoC's) or a block count a launch can have (a uint16)."""
    if cores is not None and not 1 <= cores <= 65535:
        raise ValueError(f"{name} must be in [1, 65535], got {cores}")


def soc_cores(soc: str) -> int | None:
    for prefix, cores in sorted(SOC_CORES.items(), key=lambda kv: -len(kv[0])):
        if soc.startswith(prefix):
            return cores
    return None


def soc_hbm_gbps(soc: str) -> float | None:
    return peak_for(soc)[0]


#: Peak HBM bandwidth per SoC family in GB/s, with where the number comes from.
PEAK_HBM = {
    "Ascend910B1": (1600, "vendor figure for 910B1/B2/B3 (64 GB HBM2e), via JiusiServe/light-llm-simulator"),
    "Ascend910B2": (1600, "vendor figure for 910B1/B2/B3 (64 GB HBM2e), via JiusiServe/light-llm-simulator"),
    "Ascend910B2C": (1600, "vendor figure for 910B2C, via JiusiServe/light-llm-simulator"),
    "Ascend910B3": (1600, "vendor figure for 910B1/B2/B3 (64 GB HBM2e), via JiusiServe/light-llm-simulator"),
    "Ascend910B4": (800, "vendor figure for 910B4 (32 GB), via JiusiServe/light-llm-simulator"),
    "Ascend910_93": (1600, "per die of an Atlas A3 (910_93xx), via JiusiServe/light-llm-simulator"),
    "Ascend950PR": (1600, "950PR HiBL 1.0 128 GB, press coverage"),
    "Ascend950DT": (4000, "950DT HiZQ 2.0 144 GB, press coverage"),
}


def peak_for(soc: str | None) -> tuple[float | None, str | None]:
    if not soc:
        return None, None
    for prefix, (gbps, source) in sorted(PEAK_HBM.items(), key=lambda kv: -len(kv[0])):
        if soc.startswith(prefix):
            return float(gbps), source
    return None, None
