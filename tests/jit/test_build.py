"""Compiler command lines per CANN generation and for emu; the fake bisheng holds us to each family's flags."""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import types
from pathlib import Path

import fake_cann
import jit_helpers
import pytest

from ascend_rmsnorm.errors import KernelCompileError, ToolchainNotFoundError, UnsupportedArchError
from ascend_rmsnorm.jit import build, cache, toolchain, toolpath


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
        "-ldl",
        "-Xlinker",
        "-rpath",
        "-Xlinker",
        f"{root}/lib64",
    ]


@pytest.mark.parametrize("version", ["8.0.0", "8.3.RC2"])
def test_cann_80_to_83_build_in_one_xcce_step(jit, version):
    tc = jit.npu(version)
    root = tc.cann_root
    tik = f"{root}/compiler/tikcpp/tikcfw"
    bisheng = str(root / "compiler" / "ccec_compiler" / "bin" / "bisheng")
    assert build.compile_command(tc, "dav-2201", "k.asc", "k.so") == [
        bisheng,
        "-xcce",
        "-O2",
        "-std=c++17",
        "-fPIC",
        "-shared",
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
        "k.so",
        f"-L{root}/lib64",
        "-lascendcl",
        "-lruntime",
        "-ldl",
        "-Xlinker",
        "-rpath",
        "-Xlinker",
        f"{root}/lib64",
    ]


def test_the_fake_cann_81_lays_out_its_headers_as_the_real_one(jit):
    """CANN 8.1's filelist.csv: the headers live once under <host>-linux/ascendc/include/basic_api; each tikcfw
    is a directory of relative links to them; <root>/include and lib64 are links to <host>-linux."""
    fake = jit.cann("8.1.RC1")
    host = f"{fake_cann.HOST}-linux"
    basic_api = fake.root / host / "ascendc" / "include" / "basic_api"
    for place in toolchain.TIKCFW_SUBDIRS:
        tikcfw = fake.root / place.format(host=fake_cann.HOST)
        assert tikcfw.is_dir() and not tikcfw.is_symlink()
        for entry in ("kernel_operator.h", "impl", "interface", "inner_interface"):
            link = tikcfw / entry
            assert link.is_symlink() and not Path(link.readlink()).is_absolute()
            assert link.resolve() == (basic_api / entry).resolve()
        for entry in ("lib", "kernel_tiling"):
            link = tikcfw / entry
            assert link.is_symlink() and not Path(link.readlink()).is_absolute()
            assert link.resolve() == (basic_api.parent / "highlevel_api" / entry).resolve()
    assert (fake.root / "include").readlink() == Path(host) / "include"
    assert (fake.root / "lib64").readlink() == Path(host) / "lib64"
    assert toolchain.TIKCFW_SUBDIRS == fake_cann.TIKCFW_PLACES


@pytest.mark.parametrize("place", fake_cann.TIKCFW_PLACES[1:])
def test_the_legacy_build_takes_the_first_complete_tikcfw(jit, place):
    fake = jit.use(jit.cann("8.2.RC1", tikcfw=(place,)))
    (fake.root / "compiler" / "tikcpp" / "tikcfw").mkdir(parents=True)  # there, but empty: passed over
    want = fake.root / place.format(host=fake_cann.HOST)
    tc = toolchain.get_toolchain("npu")
    assert tc.tikcfw == want
    argv = build.compile_command(tc, "dav-2201", "k.asc", "k.so")
    includes = [argv[i + 1] for i, a in enumerate(argv) if a == "-I"]
    assert includes == [str(want), f"{want}/impl", f"{want}/interface", f"{fake.root}/include"]


