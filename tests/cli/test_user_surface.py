"""What a person runs: `info`, `selftest`, `bench`, the examples and the notebook (all on this CPU)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ns_helpers import namespace_env, unshare_prefix

from ascend_rmsnorm.backends import choice
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.cli import selftest

ROOT = Path(__file__).resolve().parents[2]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    return rc, capsys.readouterr().out


# ---- info ----------------------------------------------------------------------------------------


def test_info_says_plainly_that_there_is_no_npu(capsys, jit):
    rc, out = _cli(capsys, "info")
    assert rc == 0
    import ascend_rmsnorm

    assert out.splitlines()[0].endswith(f"({Path(ascend_rmsnorm.__file__).resolve().parent})")  # not .../cli
    assert "no NPU found" in out
    assert "auto on NPU   torch" in out
    assert "writable" in out


def test_info_says_why_there_is_no_emu_compiler(capsys, monkeypatch, tmp_path):
    """No host C++ compiler (none on PATH, no ASCEND_RMSNORM_CXX): the emu section shows none and the
    reason, with the fix, and info still exits 0 (it reports, it never fails on what it finds)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ASCEND_RMSNORM_CXX", raising=False)
    rc, out = _cli(capsys, "info")
    assert rc == 0
    lines = out.splitlines()
    at = lines.index("emu (host C++)")
    assert lines[at + 1] == "  compiler      -  -", lines[at : at + 3]
    assert lines[at + 2].startswith("  problem       no host C++ compiler 'c++' for the emu backend"), lines[at + 2]
    assert "set ASCEND_RMSNORM_CXX to a C++17 compiler" in lines[at + 2]


def test_info_json_schema(capsys, jit):
    jit.use(jit.cann("8.5.0"))
    rc, out = _cli(capsys, "info", "--json")
    assert rc == 0
    data = json.loads(out)
    assert set(data) >= {"package", "python", "torch", "torch_npu", "npu", "cann", "emu", "cache", "backend"}
    assert data["npu"]["present"] is False
    assert data["cann"]["version"] == "8.5.0" and data["cann"]["generation"] == "asc"
    assert data["cann"]["bisheng"].endswith("bisheng")
    assert data["cache"]["jit"] == "import"
    kinds = [t["kind"] for t in data["cache"]["tiers"]]
    assert kinds[-1] == "writable" and data["cache"]["tiers"][-1]["writable"] is True
    assert data["backend"]["auto_for_npu_tensors"] == "torch"
    assert data["backend"]["auto_for_other_tensors"] == "torch"
    assert data["emu"]["compiler"]


def test_info_with_an_arch_override_and_a_prebuilt_tier(capsys, jit, monkeypatch, tmp_path):
    jit.use(jit.cann("9.0.0"))
    monkeypatch.setenv("ASCEND_RMSNORM_ARCH", "2201")
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(tmp_path / "shared"))
    data = json.loads(_cli(capsys, "info", "--json")[1])
    assert data["npu"]["arch"] == "dav-2201" and data["npu"]["supported"] is True
    assert data["cache"]["tiers"][0] == {
        "kind": "prebuilt",
        "path": str(tmp_path / "shared"),
        "exists": False,
        "writable": False,
        "problem": None,
    }


def test_info_says_whether_torch_compiles_into_a_place_of_the_users(capsys, jit, monkeypatch, tmp_path):
    """torch.compile's on-disk cache serves whatever is in its directory, and torch checks no owner: a
    directory others may write, or one not made yet in a directory anyone may add names to (a shared
    /tmp, where another account can make ``torchinductor_<user>`` first), is named as not safe."""
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    (tmp_path / "sticky").mkdir()
    (tmp_path / "sticky").chmod(0o1777)
    seen = {}
    for name in ("mine", "open", "sticky/torchinductor_x"):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / name))
        seen[name] = json.loads(_cli(capsys, "info", "--json")[1])["cache"]["torch_compile"]
    assert seen["mine"] == {"path": str(tmp_path / "mine"), "exists": True, "problem": None}
    assert "writable by everyone" in seen["open"]["problem"], seen["open"]
    assert seen["sticky/torchinductor_x"]["exists"] is False
    assert seen["sticky/torchinductor_x"]["problem"].startswith("not made yet, and another account could make it first")
    out = _cli(capsys, "info")[1]  # the last one, in words
    assert f"torch.compile {tmp_path / 'sticky/torchinductor_x'}  (NOT SAFE: not made yet" in out
    assert "set TORCHINDUCTOR_CACHE_DIR to a directory of yours" in out


