"""The stress preset and the calibration of the performance model (``bench --calibrate``)."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import os
import types

import pytest
import torch
from jit_helpers import NOBODY, as_root

from ascend_rmsnorm import _log as ascend_log
from ascend_rmsnorm.cli import main as cli_main
from ascend_rmsnorm.errors import CacheWriteError
from ascend_rmsnorm.perf import calibrate as cal
from ascend_rmsnorm.perf import kernel as perf_kernel
from ascend_rmsnorm.perf import model as perf_model
from ascend_rmsnorm.perf import params as perf_params
from ascend_rmsnorm.perf import results as perf_results


def test_stress_is_base_with_the_five_worst_prices():
    base, stress = dataclasses.asdict(perf_params.PRESETS["base"]), dataclasses.asdict(perf_params.PRESETS["stress"])
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
    full = perf_model.model(*shape, cores=4, preset="floor", ablate=False)
    slow = perf_model.model(
        *shape, cores=4, params=perf_params.PRESETS["floor"].replace(hbm_fraction=0.5), ablate=False
    )
    assert slow.roofline_us == full.roofline_us
    kernel = [lr.kernel_us for lr in full.launches], [lr.kernel_us for lr in slow.launches]
    assert kernel[1] == pytest.approx([2 * k for k in kernel[0]])  # floor: bandwidth is all there is
    with pytest.raises(ValueError, match="hbm_fraction must be > 0"):
        perf_params.make_params("base", {"hbm_fraction": "0"})


# --------------------------------------------------------------------------------------------------- calibration

SOC, CORES = "Ascend910B2", 48
REQUIRED = (
    "vec_latency_cycles",
    "vec_cycles_per_repeat",
    "dma_burst_cycles",
    "pipe_flag_latency_cycles",
    "launch_us",
    "hbm_gbps",
)
SETS = {
    **{name: perf_params.PRESETS[name] for name in ("base", "pess", "opt", "stress")},
    **{f"seed{s}": cal.random_params(s) for s in (1, 2, 3)},
    # a vec_rate instruction waits a barrier's latency for the one before (the war_barriers what-if)
    "stress, war_barriers": perf_params.PRESETS["stress"].replace(war_barriers=1.0),
    "seed1, war_barriers": cal.random_params(1).replace(war_barriers=1.0),
}


def test_random_sets_lie_inside_the_plausible_range_and_move_every_fitted_field():
    base = perf_params.PRESETS["base"]
    for seed in (1, 2, 3):
        p = cal.random_params(seed)
        assert p == cal.random_params(seed)  # seeded
        for name, (lo, hi) in cal.PLAUSIBLE.items():
            assert lo <= getattr(p, name) <= hi
            assert getattr(p, name) != getattr(base, name)


@pytest.mark.parametrize("name", list(SETS))
def test_the_closed_loop_gives_back_every_configured_price(name):
    """The calibration kernels, replayed through the emulation's pipe model with one Params, fitted:
    each field what was configured, to rounding (1e-9 relative; 0 configured: 1e-9 absolute): the model is
    linear in each kernel's size, so any bias in how the fit parts the prices shows; every probe is in its line."""
    p = SETS[name]
    points = cal.measure(cal.EmuRunner(p, SOC, CORES), cal.plan(CORES))
    fitres = cal.assess(points, CORES, p.clock_ghz, cal.EMU_SIZES, SOC)
    assert fitres.refused == {}  # the model's own data passes every check before writing
    conf = cal.configured(p, SOC, CORES)
    err = cal.relative_errors(conf, fitres.fitted)
    for field in REQUIRED:
        assert field in conf
    assert {k: e for k, e in err.items() if e > 1e-9} == {}
    assert sum(len(line.residuals) for line in fitres.lines.values()) == len(points)
    assert max(fitres.residuals.values()) < 1e-6  # the model is linear in each kernel's size
    assert fitres.mte_sharing == pytest.approx(2.0)  # the model splits one core's share between MTE2 and MTE3
    gather = fitres.repeat_cycles.pop("Gather")  # 5 elements a cycle, not a 256-byte repeat
    assert gather == pytest.approx(p.vec_cycles_per_repeat * ((64 * 32 + 4) // 5) / 32)
    assert fitres.repeat_cycles == pytest.approx(dict.fromkeys(fitres.repeat_cycles, p.vec_cycles_per_repeat))


def _last_operands(api: str) -> tuple[int, int, int]:
    """UB addresses (dst, src0, src1) of the emulation's last count-form ``api`` instruction on this thread."""
    fn = cal.emu_library().raw.ascend_rmsnorm_emu_last_operands
    fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32)], ctypes.c_int32
    out = (ctypes.c_uint32 * 3)()
    assert fn(api.encode(), out) == 1
    return out[0], out[1], out[2]


def _run_full(probe: cal.Probe) -> tuple[list[perf_results.LaunchResult], dict[str, torch.Tensor]]:
    lib = cal.emu_library()
    hooks = perf_kernel.PerfHooks(lib.raw, lib.path)
    bufs = {n: torch.zeros(max(b, 32), dtype=torch.uint8) for n, b in probe.buffers()}
    ptrs = [t.data_ptr() for t in bufs.values()]
    launches = perf_model.record(hooks, lambda: lib.call(probe, ptrs, None), bufs, fast=False)
    hooks.clear()
    return launches, bufs


def test_every_calibration_kernel_runs_in_the_strict_emulation_and_does_what_it_says():
    """Full mode (data moved, every rule checked) for one size of each line; the counts show the work
    each kernel claims, and the chains' results show each step ran after the one before."""
    seen = set()
    for probe in cal.plan(8):
        if probe.line in seen:
            continue
        seen.add(probe.line)
        launches, bufs = _run_full(probe)
        block = launches[0].block[0]
        if probe.kernel == "empty":
            assert len(launches) == probe.x and block.ops == 0
            continue
        assert len(launches) == 1 and launches[0].blocks == probe.blocks
        out = bufs.get("out")
        if probe.kernel == "vec_chain":
            assert block.vector["Add"].instr == probe.x and block.barriers["PIPE_V"] == probe.x + 1
            assert block.vector["Add"].repeats == probe.x * probe.args[1]
            assert torch.equal(out.view(torch.float32), torch.full((64,), 1.0 + probe.x))
        elif probe.kernel == "vec_rate":
            op = probe.line.split(".")[1]
            api = "Add" if op == "AddApart" else op  # Add, its second source in another UB bank group
            extra = 1 if api == "Compare" else 0  # the mask Select reads, made once
            assert block.vector[api].instr == probe.x + extra
            if api != "Gather":  # Gather reports 5 elements a cycle, not repeats
                assert block.vector[api].repeats == (probe.x + extra) * probe.args[2]
            if api == "Add":
                assert torch.equal(out.view(torch.float32), torch.full((64,), 3.5))  # 1.5 + 2.0 from either source
                _, src0, src1 = _last_operands("Add")
                assert (src1 - src0) % 512 == (256 if op == "AddApart" else 0)  # UB bank groups: 16 of 32 bytes
        elif probe.kernel == "dma_bursts":
            assert block.dma_in == probe.x and block.bursts_in == probe.x * probe.args[1]
        elif probe.kernel == "stream":
            mode, chunks, size = probe.args
            assert all(b.dma_in == (chunks if mode & 1 else 0) for b in launches[0].block)
            assert all(b.dma_out == (chunks if mode & 2 else 0) for b in launches[0].block)
            assert launches[0].gm_bytes == probe.blocks * chunks * size * (2 if mode == 3 else 1)
        elif probe.kernel == "dma_chain":
            assert block.dma_in == probe.x and block.barriers["PIPE_MTE2"] == probe.x
            assert launches[0].gm_bytes == probe.x * probe.args[1]  # every step from bytes never read before
        elif probe.kernel == "flag_pingpong":  # flags alone (one chain, or two interleaved): no vector step, no write
            n = probe.x * probe.args[1]
            assert block.flags["V_MTE3"] == (n + 1, n + 1) and block.flags["MTE3_V"] == (n, n)
            assert block.vector["Duplicate"].instr == 1 and block.dma_out == 1 and not block.barriers
            assert torch.equal(out.view(torch.float32), torch.full((64,), float(probe.x)))
        elif probe.kernel == "vec_spread":  # independent Adds, a barrier window every calibrate.SPREAD
            assert block.vector["Add"].instr == probe.x and block.barriers["PIPE_V"] == probe.x // cal.SPREAD + 1
            assert torch.equal(out.view(torch.float32), torch.full((64,), 3.5))
    assert seen == {p.line for p in cal.plan(8)}