@pytest.mark.parametrize("where", ["basic_api/impl", "basic_api", "highlevel_api/lib", "include", "lib64"])
def test_a_header_or_library_dir_others_can_add_names_to_is_refused(jit, where):
    """The -I and -L dirs are searched by name: one where anyone may add a file (here: made mode 1777,
    sticky as /tmp is, which the walk lets pass for the names below it) would let them put a header or a
    library in the build. CANN 8.1 keeps the headers that tikcfw's impl and interface links lead to in
    <host>-linux/ascendc/include/basic_api, and <root>/include and lib64 are links to <host>-linux."""
    fake = jit.use(jit.cann("8.1.RC1"))
    host = fake.root / f"{fake_cann.HOST}-linux"
    shared = {
        "basic_api/impl": host / "ascendc" / "include" / "basic_api" / "impl",
        "basic_api": host / "ascendc" / "include" / "basic_api",
        # the tikcfw's lib link: CANN 8.1 interface/kernel_operator_intf.h includes "lib/kernel_api.h"
        "highlevel_api/lib": host / "ascendc" / "include" / "highlevel_api" / "lib",
        "include": host / "include",
        "lib64": host / "lib64",
    }[where]
    shared.chmod(0o1777)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"{shared} is writable by everyone (mode 1777)" in text and "can add a name" in text
    shared.chmod(0o755)
    toolchain.reset()
    assert toolchain.get_toolchain("npu").tikcfw is not None  # the same tree, once only root can write there


@pytest.mark.parametrize(
    "what",
    [
        "a header folder",
        "a sticky header folder",
        "a header",
        "a runtime header",
        "a library",
        "a library folder",
        "a high-level impl header",
        "a high-level impl folder",
    ],
)
def test_what_lies_below_the_header_and_library_dirs_is_checked_too(jit, what):
    """Headers include each other by relative names, down into the folders below the -I dirs (CANN 8.1's
    impl/dav_c220, highlevel_api's ../../impl): a folder there others may write, or a header they may
    rewrite, is their code in the build. The loader looks in lib64 by name but not below it. Each is
    refused naming the very folder or file, and accepted once only root can write it. CANN 8.1's
    highlevel_api/lib headers, reached through the tikcfw's lib link, include "../../impl/..." (lib/activation/
    silu.h: "../../impl/activation/silu/silu_common_impl.h"): the kernel resolves that from where the link
    leads, highlevel_api/impl, which no -I dir and no link names."""
    fake = jit.use(jit.cann("8.1.RC1"))
    host = fake.root / f"{fake_cann.HOST}-linux"
    deep = host / "ascendc" / "include" / "basic_api" / "impl" / "dav_c220"
    high = host / "ascendc" / "include" / "highlevel_api" / "impl"
    places = {
        "a header folder": (deep, 0o777),
        "a sticky header folder": (deep, 0o1777),
        "a header": (deep / "kernel_operator_vec_binary_impl.h", 0o666),
        "a runtime header": (host / "include" / "acl" / "acl_rt.h", 0o666),
        "a library": (host / "lib64" / "libruntime_extra.so", 0o666),
        "a library folder": (host / "lib64" / "stub" / "libacl_stub.so", 0o666),
        "a high-level impl header": (high / "activation" / "silu" / "silu_common_impl.h", 0o666),
        "a high-level impl folder": (high / "activation", 0o777),
    }
    for path in places.values():
        path[0].parent.mkdir(parents=True, exist_ok=True)
        if path[0].suffix:
            path[0].write_text("")
        else:
            path[0].mkdir(exist_ok=True)
    target, mode = places[what]
    target.chmod(mode)
    if what == "a library folder":  # below lib64: no name the loader looks up
        assert toolchain.get_toolchain("npu").tikcfw is not None
        return
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    assert f"{target} is writable by everyone (mode {mode:04o})" in str(info.value)
    target.chmod(0o755 if target.is_dir() else 0o644)
    toolchain.reset()
    assert toolchain.get_toolchain("npu").tikcfw is not None