def test_info_finds_torch_compiles_default_cache_dir_without_importing_inductor(monkeypatch):
    """Without TORCHINDUCTOR_CACHE_DIR, info asks torch's own ``default_cache_dir()``, run from its file
    when ``torch._inductor`` is not imported (importing it makes the directory). Every test process had the
    variable set by an earlier torch.compile (inductor sets it in os.environ), so this path never ran: a
    torch that moved the file would have left info saying nothing, with no test to notice."""
    from torch._inductor.runtime import cache_dir_utils

    from ascend_rmsnorm.cli import info

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    want = cache_dir_utils.default_cache_dir()
    assert info._inductor_default_dir() == want  # imported already: asked directly
    monkeypatch.delitem(sys.modules, info._INDUCTOR_DIR_UTILS)
    assert info._inductor_default_dir() == want  # not imported: run from its file
    assert info._INDUCTOR_DIR_UTILS not in sys.modules
    assert info._compile_cache_section()["path"] == os.path.abspath(want)


def test_info_looks_at_torch_compiles_cache_dir_without_making_it(jit, tmp_path):
    """A fresh ``info`` process, as a person runs it: importing torch._inductor (torch._dynamo's import,
    torch 2.13) makes the cache dir, so ``info`` must not import it. Before, it made the directory itself
    and then called it "yours" (the not-made-yet case never showed outside a test process that had
    imported dynamo already), and a TORCHINDUCTOR_CACHE_DIR it could not make ended the whole command
    (exit 1, NotADirectoryError). A missing parent of a directory of yours is no danger."""
    (tmp_path / "sticky").mkdir()
    (tmp_path / "sticky").chmod(0o1777)
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "a-file").write_text("")
    seen = {}
    for name in ("sticky/torchinductor_x", "a-file/x", "mine/not/yet"):
        done = subprocess.run(
            [sys.executable, "-m", "ascend_rmsnorm", "info", "--json"], capture_output=True, text=True,
            env=_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / name)), timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, (name, done.stderr)
        seen[name] = json.loads(done.stdout)["cache"]["torch_compile"]
    assert not (tmp_path / "sticky/torchinductor_x").exists()
    assert seen["sticky/torchinductor_x"]["exists"] is False
    assert seen["sticky/torchinductor_x"]["problem"].startswith("not made yet, and another account could make it first")
    assert seen["a-file/x"]["exists"] is False and "not a directory" in seen["a-file/x"]["problem"]
    assert seen["mine/not/yet"] == {"path": str(tmp_path / "mine/not/yet"), "exists": False, "problem": None}


# ---- selftest ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "emu"])
def test_selftest_passes_and_prints_a_table(capsys, backend):
    rc, out = _cli(capsys, "selftest", "--backend", backend, "--quick")
    assert f"selftest: backend {backend} on cpu" in out
    lines = [line for line in out.splitlines() if any(f" {r} " in line for r in ("PASS", "FAIL", "SKIP"))]
    assert len(lines) == 27, out  # 6 checks + 3 probes, per dtype
    probes = [line for line in lines if line.startswith("probe: ")]
    assert len(probes) == 9
    assert [line for line in lines if " FAIL " in line and line not in probes] == [], out
    self_compared = [line for line in lines if line.startswith(("contract", "probe: "))]
    if backend == "torch":  # the torch path against itself could not fail: skipped, not passed
        assert rc == 0 and "FAIL" not in out, out
        assert len(self_compared) == 12 and all(" SKIP " in line for line in self_compared), out
        assert "15 passed, 0 failed, 12 skipped" in out
    else:
        assert not any(" SKIP " in line for line in self_compared), out