def test_the_calibration_library_is_its_own_cache_entry():
    from ascend_rmsnorm.backends.emu import EMU_ARCH
    from ascend_rmsnorm.jit import cache, toolchain

    tc = toolchain.emu_toolchain()
    main, calib = cache.build_spec(tc, EMU_ARCH), cache.build_spec(tc, EMU_ARCH, kernel="calibrate")
    assert main.key != calib.key and calib.key_input["kernel"] == "calibrate"
    assert calib.argv[-3].endswith("src/calibrate.asc")
    assert cal.emu_library().path.parent.name == calib.key
    with pytest.raises(ValueError, match="unknown kernel library"):
        cache.build_spec(tc, EMU_ARCH, kernel="nope")
    # `cache verify` checks it as the calibration library it is: loaded as the rmsnorm library it would
    # lack that ABI symbol and a good build would be quarantined
    from ascend_rmsnorm.errors import LibraryLoadError
    from ascend_rmsnorm.jit import admin, verify

    entry = cal.emu_library().path.parent
    with pytest.raises(LibraryLoadError, match="ascend_rmsnorm_abi_version"):
        verify.load_entry(entry)
    assert admin.verify_entry(admin.Entry(entry, "cache", None, None)) == ("ok", None)
    assert entry.is_dir()
    with pytest.raises(LibraryLoadError, match="it does not export ascend_rmsnorm_no_such_symbol$"):
        admin._check_exports(entry, "ascend_rmsnorm_no_such_symbol")  # what a build lacking its symbol gets
    buf = torch.zeros(4096, dtype=torch.uint8)
    gm = [buf.data_ptr()]  # not null: a null pointer is refused before the argument each check names
    with pytest.raises(cal.CalibrationError, match="vec_chain.*an argument out of range"):
        cal.emu_library().call(cal.Probe("x", "vec_chain", (1, 65), 1, 1), gm, None)  # 65 repeats: over kMaxRepeats
    with pytest.raises(cal.CalibrationError, match="dma_bursts.*out of range"):  # every block would read the same bytes
        cal.emu_library().call(cal.Probe("x", "dma_bursts", (1, 2, 32), 2, 1), gm, None)
    with pytest.raises(cal.CalibrationError, match="dma_bursts.*out of range"):  # bursts longer than their pitch
        cal.emu_library().call(cal.Probe("x", "dma_bursts", (1, 2, cal.BURST_PITCH + 32), 1, 1), gm, None)


def test_a_launch_the_runtime_refuses_is_a_calibration_error_with_its_code():
    lib = cal.emu_library()
    refuse = lib.raw.ascend_rmsnorm_emu_refuse_launch
    refuse.argtypes, refuse.restype = [ctypes.c_int64, ctypes.c_int32], None
    out = torch.zeros(64)
    refuse(0, 507035)
    try:
        with pytest.raises(cal.CalibrationError, match="calib_vec_chain.*refused a kernel launch .ACL error 507035"):
            lib.call(cal.Probe("x", "vec_chain", (3, 1), 1, 1), [out.data_ptr()], None)
    finally:
        refuse(-1, 0)
    lib.call(cal.Probe("x", "vec_chain", (3, 1), 1, 1), [out.data_ptr()], None)  # the next launch runs


GM, GM2 = "gm", "gm2"  # in _LAUNCHERS: the test's two GM buffers


def _outside(**ranges) -> list[dict]:
    """One change per value: each argument alone, just outside its range."""
    return [{name: v} for name, values in ranges.items() for v in values]


#: calibrate.asc's launchers: (the arguments after the stream, in order, as a call each takes; calls at the
#: edges of its ranges, which it takes and runs; calls it refuses with status 1, one check failing in each)
_LAUNCHERS = {
    "vec_chain": (
        dict(blocks=1, out=GM, steps=1, repeats=1),
        [{"steps": 0}, {"repeats": 64}],
        _outside(blocks=(0, 2), out=(None,), steps=(-1, 2**20 + 1), repeats=(0, 65)),
    ),
    "vec_rate": (
        dict(blocks=1, out=GM, op=0, instrs=1, repeats=1),
        [{"instrs": 0}, {"repeats": 64}, *({"op": op, "repeats": r} for op in range(8) for r in (1, 2, 3))],
        _outside(blocks=(0, 2), out=(None,), op=(-1, 8), instrs=(-1, 2**20 + 1), repeats=(0, 65)),
    ),
    "vec_spread": (
        dict(blocks=1, out=GM, instrs=4, repeats=1),
        [{"repeats": 64}],
        # -4 and 2**20 + 4 are multiples of four, refused by the range alone; 2 by the multiple alone
        _outside(blocks=(0, 2), out=(None,), instrs=(-4, 2**20 + 4, 2), repeats=(0, 65)),
    ),
    "dma_bursts": (
        dict(blocks=1, src=GM, dmas=1, bursts=2, burst_bytes=32),
        [
            {"dmas": 0},
            {"bursts": 1, "burst_bytes": 65535},
            {"bursts": 128, "burst_bytes": 512},
            {"bursts": 2048, "burst_bytes": 1},
        ],  # the last three fill the 64 KiB UB buffer
        # 513 bytes: over the pitch of several bursts; 65536 bytes: over one burst's (and the 64 KiB buffer
        # holds them); 2049 bursts of 32 bytes, each in range: over the buffer (which alone refuses 4096 too:
        # no status tells the bursts' own bound of 4095 from the buffer's)
        [
            *_outside(blocks=(0, 2), src=(None,), dmas=(-1, 2**20 + 1), bursts=(0, 4096), burst_bytes=(0, 513)),
            {"bursts": 1, "burst_bytes": 65536},
            {"bursts": 2049, "burst_bytes": 32},
        ],
    ),
    "stream": (
        dict(blocks=1, src=GM, dst=GM2, mode=3, chunks=1, chunk_bytes=32),
        [{"chunks": 0}, {"mode": 1}, {"mode": 2}, {"chunk_bytes": 32768}, {"blocks": 3}],
        # 0 and 32800 are multiples of 32, refused by the range alone; 48 by the multiple alone
        _outside(
            blocks=(0, 65536), src=(None,), dst=(None,), mode=(0, 4), chunks=(-1, 2**20 + 1), chunk_bytes=(0, 32800, 48)
        ),
    ),
    "dma_chain": (
        dict(blocks=1, src=GM, steps=1, bytes=32),
        [{"steps": 0}, {"bytes": 32768}],
        _outside(blocks=(0, 2), src=(None,), steps=(-1, 2**20 + 1), bytes=(0, 32800, 48)),
    ),
    "flag_pingpong": (
        dict(blocks=1, out=GM, trips=1, chains=1),
        [{"trips": 0}, {"chains": 2}],
        _outside(blocks=(0, 2), out=(None,), trips=(-1, 2**20 + 1), chains=(0, 3)),
    ),
    "empty": (
        dict(blocks=1, launches=1),
        [{"launches": 0}, {"blocks": 65535, "launches": 0}, {"blocks": 3}],
        _outside(blocks=(0, 65536), launches=(-1, 2**20 + 1)),
    ),
}

#: out[0, 64) after vec_rate's instructions of each class (OP_CLASSES): 1.5 + 2.0, 1.5 * 2.0, nothing (Cast and
#: Compare write elsewhere), a by the mask a < b, a gathered in order, Brcb's 3.0, 1.5 + 2.0
_VEC_RATE_OUT = (3.5, 3.0, 0.0, 0.0, 1.5, 1.5, 3.0, 3.5)


def _out_written(name: str, a: dict) -> float | None:
    """What a call of ``name`` with arguments ``a`` writes to out[0, 64) (None: it has no out)."""
    if name == "vec_chain":
        return 1.0 + a["steps"]
    if name == "vec_spread":
        return 3.5
    if name == "vec_rate":
        return _VEC_RATE_OUT[a["op"]] if a["instrs"] else 0.0
    if name == "flag_pingpong":
        return float(a["trips"])
    return None


def _launcher(name: str, gm: torch.Tensor, gm2: torch.Tensor):
    """A call of calibrate.asc's launcher ``name`` (through ctypes, as CalibrationLibrary declares it) with
    _LAUNCHERS' arguments changed by its keywords, GM and GM2 being ``gm`` and ``gm2``: (status, arguments)."""
    fn = getattr(cal.emu_library().raw, f"ascend_rmsnorm_calib_{name}")
    pointers = {GM: gm.data_ptr(), GM2: gm2.data_ptr()}

    def call(**change) -> tuple[int, dict]:
        a = {k: pointers.get(v, v) if isinstance(v, str) else v for k, v in dict(_LAUNCHERS[name][0], **change).items()}
        return fn(None, *a.values()), a

    return call


def _gm() -> tuple[torch.Tensor, torch.Tensor]:
    """GM for _launcher: 1 MiB (the largest span a call of _LAUNCHERS reads: 2048 bursts 512 apart), and
    stream's dst."""
    return torch.zeros(2**20, dtype=torch.uint8), torch.zeros(2**16, dtype=torch.uint8)


@pytest.mark.parametrize("name", sorted(_LAUNCHERS))
def test_each_calibration_launcher_refuses_each_argument_out_of_its_range(name):
    """Every argument check of calibrate.asc's launchers on its own (the calibration's plans never pass such
    arguments, so no other test reaches them): each bound's value just outside is refused with status 1,
    and its edge is taken, runs and writes what it says. vec_rate runs each class at 1 to 3 repeats too,
    where its compare masks are under 32 bytes."""
    gm, gm2 = _gm()
    call = _launcher(name, gm, gm2)
    _, edges, refused = _LAUNCHERS[name]
    for change in ({}, *edges):
        gm.zero_()
        status, a = call(**change)
        assert status == 0, change
        want = _out_written(name, a)
        if want is not None:
            assert torch.equal(gm[:256].view(torch.float32), torch.full((64,), want)), change
    for change in refused:
        assert call(**change)[0] == 1, change


