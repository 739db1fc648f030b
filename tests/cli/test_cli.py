"""The command as a whole (``cli/main.py`` and the launcher): each command's usage on a mistake, no torch
for ``--help``, ``warm`` and ``cache``, every command through the launcher with the package's __init__
unrun, ``python -m``, one line and an exit status instead of a traceback, and the default-device rule.
The commands themselves: test_warm_cmd.py, test_cache_cmd.py, test_user_surface.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ascend_rmsnorm.cli import device, info_cmd
from ascend_rmsnorm.cli import main as cli


@pytest.mark.parametrize(
    "argv, usage",
    [
        (["info", "--bogus"], "usage: ascend-rmsnorm info [-h] [--json]"),
        (["warm", "--toolchain", "emu", "--bogus"], "usage: ascend-rmsnorm warm "),
        (["cache", "clean", "--all", "--bogus"], "usage: ascend-rmsnorm cache clean "),
        (["--bogus", "info"], "usage: ascend-rmsnorm info "),
    ],
)
def test_an_unknown_option_prints_its_commands_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(usage) and "unrecognized arguments: --bogus" in err, err


def test_help_version_warm_and_cache_never_import_torch(jit, tmp_path):
    """The console script's launcher defers the package's __init__ (which imports torch); each command
    imports what it uses. Run as the installed script runs, in a fresh process."""
    probe = (
        "import sys, _ascend_rmsnorm_cli\n"
        "sys.argv = ['ascend-rmsnorm'] + sys.argv[1:]\n"
        "try:\n    code = _ascend_rmsnorm_cli.main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code)\n"
    )
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": str(jit.cache)}
    for argv, want in ((["--help"], 0), (["--version"], 0), (["cache", "path"], 0), (["warm"], 1)):
        done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, env=env)
        assert done.stdout.splitlines()[-1] == f"NO-TORCH {want}", (argv, done.stdout, done.stderr)
    done = subprocess.run([sys.executable, "-c", probe, "info"], capture_output=True, text=True, env=env)
    assert done.stdout.splitlines()[-1] == "TORCH 0"  # info reports torch's version: it needs it


def test_no_module_reads_a_name_from_the_package_object():
    """The launcher leaves the package's __init__ unrun (see ``_ascend_rmsnorm_cli``): that is safe only
    while no module takes a name from the package object itself (``rms_norm``, ``__version__``, ...);
    every ``from <the package> import X`` must name a submodule, and nothing does ``import ascend_rmsnorm``."""
    import ast

    root = Path(cli.__file__).resolve().parents[1]
    submodules = {p.stem for p in root.glob("*.py")} | {p.parent.name for p in root.glob("*/__init__.py")}
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "__init__.py":
            continue
        parts = ["ascend_rmsnorm", *path.relative_to(root).with_suffix("").parts]
        package = parts[:-1]  # what a relative import is relative to (for an __init__ too)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wrong += [f"{path}:{node.lineno} import {a.name}" for a in node.names if a.name.startswith("ascend")]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                if target == "ascend_rmsnorm":
                    wrong += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name not in submodules]
    assert not wrong, wrong
    assert {"_env", "ops", "_version", "cli", "jit"} <= submodules  # the walk sees the package


def test_every_command_runs_through_the_launcher_with_the_package_init_unrun(tmp_path):
    """As the installed console script runs: every command, in one process (torch is imported once).
    The emu kernels are the session's (built once a run); ``cache clean`` gets a scratch cache."""
    probe = (
        "import json, sys, _ascend_rmsnorm_cli as launcher\n"
        "commands = json.loads(sys.argv[1])\n"
        "def cli(argv):\n"
        "    sys.argv = ['ascend-rmsnorm', *argv]\n"
        "    try:\n        return launcher.main()\n    except SystemExit as e:\n        return e.code\n"
        "codes = [cli(['--version'])]\n"
        "import torch\n"
        "from ascend_rmsnorm.cli import bench, selftest\n"
        "# what the commands import is the point here, not their numbers: small work\n"
        "bench.QUICK_SHAPES = ((16, 256),)\n"
        "run = selftest.run_checks\n"
        "selftest.run_checks = lambda *a, **k: run(*a, **{**k, 'hidden_sizes': (64,), 'dtypes': (torch.bfloat16,)})\n"
        "codes += [cli(argv) for argv in commands]\n"
        "init_ran = hasattr(sys.modules['ascend_rmsnorm'], 'rms_norm')\n"
        "print('RESULT', json.dumps([codes, init_ran, hasattr(torch.ops.ascend_rmsnorm, 'rms_norm')]))\n"
    )
    scratch = str(tmp_path / "scratch-cache")
    commands = [
        ["info", "--json"],
        ["warm", "--toolchain", "emu"],
        ["cache", "path"],
        ["cache", "list"],
        ["cache", "verify"],
        ["cache", "clean", "--all", "--cache-dir", scratch],
        ["selftest", "--quick", "--json"],  # emu against the torch path
        ["bench", "--quick", "--json"],
        ["bench", "--model", "--shape", "64x128", "--dtype", "bfloat16", "--direction", "fwd", "--json"],
    ]
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(commands)], capture_output=True, text=True)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and result, done.stderr[-3000:]
    codes, init_ran, ops_registered = json.loads(result[0].split(" ", 1)[1])
    assert codes == [0] * (1 + len(commands)), list(zip([["--version"], *commands], codes))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert '"backend": "emu"' in done.stdout and "ascend_rmsnorm (torch path)" in done.stdout
    assert not init_ran  # the package's __init__ never ran, and selftest and bench still registered the ops
    assert ops_registered