def test_selftest_probes_pass_for_emu():
    from ascend_rmsnorm.backends import emu

    runner = selftest.Runner(emu.BACKEND, torch.device("cpu"))
    checks = [selftest._probe(runner, dtype, kind) for dtype in selftest.DTYPE_NAMES for kind in selftest.PROBE_HINTS]
    assert [c.detail for c in checks if not c.passed] == []


def test_the_probes_see_a_backend_that_flushes_subnormals_or_saturates(capsys):
    """A fake backend that behaves like hardware may: every probe shows its difference on its own line."""

    class Hardware:
        name = "flushing"

        def forward(self, x, w, eps, **options):
            tiny = x.abs() < torch.finfo(x.dtype).tiny
            y, *rest = torch_backend.forward(torch.where(tiny, torch.zeros_like(x), x), w, eps, **options)
            if x.dtype != torch.float32:  # saturating casts: inf -> max, NaN -> 0
                big = torch.finfo(y.dtype).max
                y = torch.nan_to_num(y, nan=0.0, posinf=big, neginf=-big)
            return (y, *rest)

        def backward(self, dy, x, w, rstd, **options):
            return torch_backend.backward(dy, x, w, rstd, **options)

    checks = selftest.run_checks(Hardware(), torch.device("cpu"), hidden_sizes=(64,))
    probes = {(c.name.split(" (")[0], c.dtype): c for c in checks if c.name.startswith("probe: ")}
    assert set(probes) == {(f"probe: {k}", d) for k in selftest.PROBE_HINTS for d in ("fp32", "bf16", "fp16")}
    assert not probes["probe: subnormal inputs", "fp32"].passed
    assert "subnormals to zero" in probes["probe: subnormal inputs", "fp32"].detail
    assert not probes["probe: Inf/NaN rows", "bf16"].passed
    assert "saturation mode" in probes["probe: Inf/NaN rows", "bf16"].detail
    assert not probes["probe: overflowing rows", "fp16"].passed
    assert "y: " in probes["probe: overflowing rows", "fp16"].detail
    assert probes["probe: Inf/NaN rows", "fp32"].passed  # fp32 outputs do not saturate in this fake
    ordinary = [c for c in checks if not c.name.startswith("probe: ")]
    assert all(c.passed for c in ordinary if c.dtype == "fp32" and "contract" in c.name)


def test_selftest_on_the_cpu_checks_emu_by_default_and_says_when_only_the_torch_path_ran():
    assert selftest.cpu_backend("auto") == ("emu", None)  # this host has a C++ compiler
    assert selftest.cpu_backend("emu") == ("emu", None)
    name, note = selftest.cpu_backend("torch")
    assert name == "torch" and note.startswith("ONLY THE TORCH PATH WAS EXERCISED (--backend torch")


def test_selftest_json_schema(capsys):
    rc, out = _cli(capsys, "selftest", "--backend", "torch", "--quick", "--json")
    data = json.loads(out)
    assert rc == 0 and data["passed"] is True
    assert data["backend"] == "torch" and data["device"] == "cpu"
    assert {c["name"].split(" (")[0] for c in data["checks"] if c["passed"] is None} == {
        "contract", "probe: subnormal inputs", "probe: Inf/NaN rows", "probe: overflowing rows"
    }  # fmt: skip
    assert data["note"].startswith("ONLY THE TORCH PATH WAS EXERCISED")
    assert {"name", "dtype", "passed", "detail"} == set(data["checks"][0])
    assert {c["dtype"] for c in data["checks"]} == {"fp32", "bf16", "fp16"}


