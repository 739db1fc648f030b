"""The built wheel is a pure-Python wheel that carries the package and every kernel source."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ascend_rmsnorm

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(ascend_rmsnorm.__file__).resolve().parent


def test_wheel_contains_package_and_kernels(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("ascend_rmsnorm-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ascend_rmsnorm/__init__.py" in names
    kernel_files = {
        "ascend_rmsnorm/" + p.relative_to(PKG).as_posix()
        for p in (PKG / "kernels").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert "ascend_rmsnorm/kernels/rmsnorm.asc" in kernel_files
    # the kernel's own headers, in their folders beside the .asc (it includes them relative to itself)
    assert {f.split("/")[2] for f in kernel_files if f.endswith(".h")} >= {"common", "fwd", "bwd", "host", "emu"}
    assert "ascend_rmsnorm/kernels/emu/kernel_operator.h" in kernel_files
    assert kernel_files <= names, sorted(kernel_files - names)
    assert not any(n.startswith("tests/") for n in names)
    # the console script's launcher, outside the package so that --help imports no torch
    assert "_ascend_rmsnorm_cli.py" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "ascend-rmsnorm = _ascend_rmsnorm_cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # installed from the wheel, not from this checkout: its console script runs, and imports no torch
    target = tmp_path / "installed"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target)]
    done = subprocess.run([*install, str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    script = target / "bin" / "ascend-rmsnorm"
    probe = (
        "import runpy, sys\n"
        "script = sys.argv[1]\n"
        "for argv in (['--version'], ['cache', 'path']):\n"
        "    sys.argv = [script, *argv]\n"
        "    try:\n        runpy.run_path(script, run_name='__main__')\n"
        "    except SystemExit as e:\n        assert not e.code, (argv, e.code)\n"
        "launcher, package = sys.modules['_ascend_rmsnorm_cli'], sys.modules['ascend_rmsnorm']\n"
        "print('FROM', launcher.__file__, package.__path__[0], sep='|')\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "ASCEND_RMSNORM_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(  # from tmp_path: the checkout must not be the current dir, first on sys.path
        [sys.executable, "-c", probe, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"ascend-rmsnorm {ascend_rmsnorm.__version__}", lines
    assert any(line.startswith("writable  ") for line in lines[1:-2]), lines  # cache path's report
    assert lines[-2:] == [f"FROM|{target / '_ascend_rmsnorm_cli.py'}|{target / 'ascend_rmsnorm'}", "NO-TORCH"], lines
