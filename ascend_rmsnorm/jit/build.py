"""Compiler command lines per toolchain generation, and running the compiler with a saved log.

``compile_commands`` is pure (no I/O) so tests can assert the exact argv. The cache runs them inside the
build directory with *relative* source and output paths, which keeps the argv (part of the cache key)
free of our own install and temp paths, and lets a person rerun a failed command from the saved
``failed/<key>/`` directory as it stands.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KernelCompileError, UnsupportedArchError
from .toolchain import GENERATION_ASC, GENERATION_CCE, GENERATION_EMU, Toolchain

#: ``--cce-aicore-arch`` names of the vector cores, for the CANN 8.0-8.3 ``-xcce`` form (reference §1.3).
LEGACY_VECTOR_ARCH = {
    "dav-2201": "dav-c220-vec",
    "dav-2002": "dav-m200-vec",
    "dav-3002": "dav-m300",
    "dav-3510": "dav-c310-vec",
}

#: Lines of compiler output quoted in a ``KernelCompileError`` (the full output is in build.log).
TAIL_LINES = 60


def _arch_digits(arch: str) -> str:
    digits = arch.rsplit("-", 1)[-1]
    if not digits.isdigit():
        raise UnsupportedArchError(f"arch {arch!r} is not of the form dav-NNNN")
    return digits


#: ``-mllvm`` options CANN's own cmake passes for the vector cores of dav-c220 in the legacy flow
#: (asc-devkit ``cmake/asc/legacy_modules/bisheng_intf.cmake``, target ``c220_aiv_intf_pub``; CANN 8.1
#: ``tikcpp/ascendc_kernel_cmake/bisheng_intf.cmake``).
LEGACY_MLLVM = (
    "-cce-aicore-stack-size=0x8000",
    "-cce-aicore-function-stack-size=0x8000",
    "-cce-aicore-record-overflow=true",
    "-cce-aicore-addr-transform",
    "-cce-aicore-dcci-insert-for-scalar=false",
)

#: The object file the legacy two-step build compiles to (relative to the build dir), then links.
LEGACY_OBJECT = "rmsnorm.o"


def compile_commands(toolchain: Toolchain, arch: str, source: str | Path, output: str | Path) -> list[list[str]]:
    """The commands, run in order, that build ``source`` (rmsnorm.asc, with ``emu/`` beside it) into ``output``.

    One command for emu and CANN >= 8.5 (``-x asc ... -shared``). CANN 8.0-8.3 compile with ``-xcce -c`` into
    an object and link it with ``--cce-fatobj-link -shared``: every public ``--cce-aicore-arch`` example and
    CANN's own cmake do it in these two steps (the fat object carries the device binary for the linker).
    """
    source, output = str(source), str(output)
    gen = toolchain.generation
    if gen == GENERATION_EMU:
        emu_dir = os.path.join(os.path.dirname(source), "emu")
        return [
            [
                toolchain.compiler,
                "-std=c++17",
                "-O2",
                "-fPIC",
                "-shared",
                "-x",
                "c++",
                "-ffp-contract=off",
                "-DASCEND_RMSNORM_EMU=1",
                f"-D__NPU_ARCH__={_arch_digits(arch)}",
                "-I",
                emu_dir,
                source,
                "-o",
                output,
            ]
        ]
    root = str(toolchain.cann_root)
    if gen == GENERATION_ASC:
        return [
            [
                toolchain.compiler,
                "-x",
                "asc",
                f"--npu-arch={arch}",
                "-O2",
                "-std=c++17",
                "-fPIC",
                "-shared",
                "-ffp-contract=off",
                "-DASCENDC_DUMP=0",
                source,
                "-o",
                output,
                f"-Wl,-rpath,{root}/lib64",
            ]
        ]
    if gen == GENERATION_CCE:
        legacy = LEGACY_VECTOR_ARCH.get(arch)
        if legacy is None:
            raise UnsupportedArchError(f"no legacy (-xcce) arch name known for {arch}")
        tikcfw = f"{root}/compiler/tikcpp/tikcfw"
        mllvm = [arg for option in LEGACY_MLLVM for arg in ("-mllvm", option)]
        compile_step = [
            toolchain.compiler,
            "-xcce",
            "-c",
            "-O2",
            "-std=c++17",
            "-fPIC",
            f"--cce-aicore-arch={legacy}",
            "--cce-auto-sync",
            *mllvm,
            "-ffp-contract=off",
            "-DASCENDC_DUMP=0",
            "-DASCEND_RMSNORM_LEGACY_CCE=1",
            "-I",
            tikcfw,
            "-I",
            f"{tikcfw}/impl",
            "-I",
            f"{tikcfw}/interface",
            "-I",
            f"{root}/include",
            source,
            "-o",
            LEGACY_OBJECT,
        ]
        link_step = [
            toolchain.compiler,
            "--cce-fatobj-link",
            "-fPIC",
            "-shared",
            LEGACY_OBJECT,
            "-o",
            output,
            f"-L{root}/lib64",
            "-lascendcl",
            "-lruntime",
            f"-Wl,-rpath,{root}/lib64",
        ]
        return [compile_step, link_step]
    raise ValueError(f"unknown toolchain generation {gen!r}")


def compile_command(toolchain: Toolchain, arch: str, source: str | Path, output: str | Path) -> list[str]:
    """The single command of a one-step build (emu, CANN >= 8.5); ValueError for the two-step legacy form."""
    commands = compile_commands(toolchain, arch, source, output)
    if len(commands) != 1:
        raise ValueError(f"the {toolchain.generation} build takes {len(commands)} commands; use compile_commands")
    return commands[0]


def normalise_argv(argv: list[str], replacements: dict[str, str]) -> list[str]:
    """``argv`` with each path prefix in ``replacements`` (longest first) swapped for its placeholder."""
    ordered = sorted(((str(k), v) for k, v in replacements.items() if str(k)), key=lambda kv: -len(kv[0]))
    out = []
    for arg in argv:
        for path, placeholder in ordered:
            arg = arg.replace(path, placeholder)
        out.append(arg)
    return out


@dataclass(frozen=True)
class CompileResult:
    argv: list[str]
    returncode: int
    output: str
    seconds: float
    log_path: Path


def format_compile_error(what: str, result: CompileResult, workdir: Path) -> str:
    lines = result.output.splitlines()
    tail = lines[-TAIL_LINES:]
    head = f"last {len(tail)} of {len(lines)} lines" if len(lines) > len(tail) else "compiler output"
    return "\n".join(
        [
            f"compiling {what} failed with exit status {result.returncode}.",
            f"command (run in {workdir}):",
            f"  {shlex.join(result.argv)}",
            f"{head}:",
            *(f"  {line}" for line in tail),
            f"full log: {result.log_path}",
        ]
    )


def _write_log(log_path: Path, steps: list[tuple[list[str], str]], workdir: Path, rc: int, seconds: float) -> None:
    """One log for the whole build: each command that ran, then its combined output."""
    with open(log_path, "w", encoding="utf-8") as f:
        f.write(f"$ cd {shlex.quote(str(workdir))}\n")
        for argv, output in steps:
            f.write(f"$ {shlex.join(argv)}\n")
            f.write(output)
            if output and not output.endswith("\n"):
                f.write("\n")
        f.write(f"# exit status {rc} after {seconds:.1f} s\n")
        f.flush()
        os.fsync(f.fileno())


def _move_aside(workdir: Path, failed_dir: Path) -> Path | None:
    """Keep a failed build (log + sources) at ``failed_dir``, replacing an older failure; None if it cannot."""
    try:
        failed_dir.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                os.rename(workdir, failed_dir)
                return failed_dir
            except OSError:
                shutil.rmtree(failed_dir, ignore_errors=True)
    except OSError:
        pass
    return None


def run_compiler(
    argv: list[str] | list[list[str]],
    workdir: str | Path,
    log_path: str | Path,
    *,
    failed_dir: str | Path | None = None,
    what: str = "the ascend-rmsnorm kernels",
) -> CompileResult:
    """Run ``argv`` (one command, or a list of commands run in order until one fails) in ``workdir``; save
    the commands and their combined output to ``log_path``; raise on failure.

    On failure, ``workdir`` moves to ``failed_dir`` (when given) so its log and sources survive, and the
    ``KernelCompileError`` names the log at its final place and quotes the command that failed.
    """
    workdir, log_path = Path(workdir), Path(log_path)
    commands = [list(c) for c in argv] if argv and not isinstance(argv[0], str) else [list(argv)]  # type: ignore[arg-type]
    start = time.monotonic()
    steps: list[tuple[list[str], str]] = []
    rc = 0
    for command in commands:
        try:
            done = subprocess.run(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
            rc, output = done.returncode, done.stdout.decode(errors="replace")
        except OSError as err:
            rc, output = 127, f"cannot run {command[0]}: {err}\n"
        steps.append((command, output))
        if rc != 0:
            break
    seconds = time.monotonic() - start
    _write_log(log_path, steps, workdir, rc, seconds)
    last, _ = steps[-1]
    result = CompileResult(last, rc, "".join(out for _, out in steps), seconds, log_path)
    if rc != 0:
        raise compile_failure(result, workdir, failed_dir, what)
    return result


def compile_failure(
    result: CompileResult, workdir: Path, failed_dir: str | Path | None, what: str
) -> KernelCompileError:
    """The error for a failed (or unusable) build, after moving its directory to ``failed_dir``."""
    if failed_dir is not None:
        kept = _move_aside(Path(workdir), Path(failed_dir))
        if kept is not None:
            rel = result.log_path.relative_to(workdir) if result.log_path.is_relative_to(workdir) else None
            if rel is not None:
                result = CompileResult(result.argv, result.returncode, result.output, result.seconds, kept / rel)
            workdir = kept
    err = KernelCompileError(format_compile_error(what, result, workdir))
    err.result = result  # type: ignore[attr-defined]
    return err