def test_python_dash_m_runs_the_cli(jit):
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": str(jit.cache)}
    done = subprocess.run(
        [sys.executable, "-m", "ascend_rmsnorm", "cache", "path"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert f"writable  {jit.cache}  (writable, made by the first build)" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "ascend_rmsnorm", "nope"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


# ---- never a traceback ---------------------------------------------------------------------------------


def _stderr_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and not any("Traceback" in line for line in err), err
    return err[-1]


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["selftest", "--backend", "npu"], 1, "the npu backend runs on an NPU; the default device cpu is not"),
        (["selftest", "--device", "cuda"], 1, "--device cuda: torch has no cuda device on this host"),
        (["selftest", "--device", "foo"], 2, "--device 'foo' is not a torch device; give one such as cpu, npu"),
        (["selftest", "--device", "meta"], 1, "--device meta: meta tensors hold no data"),
        (["selftest", "--backend", "emu", "--device", "cuda:1"], 1, "--device cuda:1: torch has no cuda device"),
        (["bench", "--device", "foo"], 2, "--device 'foo' is not a torch device"),
        (["bench", "--device", "npu"], 1, "--device npu: this host cannot run on an NPU: torch_npu cannot be"),
        (["bench", "--device", "meta", "--quick"], 1, "meta tensors hold no data"),
    ],
)
def test_bad_devices_and_backends_give_one_line_and_a_non_zero_exit(argv, code, says, capsys):
    assert cli.main(argv) == code
    line = _stderr_line(capsys)
    prefix = f"ascend-rmsnorm {argv[0]}: " if code == 2 else f"ascend-rmsnorm: {argv[0]}: "  # 2: argparse's form
    assert line.startswith(prefix) and says in line, line
    assert "\n" not in line


def test_check_device_accepts_what_exists(monkeypatch):
    assert device.check_device(None, "torch") == "cpu"
    assert device.check_device("cpu:0", "emu") == "cpu:0"
    with pytest.raises(cli.CliError, match="emu backend runs on the CPU"):
        monkeypatch.setattr(torch, "xpu", SimpleNamespace(is_available=lambda: True, device_count=lambda: 1), False)
        monkeypatch.setattr(torch, "empty", lambda *a, **k: None)
        device.check_device("xpu", "emu")


def test_a_nonsense_backend_variable_warns_and_selftest_still_runs(capsys, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", "foo")
    monkeypatch.setenv("PATH", str(tmp_path))  # no C++ compiler: auto on the CPU checks the torch path only
    assert cli.main(["selftest", "--quick"]) == 0
    captured = capsys.readouterr()
    assert "selftest: backend torch on cpu" in captured.out
    assert "note: ONLY THE TORCH PATH WAS EXERCISED (no host C++ compiler" in captured.out
    assert "the torch path against itself on the CPU: nothing to compare" in captured.out
    assert ", 0 failed, 12 skipped in " in captured.out
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "ASCEND_RMSNORM_BACKEND='foo' is not one of auto, npu, emu, torch; using the default (auto) instead"
    ]
    assert "Traceback" not in captured.err


