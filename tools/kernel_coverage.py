#!/usr/bin/env python3
"""Line, branch and region coverage of the Ascend C kernel sources under the emulated kernel tests.

Runs pytest (by default ``tests/kernel`` and ``tests/perf/test_calibrate.py``, or the test paths and pytest
options given after ``--``) with the emu backend's host compiler replaced by a wrapper, a ``c++`` first on
PATH that calls ``clang++ -fprofile-instr-generate -fcoverage-mapping`` with the package's own flags and keeps
a copy of each kernel library it builds (the tests' conftest clears every ``ASCEND_RMSNORM_*`` variable, so
PATH is the way in; the package refuses a compiler in a directory others can write, so the wrapper lives in a
private dir under ``--work``, by default ``~/.cache/ascend-rmsnorm-kcov``). Every process that loads an
emulated kernel library, the sweep's workers too, writes a raw profile at exit; they are merged with
``llvm-profdata`` and reported with ``llvm-cov`` (of clang's version) per library: ``librmsnorm`` for
``rmsnorm.asc`` and its ``fwd/``, ``bwd/``, ``common/`` and ``host/`` headers, ``libcalibrate`` for
``calibrate.asc``; the emulation's own headers (``emu/``) are left out. The table goes to stdout; each
library's annotated source of the lines and branches that never ran goes to ``<work>/<library>.txt`` (and
HTML to ``<work>/html-<library>/`` with ``--html``). Clang's source-based coverage counts the source's own
branches (one true and one false side per condition), not the optimiser's, so the ``-O2`` build is measured
as it is. A cheap way to check that a new test takes a branch: ``tools/kernel_coverage.py -- tests/kernel/
test_x.py -k name`` and read the branch's line in the .txt. Not part of CI (it needs clang and LLVM's tools
and takes as long as the tests); run it under ``nice`` on a shared machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "ascend_rmsnorm" / "kernels"
DEFAULT_TESTS = ["tests/kernel", "tests/perf/test_calibrate.py"]

WRAPPER = """#!/bin/sh
# tools/kernel_coverage.py: the emu build with clang's coverage; a copy of each library goes to {objs}
{clang} -fprofile-instr-generate -fcoverage-mapping "$@" || exit $?
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case "$out" in
  *.so) {cp} "$out" "{objs}/$({basename} "$out" .so)-$$.so" ;;