@pytest.mark.parametrize(
    "what, name, mode",
    [
        ("a header folder", "asc/impl/basic_api/dav_c220", 0o777),
        ("a sticky header folder", "asc/impl/basic_api/dav_c220", 0o1777),
        ("a header", "asc/include/basic_api/kernel_operator_vec_binary_intf.h", 0o666),
        (
            "an impl header reached by ../../../impl",
            "asc/impl/adv_api/detail/activation/silu/silu_common_impl.h",
            0o666,
        ),
        ("an impl folder no -I dir names", "asc/impl/c_api", 0o777),
        ("what the tikcfw's impl link leads to", "ascendc/include/basic_api/impl/kernel_tpipe_impl.h", 0o666),
        ("a runtime header below <host>-linux/include", "include/acl/acl_base.h", 0o666),
        ("the compiler's clang headers", "ccec_compiler/lib/clang/15.0.5/include/stddef.h", 0o666),
        ("the asc plugin bisheng loads", "lib64/plugin/asc/libasc_plugin.so", 0o666),
        ("the asc plugin's folder", "lib64/plugin/asc", 0o777),
    ],
)
def test_what_the_asc_build_includes_is_checked_too(jit, what, name, mode):
    """CANN 8.5's bisheng -x asc takes its -I dirs from its asc plugin (asc-devkit v8.5.0
    tools/ascc/asc_plugin: PluginGetPreCompileOpts, asc_info_manager.h's list below <root>/<host>-linux),
    none of them named on our command line: a folder there others may write, or a header they may rewrite,
    is their code in the build, and the plugin itself is code bisheng runs. Each is refused naming it, and
    accepted once only its owner can write it."""
    fake = jit.use(jit.cann("8.5.0"))
    target = fake.root / f"{fake_cann.HOST}-linux" / name
    assert target.exists()
    target.chmod(mode)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    assert f"{target} is writable by everyone (mode {mode:04o})" in str(info.value)
    target.chmod(0o755 if target.is_dir() else 0o644)
    toolchain.reset()
    assert toolchain.get_toolchain("npu").generation == "asc"


def test_a_legacy_install_without_its_headers_is_refused_naming_each_place(jit):
    """No command that cannot work: the toolchain is refused, with every place looked at and what it lacks."""
    fake = jit.use(jit.cann("8.3.RC2", tikcfw=()))
    partial = fake.root / "compiler" / "tikcpp" / "tikcfw"
    partial.mkdir(parents=True)
    (partial / "kernel_operator.h").write_text("")
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"CANN 8.3.RC2 at {fake.root} has bisheng but not the headers" in text
    assert f"{partial} (no impl, no interface)" in text
    assert f"{fake.root}/tools/tikcpp/tikcfw (no such directory)" in text
    assert f"{fake.root}/{fake_cann.HOST}-linux/tikcpp/tikcfw (no such directory)" in text
    assert "runtime headers" not in text  # <root>/include is there
    assert "Ascend-cann-toolkit" in text and "set_env.sh" in text


def test_a_legacy_install_without_runtime_headers_is_refused(jit):
    fake = jit.use(jit.cann("8.0.0"))
    (fake.root / "include").unlink()
    with pytest.raises(ToolchainNotFoundError, match=r"runtime headers in .*/include \(no such directory\)"):
        toolchain.get_toolchain("npu")


def test_cann_85_needs_no_tikcfw(jit):
    assert jit.npu("8.5.0").tikcfw is None


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
    (asc,) = build.compile_commands(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "a.so")
    toolchain.reset()
    jit.use(old)
    (cce,) = build.compile_commands(toolchain.get_toolchain("npu"), "dav-2201", "src/rmsnorm.asc", "b.so")

    ok_new = _run_fake(new, [asc], tmp_path)
    ok_old = _run_fake(old, [cce], tmp_path)
    assert ok_new.returncode == 0 and ok_old.returncode == 0, (ok_new.stderr, ok_old.stderr)
    assert (tmp_path / "work" / "a.so").read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "work" / "b.so").read_bytes()[:4] == b"\x7fELF"

    def refused(fake, argv, says):
        done = _run_fake(fake, [argv], tmp_path)
        assert done.returncode != 0 and says in done.stderr, (argv, done.stderr)

    refused(new, cce, "-xcce belongs to the CANN 8.0-8.3 command line")
    refused(old, asc, "CANN 8.5+ command line")
    refused(new, [a for a in asc if not a.startswith("--npu-arch")], "--npu-arch exactly once")

    def without(*drop):
        return [a for a in cce if a not in drop]

    def swapped(old_arg, new_arg):
        return [new_arg if a == old_arg else a for a in cce]

    tik = str(toolchain.get_toolchain("npu").tikcfw)
    refused(old, without(f"{tik}/interface"), "'kernel_operator_intf.h' file not found")
    refused(old, without(f"{tik}/impl"), "'kernel_tpipe_impl.h' file not found")
    refused(old, without(tik), "'kernel_operator.h' file not found")
    refused(old, without(f"{old.root}/include"), "'acl/acl_base.h' file not found")
    refused(old, without("-cce-aicore-addr-transform"), "-mllvm -cce-aicore-addr-transform")
    refused(old, without("-lruntime"), "need libruntime.so")
    refused(old, without(f"-L{old.root}/lib64"), "unable to find library")
    refused(old, without("-shared"), "missing -shared")
    refused(old, without("-xcce"), "missing -xcce before the source")
    refused(old, swapped("-O2", "-O3"), "-O2 or -O0 only")
    refused(old, swapped("--cce-aicore-arch=dav-c220-vec", "--cce-aicore-arch=dav-c220"), "dav-c220-vec once")
    refused(old, [*cce, "--cce-aicore-only"], "device code alone")
    refused(old, [*swapped("b.so", "b.o"), "-c"], "not an object (-c)")
    refused(old, [*cce, "--cce-fatobj-link"], "earlier -c step")


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
    # the next failure of that key replaces this one of yours (not left behind for the sweep)
    work.mkdir()
    (work / "second").write_text("")
    with pytest.raises(KernelCompileError, match=f"full log: {log}"):
        build.run_compiler(argv, work, work / "build.log", failed_dir=tmp_path / "failed" / "k", what="demo")
    assert not work.exists() and (tmp_path / "failed" / "k" / "second").is_file()


