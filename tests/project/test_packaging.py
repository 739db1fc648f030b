"""The built wheel is a pure-Python wheel that carries the package and every kernel source."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import ascend_rmsnorm

from helpers import pyproject

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(ascend_rmsnorm.__file__).resolve().parent

#: For a dependency, its first release that needs a newer Python than an older release, and that Python, as
#: PyPI's Requires-Python says: from filelock 3.20.0 on every release declares >=3.10 (4.1.1 on: >=3.11).
#: A floor in ``dependencies`` at or above such a release cannot be installed on an older Python.
PYTHON_NEEDED_FROM = {"filelock": ((3, 20), (3, 10))}


def _floor(requirement: str) -> tuple[int, ...]:
    """The release after ``>=`` in a requirement, as numbers: ``"filelock>=3.30"`` -> ``(3, 30)``."""
    found = re.search(r">=\s*([0-9]+(?:\.[0-9]+)*)", requirement)
    assert found, requirement
    return tuple(int(part) for part in found.group(1).split("."))


#: What the package uses at import that an older torch lacks, and the first torch release that has it, as
#: seen by importing the package with PyPI's wheels: 2.4.0 has no torch.library.register_vmap (ops/vmap.py),
#: 2.5.1 and 2.7.1 no torch._C._any_requires_grad (ops/_torch_compat.py); 2.8.0 imports and runs.
TORCH_NEEDED_FOR = {
    ("ops/vmap.py", "torch.library.register_vmap"): (2, 5),
    ("ops/_torch_compat.py", '"_any_requires_grad"'): (2, 8),
}


def test_torch_floor_is_a_torch_the_package_imports_with():
    """pip must refuse a torch that ``import ascend_rmsnorm`` fails on (torch>=2.4 let 2.4 to 2.7 in)."""
    project = pyproject()["project"]
    (torch_req,) = [r for r in project["dependencies"] if re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] == "torch"]
    for (module, name), release in TORCH_NEEDED_FOR.items():
        # the table is about this package's code: when a use goes, its row goes (or this fails to say so)
        assert name in (PKG / module).read_text(), (module, name)
        assert _floor(torch_req) >= release, (torch_req, name, release)


def test_requires_python_is_not_below_what_the_dependency_floors_need():
    """pip on an older Python than a dependency's floor needs finds no release of it and refuses the whole
    install (seen: requires-python >=3.9 beside filelock>=3.30, `pip install` on 3.9: "No matching
    distribution found for filelock>=3.30")."""
    project = pyproject()["project"]
    ours = _floor(project["requires-python"])
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        if name in PYTHON_NEEDED_FROM:
            release, python = PYTHON_NEEDED_FROM[name]
            if _floor(requirement) >= release:
                assert ours >= python, (requirement, project["requires-python"])


def test_ruff_targets_the_oldest_python_the_package_declares():
    """ruff's pyupgrade rules must not suggest syntax the floor lacks, nor miss what it has (py39 sat beside
    requires-python >=3.10)."""
    data = pyproject()
    floor = _floor(data["project"]["requires-python"])
    assert data["tool"]["ruff"]["target-version"] == "py" + "".join(str(part) for part in floor[:2])


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
    # the licence pyproject names, its text beside the metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
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
