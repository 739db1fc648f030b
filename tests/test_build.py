"""Compiler command lines per CANN generation and for emu; the fake bisheng holds us to each family's flags."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import fake_cann
import pytest

from ascend_rmsnorm.errors import KernelCompileError, UnsupportedArchError
from ascend_rmsnorm.jit import build, cache, toolchain


def test_cann_85_and_later_use_the_one_step_asc_form(jit):
    tc = jit.npu("9.0.0")
    root = tc.cann_root
    assert build.compile_command(tc, "dav-2201", "src/rmsnorm.asc", "librmsnorm.so") == [
        str(root / "bin" / "bisheng"),
        "-x",
        "asc",
        "--npu-arch=dav-2201",
        "-O2",
        "-std=c++17",
        "-fPIC",
        "-shared",
        "-ffp-contract=off",
        "-DASCENDC_DUMP=0",
        "src/rmsnorm.asc",
        "-o",
        "librmsnorm.so",
        f"-Wl,-rpath,{root}/lib64",
    ]


@pytest.mark.parametrize("version", ["8.0.0", "8.3.RC2"])
def test_cann_80_to_83_use_the_xcce_form(jit, version):
    tc = jit.npu(version)
    root = tc.cann_root
    tik = f"{root}/compiler/tikcpp/tikcfw"
    assert build.compile_command(tc, "dav-2201", "k.asc", "k.so") == [
        str(root / "compiler" / "ccec_compiler" / "bin" / "bisheng"),
        "-xcce",
        "-O2",
        "-std=c++17",
        "-fPIC",
        "-shared",
        "--cce-aicore-arch=dav-c220-vec",
        "--cce-auto-sync",
        "-ffp-contract=off",
        "-DASCENDC_DUMP=0",
        "-DASCEND_RMSNORM_LEGACY_CCE=1",
        "-I",
        tik,
        "-I",
        f"{tik}/impl",
        "-I",
        f"{tik}/interface",
        "-I",
        f"{root}/include",
        "k.asc",
        "-o",
        "k.so",
        f"-L{root}/lib64",
        "-lascendcl",
        "-lruntime",
        f"-Wl,-rpath,{root}/lib64",
    ]


def test_emu_form(jit):
    tc = jit.emu()
    assert build.compile_command(tc, "dav-2201", "src/rmsnorm.asc", "lib.so") == [
        tc.compiler,
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-x",
        "c++",
        "-ffp-contract=off",
        "-DASCEND_RMSNORM_EMU=1",
        "-D__NPU_ARCH__=2201",
        "-I",
        "src/emu",
        "src/rmsnorm.asc",
        "-o",
        "lib.so",
    ]


def test_legacy_form_refuses_an_arch_without_a_legacy_name(jit):
    tc = jit.npu("8.3.RC2")
    with pytest.raises(UnsupportedArchError):
        build.compile_command(tc, "dav-9999", "k.asc", "k.so")


def _run_fake(fake: fake_cann.FakeCann, argv: list[str], tmp: Path) -> subprocess.CompletedProcess:
    """Run ``fake``'s bisheng with ``argv``'s flags in a build dir holding a copy of the kernels as ``src/``."""
    work = tmp / "work"
    if not work.exists():
        shutil.copytree(cache.KERNELS_DIR, work / "src")
    return subprocess.run([str(fake.bisheng), *argv[1:]], cwd=work, capture_output=True, text=True)


def test_fake_bisheng_accepts_its_own_generation_and_rejects_the_other(jit, tmp_path):
    new = jit.use(jit.cann("8.5.0"))
    old = jit.cann("8.3.RC2")
    asc_argv = build.compile_command(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "a.so")
    toolchain.reset()
    jit.use(old)
    cce_argv = build.compile_command(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "b.so")

    ok_new = _run_fake(new, asc_argv, tmp_path)
    ok_old = _run_fake(old, cce_argv, tmp_path)
    assert ok_new.returncode == 0 and ok_old.returncode == 0, (ok_new.stderr, ok_old.stderr)
    assert (tmp_path / "work" / "a.so").read_bytes()[:4] == b"\x7fELF"

    wrong_new = _run_fake(new, cce_argv, tmp_path)
    assert wrong_new.returncode != 0 and "-xcce belongs to the CANN 8.0-8.3 command line" in wrong_new.stderr
    wrong_old = _run_fake(old, asc_argv, tmp_path)
    assert wrong_old.returncode != 0 and "CANN 8.5+ command line" in wrong_old.stderr
    no_arch = _run_fake(new, [a for a in asc_argv if not a.startswith("--npu-arch")], tmp_path)
    assert no_arch.returncode != 0 and "--npu-arch exactly once" in no_arch.stderr
    no_include = _run_fake(old, [a for a in cce_argv if not a.endswith("/interface")], tmp_path)
    assert no_include.returncode != 0 and "kernel_operator.h" in no_include.stderr


def test_run_compiler_saves_the_log_and_reports_a_failure(tmp_path, monkeypatch):
    script = tmp_path / "cc with space"
    script.write_text('#!/bin/sh\nfor i in $(seq 1 100); do echo "line $i" >&2; done\nexit 7\n')
    script.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    argv = [str(script), "-c", "a file.asc"]
    with pytest.raises(KernelCompileError) as info:
        build.run_compiler(argv, work, work / "build.log", failed_dir=tmp_path / "failed" / "k", what="demo")
    text = str(info.value)
    assert shlex.join(argv) in text and "'a file.asc'" in text
    assert "exit status 7" in text
    assert "line 100" in text and "line 41" in text and "line 40\n" not in text  # the last 60 lines
    log = tmp_path / "failed" / "k" / "build.log"
    assert f"full log: {log}" in text
    assert not work.exists()  # the build dir moved to failed/<key>
    saved = log.read_text()
    assert "line 1\n" in saved and "line 100\n" in saved and "# exit status 7" in saved


def test_run_compiler_success(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    result = build.run_compiler(["/bin/sh", "-c", "echo hello"], work, work / "build.log")
    assert result.returncode == 0 and "hello" in result.output
    assert "$ /bin/sh -c 'echo hello'" in (work / "build.log").read_text()


def test_normalise_argv_swaps_our_paths_for_placeholders():
    argv = ["cc", "-I", "/opt/pkg/kernels/emu", "/opt/pkg/kernels/rmsnorm.asc", "-o", "/tmp/b/x.so"]
    out = build.normalise_argv(argv, {"/opt/pkg": "$PKG", "/opt/pkg/kernels": "$KERNELS", "/tmp/b": "$BUILD"})
    assert out == ["cc", "-I", "$KERNELS/emu", "$KERNELS/rmsnorm.asc", "-o", "$BUILD/x.so"]


def test_run_compiler_runs_several_steps_in_order_and_stops_at_the_first_failure(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    steps = [["/bin/sh", "-c", "echo compiled > step1"], ["/bin/sh", "-c", "echo link failed; exit 5"], ["touch", "3"]]
    with pytest.raises(KernelCompileError, match="exit status 5") as info:
        build.run_compiler(steps, work, work / "build.log", failed_dir=tmp_path / "failed")
    assert shlex.join(steps[1]) in str(info.value)  # the command that failed is the one quoted
    log = (tmp_path / "failed" / "build.log").read_text()
    assert log.index(shlex.join(steps[0])) < log.index("link failed") and "touch" not in log
    assert (tmp_path / "failed" / "step1").read_text() == "compiled\n" and not (tmp_path / "failed" / "3").exists()


def test_a_command_that_cannot_start_is_status_127(tmp_path):
    rc, out = build.run_command([str(tmp_path / "no-such-compiler"), "-c"], tmp_path)
    assert rc == 127 and "cannot run" in out and "no-such-compiler" in out