def test_a_failure_with_the_disk_all_but_full_is_a_full_disk_whatever_the_compiler_said(tmp_path, monkeypatch):
    """A compiler that runs out of space may not say so ("error writing output", or killed): with under
    DISK_FULL_BYTES free after it failed, the failure is a full disk (ENOSPC, not the source's fault) and
    the build dir goes (it would keep the disk full), not to failed/."""
    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(free=build.DISK_FULL_BYTES - 1))
    work = tmp_path / "w"
    work.mkdir()
    argv = ["/bin/sh", "-c", "echo 'error: cannot write output file'; exit 1"]
    with pytest.raises(OSError) as info:
        build.run_compiler(argv, work, work / "build.log", failed_dir=tmp_path / "failed" / "k")
    assert info.value.errno == errno.ENOSPC and "cannot write output file" in str(info.value)
    assert info.value.free_bytes == build.DISK_FULL_BYTES - 1
    assert not work.exists() and not (tmp_path / "failed").exists()
    # the log itself cannot be written after the compiler ran: the same, said so
    work.mkdir()

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="writing the build log after the compiler ran") as info:
        build.run_compiler(["/bin/sh", "-c", "exit 0"], work, work / "build.log")
    assert info.value.errno == errno.ENOSPC and not work.exists()


def test_run_compiler_success(tmp_path, monkeypatch):
    """A build that succeeds is kept whatever its output says (a full-disk text is a warning then), and its
    log is synced whole before it is closed (the build dir is renamed into the cache after this) and is
    not group- or world-writable whatever the umask (a failed build's log stays so in failed/)."""
    synced = jit_helpers.record_fsyncs(monkeypatch)
    work = tmp_path / "w"
    work.mkdir()
    argv = ["/bin/sh", "-c", "echo hello; echo 'ccache: No space left on device' >&2"]
    old_umask = os.umask(0)
    try:
        result = build.run_compiler(argv, work, work / "build.log")
    finally:
        os.umask(old_umask)
    assert result.returncode == 0 and "hello" in result.output and work.is_dir()
    log = work / "build.log"
    assert f"$ {shlex.join(argv)}" in log.read_text()
    assert (log.stat().st_ino, log.stat().st_size) in {(st.st_ino, st.st_size) for st in synced}
    assert stat.S_IMODE(log.stat().st_mode) == 0o644


@pytest.mark.parametrize("low", [0, 2])
def test_run_compiler_in_a_dir_fd_that_took_a_standard_streams_number(tmp_path, low):
    """A process started with its standard streams closed (``warm <&- >&- 2>&-``, a daemon) gets 0, 1 or 2
    for the build directory's fd. The compiler's cwd was ``/proc/self/fd/N``, resolved in the child after
    its stdin/stdout/stderr were put on 0..2: the warm failed with "Not a directory (/proc/self/fd/2)".
    The command must run in the directory the fd holds, whatever its number."""
    work = tmp_path / "w"
    work.mkdir()
    saved = os.dup(low)
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.dup2(fd, low)  # the directory's fd is now `low`, as when the process started with it closed
        before = sorted(os.listdir("/proc/self/fd"))
        result = build.run_compiler(["/bin/sh", "-c", "pwd -P"], work, work / "build.log", dir_fd=low)
        assert sorted(os.listdir("/proc/self/fd")) == before  # the fd it took above 2 is closed again
    finally:
        os.dup2(saved, low)
        os.close(saved)
        os.close(fd)
    assert result.returncode == 0 and result.output.strip() == str(work.resolve()), result.output
    assert (work / "build.log").is_file()