class _Flawed:
    """The torch path with one flaw. ``batch_dependent``: y shifts by one ulp when the batch has more than
    7 rows. ``inexact``: y scaled by 1 + 2**-10 (batch-invariant and repeatable, but further from float64
    than fp32 allows). ``by_position``: y's last bit flipped in every row but the batch's first (the same
    rows give other bits at another place). ``dw_drifts``: dw's low bits xored with the number of
    backwards run so far (another dw from the same inputs at each run)."""

    name = "broken"

    def __init__(self, flaw):
        self.flaw, self.calls = flaw, 0

    def forward(self, x, w, eps, **kwargs):
        y, rstd, _ = torch_backend.forward(x, w, eps, **kwargs)
        if self.flaw == "batch_dependent" and x.shape[0] > 7:
            view = torch.int32 if y.dtype == torch.float32 else torch.int16
            y = (y.view(view) ^ 1).view(y.dtype)
        elif self.flaw == "inexact":
            y = y * (1 + 2**-10)
        elif self.flaw == "by_position":
            y = y.clone()
            y[1:] = (y[1:].view(torch.int32) ^ 1).view(y.dtype)
        return y, rstd, None

    def backward(self, dy, x, w, rstd, **kwargs):
        dx, dw = torch_backend.backward(dy, x, w, rstd, **kwargs)
        self.calls += 1
        if self.flaw == "dw_drifts":
            dw = (dw.view(torch.int32) ^ self.calls).view(dw.dtype)
        return dx, dw


def test_selftest_fails_when_a_backend_breaks_invariance(capsys, monkeypatch):
    checks = selftest.run_checks(_Flawed("batch_dependent"), torch.device("cpu"), hidden_sizes=(256,))
    failed = {c.name.split(" (")[0] for c in checks if not c.passed}
    assert {"contract", "prefixes 1..300", "row position"} <= failed
    monkeypatch.setattr(choice, "resolve", lambda name, x: _Flawed("batch_dependent"))
    rc, out = _cli(capsys, "selftest", "--backend", "torch", "--quick")
    assert rc == 1
    assert "FAIL" in out and "backend broken" in out


@pytest.mark.parametrize(
    "flaw, fails",
    [("inexact", "accuracy vs float64"), ("by_position", "row position"), ("dw_drifts", "dw run to run")],
)
def test_each_selftest_check_fails_on_the_flaw_it_is_for(flaw, fails):
    checks = selftest.run_checks(_Flawed(flaw), torch.device("cpu"), hidden_sizes=(64,), dtypes=(torch.float32,),
                                 probes=False)  # fmt: skip
    failed = {c.name.split(" (")[0] for c in checks if c.passed is False}
    assert fails in failed, [(c.name, c.detail) for c in checks]


# ---- bench ---------------------------------------------------------------------------------------


def test_bench_quick_json(capsys):
    rc, out = _cli(capsys, "bench", "--quick", "--json", "--emu")
    assert rc == 0
    data = json.loads(out)
    assert data["device"] == "cpu" and data["peak_gbps"] is None
    impls = {r["impl"] for r in data["rows"]}
    assert impls == {"ascend_rmsnorm (torch path)", "F.rms_norm", "ascend_rmsnorm (emu kernel)"}
    modes = {(r["shape"], r["mode"]) for r in data["rows"]}
    assert modes == {(s, m) for s in ("1024x4096", "32768x128") for m in ("fwd", "fwd+bwd")}
    for r in data["rows"]:
        assert r["us"] > 0 and r["gbps"] > 0 and r["dtype"] == "bfloat16"
        if r["impl"] == "ascend_rmsnorm (torch path)":
            assert r["speedup_vs_torch_path"] == 1.0


