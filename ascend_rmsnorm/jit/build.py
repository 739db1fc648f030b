"""Compiler command lines per toolchain generation, and running the compiler with a saved log.

``compile_commands`` is pure (no I/O: the toolchain has already checked the header dirs it names) so tests
can assert the exact argv. The cache runs them inside the build directory with *relative* source and
output paths, which keeps the argv (part of the cache key) free of our own install and temp paths, and
lets a person rerun a failed command from the saved ``failed/<key>/`` directory as it stands.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KernelCompileError, UnsupportedArchError
from . import trust
from ._fs import others_uid, remove_tree_at
from .toolchain import GENERATION_ASC, GENERATION_CCE, GENERATION_EMU, Toolchain

#: ``--cce-aicore-arch`` of the vector cores, for the CANN 8.0-8.3 ``-xcce`` form: the flag CANN 8.1's
#: cmake compiles dav-2201 vector kernels with (``tikcpp/ascendc_kernel_cmake/bisheng_intf.cmake``, target
#: ``aiv_intf_pub``; ``host_config.cmake`` gives it to every 910B and 910_93 SoC). Only dav-2201: the other
#: arches' targets there take other ``-mllvm`` sets, and the kernels are written for dav-2201 alone.
LEGACY_VECTOR_ARCH = {"dav-2201": "dav-c220-vec"}

#: Lines of compiler output quoted in a ``KernelCompileError`` (the full output is in build.log).
TAIL_LINES = 60


def _arch_digits(arch: str) -> str:
    digits = arch.rsplit("-", 1)[-1]
    if not digits.isdigit():
        raise UnsupportedArchError(f"arch {arch!r} is not of the form dav-NNNN")
    return digits


#: ``-mllvm`` options CANN's own cmake passes with ``--cce-aicore-arch=dav-c220-vec`` (CANN 8.1
#: ``tikcpp/ascendc_kernel_cmake/bisheng_intf.cmake``, target ``aiv_intf_pub``; asc-devkit
#: ``cmake/asc/legacy_modules/bisheng_intf.cmake``); MindStudio 8.3's kernel-launch build script
#: (msKPP ``jit_build.sh``) passes the same set in its one-step ``-xcce ... --shared`` build.
LEGACY_MLLVM = (
    "-cce-aicore-stack-size=0x8000",
    "-cce-aicore-function-stack-size=0x8000",
    "-cce-aicore-record-overflow=true",
    "-cce-aicore-addr-transform",
    "-cce-aicore-dcci-insert-for-scalar=false",
)


def rpath(directory: str) -> list[str]:
    """The run path option for ``directory``, as a separate linker argument: ``-Wl,-rpath,<dir>`` would
    split a directory with a comma in it into more linker options."""
    return ["-Xlinker", "-rpath", "-Xlinker", directory]


def compile_commands(toolchain: Toolchain, arch: str, source: str | Path, output: str | Path) -> list[list[str]]:
    """The commands, run in order, that build ``source`` (rmsnorm.asc, with ``emu/`` beside it) into ``output``.

    Every generation builds in one command: the host launchers and their ``<<<>>>`` launches sit in the
    same file as the kernels, and bisheng compiles both and links the library in one step (docs/design.md §5).
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
        # asc-devkit docs/zh/guide/编程指南/编译与运行/算子编译/AI-Core算子编译基本用法.md: "-shared x.asc -o
        # lib.so -fPIC --npu-arch=dav-xxxx" (table 动态库编译; examples/01_simd_cpp_api/02_features/04_compile/
        # 02_dynamic_library_compile), -x asc and -O2 from its option table, -DASCENDC_DUMP=0 from 内置编译宏开关
        # (printf/assert set-up off). The .asc needs no -I: the asc driver adds the Ascend C and ACL headers.
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
                "-ffp-contract=off",  # ours: no fused multiply-add (the contract rounds every product)
                "-DASCENDC_DUMP=0",
                source,
                "-o",
                output,
                "-ldl",  # ours: kernels/host/launch_check.h finds ACL's error functions with dlopen/dlsym
                *rpath(f"{root}/lib64"),
            ]
        ]
    if gen == GENERATION_CCE:
        legacy = LEGACY_VECTOR_ARCH.get(arch)
        if legacy is None:
            raise UnsupportedArchError(f"no legacy (-xcce) arch name known for {arch}")
        if toolchain.tikcfw is None:
            raise ValueError("a CANN 8.0-8.3 toolchain needs its tikcfw header dir (get_toolchain finds it)")
        tikcfw = str(toolchain.tikcfw)
        mllvm = [arg for option in LEGACY_MLLVM for arg in ("-mllvm", option)]
        # One step, host and device together, as the BiSheng compiler guide for CANN 8.0-8.2 (异构编译,
        # atlas_bisheng_10_0003) and 8.3 (异构编译步骤, atlas_bisheng_10_0011) builds a <<<>>> program
        # ("一步编译": -xcce, -O2 or -O0 only, --std=c++17, -fPIC, --shared, --cce-auto-sync, -I
        # <root>/include -L <root>/lib64), and as MindStudio 8.3's msKPP jit_build.sh builds one <<<>>> launch
        # source into a .so (-xcce --cce-aicore-arch -mllvm... -I tikcfw{,/impl,/interface} -I include -L lib64
        # -lruntime -lascendcl --shared). CANN's cmake splits it (--cce-aicore-only, ascendc_pack_kernel,
        # libascendc_runtime.a) only because there a host compiler other than bisheng builds generated
        # aclrtlaunch_* stubs; nothing here needs that.
        return [
            [
                toolchain.compiler,
                "-xcce",
                "-O2",
                "-std=c++17",
                "-fPIC",
                "-shared",
                f"--cce-aicore-arch={legacy}",
                "--cce-auto-sync",  # bisheng_intf.cmake aiv_intf_pub, as the arch flag
                *mllvm,
                "-ffp-contract=off",  # ours: no fused multiply-add (the contract rounds every product)
                "-DASCENDC_DUMP=0",  # CANN 8.1 function.cmake passes ASCENDC_DUMP=0 through to the host side
                "-DASCEND_RMSNORM_LEGACY_CCE=1",  # ours: the kernel's 8.0-8.3 spellings (kernels/rmsnorm.asc)
                # bisheng_intf.cmake device_intf_pub: tikcfw, tikcfw/interface, tikcfw/impl; host_intf.cmake:
                # <root>/include (tikcfw: jit/toolchain.py TIKCFW_SUBDIRS, checked to exist)
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
                output,
                # the <<<>>> launches call the runtime: msKPP jit_build.sh, and function.cmake's
                # ascendc_library links, name ascendcl and runtime
                f"-L{root}/lib64",
                "-lascendcl",
                "-lruntime",
                "-ldl",  # ours: kernels/host/launch_check.h finds ACL's error functions with dlopen/dlsym
                *rpath(f"{root}/lib64"),  # ours: loads without LD_LIBRARY_PATH
            ]
        ]
    raise ValueError(f"unknown toolchain generation {gen!r}")