def test_normalise_argv_swaps_our_paths_for_placeholders():
    argv = ["cc", "-I", "/opt/pkg/kernels/emu", "/opt/pkg/kernels/rmsnorm.asc", "-o", "/tmp/b/x.so"]
    out = build.normalise_argv(argv, {"/opt/pkg": "$PKG", "/opt/pkg/kernels": "$KERNELS", "/tmp/b": "$BUILD"})
    assert out == ["cc", "-I", "$KERNELS/emu", "$KERNELS/rmsnorm.asc", "-o", "$BUILD/x.so"]


def test_the_legacy_build_goes_through_the_cache(jit):
    """CANN 8.3: the cache runs the one -xcce command, logs it, and keys and records it."""
    tc = jit.npu("8.3.RC2")
    lib = cache.get_library(tc, "dav-2201")
    assert lib.path.read_bytes()[:4] == b"\x7fELF" and jit.compiles() == 1
    spec = cache.build_spec(tc, "dav-2201")
    assert len(spec.commands) == 1 and spec.commands[0][1] == "-xcce" and spec.argv == spec.commands[0]
    assert spec.key_input["argv"][-8:] == [
        f"-L{tc.cann_root}/lib64",
        "-lascendcl",
        "-lruntime",
        "-ldl",
        "-Xlinker",
        "-rpath",
        "-Xlinker",
        f"{tc.cann_root}/lib64",
    ]
    log = (lib.path.parent / "build.log").read_text()
    assert f"$ {shlex.join(spec.argv)}" in log
    manifest = json.loads((lib.path.parent / "manifest.json").read_text())
    assert manifest["built"]["command"] in (list(spec.argv), [list(spec.argv)])


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


def test_the_supervisor_leaves_the_terminals_signals_to_the_builder_and_the_compiler_starts_as_it_did(tmp_path):
    """A builder that handles SIGHUP itself (a handler is reset to the default across exec), as it does
    SIGINT: its supervisor ignores both (the builder's to handle; a default SIGHUP would end the supervisor
    and the build with it), while the compiler starts with the dispositions and mask the supervisor
    started with: neither ignored, SIGTERM not blocked."""

    def sig_sets(text: str, pid: str) -> dict[str, set[int]]:
        out = {}
        for line in text.splitlines()[1:]:
            where, field, value = line.split(":")
            if where == f"/proc/{pid}/status":
                out[field] = {n for n in range(1, 65) if int(value, 16) >> (n - 1) & 1}
        return out

    old = signal.signal(signal.SIGHUP, lambda *_: None)
    try:
        script = 'echo "$PPID $$"; grep -E "^Sig(Ign|Blk):" /proc/$PPID/status /proc/$$/status | tr -d " \\t"'
        rc, out = build.run_command(["/bin/sh", "-c", script], tmp_path)
    finally:
        signal.signal(signal.SIGHUP, old)
    assert rc == 0, out
    supervisor, compiler = out.splitlines()[0].split()
    assert {signal.SIGHUP, signal.SIGINT} <= sig_sets(out, supervisor)["SigIgn"]
    mine = sig_sets(out, compiler)
    assert not {signal.SIGHUP, signal.SIGINT} & mine["SigIgn"] and signal.SIGTERM not in mine["SigBlk"]