def test_bench_prints_progress_and_a_table(capsys):
    rc = cli.main(["bench", "--quick"])
    captured = capsys.readouterr()
    assert rc == 0
    assert "[1/4] 1024x4096 bfloat16 fwd" in captured.err
    assert "implementation" in captured.out and "no HBM peak figure" in captured.out
    assert "ascend_rmsnorm (torch path)" in captured.out  # never a bare "torch" beside F.rms_norm
    assert not [line for line in captured.out.splitlines() if re.search(r" fwd(\+bwd)? +torch ", line)]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--calibrate", "--emu", "--shape", "8x128"], "--shape does not go with --calibrate"),
        (
            ["--calibrate", "--emu", "--kernel-source", "/nonexistent.asc"],
            "--kernel-source does not go with --calibrate",
        ),
        (["--calibrate", "--emu", "--quick"], "--quick does not go with --calibrate"),
        (["--model", "--device", "bogus"], "--device does not go with --model"),
        (["--model", "--emu"], "--emu does not go with --model"),
        (["--model", "--out", "x.json"], "--out goes with --model only with --against-measured"),
        (["--model", "--against-measured", "--json"], "--json does not go with --against-measured"),
        (["--sync-log", "d", "--emu"], "--emu does not go with --sync-log"),
        (["--sync-log", "d", "--json"], "--json does not go with --sync-log"),
        (["--sync-log", "d", "--model"], "--sync-log does not go with --model or --calibrate"),
        (["--sync-log", "d", "--calibrate", "--emu"], "--sync-log does not go with --model or --calibrate"),
        # timing takes none of the model's or calibration's options; the message names the jobs that do
        (["--out", "x.json"], "--out goes with --model --against-measured or --calibrate --emu"),
        (["--preset", "opt", "--param", "launch_us=1"], "--preset, --param go with --model or --calibrate --emu"),
        (["--soc", "Ascend910B2"], "--soc goes with --model or --calibrate"),
        (["--shape", "8x128", "--cores", "8"], "--shape goes with --model only; --cores goes with --model or"),
    ],
)
def test_bench_refuses_options_its_job_would_ignore(argv, says, capsys, tmp_path, monkeypatch):
    """Each of bench's jobs (timing, --model, --calibrate, --sync-log) takes its own options; one it would
    silently ignore (a --out that writes nothing, a --device never checked) is a bad command line."""
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["bench", *argv])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err[0].startswith("usage: ascend-rmsnorm bench "), err  # as argparse: usage first
    assert err[-1] == f"ascend-rmsnorm bench: {says}" or err[-1].startswith(f"ascend-rmsnorm bench: {says}"), err
    assert not list(tmp_path.iterdir())  # nothing written: refused before any work


@pytest.mark.parametrize(
    "shape, says",
    [
        ("abc", "--shape wants ROWSxHIDDEN (e.g. 8192x4096), got 'abc'"),
        ("0x128", "--shape wants ROWSxHIDDEN with both >= 1, got '0x128'"),
        # past what a tensor's int64 byte count holds: torch's "Storage size calculation overflowed" before
        (f"{2**62}x1", f"--shape '{2**62}x1' has {2**62} elements, more than a tensor can hold ({2**61 - 1})"),
    ],
)
def test_bench_model_says_what_is_wrong_with_a_shape(shape, says, capsys):
    rc = cli.main(["bench", "--model", "--soc", "Ascend910B2", "--shape", shape])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == f"ascend-rmsnorm: bench --model: {says}", err