def compile_command(toolchain: Toolchain, arch: str, source: str | Path, output: str | Path) -> list[str]:
    """The single command of a one-step build (every generation builds in one); ValueError otherwise."""
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


#: A log is a new file: never an existing name (a planted link or file) followed, truncated or reused.
_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_log(
    log_path: Path, steps: list[tuple[list[str], str]], workdir: Path, rc: int, seconds: float, dir_fd: int | None
) -> None:
    """One log for the whole build: each command that ran, then its combined output. Created as a new
    file, inside the directory ``dir_fd`` when given (``log_path`` then only names it).

    Paths are bytes on Linux: a non-UTF-8 one is written as the bytes it is (surrogateescape)."""
    if dir_fd is None:
        fd = os.open(log_path, _LOG_FLAGS, 0o644)
    else:
        fd = os.open(log_path.name, _LOG_FLAGS, 0o644, dir_fd=dir_fd)
    with open(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
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
    """Keep a failed build (log + sources) at ``failed_dir``, replacing an older failure of this user's
    (``_fs.mine``: not another's in a sticky shared ``failed/``); None if it cannot.

    ``failed/`` is reached by the trust walk and the older failure removed through its fd, never by a path
    a planted link could redirect."""
    try:
        parent_fd = trust.open_path(failed_dir.parent, create=True, directory=True)
    except OSError:
        return None
    try:
        for _ in range(2):
            try:
                if others_uid(failed_dir.name, parent_fd) is not None:
                    return None  # someone else's (anyone may add a name in a sticky failed/): not ours
            except OSError:
                return None
            try:  # (checked first: the rename would replace an empty dir of hers, as root)
                os.rename(workdir, failed_dir.name, dst_dir_fd=parent_fd)
                return failed_dir
            except OSError:
                try:
                    if others_uid(failed_dir.name, parent_fd) is not None:
                        return None
                    remove_tree_at(parent_fd, failed_dir.name)
                except OSError:
                    return None
    finally:
        os.close(parent_fd)
    return None


#: Compiler output that means the disk (or quota) ran out, not that the source is wrong.
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")
#: Below this many free bytes after a failed compile, the failure is taken for a full disk.
DISK_FULL_BYTES = 64 * 1024


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the filesystem of ``path`` (or of its nearest existing parent), None if unknown."""
    p = Path(path)
    for candidate in (p, *p.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _disk_full(workdir: Path, output: str) -> bool:
    if any(text in output for text in _DISK_FULL_TEXT):
        return True
    free = free_bytes(workdir)
    return free is not None and free < DISK_FULL_BYTES


# The compiler runs under this small supervisor (``python -S -c``, no package import, ~20 ms), so that
# it dies with the process that started it: the supervisor starts the compiler in a process group of its
# own and kills that whole group (bisheng's cc1/ld children included) as soon as its stdin - a pipe whose
# other end only the builder holds - reaches EOF, which the kernel delivers when the builder dies, even
# by SIGKILL. On Linux PR_SET_PDEATHSIG is a second trigger; SIGTERM kills the group too. The supervisor
# runs in a session of its own too: a SIGKILL of the builder's whole process group (how Jupyter restarts
# or shuts down a busy kernel, `kill -9 -PGID`) must not kill it along with the builder, which would leave
# the compiler running as an orphan. The signals a terminal sends its foreground process group are the
# builder's to handle: Ctrl-C (SIGINT) and a hangup (SIGHUP: a `nohup` job ignores it and its build must
# go on) are ignored all the same, from before the compiler starts (one sent to it by hand just after
# that start must not end the supervisor and orphan the compiler), and SIGTERM is held until the
# compiler's pid is known. The compiler itself starts with the signal dispositions and mask the supervisor
# started with. It exits with the compiler's status.
_SUPERVISOR = r"""
import os, signal, subprocess, sys, threading
parent, argv = int(sys.argv[1]), sys.argv[2:]
child = None
def kill_group(*_):
    if child is not None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(137)
mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
ignored = {s: signal.getsignal(s) == signal.SIG_IGN for s in (signal.SIGINT, signal.SIGHUP)}
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the builder's to handle: it closes our stdin
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGTERM, kill_group)
def as_started():  # in the compiler's process, before it runs: what this process started with
    for s, was_ignored in ignored.items():
        signal.signal(s, signal.SIG_IGN if was_ignored else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
try:
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=as_started)
except OSError as err:
    sys.stdout.write(f"cannot run {argv[0]}: {err}\n")
    sys.stdout.flush()
    os._exit(127)
signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGTERM held meanwhile kills the group now
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != parent:
    kill_group()
def watch():
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    kill_group()
threading.Thread(target=watch, daemon=True).start()
rc = child.wait()
try:
    os.killpg(child.pid, signal.SIGKILL)  # nothing the compiler started outlives it
except OSError:
    pass
os._exit(rc if rc >= 0 else 128 - rc)
"""


def run_command(argv: list[str], workdir: str | Path, env: dict | None = None) -> tuple[int, str]:
    """(exit status, combined stdout+stderr) of one command run in ``workdir`` under the supervisor, so
    that it dies with this process. A command that cannot be started gives 127 and says why."""
    if not sys.executable:
        done = subprocess.run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True, check=False)  # fmt: skip
        return done.returncode, done.stdout.decode(errors="replace")
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _SUPERVISOR, str(os.getpid()), *argv],
        cwd=workdir,
        env=env,
        stdin=subprocess.PIPE,  # never written: its EOF tells the supervisor we are gone
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # outside our process group: a group-wide SIGKILL leaves it to kill the compiler
    )
    try:
        output = proc.stdout.read()  # type: ignore[union-attr]
        rc = proc.wait()
    except BaseException:
        proc.stdin.close()  # type: ignore[union-attr]  # interrupted: the supervisor kills the compiler
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
    return rc, output.decode(errors="replace")


def run_compiler(
    argv: list[str] | list[list[str]],
    workdir: str | Path,
    log_path: str | Path,
    *,
    failed_dir: str | Path | None = None,
    what: str = "the ascend-rmsnorm kernels",
    env: dict | None = None,
    dir_fd: int | None = None,
) -> CompileResult:
    """Run ``argv`` (one command, or a list of commands run in order until one fails: compile, then link)
    in ``workdir``; save the commands and their combined output to ``log_path``; raise on failure.

    With ``dir_fd`` (an open fd of ``workdir``), the commands run in that very directory
    (``/proc/self/fd/N``) and the log is created in it, whatever ``workdir``'s name points at by then.

    Each command runs through ``run_command``: it dies with this process. On failure, ``workdir`` moves to
    ``failed_dir`` (when given) so its log and sources survive, and the ``KernelCompileError`` names the
    log at its final place and quotes the command that failed. A failure because the disk is full is not
    the source's fault: ``workdir`` is removed (it would keep the disk full) and ``OSError(ENOSPC)``
    naming it is raised, which the cache reports as such.
    """
    workdir, log_path = Path(workdir), Path(log_path)
    commands = [list(c) for c in argv] if argv and not isinstance(argv[0], str) else [list(argv)]  # type: ignore[arg-type]
    start = time.monotonic()
    steps: list[tuple[list[str], str]] = []
    rc = 0
    # The child resolves its cwd, /proc/self/fd/N, after its stdin/stdout/stderr are put on 0..2: a dir fd
    # that got one of those numbers (this process started with that stream closed) needs one above them.
    cwd_fd = None if dir_fd is None or dir_fd > 2 else fcntl.fcntl(dir_fd, fcntl.F_DUPFD_CLOEXEC, 3)
    cwd = workdir if dir_fd is None else trust.fd_path(dir_fd if cwd_fd is None else cwd_fd)
    try:
        for command in commands:
            rc, output = run_command(command, cwd, env)
            steps.append((command, output))
            if rc != 0:
                break
    finally:
        if cwd_fd is not None:
            os.close(cwd_fd)
    seconds = time.monotonic() - start
    output = "".join(out for _, out in steps)
    try:
        _write_log(log_path, steps, workdir, rc, seconds, dir_fd)
    except OSError as err:
        why = f"{err.strerror} (writing the build log after the compiler ran)"
        wrapped = OSError(err.errno, why, str(log_path))
        wrapped.free_bytes = free_bytes(workdir)  # type: ignore[attr-defined]
        shutil.rmtree(workdir, ignore_errors=True)
        raise wrapped from err
    if rc != 0 and _disk_full(workdir, output):
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
        err = OSError(errno.ENOSPC, f"No space left on device (the compiler said: {last[-200:]})", str(workdir))
        err.free_bytes = free_bytes(workdir)  # type: ignore[attr-defined]  # before the cleanup frees it
        shutil.rmtree(workdir, ignore_errors=True)
        raise err
    result = CompileResult(steps[-1][0], rc, output, seconds, log_path)
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