def test_nothing_the_compiler_started_outlives_it(tmp_path):
    """A compiler that leaves a process behind (a server it started, a stray child): the supervisor kills
    the compiler's whole process group once the compiler has exited."""
    rc, out = build.run_command(["/bin/sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], tmp_path)
    left = int(out.split()[0])
    try:
        assert rc == 0
        jit_helpers.wait_for(lambda: not jit_helpers.alive(left), what=f"the compiler's child {left} to be killed")
    finally:
        if jit_helpers.alive(left):
            os.kill(left, signal.SIGKILL)


def test_a_command_that_cannot_start_is_status_127(tmp_path):
    rc, out = build.run_command([str(tmp_path / "no-such-compiler"), "-c"], tmp_path)
    assert rc == 127 and "cannot run" in out and "no-such-compiler" in out


# --------------------------------------------------------------------------------------------------- its environment


def test_the_compiler_takes_no_program_header_or_temp_file_from_a_place_someone_else_can_write(tmp_path, caplog):
    """gcc runs ``as`` and ``ld`` from PATH and writes its intermediate files to TMPDIR: a PATH entry or a
    temp dir another user can write would put their code into a library everyone loads from the cache.
    Entries that fail the ownership test (here: world-writable), those others can add names to (a
    shared sticky dir, as /tmp: the sticky bit protects the names that are there, not the ``as`` someone
    adds), relative ones and repeats go, each said once (one that is not there goes unsaid: nothing is
    found there), the rest keep the user's order and the compiler's own directory is added where
    missing; the variables that add headers, libraries, options or a run path behind the command line's
    back go, and those that load code into it; TMPDIR is the build's own."""
    open_dir, shared, mine, cc_dir = tmp_path / "open", tmp_path / "shared", tmp_path / "mine", tmp_path / "cc"
    for d in (open_dir, shared, mine, cc_dir):
        d.mkdir(mode=0o755)
    open_dir.chmod(0o777)
    shared.chmod(0o1777)
    environ = {
        "PATH": f"{open_dir}:bin::{shared}:{mine}:/usr/bin:{mine}:{tmp_path / 'gone'}",
        "LD_LIBRARY_PATH": f"{shared}:{open_dir}",
        "CPATH": str(mine),
        "C_INCLUDE_PATH": str(mine),
        "CPLUS_INCLUDE_PATH": str(mine),
        "OBJC_INCLUDE_PATH": str(mine),
        "OBJCPLUS_INCLUDE_PATH": str(mine),
        "LIBRARY_PATH": str(mine),
        "DEPENDENCIES_OUTPUT": str(mine / "deps"),
        "SUNPRO_DEPENDENCIES": str(mine / "deps"),
        "COMPILER_PATH": str(mine),
        "GCC_EXEC_PREFIX": str(mine) + "/",
        "LD_RUN_PATH": str(open_dir),
        "CCC_OVERRIDE_OPTIONS": f"+-Wl,-rpath,{open_dir}",
        "LD_PRELOAD": str(open_dir / "x.so"),
        "LD_AUDIT": str(open_dir / "y.so"),
        "GCONV_PATH": str(open_dir),
        "TMPDIR": str(open_dir),
        "HOME": "/root",
        "CCACHE_PATH": str(shared),  # where a `c++` that is ccache finds the real compiler: past the PATH filter
        "CCACHE_COMPILER": str(shared / "c++"),
        "CCACHE_PREFIX": str(shared / "wrap"),
        "CCACHE_DIR": str(shared),  # its ccache.conf can name the compiler too
        "CCACHE_CONFIGPATH": str(shared / "ccache.conf"),
        "CCACHE_CONFIGPATH2": str(shared / "ccache.conf"),
        "CCACHE_DISABLE": "0",
    }
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        env = toolpath.compiler_env(str(cc_dir / "c++"), tmp_path / "work" / ".tmp", environ)
    assert env["PATH"].split(":") == [str(mine), "/usr/bin", str(cc_dir)]
    assert toolpath.compiler_env("/usr/bin/c++", tmp_path, environ)["PATH"].split(":") == [str(mine), "/usr/bin"]
    assert "LD_LIBRARY_PATH" not in env  # nothing left of it
    said = sorted(r.getMessage().split(" left out")[0] for r in caplog.records)
    assert said == [f"LD_LIBRARY_PATH entry {d}" for d in (open_dir, shared)] + [
        f"PATH entry {d}" for d in (open_dir, shared)
    ]  # once each, though the second call met them again
    assert "anyone who can write there can add a name" in caplog.text
    assert not set(toolpath.COMPILER_ENV_DROPPED) & set(env)
    # every other variable set above is dropped (ccache's three are the package's own values, below)
    assert set(env) & set(environ) == {
        "PATH",
        "TMPDIR",
        "HOME",
        "CCACHE_DISABLE",
        "CCACHE_CONFIGPATH",
        "CCACHE_CONFIGPATH2",
    }
    assert env["TMPDIR"] == str(tmp_path / "work" / ".tmp") and env["HOME"] == "/root"
    assert env["CCACHE_DISABLE"] == "1"  # a `c++` that is ccache runs the compiler, never a shared cache's objects
    # ... and it takes no setting of the user's or from any ccache.conf: none can name what it runs
    assert {k: v for k, v in env.items() if k.startswith("CCACHE_")} == {
        "CCACHE_DISABLE": "1",
        "CCACHE_CONFIGPATH": os.devnull,
        "CCACHE_CONFIGPATH2": os.devnull,
    }
    assert environ["TMPDIR"] == str(open_dir)  # the caller's dict is left alone


def test_a_build_runs_the_compiler_in_that_environment(jit, tmp_path):
    """Through the cache: what the compiler sees (a wrapper records it), with a world-writable PATH entry
    ahead of the real ones and CPATH set."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    record = tmp_path / "seen"
    counting = fake_cann.write_counting_cxx(tmp_path / "cxx")
    wrapper = tmp_path / "cxx-wrapper"
    asked = tmp_path / "asked"  # what discovery's runs (--version, whose text goes into the key; -E -v) see
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" != --version ] && [ "$3" != -E ]; then\n'
        f'printf "%s\\n%s\\n%s\\n" "$PATH" "$TMPDIR" "${{CPATH-unset}}" > {record}; else '
        f'printf "%s %s %s %s\\n" "${{3:-$1}}" "$PATH" "${{CPATH-unset}}" "${{LC_ALL-unset}}" >> {asked}; fi\n'
        f'exec {counting} "$@"\n'
    )
    wrapper.chmod(0o755)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(wrapper))
    jit.mp.setenv("PATH", f"{open_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    jit.mp.setenv("CPATH", str(tmp_path))
    jit.mp.setenv("LC_ALL", "POSIX")
    status, entry = cache.ensure_built(toolchain.emu_toolchain(), "dav-2201")
    # each run the same environment, and the same words whatever the user's locale
    runs = sorted(asked.read_text().splitlines())
    assert runs == [f"{run} /usr/bin:/bin:{tmp_path} unset C" for run in ("--version", "-E")], runs
    assert status == "built"
    path, tmpdir, cpath = record.read_text().splitlines()
    assert path.split(":") == ["/usr/bin", "/bin", str(tmp_path)]  # the wrapper's own dir added last
    assert Path(tmpdir).name == ".tmp" and Path(tmpdir).parent.parent == jit.cache / "v1" / "tmp"
    assert cpath == "unset" and not (entry / ".tmp").exists()


def test_the_legacy_build_through_a_latest_directory_of_links(jit):
    """CANN 8.x's installer makes ``ascend-toolkit/latest`` a directory (with ``var/`` for its latest manager
    and ``version.cfg``) holding a link per entry of the version dir (CANN 8.1 runtime/script/multi_version.inc,
    ``make_dir_with_permission "${install_path}/${LATEST_DIR}"`` and ``.../var``; version_cfg.inc keeps
    version.cfg there), not one symlink to it. The root is then ``latest`` itself, read through its links."""
    fake = jit.cann("8.1.RC1", version_cfg=False)
    latest = fake.alias
    latest.unlink()
    (latest / "var").mkdir(parents=True)
    (latest / "version.cfg").write_text("# version: 1.0\ntoolkit_running_version=[7.7.0.1.238:8.1.RC1]\n")
    for entry in fake.root.iterdir():
        (latest / entry.name).symlink_to(os.path.join("..", fake.root.name, entry.name))
    jit.use(fake)
    tc = toolchain.get_toolchain("npu")
    assert tc.cann_root == latest and tc.cann_version == "8.1.RC1" and tc.generation == "cce"
    assert tc.tikcfw == latest / "compiler" / "tikcpp" / "tikcfw"
    lib = cache.get_library(tc, "dav-2201")
    assert lib.path.read_bytes()[:4] == b"\x7fELF" and jit.compiles() == 1