@pytest.mark.parametrize("name", sorted(_LAUNCHERS))
def test_each_calibration_launcher_reports_a_launch_the_runtime_refuses(name):
    """Each launcher launches through RMSNORM_LAUNCH (host/launch_check.h): a launch the runtime refuses is
    its status, the runtime's code, taken off the thread, and no block ran; a launch made while the thread
    holds an earlier call's error goes unchecked and leaves that error to its owner. empty stops at the
    launch refused (its second here)."""
    lib = cal.emu_library().raw
    refuse, set_error = lib.ascend_rmsnorm_emu_refuse_launch, lib.ascend_rmsnorm_emu_set_thread_error
    refuse.argtypes, refuse.restype = [ctypes.c_int64, ctypes.c_int32], None
    set_error.argtypes, set_error.restype = [ctypes.c_int32], None
    error = lib.ascend_rmsnorm_emu_thread_error
    error.restype = ctypes.c_int32
    gm, gm2 = _gm()
    call = _launcher(name, gm, gm2)
    try:
        refuse(0, 507035)
        assert call()[0] == 507035 and error() == 0
        assert not gm.any()  # nothing written: no block ran
        if name == "empty":
            refuse(1, 507036)
            assert call(launches=3)[0] == 507036 and error() == 0
        set_error(107002)  # as an earlier call of this thread would leave it
        assert call()[0] == 0 and error() == 107002
    finally:
        refuse(-1, 0)
        set_error(0)
    assert call()[0] == 0


def test_bench_calibrate_emu_json_and_its_file(tmp_path, capsys):
    out = tmp_path / "loop.json"
    argv = ["bench", "--calibrate", "--emu", "--preset", "pess", "--param", "war_barriers=1", "--json", "--out"]
    assert cli_main.main([*argv, str(out)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) >= {"configured", "fitted", "residuals"}
    assert set(got["configured"]) == set(got["fitted"]) == set(got["residuals"]) == set(cal.FITTED)
    assert got["fitted"]["launch_us"] == pytest.approx(10.0)
    assert got["fitted"]["war_barriers"] == pytest.approx(1.0)
    written = json.loads(out.read_text())
    assert written["calibration"]["source"] == "emulation" and written["comment"].startswith("bench --calibrate")
    p = perf_params.make_params(json_file=out)  # a --params file
    assert (p.launch_us, p.gm_latency_us, p.vec_latency_cycles) == pytest.approx((10.0, 1.0, 40.0))
    assert p.hbm_gbps is None and p.hbm_fraction == pytest.approx(1.0)
    assert p.war_barriers == 1.0  # the model's is 0 or 1: a fitted 0.97 is written as 1


def test_the_closed_loops_default_file_is_in_your_cache_root_and_never_taken_for_a_calibration(tmp_path, monkeypatch):
    """Not a fixed name in the shared temp dir (someone else could make that directory first, and the run
    would fail at its end), and not in calibration/, where bench --model looks."""
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(tmp_path / "cache"))
    path = cal.emu_result_path("stress", "Ascend910B2")
    assert path == tmp_path / "cache" / "emu-closed-loop" / "emu-closed-loop-stress-Ascend910B2.json"
    assert path.parent not in cal.calibration_dirs()
    cal.write_json(path, {"x": 1})
    assert json.loads(path.read_text()) == {"x": 1} and cal.find_calibration("Ascend910B2") is None


def _assessed(p: perf_params.Params) -> cal.Fit:
    """The closed loop's fit of the emulation run with ``p``, judged as on an NPU (``assess``)."""
    return cal.assess(cal.measure(cal.EmuRunner(p, SOC, CORES), cal.plan(CORES)), CORES, 1.8, cal.EMU_SIZES, SOC)


@pytest.fixture(scope="module")
def base_points():
    """The closed loop's measurements under base, once for the tests that perturb or refit them."""
    return cal.measure(cal.EmuRunner(perf_params.PRESETS["base"], SOC, CORES), cal.plan(CORES))


def test_a_closed_loops_result_put_in_calibration_is_never_taken_for_one(base_points, tmp_path, caplog):
    """`bench --calibrate --emu --out <cache>/calibration/calibration-<soc>-<cann>.json` wrote the closed
    loop's file there and said "bench --model never picks it up"; bench --model then modelled with it as
    "prices fitted on an NPU". A file whose record says it is the emulation's is passed over, with one
    warning naming it; an NPU calibration there, or a file with no record (made by hand), is still used,
    but not an NPU calibration of another SoC or CANN copied in under this one's name."""
    import logging

    fitres = cal.assess(base_points, CORES, 1.8, cal.EMU_SIZES, SOC)
    root = tmp_path / "cache"
    emu = cal.write_json(root / "calibration" / cal.calibration_name(SOC, "8.5.RC1"),
                         cal.params_file(fitres, SOC, "emulation", None))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert cal.find_calibration(SOC, "8.5.RC1", root) is None and cal.find_calibration(SOC, None, root) is None
        assert cal.model_params([SOC], root) == {}
    assert f"passed over {emu}: it was not measured on an NPU (source 'emulation')" in caplog.text
    npu = cal.write_json(root / "calibration" / cal.calibration_name(SOC, "8.3.RC1"),
                         cal.params_file(fitres, SOC, "npu events", "8.3.RC1"))  # fmt: skip
    assert cal.find_calibration(SOC, "8.5.RC1", root) == npu
    other = "Ascend910_9362" if SOC != "Ascend910_9362" else "Ascend910B2"
    for soc, cann in ((other, "8.3.RC1"), (SOC, "8.2.RC1")):  # copied in under 8.3.RC1's name
        copied = cal.write_json(root / "calibration" / cal.calibration_name(SOC, "8.3.RC1"),
                                cal.params_file(fitres, soc, "npu events", cann))  # fmt: skip
        ascend_log.reset()  # one warning per file and process
        with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
            assert cal.find_calibration(SOC, "8.3.RC1", root) is None, (soc, cann)
        why = f"it is the calibration of {soc!r}, CANN {cann!r}; fix: remove it, or give it the name"
        assert f"passed over {copied}: {why}" in caplog.text
    npu = cal.write_json(copied, cal.params_file(fitres, SOC, "npu events", "8.3.RC1"))
    assert cal.find_calibration(SOC, "8.3.RC1", root) == npu
    emu.write_text(json.dumps({"launch_us": 3.0}))
    assert cal.find_calibration(SOC, "8.5.RC1", root) == emu


def test_a_fitted_barrier_wait_is_written_as_the_models_0_or_1(base_points):
    """On an NPU the fitted war_barriers (a vec_rate instruction's own wait over the vector latency) is a
    ratio near 0 or 1; the file keeps it and gives the model, whose what-if is on or off, the nearer."""
    fitres = cal.fit(base_points, CORES, 1.8)
    for measured, model in ((0.97, 1.0), (0.85, 1.0), (0.15, 0.0), (-0.01, 0.0)):
        fitres.fitted["war_barriers"] = measured
        data = cal.params_file(fitres, SOC, "npu events", "8.5.RC1")
        assert data["war_barriers"] == model and data["calibration"]["war_barriers_fitted"] == measured


def test_a_field_one_bad_measurement_or_a_host_bound_line_would_set_is_not_written(base_points, tmp_path):
    """What an NPU's timings can do that the model's cannot: one preempted probe (3x), a line whose
    calls the host issued as slowly as the NPU ran them, a ratio that is neither 0 nor 1. Each field they
    would set is refused, named with why, left out of the file (the model keeps base's value), and the
    calibration exits 1; every other field is still written."""
    trips = [i for i, (pr, _) in enumerate(base_points) if pr.line == "flag_pingpong"]
    flag = max(trips, key=lambda i: base_points[i][0].x)
    points = list(base_points)
    points[flag] = (points[flag][0], 3 * points[flag][1])
    fitres = cal.assess(points, CORES, 1.8, cal.EMU_SIZES, SOC, host_bound=["launch"])
    assert "too noisy" in fitres.refused["pipe_flag_latency_cycles"]
    assert "host-bound points in launch" in fitres.refused["launch_us"]
    assert {"vec_latency_cycles", "dma_burst_cycles", "hbm_gbps", "war_barriers"}.isdisjoint(fitres.refused)
    data = cal.params_file(fitres, SOC, "npu events", "8.5.RC1")
    assert "pipe_flag_latency_cycles" not in data and "launch_us" not in data and "vec_latency_cycles" in data
    assert set(data["calibration"]["refused"]) == set(fitres.refused)
    fitres = cal.assess(base_points, CORES, 1.8, cal.EMU_SIZES, SOC)
    fitres.fitted["war_barriers"] = 0.5  # as an unmodelled per-instruction cost makes it
    fitres.refused = {}
    assert cal.params_file(fitres, SOC, "npu events", None)["war_barriers"] == 1.0  # params_file rounds...

    class Preempted(cal.EmuRunner):
        def __call__(self, probe):
            us = super().__call__(probe)
            return 3 * us if probe.line == "dma_chain" and probe.x == cal.EMU_SIZES.dma_chain_steps[-1] else us

    lines = []
    rc = cal.calibrate_npu(
        Preempted(perf_params.PRESETS["base"], SOC, CORES), SOC, CORES, "8.5.RC1", 1.8, False, lines.append,
        tmp_path, cal.EMU_SIZES,
    )  # fmt: skip
    assert rc == 1 and "\nNOT WRITTEN gm_latency_us: moves by" in "\n".join(lines)
    written = json.loads((tmp_path / "calibration" / f"calibration-{SOC}-8.5.RC1.json").read_text())
    assert "gm_latency_us" not in written and "gm_latency_us" in written["calibration"]["refused"]


