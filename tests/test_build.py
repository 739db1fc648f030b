"""Compiler command lines per CANN generation and for emu; the fake bisheng holds us to each family's flags."""

from __future__ import annotations

import json
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
        "-Xlinker",
        "-rpath",
        "-Xlinker",
        f"{root}/lib64",
    ]


@pytest.mark.parametrize("version", ["8.0.0", "8.3.RC2"])
def test_cann_80_to_83_compile_with_xcce_then_link_with_fatobj_link(jit, version):
    tc = jit.npu(version)
    root = tc.cann_root
    tik = f"{root}/compiler/tikcpp/tikcfw"
    bisheng = str(root / "compiler" / "ccec_compiler" / "bin" / "bisheng")
    compile_step, link_step = build.compile_commands(tc, "dav-2201", "k.asc", "k.so")
    assert compile_step == [
        bisheng,
        "-xcce",
        "-c",
        "-O2",
        "-std=c++17",
        "-fPIC",
        "--cce-aicore-arch=dav-c220-vec",
        "--cce-auto-sync",
        "-mllvm",
        "-cce-aicore-stack-size=0x8000",
        "-mllvm",
        "-cce-aicore-function-stack-size=0x8000",
        "-mllvm",
        "-cce-aicore-record-overflow=true",
        "-mllvm",
        "-cce-aicore-addr-transform",
        "-mllvm",
        "-cce-aicore-dcci-insert-for-scalar=false",
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
        "rmsnorm.o",
    ]
    assert link_step == [
        bisheng,
        "--cce-fatobj-link",
        "-fPIC",
        "-shared",
        "rmsnorm.o",
        "-o",
        "k.so",
        f"-L{root}/lib64",
        "-lascendcl",
        "-lruntime",
        "-Xlinker",
        "-rpath",
        "-Xlinker",
        f"{root}/lib64",
    ]
    with pytest.raises(ValueError, match="compile_commands"):
        build.compile_command(tc, "dav-2201", "k.asc", "k.so")


def test_the_legacy_mllvm_options_are_cannss_own(jit):
    """The fake bisheng and the command line agree on the -mllvm list (both copied from CANN's cmake)."""
    assert build.LEGACY_MLLVM == fake_cann.LEGACY_MLLVM


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


def _run_fake(fake: fake_cann.FakeCann, commands: list[list[str]], tmp: Path) -> subprocess.CompletedProcess:
    """Run ``fake``'s bisheng with each command's flags, in order, in a build dir holding a copy of the kernels as
    ``src/``; returns the first failure or the last result."""
    work = tmp / "work"
    if not work.exists():
        shutil.copytree(cache.KERNELS_DIR, work / "src")
    for argv in commands:
        done = subprocess.run([str(fake.bisheng), *argv[1:]], cwd=work, capture_output=True, text=True)
        if done.returncode != 0:
            break
    return done


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf to read the run path back")
def test_a_cann_root_with_a_comma_stays_one_run_path(jit, tmp_path):
    """-Wl,-rpath,<root>/lib64 would split such a root into extra linker options."""
    fake = jit.use(jit.cann("8.5.0", base=tmp_path / "usr,local" / "Ascend"))
    tc = toolchain.get_toolchain("npu")
    (command,) = build.compile_commands(tc, "dav-2201", "src/rmsnorm.asc", "a.so")
    want = f"{tc.cann_root}/lib64"
    assert "," in want and command[-4:] == ["-Xlinker", "-rpath", "-Xlinker", want]
    assert not any(a.startswith("-Wl,") for a in command)
    src = tmp_path / "t.c"
    src.write_text("int f(void) { return 1; }\n")
    out = tmp_path / "t.so"
    subprocess.run([fake_cann.REAL_CXX, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(out), *build.rpath(want)],
                   check=True)  # fmt: skip
    dynamic = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True, check=True).stdout
    assert f"[{want}]" in dynamic  # the host linker got it whole
    split = _run_fake(fake, [command[:-4] + [f"-Wl,-rpath,{want}"]], tmp_path)
    assert split.returncode != 0 and "pass linker options with -Xlinker" in split.stderr


def test_fake_bisheng_accepts_its_own_generation_and_rejects_the_other(jit, tmp_path):
    new = jit.use(jit.cann("8.5.0"))
    old = jit.cann("8.3.RC2")
    asc = build.compile_commands(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "a.so")
    toolchain.reset()
    jit.use(old)
    cce = build.compile_commands(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "b.so")
    assert len(asc) == 1 and len(cce) == 2

    ok_new = _run_fake(new, asc, tmp_path)
    ok_old = _run_fake(old, cce, tmp_path)
    assert ok_new.returncode == 0 and ok_old.returncode == 0, (ok_new.stderr, ok_old.stderr)
    assert (tmp_path / "work" / "a.so").read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "work" / "b.so").read_bytes()[:4] == b"\x7fELF"

    wrong_new = _run_fake(new, cce, tmp_path)
    assert wrong_new.returncode != 0 and "-xcce belongs to the CANN 8.0-8.3 command line" in wrong_new.stderr
    wrong_old = _run_fake(old, asc, tmp_path)
    assert wrong_old.returncode != 0 and "CANN 8.5+ command line" in wrong_old.stderr
    no_arch = _run_fake(new, [[a for a in asc[0] if not a.startswith("--npu-arch")]], tmp_path)
    assert no_arch.returncode != 0 and "--npu-arch exactly once" in no_arch.stderr
    compile_step, link_step = cce
    no_include = _run_fake(old, [[a for a in compile_step if not a.endswith("/interface")]], tmp_path)
    assert no_include.returncode != 0 and "kernel_operator.h" in no_include.stderr
    no_mllvm = _run_fake(old, [[a for a in compile_step if a != "-cce-aicore-addr-transform"]], tmp_path)
    assert no_mllvm.returncode != 0 and "-mllvm -cce-aicore-addr-transform" in no_mllvm.stderr
    one_step = [a for a in compile_step if a != "-c"][:-1] + ["b.so", "-shared"]
    refused = _run_fake(old, [one_step], tmp_path)
    assert refused.returncode != 0 and "--cce-fatobj-link" in refused.stderr
    (tmp_path / "work" / "rmsnorm.o").unlink()
    unlinked = _run_fake(old, [link_step], tmp_path)
    assert unlinked.returncode != 0 and "run the -c step first" in unlinked.stderr


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


def test_the_legacy_two_step_build_goes_through_the_cache(jit):
    """CANN 8.3: the cache runs both steps in one build dir, logs both, and keys and records both commands."""
    tc = jit.npu("8.3.RC2")
    lib = cache.get_library(tc, "dav-2201")
    assert lib.path.read_bytes()[:4] == b"\x7fELF" and jit.compiles() == 1
    spec = cache.build_spec(tc, "dav-2201")
    assert [c[1] for c in spec.commands] == ["-xcce", "--cce-fatobj-link"]
    assert spec.key_input["argv"][0][-1] == build.LEGACY_OBJECT and "--cce-fatobj-link" in spec.key_input["argv"][1]
    log = (lib.path.parent / "build.log").read_text()
    assert all(f"$ {shlex.join(c)}" in log for c in spec.commands)
    manifest = json.loads((lib.path.parent / "manifest.json").read_text())
    assert manifest["built"]["command"] == [list(c) for c in spec.commands]


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