def test_an_unexpected_error_is_one_line_unless_debugging(capsys, monkeypatch):
    def boom(args):
        raise ZeroDivisionError("division by zero somewhere deep")

    monkeypatch.setattr(info_cmd, "run", boom)
    assert cli.main(["info"]) == 1
    line = _stderr_line(capsys)
    assert "info: unexpected ZeroDivisionError: division by zero somewhere deep. This is a bug" in line
    monkeypatch.setenv("ASCEND_RMSNORM_LOG_LEVEL", "DEBUG")
    assert cli.main(["info"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    "exc, code, says",
    [
        (KeyboardInterrupt(), 130, "info: interrupted"),
        (OSError(28, "No space left on device"), 1, "info: OSError: [Errno 28] No space left on device"),
        (ValueError("bad thing\nsecond line"), 1, "info: bad thing"),
    ],
)
def test_interrupts_and_os_errors_are_one_line(exc, code, says, capsys, monkeypatch):
    def raiser(args):
        raise exc

    monkeypatch.setattr(info_cmd, "run", raiser)
    assert cli.main(["info"]) == code
    assert _stderr_line(capsys) == f"ascend-rmsnorm: {says}"


def test_a_package_error_keeps_every_line_of_its_message(capsys, monkeypatch):
    """The package's own errors carry what to do on their later lines (the warm command, the tiers
    searched): main prints the whole message once, status 1, not its first line as an unexpected error."""
    from ascend_rmsnorm.errors import KernelNotCachedError

    def raiser(args):
        raise KernelNotCachedError(
            "no cached kernel library for npu dav-2201\nBuild it once with:\n  ascend-rmsnorm warm"
        )

    monkeypatch.setattr(info_cmd, "run", raiser)
    assert cli.main(["info"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "ascend-rmsnorm: no cached kernel library for npu dav-2201\nBuild it once with:\n  ascend-rmsnorm warm\n"
    ), err


def test_a_reader_that_went_away_ends_the_command_quietly_with_status_1(jit):
    """A reader that went away (``ascend-rmsnorm cache list | head -1``): writing stdout fails with EPIPE.
    The command stops with status 1 and nothing on stderr: no BrokenPipeError line and no complaint at exit
    about flushing stdout."""
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": str(jit.cache)}
    launcher = Path(__file__).resolve().parents[2] / "_ascend_rmsnorm_cli.py"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, str(launcher), "cache", "path"], stdout=write_end, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, b""), done.stderr


def test_a_device_index_past_the_hosts_count_or_one_that_cannot_hold_a_tensor_is_one_line(monkeypatch):
    """An accelerator torch reports available: an index past its count is named with the count, and one
    that refuses an allocation (here: a torch built without it) says so, each a CliError before any work."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        cli.CliError, match=r"^--device cuda:2: there is no cuda:2 \(this host has 2 cuda device\(s\)\)$"
    ):
        device.check_device("cuda:2", "torch")
    if not torch.backends.cuda.is_built():
        with pytest.raises(cli.CliError, match="^--device cuda:1: cannot allocate a tensor there: AssertionError: "):
            device.check_device("cuda:1", "torch")


def test_an_npu_host_without_a_usable_torch_npu_says_so_and_runs_on_the_cpu(capsys, monkeypatch):
    from ascend_rmsnorm.backends import npu

    monkeypatch.setattr(npu, "npu_present", lambda: True)
    monkeypatch.setattr(device, "npu_usable", lambda: "torch_npu cannot be imported (ImportError: libhccl.so)")
    assert device.check_device(None, "auto") == "cpu"
    assert "this host has an NPU, but torch_npu cannot be imported (ImportError: libhccl.so); running on the CPU" in (
        capsys.readouterr().err
    )
    with pytest.raises(cli.CliError, match="the npu backend runs on an NPU.*libhccl"):
        device.check_device(None, "npu")


def test_bench_timing_waits_for_the_device_it_times(monkeypatch):
    """`bench --device cuda:1` (or npu:1) while another device is current: each repetition waits for that
    device, or it would time the host's launches only."""
    from ascend_rmsnorm.cli import bench

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    bench.time_median(lambda: None, torch.device("cuda", 1), warmup=1, reps=2)
    assert waited and all(d == torch.device("cuda", 1) for d in waited)


