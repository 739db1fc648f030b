"""Where bisheng's auto-sync puts synchronisation in the kernels: a build with ``--cce-auto-sync-log``.

On dav-2201 bisheng inserts the PIPE_V synchronisation itself (asc-devkit, 核内同步/关键特性说明.md:
"PIPE_V之间由毕昇编译器自动完成同步插入"). What it inserts inside a barrier window decides what no CPU
run can show: whether the kernels' windows stay whole where an instruction overwrites what an earlier
one of its window read or wrote (docs/design.md §9; the model prices the worst case with
``--param war_barriers=1``), and whether the calibration's ``vec_spread`` windows do
(docs/calibration.md). The build needs CANN, not an NPU.

``ascend-rmsnorm bench --sync-log DIR`` builds each kernel source with the package's own command
(``jit/build.py``) plus ``-g --cce-auto-sync-log=DIR/<kernel>.sync.log``, into DIR (never the kernel
cache), and prints, for every line of our kernel files that bisheng put something before, what it put.
The log's format is the one asc-devkit documents::

    Position: <path>:<line> : line before insert sync : PipeBarrier<PIPE_V>();
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._log import to_stderr
from ..errors import AscendRMSNormError
from . import build, toolchain, toolpath, trust

#: The kernel sources it builds (``kernels/<name>.asc``).
KERNELS = ("rmsnorm", "calibrate")
KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"

_ENTRY = re.compile(r"^\s*Position:\s*(?P<path>.+?):(?P<line>\d+)\s*:\s*(?P<where>[^:]*?)\s*:\s*(?P<sync>\S.*?)\s*$")


@dataclass(frozen=True)
class Inserted:
    """One synchronisation bisheng inserted: before (or after, as ``where`` says) ``path``:``line``."""

    path: str
    line: int
    where: str
    sync: str

    @property
    def kind(self) -> str:
        """``PipeBarrier<PIPE_V>``, ``SetFlag<HardEvent::V_S>``, ...: the call without its arguments."""
        return self.sync.split("(", 1)[0].strip()


def parse(text: str) -> list[Inserted]:
    """The log's entries; other lines (its header, blank ones) are skipped."""
    found = []
    for raw in text.splitlines():
        m = _ENTRY.match(raw)
        if m:
            found.append(Inserted(m["path"], int(m["line"]), m["where"], m["sync"]))
    return found


def command(tc: toolchain.Toolchain, arch: str, source: Path, output: Path, log: Path) -> list[str]:
    """The package's build command for ``source`` with the auto-sync log (and ``-g``, which it needs for
    line numbers) added."""
    argv = build.compile_command(tc, arch, str(source), str(output))
    return [argv[0], "-g", f"--cce-auto-sync-log={log}", *argv[1:]]


def _ours(path: str, kernels_dir: Path) -> str | None:
    """``path`` relative to the kernel sources, or None when it lies elsewhere (the devkit's headers)."""
    try:
        return str(Path(path).resolve().relative_to(kernels_dir.resolve()))
    except (ValueError, OSError):
        return None


def summary(entries: Sequence[Inserted], kernels_dir: Path = KERNELS_DIR) -> list[str]:
    """One line per entry in our files (file:line, what was inserted, the source line), then the counts."""
    lines, ours = [], Counter()
    texts: dict[str, list[str]] = {}
    for e in entries:
        rel = _ours(e.path, kernels_dir)
        if rel is None:
            continue
        ours[e.kind] += 1
        if rel not in texts:
            try:
                texts[rel] = (kernels_dir / rel).read_text(errors="replace").splitlines()
            except OSError:
                texts[rel] = []
        src = texts[rel][e.line - 1].strip() if 0 < e.line <= len(texts[rel]) else ""
        lines.append(f"  {rel}:{e.line}: {e.where}: {e.sync}    | {src}")
    elsewhere = len(entries) - sum(ours.values())
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(ours.items())) or "none"
    lines.append(f"  in our files: {counts}; in other files (the devkit's headers): {elsewhere}")
    return lines


def _output_dir(out_dir: str | os.PathLike) -> tuple[Path, str | None]:
    """(DIR as a path with no link in it, why it cannot be used or None). DIR is made (missing parents
    too) and checked by the cache's walk as given, so a link someone else owns is refused, not followed;
    then as a directory files are made in by name (``trust.unsafe_reason(searched=True)``): the compiler
    writes there and this removes and reads there, so nobody else may add or swap a name in it. The path
    returned is where that walk led (the compiler runs inside it: a relative name would point below it),
    and every part of it is yours or root's, so it cannot be changed under the build."""
    shown = Path(os.path.abspath(out_dir))
    try:
        os.close(trust.open_path(shown, create=True, directory=True))
    except trust.Untrusted as err:
        return shown, err.problem
    except OSError as err:
        return shown, f"cannot make {err.filename or shown}: {err.strerror or err}"
    problem = trust.unsafe_reason(shown, searched=True)
    return Path(os.path.realpath(shown)), problem


def main(out_dir: str | os.PathLike, kernels: Sequence[str] = KERNELS, echo: Callable[[str], None] = print) -> int:
    """``bench --sync-log DIR``: 0 when every build wrote its log; 1 when one did not, or without CANN;
    2 for a DIR it may not use."""
    try:
        tc = toolchain.get_toolchain("npu")
    except AscendRMSNormError as err:
        to_stderr(f"ascend-rmsnorm: bench --sync-log: {err}")
        return 1
    arch = toolchain.SUPPORTED_ARCHES[0]
    out, unsafe = _output_dir(out_dir)
    if unsafe:
        fix = "" if "fix:" in unsafe else "; give a directory only you can write"
        to_stderr(f"ascend-rmsnorm: bench --sync-log: {unsafe}{fix}")
        return 2
    status = 0
    # as the cache builds (jit/publish.py): the compiler's PATH and library paths cut to places nobody
    # else can write, its temp files in DIR, and it dies with this process (build.run_command)
    env = toolpath.compiler_env(tc.compiler, out)
    for name in kernels:
        source, log = KERNELS_DIR / f"{name}.asc", out / f"{name}.sync.log"
        lib, build_log = out / f"lib{name}.sync.so", out / f"{name}.build.log"
        for stale in (log, lib):  # a log from an earlier run must not pass for this one's
            stale.unlink(missing_ok=True)
        argv = command(tc, arch, source, lib, log)
        to_stderr(f"  building {source.name} with bisheng's auto-sync log (a minute or more) ...")
        start = time.monotonic()
        rc, output = build.run_command(argv, out, env)
        build_log.write_text(f"$ {shlex.join(argv)}\n{output}")
        if rc != 0:
            result = build.CompileResult(argv, rc, output, time.monotonic() - start, build_log)
            echo(f"{name}.asc: FAILED (exit {rc})\n{build.format_compile_error(f'{name}.asc', result, out)}")
            status = 1
            continue
        if not log.is_file():
            echo(f"{name}.asc: FAILED (no log written); {build_log} has the command and output")
            status = 1
            continue
        entries = parse(log.read_text(errors="replace"))
        echo(f"{name}.asc: {len(entries)} synchronisations inserted ({log})")
        for line in summary(entries):
            echo(line)
    return status