esac
exit 0
"""


def _tool(name: str, major: str) -> str:
    """LLVM's ``name`` of clang's major version: ``name-<major>``, else ``name`` if it is that version."""
    for candidate in (f"{name}-{major}", name):
        found = shutil.which(candidate)
        if found and (candidate != name or f"version {major}." in _run([found, "--version"]).stdout):
            return found
    sys.exit(f"kernel_coverage: no {name} of LLVM {major} (clang's version) on PATH")


def _run(argv: list[str], check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def _build_id(path: Path) -> str:
    """The GNU build id of an ELF file (clang's linker writes one), as hex."""
    data = path.read_bytes()
    m = re.search(rb"\x04\0\0\0(.{4})\x03\0\0\0GNU\0", data, re.S)
    if not m:
        return ""
    size = int.from_bytes(m.group(1), "little")
    at = m.end()
    return data[at : at + size].hex()


def _profiles_of(profdata_tool: str, raws: list[Path], build_id: str) -> list[Path]:
    """The raw profiles a library wrote: those naming its build id (a process writes one per
    instrumented module it loaded; the test binaries the wrapper also built write their own)."""
    out = []
    for raw in raws:
        shown = _run([profdata_tool, "show", "--binary-ids", str(raw)]).stdout
        if build_id and build_id in shown:
            out.append(raw)
    return out


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def _build_prefix(files: list[str]) -> str | None:
    """The build dir's ``src`` the library's files were compiled from (the cache builds in a temp dir)."""
    for name in files:
        m = re.match(r"(.*/src)/", name)
        if m:
            return m.group(1)
    return None


def report(llvm_cov: str, obj: Path, profdata: Path, out: Path, html: bool) -> list[tuple[str, dict]]:
    """Per-file summaries of ``obj``'s kernel sources (the emulation's headers left out), and the
    annotated uncovered source written to ``out``."""
    base = [llvm_cov, "export", "-summary-only", "-object", str(obj), "-instr-profile", str(profdata)]
    data = json.loads(_run(base, check=True).stdout)["data"][0]
    prefix = _build_prefix([f["filename"] for f in data["files"]])
    rows = []
    for f in data["files"]:
        rel = f["filename"][len(prefix) + 1 :] if prefix else f["filename"]
        if not rel.startswith("emu/"):
            rows.append((rel, f["summary"]))
    show = [llvm_cov, "show", "-object", str(obj), "-instr-profile", str(profdata), "-show-branches=count",
            "-show-line-counts-or-regions", "-ignore-filename-regex=/emu/"]  # fmt: skip
    if prefix:
        show.append(f"-path-equivalence={prefix},{KERNELS}")
    out.write_text(_run(show).stdout)
    if html:
        _run([*show, "-format=html", f"-output-dir={out.with_name('html-' + out.stem)}"])
    return sorted(rows)


def _pct(s: dict) -> str:
    return f"{s['covered']:>5}/{s['count']:<5} {s['percent']:6.2f}%" if s["count"] else f"{'-':>18}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "ascend-rmsnorm-kcov",
                    help="private dir for the wrapper, the profiles, the libraries and the reports")  # fmt: skip
    ap.add_argument("--clang", default="clang++", help="the clang++ to build with (default: on PATH)")
    ap.add_argument("--html", action="store_true", help="also write llvm-cov's HTML per library")
    ap.add_argument("pytest_args", nargs="*", help="after --: test paths and pytest options")
    args = ap.parse_args()

    clang = shutil.which(args.clang) or sys.exit(f"kernel_coverage: no {args.clang}")
    major = re.search(r"version (\d+)\.", _run([clang, "--version"]).stdout)
    major = major.group(1) if major else ""
    profdata_tool, llvm_cov = _tool("llvm-profdata", major), _tool("llvm-cov", major)

    run = _private_dir(args.work) / time.strftime("run-%Y%m%d-%H%M%S")
    bin_dir, objs, prof = (_private_dir(run / d) for d in ("bin", "objs", "prof"))
    wrapper = bin_dir / "c++"
    wrapper.write_text(WRAPPER.format(clang=clang, objs=objs, cp=shutil.which("cp"), basename=shutil.which("basename")))
    wrapper.chmod(0o755)

    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["LLVM_PROFILE_FILE"] = str(prof / "%p-%m.profraw")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    tests = args.pytest_args or DEFAULT_TESTS
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={run / 'pytest'}", *tests]
    print("kernel_coverage:", " ".join(argv), file=sys.stderr)
    rc = subprocess.call(argv, cwd=ROOT, env=env)

    raws = sorted(prof.glob("*.profraw"))
    libs = list({hashlib.sha256(p.read_bytes()).digest(): p for p in sorted(objs.glob("*.so"))}.values())
    if not raws or not libs:
        sys.exit(f"kernel_coverage: no profiles or no library built (pytest exit {rc})")
    print(f"\npytest exit {rc}; {len(raws)} profiles; reports in {run}")
    print(f"{'file':<26} {'lines':>18} {'branches':>18} {'regions':>18}")
    for lib in libs:
        mine = _profiles_of(profdata_tool, raws, _build_id(lib))
        if not mine:
            continue  # a library no test process loaded
        merged = run / f"{lib.stem}.profdata"
        subprocess.check_call([profdata_tool, "merge", "-sparse", "-o", str(merged), *map(str, mine)])
        rows = report(llvm_cov, lib, merged, run / f"{lib.stem}.txt", args.html)
        sources = ", ".join(r for r, _ in rows if r.endswith(".asc")) or rows[0][0]
        print(f"-- {sources} ({lib.name}, {len(mine)} profiles)")
        for rel, s in rows:
            print(f"{rel:<26} {_pct(s['lines'])} {_pct(s['branches'])} {_pct(s['regions'])}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