@pytest.mark.parametrize("content", [b"", b"{'clock_ghz': 1}", b'{"comment": "\xff"}'])
@pytest.mark.parametrize("job", [["--model"], ["--calibrate", "--emu"]])
def test_a_params_file_that_is_not_json_is_named_in_the_message(job, content, capsys, tmp_path):
    """Not `Expecting value: line 1 column 1 (char 0)` alone: the message says which file is wrong."""
    bad = tmp_path / "prices.json"
    bad.write_bytes(content)
    rc = cli.main(["bench", *job, "--params", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and f"--params {bad}: not a JSON file" in err, err


def test_a_params_file_over_the_limit_is_refused_not_read_cut_short(capsys, tmp_path, monkeypatch):
    """A params file past ``MAX_PARAMS_BYTES`` is an error that says so; it is never read cut at the limit,
    where a valid object padded with blanks (JSON too) would pass."""
    from ascend_rmsnorm.perf import params as perf_params

    monkeypatch.setattr(perf_params, "MAX_PARAMS_BYTES", 64)
    big = tmp_path / "prices.json"
    big.write_text('{"preset": "base"}' + " " * 100)
    rc = cli.main(["bench", "--model", "--soc", "Ascend910B2", "--shape", "8x128", "--params", str(big)])
    err = capsys.readouterr().err
    assert rc == 2 and f"--params {big}: larger than 64 bytes" in err, err


_BAD_PARAMS_CONTENT = {
    "list": "[1, 2]",
    "unknown parameter": '{"gm_latency": 0.7}',
    "not a number": '{"gm_latency_us": "fast"}',
    "unknown preset": '{"preset": "bogus"}',
}


@pytest.mark.parametrize("kind", ["missing", "directory", *_BAD_PARAMS_CONTENT])
@pytest.mark.parametrize("job", [["--model"], ["--calibrate", "--emu"]])
def test_a_params_file_that_cannot_be_used_is_named_with_its_option(job, kind, capsys, tmp_path):
    """A file that is not there, a directory, a JSON list, or an object whose parameter, value or preset
    the model does not take: the one line names --params and the path, as for a file that is not JSON
    (not a bare `[Errno 2] ...`, nor an 'unknown model parameter' that --param could have given)."""
    bad = tmp_path / "prices.json"
    if kind == "directory":
        bad.mkdir()
    elif kind in _BAD_PARAMS_CONTENT:
        bad.write_text(_BAD_PARAMS_CONTENT[kind])
    rc = cli.main(["bench", *job, "--params", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("ascend-rmsnorm: bench ") and f": --params {bad}: " in err[-1], err


def test_peak_table_matches_socs():
    from ascend_rmsnorm.cli import bench

    assert bench.peak_for("Ascend910B3")[0] == 1600
    assert bench.peak_for("Ascend910B4")[0] == 800
    assert bench.peak_for("Ascend910_9392")[0] == 1600
    assert bench.peak_for("Ascend950DT_9591")[0] == 4000
    assert bench.peak_for("SomethingElse") == (None, None)


# ---- examples --------------------------------------------------------------------------------------


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def test_quickstart_runs_and_shows_both_facts():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 0, done.stderr
    assert "emu kernel vs torch path: y identical = True, rstd identical = True" in done.stdout
    assert "ascend_rmsnorm:    rstd identical for all 8 rows = True" in done.stdout
    assert "of 8 rows change their bits" in done.stdout


def test_notebook_runs_top_to_bottom():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "no NPU found" in text and "row prefixes equal to the full batch" in text
    assert "ascend_rmsnorm (torch path)" in text and "F.rms_norm" in text  # the bench table's labels
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_cluster_warm_script_with_a_fake_cann(jit, tmp_path):
    fake = jit.use(jit.cann("8.5.0"))
    shared = tmp_path / "shared"
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "warm_cache_cluster.sh")],
        capture_output=True,
        text=True,
        env=_env(SHARED=str(shared), ASCEND_HOME_PATH=str(fake.alias)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "built npu dav-2201" in done.stdout
    assert f"export ASCEND_RMSNORM_PREBUILT_DIR={shared}" in done.stdout
    assert list((shared / "v1" / "8.5.0" / "dav-2201").iterdir())


#: Mounts a tmpfs on /usr/local (the original entries bound back) holding a CANN-style set_env.sh at
#: the script's first default place, as CANN 8.1 writes it: `...:$LD_LIBRARY_PATH`, unguarded.
_WITH_A_DEFAULT_SET_ENV = r"""
set -e
orig="$ORIG"
mkdir "$orig"
mount --bind /usr/local "$orig"
mount -t tmpfs -o size=1m,mode=755 tmpfs /usr/local
for e in "$orig"/* "$orig"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=$(basename "$e")
    if [ -L "$e" ]; then cp -P "$e" /usr/local/; else mkdir "/usr/local/$n" && mount --bind "$e" "/usr/local/$n"; fi
done
mkdir -p /usr/local/Ascend/cann
printf '%s\n' 'export LD_LIBRARY_PATH=${FAKE_ROOT}/lib64:$LD_LIBRARY_PATH' 'export ASCEND_HOME_PATH=${FAKE_ROOT}' \
    'pwd > "$SET_ENV_PWD"' > /usr/local/Ascend/cann/set_env.sh
exec bash "$SCRIPT"
"""


@pytest.mark.skipif(unshare_prefix() is None, reason="no mount namespace here (unshare -m / -rm)")
def test_cluster_warm_script_sources_a_set_env_that_reads_unset_variables(jit, tmp_path):
    """CANN's set_env.sh (8.1: `export LD_LIBRARY_PATH=...:$LD_LIBRARY_PATH`) reads variables a fresh
    node may not have set; the script's `set -u` must not abort on them while it sources the file. That
    leaves LD_LIBRARY_PATH an empty entry, the working directory, which whatever set_env.sh runs next
    searches: so the script runs it from /, not from where it was started (a shared /tmp, say), and a
    relative SHARED is taken from there."""
    fake = jit.use(jit.cann("8.5.0"))
    shared = tmp_path / "shared"
    env = _env(SHARED="shared", FAKE_ROOT=str(fake.alias), ORIG=str(tmp_path / "usr-local"))
    env["SET_ENV_PWD"] = str(tmp_path / "set-env-pwd")
    env["SCRIPT"] = str(ROOT / "examples" / "warm_cache_cluster.sh")
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    done = subprocess.run(
        [*unshare_prefix(), "sh", "-c", _WITH_A_DEFAULT_SET_ENV], capture_output=True, text=True,
        env=namespace_env(env), cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "built npu dav-2201" in done.stdout
    assert list((shared / "v1" / "8.5.0" / "dav-2201").iterdir())
    assert (tmp_path / "set-env-pwd").read_text() == "/\n"


#: Stands in for the console script: `warm` writes the three search paths it got, NUL-separated, to $DUMP.
_DUMP_PATHS = r"""#!/bin/bash
if [ "$1" = warm ]; then
    for v in PATH LD_LIBRARY_PATH PYTHONPATH; do
        if [ -n "${!v+set}" ]; then printf '%s=%s\0' "$v" "${!v}"; else printf '%s\0' "$v"; fi
    done > "$DUMP"
fi
"""


def test_cluster_warm_script_keeps_each_absolute_entry_whole_whatever_it_holds(tmp_path):
    """The script keeps the absolute entries of PATH, LD_LIBRARY_PATH and PYTHONPATH, each as it is: one with
    a space, a glob character or a newline in it (an absolute one whose name goes on past a newline, one
    that ends with one) is neither cut short nor the end of the list; the empty and relative ones go, and a
    variable left with none is unset, an unset one stays so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ascend-rmsnorm").write_text(_DUMP_PATHS)
    (bin_dir / "ascend-rmsnorm").chmod(0o755)
    (tmp_path / "glob-a").mkdir()  # what /.../glob-* would match, were it expanded
    odd = [f"{tmp_path}/with space", f"{tmp_path}/glob-*", f"{tmp_path}/new\nline", f"{tmp_path}/new\n/line"]
    path = ["", str(bin_dir), "relative", *odd, "/usr/bin", "/bin", ""]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(SHARED=str(tmp_path / "shared"), ASCEND_HOME_PATH="/nonexistent", DUMP=str(tmp_path / "dump"))
    env.update(PATH=":".join(path), PYTHONPATH=f"rel::{tmp_path}/last\n")
    done = subprocess.run(["/bin/bash", str(ROOT / "examples" / "warm_cache_cluster.sh")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got = (tmp_path / "dump").read_bytes().decode().split("\0")
    assert got == [f"PATH={':'.join([str(bin_dir), *odd, '/usr/bin', '/bin'])}", "LD_LIBRARY_PATH",
                   f"PYTHONPATH={tmp_path}/last\n", ""]  # fmt: skip