def _run_with_fd_closed(jit, fd: int, *argv: str) -> subprocess.CompletedProcess:
    """The CLI started with ``fd`` closed (``>&-`` or ``2>&-``), the other standard stream captured."""
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": str(jit.cache)}
    launcher = Path(__file__).resolve().parents[2] / "_ascend_rmsnorm_cli.py"
    kept = {"stderr" if fd == 1 else "stdout": subprocess.PIPE}
    return subprocess.run(
        [sys.executable, str(launcher), *argv], text=True, env=env, preexec_fn=lambda: os.close(fd), **kept
    )


def test_a_command_started_with_stderr_closed_keeps_its_complaint_off_stdout(jit):
    """Started with fd 2 closed (``2>&-``), Python sets ``sys.stderr`` to None, and ``print(file=None)``
    writes to stdout: the complaint (or a progress line) would land in the output a caller parses.
    ``_log.to_stderr`` passes a missing stderr over, as it does a closed one; the exit status still tells."""
    done = _run_with_fd_closed(jit, 2, "cache", "clean")
    assert done.returncode == 2 and done.stdout == "", done.stdout


def test_a_command_started_with_stdout_closed_fails_rather_than_lose_its_result(jit):
    """Started with fd 1 closed (``>&-``), Python sets ``sys.stdout`` to None and ``print`` writes nothing:
    ``cache path`` exited 0 having said nothing, a success whose result went nowhere. Like a write to a
    full disk (or coreutils' ``ls >&-``), it now fails and says why on stderr."""
    done = _run_with_fd_closed(jit, 1, "cache", "path")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == "ascend-rmsnorm: cache: OSError: [Errno 9] standard output is closed: " + (
        "the result cannot be written"
    ), done.stderr


def test_an_ascii_only_stdout_gets_help_and_tables_not_an_encoding_error(jit):
    """A job's stdout may be ASCII only (``PYTHONIOENCODING=ascii``, or ``LC_ALL=C`` with ``PYTHONUTF8=0``).
    The bench help and tables say ``µs``: ``bench --help`` died with a UnicodeEncodeError traceback and
    ``bench --model`` exited 1 with "'ascii' codec can't encode". The characters that stdout cannot hold
    are spelled in ASCII instead; a path's non-UTF-8 byte is still written as the byte it is."""
    env = {**os.environ, "ASCEND_RMSNORM_CACHE_DIR": str(jit.cache), "PYTHONIOENCODING": "ascii"}
    launcher = Path(__file__).resolve().parents[2] / "_ascend_rmsnorm_cli.py"

    def run(*argv: str | bytes) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(launcher), *argv], capture_output=True, env=env, timeout=300)

    done = run("bench", "--help")
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"Medians in us" in done.stdout, done.stdout
    model = ("--model", "--shape", "64x128", "--dtype", "bfloat16", "--direction", "fwd", "--soc", "Ascend910B2")
    done = run("bench", *model)
    assert done.returncode == 0, done.stderr
    assert b" us " in done.stdout.splitlines()[1] and b"Ascend910B2" in done.stdout, done.stdout
    odd = os.fsencode(jit.tmp) + b"/cache-\xc3\xa9-\xff"  # an e-acute and a byte that is no UTF-8
    done = run("cache", "path", "--cache-dir", odd)
    assert done.returncode == 0, done.stderr
    assert b"/cache-\\xe9-\xff  (writable" in done.stdout, done.stdout


def test_an_interrupt_while_the_command_starts_is_one_line_and_130(capsys, monkeypatch):
    """SIGINT in the first ~50 ms (a job cancelled as it starts) landed in the launcher's import of
    ``cli.main`` or in ``build_parser``/``parse``, outside ``main``'s handlers: a KeyboardInterrupt
    traceback. Both places now end as an interrupt later does: one line, status 130."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    try:
        code = cli.main(["cache", "path"])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt left main")
    assert code == 130
    assert _stderr_line(capsys) == "ascend-rmsnorm: interrupted"
    probe = (
        "import sys, _ascend_rmsnorm_cli as launcher\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ascend_rmsnorm.cli.main':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['ascend-rmsnorm', 'cache', 'path']\n"
        "sys.exit(launcher.main())\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, timeout=120)
    assert done.returncode == 130 and done.stderr == "ascend-rmsnorm: interrupted\n", (done.returncode, done.stderr)