def test_an_ambiguous_barrier_wait_is_refused(base_points):
    """...but assess refuses a ratio between 0.2 and 0.8: the model has neither case."""
    by_line = {}
    for probe, us in base_points:
        by_line.setdefault(probe.line, []).append((probe, us))
    fitres = cal.assess(base_points, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert fitres.fitted["war_barriers"] == pytest.approx(0.0, abs=1e-6) and "war_barriers" not in fitres.refused
    # a wait of half the vector latency on every vec_rate instruction: each of its calls costs x * lat / 2 more
    lat = perf_params.PRESETS["base"].vec_latency_cycles / 1.8e3
    half = [(pr, us + pr.x * lat / 2 if pr.kernel == "vec_rate" else us) for pr, us in base_points]
    fitres = cal.assess(half, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert fitres.fitted["war_barriers"] == pytest.approx(0.5, abs=0.02)
    assert "neither 0" in fitres.refused["war_barriers"]


def test_bench_calibrate_errors(tmp_path, capsys):
    """A bad command line is 2, a host without what the command needs (here: an NPU) 1 (README)."""
    assert cli_main.main(["bench", "--calibrate"]) == 1  # no NPU here
    assert "needs an Ascend NPU" in capsys.readouterr().err
    assert cli_main.main(["bench", "--calibrate", "--preset", "pess"]) == 2
    assert cli_main.main(["bench", "--calibrate", "--emu", "--soc", "Ascend310P"]) == 2
    assert cli_main.main(["bench", "--calibrate", "--model"]) == 2
    assert cli_main.main(["bench", "--model", "--against-measured", "--shape", "8x128"]) == 1
    assert "needs an Ascend NPU" in capsys.readouterr().err
    assert cli_main.main(["bench", "--against-measured"]) == 2
    assert cli_main.main(["bench", "--preset", "opt"]) == 2  # a model price without the model
    assert "--preset goes with --model or --calibrate --emu" in capsys.readouterr().err


@pytest.mark.parametrize("cores", ["0", "-3", "70000"])
def test_a_core_count_no_launch_takes_is_refused_before_anything_is_measured(cores, monkeypatch, capsys):
    """--cores as bench --model takes it, [1, 65535]: 0 is not the SoC's count, and a count the launchers
    refuse would stop the calibration only at the stream probes, after every vector probe had run."""
    monkeypatch.setattr(cal, "measure", lambda *a, **k: pytest.fail("measured with a core count it cannot launch"))
    assert cli_main.main(["bench", "--calibrate", "--emu", "--cores", cores]) == 2
    assert f"--cores must be in [1, 65535], got {cores}" in capsys.readouterr().err


def test_an_npu_calibration_refuses_more_cores_than_the_npu_has(monkeypatch, capsys):
    """Blocks above the core count run in waves, so stream.read.<cores> would not be that many cores'
    bandwidth: refused before the library is built or anything timed (a fake NPU of 48 vector cores); a
    count the device could not report is the user's to give."""
    from ascend_rmsnorm.backends import npu

    monkeypatch.setattr(cal, "require_npu", lambda what: torch.device("cpu"))
    monkeypatch.setattr(npu, "_target", lambda: pytest.fail("went on to build with too many cores"))
    monkeypatch.setattr(npu, "vector_cores", lambda device: (48, "torch.npu.get_device_properties"))
    assert cli_main.main(["bench", "--calibrate", "--cores", "64"]) == 2
    assert "--cores 64: this NPU has 48 vector cores" in capsys.readouterr().err
    monkeypatch.setattr(npu, "vector_cores", lambda device: (npu.FALLBACK_VECTOR_CORES, npu.VECTOR_CORES_UNKNOWN))
    with pytest.raises(pytest.fail.Exception, match="went on to build"):  # not refused: it got as far as building
        cli_main.main(["bench", "--calibrate", "--cores", "64"])


def test_an_npu_calibration_lands_in_the_cache_and_bench_model_uses_it(tmp_path, monkeypatch, capsys):
    """The NPU path with a fake NPU (the emulation's replay of a random parameter set stands in for the
    events): the file in the cache tier, then bench --model's first line and times, and the overrides."""
    truth = cal.random_params(7)
    fake = cal.EmuRunner(truth, SOC, CORES)
    assert cal.calibrate_npu(fake, SOC, CORES, "8.5.RC1", 1.8, False, print, tmp_path, cal.EMU_SIZES) == 0
    path = tmp_path / "calibration" / f"calibration-{SOC}-8.5.RC1.json"
    assert json.loads(path.read_text())["calibration"]["source"] == "npu events"
    capsys.readouterr()
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(tmp_path))  # a read-only tier holding the file
    argv = ["bench", "--model", "--soc", SOC, "--shape", "64x1024", "--dtype", "float32", "--direction", "fwd"]

    def first_line_and_us(extra=()):
        assert cli_main.main([*argv, *extra, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert cli_main.main([*argv, *extra]) == 0
        return capsys.readouterr().out.splitlines()[0], data

    line, data = first_line_and_us()
    assert f"calibration file {path}" in line and data["model"]["calibration"] == {SOC: str(path)}
    assert "prices from the calibration file(s) named" in line and "on a preset" not in line
    assert data["model"]["calibrated_params"] == {SOC: perf_params.make_params(json_file=path).to_dict()}
    want = perf_model.model(
        64, 1024, "float32", "fwd", soc=SOC, params=perf_params.make_params(json_file=path), ablate=False
    )
    assert data["records"][0]["predicted_us"] == pytest.approx(want.predicted_us)
    truth_rec = perf_model.model(64, 1024, "float32", "fwd", soc=SOC, params=truth, ablate=False)
    assert want.predicted_us == pytest.approx(truth_rec.predicted_us, rel=0.01)  # the fit found truth's prices
    base = perf_model.model(64, 1024, "float32", "fwd", soc=SOC, ablate=False).predicted_us
    line, data = first_line_and_us(["--preset", "base"])
    assert "calibration" not in line and "base preset" in line
    assert data["records"][0]["predicted_us"] == pytest.approx(base)
    own = tmp_path / "mine.json"
    own.write_text(json.dumps({"launch_us": 0}))
    line, data = first_line_and_us(["--params", str(own)])
    assert "calibration" not in line and data["records"][0]["predicted_us"] == pytest.approx(base - 5.0)
    own.write_text(json.dumps({"preset": "opt", "launch_us": 0}))  # the file's preset is the one named
    opt = perf_model.model(64, 1024, "float32", "fwd", soc=SOC, params=perf_params.PRESETS["opt"], ablate=False)
    line, data = first_line_and_us(["--params", str(own)])
    assert "opt preset, adjusted" in line and data["model"]["preset"] == "opt"
    assert data["records"][0]["predicted_us"] == pytest.approx(opt.predicted_us - 5.0)
    assert cli_main.main([*argv, "--params", str(own), "--preset", "pess"]) == 2  # which one? neither, said so
    assert "--preset pess and" in capsys.readouterr().err
    line, _ = first_line_and_us(["--soc", "Ascend910_9362"])  # a SoC without a file: its preset, said so
    assert f"{SOC}: calibration file" in line and "Ascend910_9362: base preset" in line
    assert "about +-50 % on a preset, prices from the calibration file(s) named" in line


def test_against_measured_pairs_each_prediction_with_its_measurement():
    recs = [perf_model.model(64, 1024, "float32", d, soc=SOC, cores=8, ablate=False) for d in perf_params.DIRECTIONS]
    calls = []

    def measure(rows, hidden, dtype, direction):
        calls.append(direction)
        return {"fwd": cal.Measured(10.0, False, 4.0), "fwd+bwd": cal.Measured(35.0, True, 40.0)}[direction]

    rows = cal.against_measured(recs, measure)
    assert sorted(calls) == ["fwd", "fwd+bwd"]  # each measured once
    assert [(r["direction"], r["measured_us"]) for r in rows] == [("fwd", 10.0), ("bwd", 25.0), ("fwd+bwd", 35.0)]
    assert rows[1]["measured_over_predicted"] == pytest.approx(25.0 / recs[1].predicted_us)
    # bwd is a difference of the two: host-bound when either is
    assert [(r["host_bound"], r["host_us_per_call"]) for r in rows] == [(False, 4.0), (True, None), (True, 40.0)]


def _against_measured_main(monkeypatch, out, measure):
    monkeypatch.setattr(cal, "device_soc", lambda device: SOC)
    monkeypatch.setattr(cal, "_cann_version", lambda: "8.1.RC1")
    recs = [perf_model.model(64, 1024, "float32", d, soc=SOC, cores=8, ablate=False) for d in perf_params.DIRECTIONS]
    lines = []
    code = cal.against_measured_main(recs, torch.device("cpu"), str(out), lines.append, measure)
    return code, "\n".join(lines)


def test_against_measured_refuses_an_out_path_it_cannot_write_before_it_measures(monkeypatch, tmp_path):
    (tmp_path / "taken").mkdir()  # a directory at the file's name: a rename onto it fails, for root too
    calls = []

    def measure(rows, hidden, dtype, direction):
        calls.append(direction)
        return cal.Measured(10.0, False, 4.0)

    with pytest.raises(CacheWriteError, match="taken"):
        _against_measured_main(monkeypatch, tmp_path / "taken", measure)
    assert calls == []  # refused before any timing


def test_against_measured_prints_its_table_when_the_file_cannot_be_written_after_measuring(monkeypatch, tmp_path):
    out = tmp_path / "results.json"

    def measure(rows, hidden, dtype, direction):
        out.mkdir(exist_ok=True)  # the name is taken meanwhile
        return cal.Measured(10.0 if direction == "fwd" else 35.0, False, 4.0)

    code, text = _against_measured_main(monkeypatch, out, measure)
    assert code == 1
    assert "NOTHING WRITTEN" in text and f"cannot write {out}" in text
    assert '"measured_us": 35.0' in text  # the results are shown all the same
    assert any(line.split()[:3] == ["64x1024", "float32", "fwd+bwd"] for line in text.splitlines()), text


class _Timeline:
    """A host clock and an in-order NPU stream: an op submitted at host time h runs from max(h, the
    stream's end) for its duration; an event is reached when the stream gets to it."""

    def __init__(self) -> None:
        self.host = self.dev = 0.0  # seconds

    def submit(self, host_s: float, dev_s: float) -> None:
        self.host += host_s
        self.dev = max(self.host, self.dev) + dev_s

    def npu(self):
        tl = self

        class Event:
            def record(self, stream=None) -> None:
                self.at = tl.dev = max(tl.host, tl.dev)

            def synchronize(self) -> None:
                tl.host = max(tl.host, self.at)

            def elapsed_time(self, other) -> float:
                return (other.at - self.at) * 1e3

        def synchronize(device=None) -> None:
            tl.host = max(tl.host, tl.dev)

        stream = types.SimpleNamespace(npu_stream=1)
        return types.SimpleNamespace(
            Event=lambda enable_timing: Event(), synchronize=synchronize, current_stream=lambda device=None: stream
        )


@pytest.mark.parametrize("host_waits, busy_host_us", [(False, 1.0), (False, 30.0), (True, 1.0)])
def test_npu_measure_times_the_kernels_not_the_host_that_issues_them(monkeypatch, host_waits, busy_host_us):
    """A call the host takes 30 µs to issue and the NPU 10 µs to run: back-to-back calls between two events
    would read 30. Behind a device-side delay longer than the issue, the events read the NPU's 10 (also
    when the host takes 30 of each delay step's 50 µs to issue it); where the host waits for the device
    inside a call (the delay cannot help), the figure is flagged host-bound."""
    import ascend_rmsnorm.functional as functional

    tl = _Timeline()
    monkeypatch.setattr(torch, "npu", tl.npu(), raising=False)
    monkeypatch.setattr(cal.time, "perf_counter", lambda: tl.host)

    def fake_rms_norm(x, w, eps, backend):
        tl.submit(30e-6, 10e-6)
        if host_waits:
            tl.host = max(tl.host, tl.dev)  # e.g. a value read back from the device
        return x

    monkeypatch.setattr(functional, "rms_norm", fake_rms_norm)
    run = cal.npu_measure(torch.device("cpu"), warmup=2, reps=20, busy=lambda: tl.submit(busy_host_us * 1e-6, 50e-6))
    m = run(4, 64, "float32", "fwd")
    if host_waits:
        assert m.host_bound and m.us > 30.0  # the pace of a host that waits, not the kernels' 10
    else:
        assert not m.host_bound and m.us == pytest.approx(10.0) and m.host_us == pytest.approx(30.0)


@as_root
def test_a_results_folder_of_someone_elses_is_refused_with_the_fix_for_out(tmp_path):
    """``--out`` below a folder another account owns: the walk's fix, then what fits ``--out``
    (``Untrusted.advised``), and nothing is written there."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(CacheWriteError) as info:
        cal.write_json(theirs / "results" / "c.json", {"launch_us": 1})
    assert "belongs to nobody" in str(info.value) and str(info.value).endswith(f"; or {cal.OUT_FIX}"), info.value
    assert list(theirs.iterdir()) == []


def test_calibration_files_are_written_and_read_only_where_nobody_else_can_write(tmp_path):
    """A calibration steers every `bench --model` on the host: it is never written into, nor read from, a
    directory others may write (there anybody could swap in their own prices)."""
    from ascend_rmsnorm.errors import CacheWriteError

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(
        CacheWriteError, match=rf"cannot write {open_dir}/c.json: not safe to write into: {open_dir} is"
    ):
        cal.write_json(open_dir / "c.json", {"launch_us": 1})
    assert list(open_dir.iterdir()) == []
    root = tmp_path / "tier"
    path = cal.write_json(root / "calibration" / cal.calibration_name(SOC, "8.5.RC1"), {"launch_us": 1})
    assert json.loads(path.read_text()) == {"launch_us": 1} and [p.name for p in path.parent.iterdir()] == [path.name]
    assert cal.find_calibration(SOC, "8.5.RC1", root) == path
    older = cal.write_json(root / "calibration" / cal.calibration_name(SOC, "8.3.RC1"), {"launch_us": 2})
    os.utime(older, (1, 1))
    assert cal.find_calibration(SOC, None, root) == path  # no CANN version to match: the newest
    assert cal.find_calibration(SOC, "8.3.RC1", root) == older  # this CANN's own, old or not
    path.parent.chmod(0o777)  # now anyone could have replaced it
    assert cal.find_calibration(SOC, "8.5.RC1", root) is None and cal.find_calibration(SOC, None, root) is None


class _FakeNpu:
    """torch.npu as NpuRunner uses it, with torch_npu's task queue: an event's record and the L2 flush
    wait in a queue that only a read of the stream's ``npu_stream`` (or a synchronize) submits, while a
    ctypes launch acts at once, on a clock it advances: a GM probe's call takes 10 µs when the L2 was
    flushed since the call before (its data cold), 1 µs otherwise."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.queue: list = []

    def submit(self) -> None:
        while self.queue:
            self.queue.pop(0)()

    def current_stream(self, device):
        npu = self

        class Stream:
            @property
            def npu_stream(self) -> int:
                npu.submit()
                return 1

        return Stream()

    def synchronize(self, device) -> None:
        self.submit()

    def Event(self, enable_timing: bool):  # noqa: N802 - torch.npu's name
        npu = self

        class Event:
            def record(self, stream) -> None:
                npu.queue.append(lambda: setattr(self, "at", npu.now_ms))

            def synchronize(self) -> None:
                npu.submit()

            def elapsed_time(self, other) -> float:
                return other.at - self.at

        return Event()


class _QueuedFlush:
    """The L2 flush buffer: its zero_ is queued like any torch_npu op; it leaves the L2 full of dirty
    lines until a read of the other buffer (``amax``, queued too) replaces them with clean ones."""

    def __init__(self, npu: _FakeNpu) -> None:
        self.npu, self.cold, self.dirty = npu, False, False

    def zero_(self) -> None:
        self.npu.queue.append(lambda: (setattr(self, "cold", True), setattr(self, "dirty", True)))

    def amax(self) -> None:
        self.npu.queue.append(lambda: setattr(self, "dirty", False))


def test_the_npu_runner_times_gm_probes_from_a_flushed_l2(monkeypatch):
    """A GM probe (bandwidth, bursts, latency) must read HBM, not what the calls before it left in the L2,
    and must not pay for writing back the flush's dirty lines:
    each timed call comes after the flush buffer is rewritten and is timed alone (the median); a vector
    probe keeps its back-to-back calls between one pair of events. Both hold with torch_npu's task
    queue, which submits the events and the flush later than a ctypes launch unless the runner has it
    submit them first."""
    import sys
    import types

    npu = _FakeNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    calls = []

    class Lib:
        def call(self, probe, ptrs, stream) -> None:
            cold = flush.cold
            assert not flush.dirty  # no timed call writes the flush's zeroes back to HBM
            calls.append(cold)
            flush.cold = False  # this call's data is in the L2 until the next flush rewrites the buffer
            npu.now_ms += (10.0 if cold else 1.0) * 1e-3

    runner = cal.NpuRunner(Lib(), torch.device("cpu"), warmup=2, reps=5)
    runner._flush = runner._clean = flush = _QueuedFlush(npu)
    gm = next(p for p in cal.plan(4) if p.kernel == "dma_chain")
    assert runner(gm) == pytest.approx(10.0)
    assert calls == [False, False] + [True] * 5  # the warm-up, then every timed call after a flush
    calls.clear()
    vec = next(p for p in cal.plan(4) if p.kernel == "vec_rate")
    assert runner(vec) == pytest.approx(1.0)  # back-to-back calls between one pair of events, per call
    assert calls == [False] * (2 + 3 * 5)  # the warm-up, then three blocks (the median)


@pytest.mark.parametrize("host_us, bound", [(0.5, False), (2.0, True)])
def test_the_npu_runner_marks_a_line_whose_calls_the_host_issued_too_slowly(monkeypatch, host_us, bound):
    """A back-to-back block the host took about as long to issue as the NPU to run (1 µs a call) times the
    host: its line is marked host-bound (assess then writes no field from it); a faster host is not."""
    import sys

    npu = _FakeNpu()
    host = [0.0]
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    monkeypatch.setattr(cal.time, "perf_counter", lambda: host[0])

    class Lib:
        def call(self, probe, ptrs, stream) -> None:
            host[0] += host_us * 1e-6
            npu.now_ms += 1e-3

    runner = cal.NpuRunner(Lib(), torch.device("cpu"), warmup=1, reps=5)
    vec = next(p for p in cal.plan(4) if p.kernel == "vec_rate")
    assert runner(vec) == pytest.approx(1.0)
    assert runner.host_bound == ({vec.line} if bound else set())
    launch = next(p for p in cal.plan(4) if p.kernel == "empty")
    runner(launch)  # back-to-back launches cost what the host pays to issue them too: never host-bound
    assert launch.line not in runner.host_bound


def test_the_npu_runner_takes_the_median_of_its_blocks(monkeypatch):
    """One block of back-to-back calls preempted (each call 5x slower) is not the price: the median is."""
    import sys

    npu = _FakeNpu()
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    n = [0]

    class Lib:
        def call(self, probe, ptrs, stream) -> None:
            n[0] += 1
            npu.now_ms += 5e-3 if 2 <= (n[0] - 1) // 5 < 3 else 1e-3  # the warm-up, then blocks of 5

    runner = cal.NpuRunner(Lib(), torch.device("cpu"), warmup=5, reps=5)
    assert runner(next(p for p in cal.plan(4) if p.kernel == "vec_rate")) == pytest.approx(1.0)


def test_a_bad_calibration_file_is_named_and_preset_still_runs(tmp_path, monkeypatch, capsys):
    """A calibration file the model refuses (hand-edited, or from an older version) stops bench --model
    with the file's path and the way around it, not with a bare parameter error."""
    d = tmp_path / "calibration"
    bad = cal.write_json(d / cal.calibration_name(SOC, "8.5.RC1"), {"preset": "base", "hbm_fraction": -24.8})
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(tmp_path))
    argv = ["bench", "--model", "--soc", SOC, "--shape", "64x1024", "--dtype", "float32", "--direction", "fwd"]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert f"calibration file {bad}: model parameter hbm_fraction" in err and "--preset" in err
    assert cli_main.main([*argv, "--preset", "base"]) == 0
    capsys.readouterr()
    bad.write_text("[1, 2]")  # nor one that is not a JSON object: named as the calibration file, no --params given
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert f"calibration file {bad}: expected a JSON object" in err and "--params" not in err, err


def test_cycles_are_fitted_at_the_socs_clock_and_the_file_records_it(jit, base_points, tmp_path):
    """The AI core's clock comes from the SoC's platform ini (the fake tree's: 1850 MHz), else the model's
    1.8 GHz; the file records the clock its cycles were counted at, so the model gives back the µs."""
    fake = jit.cann("8.5.0")
    assert cal.ini_clock_ghz(fake.root, "Ascend910B3") == pytest.approx(1.85)
    assert cal.ini_clock_ghz(None, "Ascend910B3") == perf_params.Params().clock_ghz
    (ini,) = fake.root.glob("*-linux/data/platform_config/Ascend910B3.ini")
    ini.write_text(ini.read_text() + "[VectorCoreSpec]\nvec_freq=1650\n")  # the vector core's own, first
    assert cal.ini_clock_ghz(fake.root, "Ascend910B3") == pytest.approx(1.65)
    fitres = cal.assess(base_points, CORES, 1.85, cal.EMU_SIZES, SOC)
    path = cal.write_json(tmp_path / "c.json", cal.params_file(fitres, SOC, "npu events", "8.5.RC1"))
    p = perf_params.make_params(json_file=path)
    base = perf_params.PRESETS["base"]
    assert p.clock_ghz == pytest.approx(1.85)
    # the same measured µs, counted at 1.85 GHz: more cycles, the same time
    assert p.vec_latency_cycles / p.clock_ghz == pytest.approx(base.vec_latency_cycles / base.clock_ghz, rel=1e-6)


def test_a_flag_pingpong_trip_is_two_flag_latencies_whatever_else_the_core_costs():
    """flag_pingpong's trips chain through the pipes alone (a SetFlag behind a WaitFlag on MTE3 or V waits
    for it: SetFlag-WaitFlag(ISASI).md), so its slope is two flag latencies, and the fitted price is not a
    remainder of other slopes: every other price of the model moved leaves it (and its line) where it
    was. (Before the replay held a SetFlag behind its pipe's WaitFlag, a trip cost only the scalar unit's
    issue of its four flag instructions: 4 cycles fitted for 50.)"""
    base = perf_params.PRESETS["base"]
    probes = [p for p in cal.plan(CORES) if p.line == "flag_pingpong"]
    other = base.replace(
        vec_latency_cycles=90.0, vec_cycles_per_repeat=1.7, gm_latency_us=1.4, dma_burst_cycles=40.0,
        launch_us=15.0, hbm_fraction=0.6, s_flag_latency_us=1.2, issue_sync_cycles=6.0,
    )  # fmt: skip
    for flag in (10.0, 50.0, 170.0):
        lines = []
        for p in (base.replace(pipe_flag_latency_cycles=flag), other.replace(pipe_flag_latency_cycles=flag)):
            runner = cal.EmuRunner(p, SOC, CORES)
            lines.append(cal.fit_line([pr.x for pr in probes], [runner(pr) for pr in probes]))
        for line in lines:
            assert line.slope * 1.8e3 == pytest.approx(2 * flag, rel=1e-9)
        assert lines[0].intercept != pytest.approx(lines[1].intercept)  # the rest moved, only outside the trips


def test_a_flag_pingpong_bound_by_issuing_its_flag_instructions_is_refused_not_written_biased():
    """Where the scalar unit issues a trip's four flag instructions more slowly than two flag latencies,
    flag_pingpong's slope is the issue's: here 4 x 40 cycles a trip for 2 x 50, a flag price of 80 for 50.
    Two chains interleaved wait the same latencies but issue twice the instructions: their trips cost
    twice one chain's, and the price is refused, named with why (latency-bound, the two cost the same)."""
    p = perf_params.PRESETS["base"].replace(issue_sync_cycles=40.0)
    fitres = _assessed(p)
    assert fitres.fitted["pipe_flag_latency_cycles"] == pytest.approx(80.0)
    assert fitres.flag_chain_ratio == pytest.approx(2.0)
    assert "bound by issuing the flag instructions" in fitres.refused["pipe_flag_latency_cycles"]
    base = _assessed(p.replace(issue_sync_cycles=2.0))
    assert base.flag_chain_ratio == pytest.approx(1.0) and "pipe_flag_latency_cycles" not in base.refused


def test_every_calibration_add_writes_the_ub_bank_its_sources_lie_in():
    """vec_chain's step and vec_spread's instruction pay the same repeats, the fit's premise: on dav-2201 a
    vector instruction whose destination shares a UB bank with a source pays a read-write conflict (banks:
    32-byte rows 512 bytes apart within one 64 KiB third, asc-devkit guide 避免bank冲突（NPU架构版本2201）),
    so every Add of the vector probes writes the bank its sources lie in, at every repeats an instruction
    (the last Add of a window, vec_spread's fourth, shows it)."""

    def bank(addr: int) -> int:
        return 16 * (addr >> 16) + ((addr >> 5) & 15)

    seen = set()
    for probe in cal.plan(8, cal.NPU_SIZES):
        if probe.kernel not in ("vec_chain", "vec_spread", "vec_rate") or probe.line in seen:
            continue
        if probe.kernel == "vec_rate" and probe.line.split(".")[1] not in ("Add", "AddApart"):
            continue
        seen.add(probe.line)
        a = probe.args  # 4 instructions (steps) of the probe's repeats
        _run_full(dataclasses.replace(probe, args=(a[0], 4, a[2]) if probe.kernel == "vec_rate" else (4, a[1])))
        dst, src0, src1 = _last_operands("Add")
        assert bank(dst) == bank(src0), (probe.line, hex(dst), hex(src0))
        if not probe.line.endswith("AddApart"):  # (its second source is in another bank group on purpose)
            assert bank(dst) == bank(src1), (probe.line, hex(dst), hex(src1))
    assert {"vec_spread", "vec_chain", "vec_spread.r8", "vec_rate.Add.large"} <= seen


def test_every_gm_read_of_a_calibration_kernel_is_from_bytes_it_never_read_before():
    """The bursts and the GM latency are the HBM's, as the kernels' rows are: with an L2 in the model (any
    re-read of recent bytes 4x faster), dma_bursts, dma_chain and stream time the same as without one."""
    base = perf_params.PRESETS["base"]
    with_l2 = base.replace(l2_bytes=float(1 << 30), l2_speedup=4.0)
    for probe in cal.plan(CORES):
        if probe.kernel in cal.GM_KERNELS and probe.x == max(p.x for p in cal.plan(CORES) if p.line == probe.line):
            plain, cached = cal.EmuRunner(base, SOC, CORES)(probe), cal.EmuRunner(with_l2, SOC, CORES)(probe)
            assert cached == pytest.approx(plain), probe.line


def test_a_price_every_vector_instruction_pays_once_is_told_apart_from_latency_and_barrier_waits(base_points):
    """Hardware may charge each vector instruction some cycles beyond its repeats, which the model has no
    price for. vec_spread (a latency every four independent instructions) against vec_chain (one every
    instruction) parts it from the latency: 20 cycles an instruction on every vector probe leave the
    vector latency, the barrier wait (before vec_spread it read as war_barriers 0.5) and the flag price
    where they were, and come out as vec_once_cycles. A vec_spread whose windows the build broke up
    (a barrier after every Add: as dear a step as vec_chain) refuses the prices it would set."""
    base = cal.assess(base_points, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert base.vec_once_cycles == pytest.approx(0.0, abs=1e-6)
    vector = ("vec_chain", "vec_spread", "vec_rate")
    more = [(pr, us + pr.x * 20 / 1.8e3 if pr.kernel in vector else us) for pr, us in base_points]
    got = cal.assess(more, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert got.vec_once_cycles == pytest.approx(20.0)
    assert got.fitted == pytest.approx(base.fitted, abs=1e-6) and got.refused == {}
    chain = {pr.args: us for pr, us in base_points if pr.kernel == "vec_chain"}  # (steps, repeats): every pair
    serial = [(pr, chain[pr.args] if pr.kernel == "vec_spread" else us) for pr, us in base_points]
    got = cal.assess(serial, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert {"vec_latency_cycles", "war_barriers"} <= set(got.refused) and "launch_us" not in got.refused
    assert "windows" in got.refused["vec_latency_cycles"] and "--sync-log" in got.refused["vec_latency_cycles"]
    # vec_spread cheaper than any window of four could be (a latency every eight): a negative once-paid
    # price (minus a sixth of the latency), which no pipe has: the two lines disagree, refused
    lat = perf_params.PRESETS["base"].vec_latency_cycles / 1.8e3
    eights = [(pr, us - pr.x * lat / 8 if pr.kernel == "vec_spread" else us) for pr, us in base_points]
    got = cal.assess(eights, CORES, 1.8, cal.EMU_SIZES, SOC)
    assert got.vec_once_cycles == pytest.approx(-perf_params.PRESETS["base"].vec_latency_cycles / 6)
    assert "disagree" in got.refused["vec_latency_cycles"] and "disagree" in got.refused["war_barriers"]


class _Counting(cal.EmuRunner):
    """The emulation's replay standing in for an NPU's events, keeping every probe it was asked for."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.calls: list = []

    def __call__(self, probe):
        self.calls.append(probe)
        return super().__call__(probe)


def test_an_npu_calibration_checks_where_it_writes_first_and_prints_what_it_could_not_write(tmp_path, capsys):
    """Minutes of measuring are not spent for a calibration/ that cannot be written (here a file stands
    there), and a file that cannot be written after all (made unwritable meanwhile) leaves its content
    printed, with exit 1."""
    (tmp_path / "calibration").write_text("not a directory")
    runner = _Counting(perf_params.PRESETS["base"], SOC, CORES)
    calls = runner.calls
    with pytest.raises(CacheWriteError, match="calibration"):
        cal.calibrate_npu(runner, SOC, CORES, "8.5.RC1", 1.8, False, print, tmp_path, cal.EMU_SIZES)
    assert calls == []
    (tmp_path / "calibration").unlink()
    real = cal.write_json

    def made_unwritable(path, data, **kw):
        (tmp_path / "calibration").rmdir()
        (tmp_path / "calibration").write_text("not a directory")
        return real(path, data, **kw)

    lines = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cal, "write_json", made_unwritable)
        rc = cal.calibrate_npu(runner, SOC, CORES, "8.5.RC1", 1.8, False, lines.append, tmp_path, cal.EMU_SIZES)
    text = "\n".join(lines)
    assert rc == 1 and calls
    assert "NOTHING WRITTEN: cannot write" in text and '"vec_latency_cycles"' in text


def test_an_npu_calibration_finds_a_calibration_folder_it_cannot_write_before_it_measures(tmp_path):
    """The folder passing the trust walk is not enough: one of your own (or root's) you may not write, or a
    directory where the file goes, failed only after every measurement. Here as an account without the
    permission-bypass capabilities (root runs it through setpriv), with calibration/ at mode 555, and with a
    directory at the file's name (which stops root too)."""
    import shutil
    import subprocess
    import sys

    blocked = tmp_path / "dir-at-name"
    (blocked / "calibration" / cal.calibration_name(SOC, "8.5.RC1")).mkdir(parents=True)
    runner = _Counting(perf_params.PRESETS["base"], SOC, CORES)
    calls = runner.calls
    with pytest.raises(CacheWriteError, match="Is a directory"):
        cal.calibrate_npu(runner, SOC, CORES, "8.5.RC1", 1.8, False, print, blocked, cal.EMU_SIZES)
    assert calls == []
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root, and no setpriv to run without the permission-bypass capabilities")
    ro = tmp_path / "read-only"
    (ro / "calibration").mkdir(parents=True)
    (ro / "calibration").chmod(0o555)
    probe = (
        "import sys; from ascend_rmsnorm.errors import CacheWriteError; "
        "from ascend_rmsnorm.perf import calibrate as cal, params as pp\n"
        "class R(cal.EmuRunner):\n"
        "    def __call__(self, probe): sys.exit('measured before the write check')\n"
        f"r = R(pp.PRESETS['base'], {SOC!r}, {CORES})\n"
        "try:\n"
        f"    cal.calibrate_npu(r, {SOC!r}, {CORES}, '8.5.RC1', 1.8, False, print, {str(ro)!r}, cal.EMU_SIZES)\n"
        "except CacheWriteError as err:\n"
        "    print('refused:', err)\n"
    )
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: cannot write" in done.stdout and "calibration" in done.stdout, done.stdout


def test_a_price_the_noise_of_all_its_lines_leaves_unpinned_is_not_written(base_points):
    """A few parts in a thousand of noise on every timing, as an NPU's events have: several prices are
    small remainders of large slopes (the flag latency, the vector latency), so every line's noise at
    once moves them far more than any one left-out point does. Each field is either within 25 % of what
    was configured (of SCALE where that is smaller) or refused, never written off by more; and refused
    with the standard error that says why."""
    import random

    conf = cal.configured(perf_params.PRESETS["base"], SOC, CORES)
    by_stderr = 0
    for seed in range(30):
        # each probe's draw its own (seeded by the probe), so that probes added to the plan leave the others'
        noisy = [(pr, us * (1 + random.Random(f"{seed} {pr}").gauss(0, 0.003))) for pr, us in base_points]
        fitres = cal.assess(noisy, CORES, 1.8, cal.EMU_SIZES, SOC)
        by_stderr += sum("standard error" in why for why in fitres.refused.values())
        for k in cal.FITTED:
            if k not in fitres.refused and k != "war_barriers":  # (war_barriers: written as 0 or 1)
                assert abs(fitres.fitted[k] - conf[k]) <= 0.25 * max(abs(conf[k]), cal.SCALE[k]), (seed, k)
    assert by_stderr > 0 and set(fitres.stderr) >= set(cal.FITTED)


def test_an_npu_calibration_sends_back_its_raw_timings_and_what_it_ran_on(tmp_path, capsys):
    """The fitted numbers alone cannot be refitted with another model or checked against a profile: the
    file and --json carry every timing (probe, size, µs), each line, the sizes and the runner's repeats,
    the clock and the versions (package, torch, torch_npu, driver) beside the SoC and CANN."""
    env = {"torch_npu": "2.6.0.post1", "driver": cal.driver_version(tmp_path)}
    assert env["driver"] is None
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "version.info").write_text("Version=24.1.rc3\nascendhal_version=7.35.23\n")
    env["driver"] = cal.driver_version(tmp_path)
    assert env["driver"] == "24.1.rc3"
    runner = cal.EmuRunner(perf_params.PRESETS["base"], SOC, CORES)
    out = []
    cal.calibrate_npu(runner, SOC, CORES, "8.5.RC1", 1.8, True, out.append, tmp_path, cal.EMU_SIZES, env)
    printed = json.loads(out[0])
    written = json.loads((tmp_path / "calibration" / f"calibration-{SOC}-8.5.RC1.json").read_text())
    for got in (printed, written["calibration"]):
        probes = cal.plan(CORES)
        assert len(got["points"]) == len(probes)
        assert [(p["line"], p["x"], p["blocks"], tuple(p["args"])) for p in got["points"]] == [
            (p.line, p.x, p.blocks, p.args) for p in probes
        ]
        assert all(p["us"] > 0 for p in got["points"])
        assert got["lines"]["vec_chain"]["slope_us"] > 0 and len(got["lines"]["vec_chain"]["residuals_us"]) == 3
    for e in (printed["environment"], written["calibration"]["environment"]):
        assert e["driver"] == "24.1.rc3" and e["torch_npu"] == "2.6.0.post1" and e["clock_ghz"] == 1.8
        assert e["sizes"]["chain_steps"] == list(cal.EMU_SIZES.chain_steps) and e["cores"] == CORES


def test_the_launch_price_is_measured_at_the_block_count_the_kernels_launch_with():
    """The model charges launch_us on every launch of the kernels, which ask for every vector core
    (backends/npu.py _block_dim); what a launch costs the device may grow with its blocks (each is
    dispatched to a core), so the empty kernel is launched as they are, not on one block."""
    launches = [p for p in cal.plan(CORES) if p.line == "launch"]
    assert launches and all(p.blocks == CORES for p in launches)


@pytest.mark.parametrize(
    ("issue", "cpr", "lat", "level"),
    [
        (40.0, 1.0, 20.0, None),
        (40.0, 0.5, 20.0, None),
        (40.0, 0.5, 80.0, 32),
        (20.0, 1.0, 20.0, 16),
        (20.0, 0.5, 20.0, 32),
    ],  # fmt: skip
)
def test_a_vector_latency_from_windows_the_scalar_units_issue_bound_is_refused_not_written_low(issue, cpr, lat, level):
    """Where the scalar unit issues vector instructions more slowly than the V pipe runs them, vec_spread's
    windows (and at fewer repeats vec_chain's steps) cost the issue's time, which does not grow with the
    repeats, and the latency reads low (issue_vector 40: 2 cycles for 20 at 8 repeats an instruction, 15.3
    at 32). It is taken from the fewest repeats whose pair the next one confirms (vec_spread grew with the
    repeats as vec_chain did, the latency read no higher), and refused where none is (None: the pair at
    32 repeats alone, as before CALIBRATION_VERSION 7, wrote 15.3 and 2 for 20)."""
    p = perf_params.PRESETS["base"].replace(
        issue_vector_cycles=issue, vec_cycles_per_repeat=cpr, vec_latency_cycles=lat
    )
    fitres = _assessed(p)
    if level is None:
        assert "scalar unit's issue" in fitres.refused["vec_latency_cycles"]
        assert "war_barriers" in fitres.refused
        assert fitres.vec_latency_by_repeats[32] < 0.8 * lat
    else:
        assert fitres.latency_repeats == level and "vec_latency_cycles" not in fitres.refused
        assert fitres.fitted["vec_latency_cycles"] == pytest.approx(lat, rel=ISSUE_BIAS)
        assert min(fitres.vec_latency_by_repeats.values()) < 0.9 * lat  # fewer repeats read it low


ISSUE_BIAS = cal.ISSUE_TOLERANCE  # a latency taken is at most this much below the next pair's


@pytest.mark.parametrize(
    "issue, cpr, refused",
    [(10.0, 1.0, False), (20.0, 1.0, False), (40.0, 2.0, False), (20.0, 0.5, True), (40.0, 1.0, True)],
)
def test_a_repeat_price_from_vec_rate_lines_the_scalar_units_issue_bound_is_refused_not_written_low(
    issue, cpr, refused
):
    """vec_rate's instructions have no barrier between them: where the scalar unit issues them more slowly
    than their repeats take, the line at 32 repeats costs the issue's time and the repeat price reads low
    (0.379 for 0.5 at issue_vector_cycles 20, 0.75 for 1.0 at 40), inside the plausible range, so it was written.
    vec_chain's steps, a latency longer each, outlast the issue: their growth per repeat is the check."""
    p = perf_params.PRESETS["base"].replace(issue_vector_cycles=issue, vec_cycles_per_repeat=cpr)
    fitres = _assessed(p)
    assert fitres.chain_cycles_per_repeat == pytest.approx(cpr, rel=1e-6)
    if refused:
        assert "scalar unit's issue" in fitres.refused["vec_cycles_per_repeat"]
        assert fitres.fitted["vec_cycles_per_repeat"] < 0.8 * cpr
    else:
        assert "vec_cycles_per_repeat" not in fitres.refused
        assert fitres.fitted["vec_cycles_per_repeat"] == pytest.approx(cpr, rel=1e-6)


def test_the_vector_latency_is_fitted_from_few_repeats_an_instruction_where_noise_moves_it_less():
    """1 % of noise on every timing (seeded, 40 draws; NPU_SIZES' lines from the base emulation): the pair at
    8 repeats an instruction pins the latency where the pair at 64 alone (as at 32 before) would be refused
    by its standard error far more often."""
    import random

    small = dataclasses.replace(
        cal.NPU_SIZES, chain_steps=(4, 8, 16), rate_instrs=(4, 8, 16), burst_dmas=(4, 8, 16), stream_chunks=(4, 8, 16),
        dma_chain_steps=(4, 8, 16), flag_trips=(4, 8, 16), launches=(1, 2, 4),
    )  # fmt: skip
    p = perf_params.PRESETS["base"]
    lines = cal.fit(cal.measure(cal.EmuRunner(p, SOC, CORES), cal.plan(CORES, small)), CORES, 1.8, small).lines
    probes = cal.plan(CORES, cal.NPU_SIZES)
    clean = [lines[pr.line].intercept + lines[pr.line].slope * pr.x for pr in probes]
    refused = dict.fromkeys((8, 64), 0)
    for seed in range(40):
        noisy = [
            (pr, us * (1 + random.Random(f"{seed} {pr}").gauss(0, 0.01)) + random.Random(f"{pr} {seed}").gauss(0, 0.5))
            for pr, us in zip(probes, clean)
        ]
        for level in refused:
            fitres = cal.assess(noisy, CORES, 1.8, cal.NPU_SIZES, SOC) if level == 8 else None
            if fitres is None:  # the latency from the pair at 64 alone, with assess's standard-error rule
                full = cal.fit(noisy, CORES, 1.8, cal.NPU_SIZES, 64).fitted["vec_latency_cycles"]
                moves = [
                    cal.fit([*noisy[:j], *noisy[j + 1 :]], CORES, 1.8, cal.NPU_SIZES, 64).fitted["vec_latency_cycles"]
                    - full
                    for j, (pr, _) in enumerate(noisy)
                    if pr.kernel in ("vec_chain", "vec_spread")
                ]
                refused[level] += 2 * sum(m * m for m in moves) ** 0.5 > cal.MAX_SPREAD * max(full, 10.0)
            else:
                assert fitres.latency_repeats == 8 or "vec_latency_cycles" in fitres.refused
                refused[level] += "vec_latency_cycles" in fitres.refused
    assert refused[8] <= 2 and refused[64] >= 4 * max(refused[8], 1), refused


def test_the_driver_version_is_found_where_the_driver_installer_says_it_installed(tmp_path, monkeypatch):
    """A driver installed with --install-path is not under /usr/local/Ascend: its installer records the
    path in /etc/ascend_install.info (Driver_Install_Path_Param=), where CANN's scripts look it up
    (runtime/script/common_func.inc); the calibration file recorded the driver as null there. Nothing
    it reads may make it raise."""
    info = tmp_path / "ascend_install.info"
    monkeypatch.setattr(cal, "ASCEND_INSTALL_INFO", str(info), raising=False)
    default = cal.driver_version()  # no install info: /usr/local/Ascend's, if any
    (tmp_path / "opt" / "driver").mkdir(parents=True)
    (tmp_path / "opt" / "driver" / "version.info").write_text("Version=25.0.rc1.1\n")
    info.write_text(f"UserName=HwHiAiUser\nDriver_Install_Type=full\nDriver_Install_Path_Param={tmp_path / 'opt'}\n")
    assert cal.driver_version() == "25.0.rc1.1"
    assert cal.driver_version(tmp_path / "opt") == "25.0.rc1.1"  # an explicit root, as before
    info.write_bytes(b"Driver_Install_Path_Param=\xff\x00/nowhere\n")  # undecodable, a NUL in the path
    assert cal.driver_version() == default
    fifo_root = tmp_path / "fifo"
    (fifo_root / "driver").mkdir(parents=True)
    os.mkfifo(fifo_root / "driver" / "version.info")  # read as a text file, it would wait for a writer
    assert cal.driver_version(fifo_root) is None


def test_the_json_it_prints_and_writes_is_strict_json_where_a_price_is_not_finite(tmp_path):
    """A flag slope of exactly 0 gives a NaN ratio, a left-out fit that is not finite an infinite spread:
    Python's json.dumps wrote them as NaN and Infinity, which strict readers (jq, JavaScript) refuse. Every
    non-finite number is null, in the printed object and in a written file."""
    p = perf_params.PRESETS["base"]
    fitres = _assessed(p)
    fitres.flag_chain_ratio = math.nan
    fitres.spread["vec_latency_cycles"] = math.inf
    fitres.points[0]["us"] = -math.inf

    def refuse(name: str):
        raise AssertionError(f"not strict JSON: {name}")

    printed = json.loads(cal.dumps_strict(cal.result(fitres, None)), parse_constant=refuse)
    assert printed["flag_chain_ratio"] is None and printed["spread"]["vec_latency_cycles"] is None
    assert printed["points"][0]["us"] is None
    path = cal.write_json(tmp_path / "results" / "calibration.json", cal.params_file(fitres, SOC, "test", None))
    written = json.loads(path.read_text(), parse_constant=refuse)
    assert written["calibration"]["flag_chain_ratio"] is None
