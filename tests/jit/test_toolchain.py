"""Discovery: CANN roots and versions per layout, bisheng's places, generations, SoC -> arch, errors."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import fake_cann
import pytest

from ascend_rmsnorm.errors import ToolchainNotFoundError, UnsupportedArchError
from ascend_rmsnorm.jit import toolchain


@pytest.mark.parametrize(
    "version, gen, version_file",
    [
        ("8.0.0", "cce", "ascend_toolkit_install.info"),
        ("8.3.RC2", "cce", "ascend_toolkit_install.info"),
        ("8.5.0", "asc", "ascend_toolkit_install.info"),
        ("9.0.0", "asc", "ascend_toolkit_install.info"),
    ],
)
def test_each_layout_is_found_through_its_default_symlink(jit, version, gen, version_file):
    fake = jit.cann(version)
    cann = toolchain.find_cann()
    assert cann is not None
    assert cann.root == fake.root.resolve()  # latest / cann resolved
    assert cann.root != fake.alias
    assert cann.version == version and cann.version_source.endswith(version_file)
    tc = toolchain.get_toolchain("npu")
    assert tc.generation == gen
    assert tc.cann_version == version
    assert tc.compiler_real == str(fake.bisheng.resolve())
    assert f"CANN {version}" in tc.compiler_version
    assert tc.compiler_info == fake_cann._inner_version(version)
    assert tc.fingerprint()["compiler"] == str(fake.bisheng.resolve())


def test_bisheng_is_taken_from_each_generations_place(jit):
    old = jit.cann("8.0.0")
    assert toolchain.find_bisheng(old.root)[0] == str(old.root / "compiler/ccec_compiler/bin/bisheng")
    new = jit.cann("8.5.0")  # compiler/ccec_compiler is a symlink to <host>-linux/ccec_compiler
    path = toolchain.find_bisheng(new.root)[0]
    assert path == str(new.root / "compiler/ccec_compiler/bin/bisheng")
    assert os.path.realpath(path) == str(new.root / f"{fake_cann.HOST}-linux/ccec_compiler/bin/bisheng")
    nine = jit.cann("9.0.0", base=jit.tmp / "nine")
    assert toolchain.find_bisheng(nine.root)[0] == str(nine.root / "bin/bisheng")
    # only the real place (no symlinks), and the post-9.1 tools/bisheng_compiler place
    bare = jit.tmp / "bare" / "cann-9.1.0"
    fake_cann.write_compiler(bare / f"{fake_cann.HOST}-linux/ccec_compiler/bin/bisheng", mode="bisheng")
    assert toolchain.find_bisheng(bare)[0] == str(bare / f"{fake_cann.HOST}-linux/ccec_compiler/bin/bisheng")
    late = jit.tmp / "late" / "cann-9.2.0"
    fake_cann.write_compiler(late / "tools/bisheng_compiler/bin/bisheng", mode="bisheng")
    fake_cann.write_compiler(late / "bin/bisheng", mode="bisheng").chmod(0o644)  # not executable: passed over
    path, searched = toolchain.find_bisheng(late)
    assert path == str(late / "tools/bisheng_compiler/bin/bisheng")
    assert str(late / "bin/bisheng") in searched and "bisheng on PATH" in searched


def test_version_falls_back_to_version_cfg_then_the_directory_name(jit):
    cfg_only = jit.cann("8.0.RC3", install_info=False)
    assert toolchain.cann_version(cfg_only.root) == ("8.0.RC3", str(cfg_only.root / "version.cfg"))
    name_only = jit.cann("9.1.0", install_info=False, version_cfg=False, base=jit.tmp / "x")
    assert toolchain.cann_version(name_only.root) == ("9.1.0", "directory name cann-9.1.0")
    assert toolchain.cann_version(jit.tmp) == (None, "")
    # only another machine's install info (a toolkit laid out for the other host): still that release
    other = "aarch64" if toolchain.host_arch() != "aarch64" else "x86_64"
    info = jit.tmp / "cross" / "cann" / f"{other}-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.5.0\n")
    assert toolchain.cann_version(info.parent.parent) == ("8.5.0", str(info))


def test_version_cfg_takes_the_toolkits_version_over_the_other_components(jit):
    """A mixed install's version.cfg lists each component's release; the toolkit's (whose compiler builds
    the kernels) picks the generation, whatever line comes first."""
    root = jit.tmp / "mixed" / "cann"
    root.mkdir(parents=True)
    (root / "version.cfg").write_text(
        "runtime_running_version=[7.3.0:8.3.RC1]\ncompiler_running_version=[7.5.0:8.5.0]\n"
        "toolkit_running_version=[7.6.0:9.0.0]\n"
    )
    assert toolchain.cann_version(root) == ("9.0.0", str(root / "version.cfg"))
    # none of those three listed: the first component's release, not "no version"
    (root / "version.cfg").write_text("# version: 1.0\nopp_running_version=[7.6.0:8.2.RC1]\n")
    assert toolchain.cann_version(root) == ("8.2.RC1", str(root / "version.cfg"))


def test_a_fifo_planted_as_a_version_file_is_no_version_and_never_waited_on(jit):
    """Discovery reads a root's version files before it checks who owns the tree: each is opened without
    blocking and must be a regular file (a planted FIFO would hang ``info`` and every import). Run in a
    child with a deadline, so that a regression fails instead of hanging the suite."""
    root = jit.tmp / "planted" / "cann-x"
    (root / f"{toolchain.host_arch()}-linux").mkdir(parents=True)
    for name in (f"{toolchain.host_arch()}-linux/ascend_toolkit_install.info", "version.cfg"):
        os.mkfifo(root / name)
    # torch-free, as the console script: the deadline is for the read alone, not for an import of torch
    # (seconds, a minute on a loaded machine) that nothing here needs
    code = (
        "import _ascend_rmsnorm_cli; _ascend_rmsnorm_cli.defer_package_init()\n"
        f"from ascend_rmsnorm.jit import toolchain; print(toolchain.cann_version({str(root)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "(None, '')", done.stderr


def test_generations_by_version():
    for version in ("8.0.RC3", "8.0.0", "8.1.RC1", "8.2.RC1", "8.3.RC1", "8.3.RC2"):
        assert toolchain.generation(version) == "cce", version
    for version in ("8.5.0", "9.0.0", "9.1.0", "9.2.0-beta.2"):
        assert toolchain.generation(version) == "asc", version
    with pytest.raises(ToolchainNotFoundError, match=r"CANN 7\.0\.0 is too old.*8\.0 or newer"):
        toolchain.generation("7.0.0")
    assert toolchain.parse_version("8.3.RC2") == (8, 3)


def test_env_var_precedence(jit):
    a = jit.cann("8.5.0", base=jit.tmp / "a")
    b = jit.cann("9.0.0", base=jit.tmp / "b")
    jit.cann("8.3.RC2")  # the default location
    assert toolchain.find_cann().version == "8.3.RC2"
    jit.mp.setenv("ASCEND_TOOLKIT_HOME", str(b.alias / "toolkit"))  # a .../toolkit suffix is normalised
    assert toolchain.find_cann().root == b.root
    jit.mp.setenv("ASCEND_HOME_PATH", str(a.alias))
    found = toolchain.find_cann()
    assert (found.root, found.found_by) == (a.root, "$ASCEND_HOME_PATH")


def test_home_install_is_found(jit):
    fake = jit.cann("8.5.0", base=jit.home / "Ascend")
    assert toolchain.find_cann().root == fake.root
    jit.mp.setenv("HOME", str(jit.tmp / "another-home"))  # another user's ~ (su, sudo -H): not that one's CANN
    assert toolchain.find_cann() is None


def test_bisheng_env_and_path_win_over_the_cann_root(jit, caplog):
    """Each of PATH and ASCEND_RMSNORM_BISHENG changes the toolchain a later call gets (no reset between)."""
    fake = jit.use(jit.cann("8.5.0"))
    assert toolchain.get_toolchain("npu").compiler == str(fake.root / "compiler/ccec_compiler/bin/bisheng")
    other = fake_cann.write_compiler(jit.tmp / "elsewhere" / "bisheng", mode="bisheng", version_text="other 1.0")
    unsafe = _open_dir(jit.tmp / "open-bin")
    fake_cann.write_compiler(unsafe / "bisheng", mode="bisheng", version_text="theirs 1.0")
    jit.mp.setenv("PATH", f"{unsafe}{os.pathsep}{other.parent}{os.pathsep}{os.environ['PATH']}")
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert toolchain.find_bisheng(fake.root)[0] == str(other)  # the unsafe one passed over, said so
    assert f"skipped {unsafe / 'bisheng'} on PATH (not used: {unsafe} is writable by everyone" in caplog.text
    # a bare name is looked up on PATH, as a shell would; the first found is the one meant, refused if unsafe
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", "bisheng")
    with pytest.raises(ToolchainNotFoundError, match=f"refusing to use the compiler {unsafe / 'bisheng'} "):
        toolchain.find_bisheng(fake.root)
    jit.mp.delenv("ASCEND_RMSNORM_BISHENG")
    jit.mp.setenv("PATH", f"{other.parent}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.find_bisheng(fake.root)[0] == str(other)
    assert toolchain.get_toolchain("npu").compiler == str(other)
    explicit = fake_cann.write_compiler(jit.tmp / "mine" / "bisheng", mode="bisheng", version_text="mine 2.0")
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(explicit))
    tc = toolchain.get_toolchain("npu")
    assert tc.compiler == str(explicit) and tc.compiler_version == "mine 2.0"
    assert tc.cann_version == "8.5.0"  # the version still comes from the CANN root


def test_bisheng_alone_finds_its_cann_root(jit):
    fake = jit.cann("9.0.0")
    jit.mp.setattr(toolchain, "DEFAULT_CANN_ROOTS", ())
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(fake.root / "bin" / "bisheng"))
    tc = toolchain.get_toolchain("npu")
    assert (tc.cann_root, tc.cann_version, tc.generation) == (fake.root, "9.0.0", "asc")


def test_a_bisheng_with_no_cann_above_it_or_anywhere_says_so_and_what_was_searched(jit):
    """A bisheng named by ASCEND_RMSNORM_BISHENG, no CANN install found and none above the binary: the
    version (so the command-line family) cannot be known, which the error says, with the places searched."""
    loose = fake_cann.write_compiler(jit.tmp / "loose" / "bin" / "bisheng", mode="bisheng", version_text="b 1.0")
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(loose))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert text.startswith(f"found bisheng at {loose} but no CANN install to read its version from. Searched:\n")
    assert f"  CANN root: {jit.usr / 'cann'}" in text and "source /usr/local/Ascend/cann/set_env.sh" in text


def test_the_cann_root_found_above_an_explicit_bisheng_is_refused_when_others_can_write_it(jit):
    """The root above a bisheng found without one goes into every build (-I include, -L/run path lib64),
    as a root a variable names does: one whose lib64 everyone may write is refused, never used."""
    fake = jit.cann("9.0.0")
    jit.mp.setattr(toolchain, "DEFAULT_CANN_ROOTS", ())
    lib64 = _open_dir(fake.root / "lib64")
    bisheng = fake.root / "bin" / "bisheng"
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(bisheng))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"refusing to use the CANN root {fake.root} (above {bisheng})" in text
    assert f"{lib64} is writable by everyone (mode 0777)" in text and f"{OPT_OUT}=1" in text
    jit.mp.setenv(OPT_OUT, "1")
    assert toolchain.get_toolchain("npu").cann_root == fake.root


def test_missing_install_says_what_was_searched_and_how_to_fix(jit):
    jit.mp.setenv("ASCEND_HOME_PATH", str(jit.tmp / "nowhere"))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"{jit.tmp / 'nowhere'} ($ASCEND_HOME_PATH: not a directory)" in text
    assert str(jit.usr / "cann") in text and str(jit.usr / "ascend-toolkit" / "latest") in text
    assert str(jit.home / "Ascend" / "cann") in text
    assert "bisheng on PATH" in text
    assert "source /usr/local/Ascend/cann/set_env.sh" in text and "ascend-toolkit/set_env.sh" in text
    assert "ASCEND_HOME_PATH" in text and "ASCEND_RMSNORM_BISHENG" in text
    # a directory that holds no CANN release (no version file, no version in its name) is passed over
    (jit.tmp / "not-cann").mkdir()
    jit.mp.setenv("ASCEND_HOME_PATH", str(jit.tmp / "not-cann"))
    assert toolchain.find_cann() is None
    assert f"{jit.tmp / 'not-cann'} ($ASCEND_HOME_PATH: no version file, not a CANN install)" in (
        toolchain.cann_search_report()
    )


def test_install_without_bisheng_lists_its_places(jit):
    fake = jit.use(jit.cann("8.5.0", bisheng=False))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"CANN root: {fake.root} (CANN 8.5.0" in text
    for sub in ("bin", "compiler/ccec_compiler/bin", f"{fake_cann.HOST}-linux/ccec_compiler/bin"):
        assert str(fake.root / sub / "bisheng") in text


def test_wrong_explicit_bisheng_is_an_error_not_a_fallback(jit):
    jit.use(jit.cann("8.5.0"))
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(jit.tmp / "no-such-bisheng"))
    with pytest.raises(ToolchainNotFoundError, match="ASCEND_RMSNORM_BISHENG=.*no-such-bisheng.*not an executable"):
        toolchain.get_toolchain("npu")


def test_fingerprint_follows_a_replaced_compiler(jit):
    fake = jit.use(jit.cann("8.5.0"))
    before = toolchain.get_toolchain("npu")
    assert toolchain.get_toolchain("npu") is before  # memoised per process
    assert toolchain.compiler_version(before.compiler) == before.compiler_version
    fake_cann.make_cann(jit.usr, "8.5.0", extra_version_text=" hotfix-1")  # same path, new binary
    # the --version memo is keyed by (real path, size, mtime_ns): the new binary is asked again
    assert "hotfix-1" in toolchain.compiler_version(before.compiler)
    fake_cann.make_cann(jit.usr, "8.5.0", extra_version_text=" hotfix-2")  # the same size, a later mtime
    st = fake.bisheng.resolve().stat()
    os.utime(fake.bisheng.resolve(), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert "hotfix-2" in toolchain.compiler_version(before.compiler)
    toolchain.reset()
    after = toolchain.get_toolchain("npu")
    assert after.compiler == before.compiler and after.fingerprint() != before.fingerprint()
    assert fake.bisheng.exists()


def test_the_version_memo_asks_a_binary_of_another_size_or_real_path_again_whatever_its_mtime(jit, tmp_path):
    """``compiler_version``'s memo is keyed by the binary's real path, size and mtime: a binary replaced by
    one of another size with the same mtime (``cp -p``, ``rsync -t``), or a link moved to another binary
    of the same size and mtime, is asked again."""

    def write(path: Path, text: str) -> None:
        path.write_text(f"#!/bin/sh\necho {text}\n")
        path.chmod(0o755)
        os.utime(path, ns=(10**18, 10**18))

    cxx = tmp_path / "c++"
    write(tmp_path / "one", "one")
    cxx.symlink_to(tmp_path / "one")
    assert toolchain.compiler_version(str(cxx)) == "one"
    write(tmp_path / "one", "one-1")  # another size, the same mtime
    assert toolchain.compiler_version(str(cxx)) == "one-1"
    write(tmp_path / "two", "two-1")  # the same size and mtime, another file
    cxx.unlink()
    cxx.symlink_to(tmp_path / "two")
    assert toolchain.compiler_version(str(cxx)) == "two-1"


def test_emu_toolchain(jit):
    tc = jit.emu()
    assert tc.kind == "emu" and tc.generation == "emu" and tc.cann_version is None
    assert tc.cache_dirname == "emu"
    assert tc.version_line  # first line of the host compiler's --version
    with pytest.raises(ValueError, match="unknown toolchain 'gpu'"):
        toolchain.get_toolchain("gpu")
    # without the variable, PATH picks the compiler, and a changed PATH a later call's (no reset between)
    jit.mp.delenv("ASCEND_RMSNORM_CXX")
    first = jit.tmp / "first-bin"
    first.mkdir()
    (first / "c++").symlink_to(fake_cann.REAL_CXX)
    jit.mp.setenv("PATH", f"{first}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.get_toolchain("emu").compiler == str(first / "c++")
    jit.mp.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    assert toolchain.get_toolchain("emu").compiler != str(first / "c++")
    jit.mp.setenv("ASCEND_RMSNORM_CXX", "no-such-c++-compiler")
    with pytest.raises(ToolchainNotFoundError, match="no-such-c\\+\\+-compiler.*ASCEND_RMSNORM_CXX"):
        toolchain.get_toolchain("emu")
    # a path is not looked up on PATH: the message says what is wrong with the path itself
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(jit.tmp / "no-such-dir" / "g++"))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("emu")
    assert "PATH" not in str(info.value) and "no executable file there" in str(info.value)
    # a compiler whose --version fails is no compiler to key a cache on
    broken = jit.tmp / "broken-c++"
    broken.write_text("#!/bin/sh\necho 'cannot load libLLVM.so'\nexit 3\n")
    broken.chmod(0o755)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(broken))
    with pytest.raises(ToolchainNotFoundError, match="--version exited with status 3: cannot load libLLVM.so"):
        toolchain.get_toolchain("emu")


# --------------------------------------------------------------------------------------------------- SoC and arch


@pytest.mark.parametrize(
    "soc, arch",
    [
        ("Ascend910B1", "dav-2201"),
        ("Ascend910B2C", "dav-2201"),
        ("Ascend910B3", "dav-2201"),
        ("Ascend910B4-1", "dav-2201"),
        ("Ascend910_9392", "dav-2201"),
        ("Ascend910_9362", "dav-2201"),
        ("Ascend310P3", "dav-2002"),
        ("Ascend310B1", "dav-3002"),
        ("Ascend950PR_9599", "dav-3510"),
        ("Ascend950DT_9591", "dav-3510"),
        ("Ascend910B", "dav-1001"),  # no digit: the old 910, not Atlas A2
        ("Ascend910ProB", "dav-1001"),
        ("Ascend910A", "dav-1001"),
    ],
)
def test_builtin_soc_table(soc, arch):
    assert toolchain.arch_from_table(soc) == arch
    assert toolchain.soc_arch(soc).arch == arch


def test_builtin_core_counts():
    assert toolchain.soc_arch("Ascend910B2").vector_cores == 48
    assert toolchain.soc_arch("Ascend910B4").vector_cores == 40
    assert toolchain.soc_arch("Ascend910_9391").vector_cores == 48
    assert toolchain.soc_arch("Ascend310P3").vector_cores is None


@pytest.mark.parametrize("version", ["8.0.0", "8.5.0"])
def test_platform_ini_gives_arch_and_cores(jit, version):
    fake = jit.cann(version)
    expected = toolchain.ArchInfo("Ascend910B3", "dav-2201", 40, "platform ini")
    assert toolchain.soc_arch("Ascend910B3", fake.root) == expected
    assert toolchain.soc_arch("Ascend910_9392", fake.root).vector_cores == 48
    assert toolchain.soc_arch("Ascend310P3", fake.root).arch == "dav-2002"
    assert toolchain.soc_arch("Ascend950PR_9599", fake.root).arch == "dav-3510"
    # an ini without NpuArch (CANN 8.1's): the arch from its vector target, the cores still its own
    # (the built-in table does not know this SoC's)
    assert toolchain.soc_arch("Ascend910_9351", fake.root) == toolchain.ArchInfo(
        "Ascend910_9351", "dav-2201", 36, "platform ini"
    )
    assert toolchain.soc_arch("Ascend910_9351").vector_cores is None
    # an ini whose vector target is none the package knows: the table's arch where it knows the SoC (the
    # ini's cores), else no kernels, said as such (CANN 8.1's Ascend910_95, dav-c310: not "set the arch
    # to dav-2201", which would build A2 kernels for it); an ini that names none: the table, else unknown
    (ini_dir,) = {p.parent for p in fake.root.glob("**/platform_config/Ascend910B3.ini")}
    for soc in ("Ascend910B2", "Ascend777"):
        (ini_dir / f"{soc}.ini").write_text("[version]\nCCEC_AIV_version=dav-x999-vec\n[SoCInfo]\nvector_core_cnt=24\n")
    (ini_dir / "Ascend778.ini").write_text("[version]\nSoC_version=Ascend778\n[SoCInfo]\nvector_core_cnt=24\n")
    assert toolchain.soc_arch("Ascend910B2", fake.root) == toolchain.ArchInfo(
        "Ascend910B2", "dav-2201", 24, "built-in table (cores: platform ini)"
    )
    with pytest.raises(UnsupportedArchError, match="no kernels for NPU SoC 'Ascend777'.*'dav-x999-vec'") as err:
        toolchain.soc_arch("Ascend777", fake.root)
    assert "dav-2201 (Atlas A2" in str(err.value) and "ASCEND_RMSNORM_ARCH" not in str(err.value)
    with pytest.raises(UnsupportedArchError, match="'Ascend778': its platform ini names no arch and it is not in"):
        toolchain.soc_arch("Ascend778", fake.root)
    # a core count of 0 is no count (None), never 0 cores to split rows over; an NpuArch that is not a
    # number is none (the vector target then says)
    (ini_dir / "Ascend910B1.ini").write_text("[version]\nNpuArch=c220\nCCEC_AIV_version=dav-c220-vec\n")
    assert toolchain.soc_arch("Ascend910B1", fake.root).arch == "dav-2201"
    (ini_dir / "Ascend910B4.ini").write_text("[version]\nNpuArch=2201\n[SoCInfo]\nvector_core_cnt=0\n")
    no_count = toolchain.ArchInfo("Ascend910B4", "dav-2201", None, "platform ini")
    assert toolchain.soc_arch("Ascend910B4", fake.root) == no_count
    # CANN 8.3+: the <host>-linux place is read first; an older layout's leftover ini is not
    older = fake.root / "compiler" / "data" / "platform_config"
    if ini_dir != older:
        older.mkdir(parents=True)
        (older / "Ascend910B3.ini").write_text("[version]\nNpuArch=1001\n[SoCInfo]\nvector_core_cnt=8\n")
        assert toolchain.soc_arch("Ascend910B3", fake.root) == expected
    # a SoC name is one file name under platform_config, never a path out of it
    (fake.root / "planted").mkdir()
    (fake.root / "planted" / "x.ini").write_text("[version]\nNpuArch=2201\n[SoCInfo]\nvector_core_cnt=48\n")
    with pytest.raises(UnsupportedArchError, match="unknown NPU SoC '../../../planted/x': no platform ini"):
        toolchain.soc_arch("../../../planted/x", fake.root)


def test_unknown_soc_is_an_error():
    with pytest.raises(UnsupportedArchError, match="unknown NPU SoC 'Ascend123'.*ASCEND_RMSNORM_ARCH"):
        toolchain.soc_arch("Ascend123")


class LazyInitNpu:
    """``torch.npu`` as torch_npu 7.0+ has it: ``get_device_name()`` without an index asks
    ``current_device()``, which initialises torch_npu; torch_npu before 7.2 (CANN 8.1, 8.2) then makes
    device 0 current in this process. With an index it only asks ACL for the SoC name
    (``torch_npu._C._npu_getDeviceName``, torch_npu/npu/utils.py of v7.0.0)."""

    def __init__(self):
        self.initialised = False

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialised

    def current_device(self):
        self.initialised = True  # _lazy_init(): aclInit, and aclrtSetDevice(0) before CANN 8.3
        return 0

    def get_device_name(self, device=None):
        if device is None:
            self.current_device()
        return "Ascend910B2"


class LazyInitNpu6(LazyInitNpu):
    """``torch.npu`` as torch_npu 6.0.x (CANN 8.0, torch 2.4) has it: ``get_device_name(index)`` runs
    ``_lazy_init()`` and then ``_npu_getDeviceProperties(index).name`` (torch_npu/npu/utils.py of
    v6.0.0-pytorch2.4.0, lines 66-72); the init (``NpuSysCtrl::Initialize``) calls ``SetDevice(0)`` when no
    device is set (npu_sys_ctrl.cpp, lines 218-222). There is no ``torch_npu._C._npu_getDeviceName``."""

    def get_device_name(self, device=None):
        self.initialised = True
        return "Ascend910B2"


def fake_torch_npu(has_get_device_name: bool) -> types.ModuleType:
    module = types.ModuleType("torch_npu")
    module._C = types.SimpleNamespace()
    if has_get_device_name:
        module._C._npu_getDeviceName = lambda: "Ascend910B2"
    return module


def test_soc_from_torch_npu_when_loaded(jit, monkeypatch):
    import torch

    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu(True))
    fake_npu = LazyInitNpu()
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    assert toolchain.detect_soc() == ("Ascend910B2", "torch.npu.get_device_name")
    info = toolchain.detect_arch()
    assert (info.soc, info.arch, info.vector_cores) == ("Ascend910B2", "dav-2201", 48)
    # what `import torch_npu; import ascend_rmsnorm` runs on each rank before its own set_device: it must
    # not initialise torch_npu, or every rank holds a context on NPU 0
    assert not fake_npu.initialised


def test_soc_from_torch_npu_6_does_not_start_npu_0(jit, monkeypatch):
    """torch_npu 6.0.x starts NPU 0 to answer get_device_name(0): before torch_npu is initialised, the
    SoC comes from ACL (the libascendcl.so torch_npu loaded) instead; once it is, torch_npu is asked."""
    import torch

    fake = jit.use(jit.cann("8.0.0"))
    jit.acl(fake)
    jit.mp.setenv("FAKE_ACL_SOC", "Ascend910B3")
    monkeypatch.setitem(sys.modules, "torch_npu", fake_torch_npu(False))
    fake_npu = LazyInitNpu6()
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    assert toolchain.detect_soc(fake.root) == ("Ascend910B3", "aclrtGetSocName")
    assert not fake_npu.initialised  # no rank holds a context on NPU 0 because of this package
    toolchain.reset()
    fake_npu.initialised = True  # the user's own first NPU op or set_device ran: asking changes nothing
    assert toolchain.detect_soc(fake.root) == ("Ascend910B2", "torch.npu.get_device_name")


def test_soc_from_aclrtgetsocname(jit):
    fake = jit.use(jit.cann("9.0.0"))
    jit.acl(fake)
    jit.mp.setenv("FAKE_ACL_SOC", "Ascend910_9392")
    assert toolchain.detect_soc(fake.root) == ("Ascend910_9392", "aclrtGetSocName")
    info = toolchain.detect_arch()
    assert (info.arch, info.vector_cores) == ("dav-2201", 48)
    assert "aclrtGetSocName + platform ini" == info.source
    toolchain.reset()
    jit.mp.delenv("FAKE_ACL_SOC")  # the call returns NULL: a failure, and nothing else answers
    soc, how = toolchain.detect_soc(fake.root)
    assert soc is None and "npu-smi" in how


def test_libascendcl_is_never_loaded_by_the_loaders_search_where_a_root_is_known_or_refused(jit, tmp_path_factory):
    """``acl_library``: the copy already loaded is found without loading anything; a root that a variable
    names and that is refused stops the bare-name load (set_env.sh put that root's lib64 first in the
    loader's search); with a root, its lib64 copy is loaded only when none is loaded yet. The loader reads
    LD_LIBRARY_PATH once, at a process's start: so a child process, whose search finds a libascendcl."""
    searched = tmp_path_factory.mktemp("ld-library-path")
    lib = fake_cann.build_fake_libascendcl(searched)
    refused = jit.cann("9.0.0", base=jit.tmp / "refused")
    _open_dir(refused.root / "lib64")
    other = jit.cann("9.0.0", base=jit.tmp / "other")
    shutil.copy(lib, other.root / "lib64" / "libascendcl.so")
    code = (
        "import os, sys, _ascend_rmsnorm_cli\n"
        "_ascend_rmsnorm_cli.defer_package_init()\n"
        "from ascend_rmsnorm.jit import toolchain\n"
        "print(toolchain.loaded_acl(), toolchain.acl_library(None))\n"
        "del os.environ['ASCEND_HOME_PATH']\n"
        "toolchain.reset()\n"
        "print(toolchain.acl_library(None)._name, toolchain.acl_library(sys.argv[1])._name)\n"
    )
    env = {**os.environ, "LD_LIBRARY_PATH": str(searched), "ASCEND_HOME_PATH": str(refused.alias)}
    done = subprocess.run([sys.executable, "-c", code, str(other.root)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["None None", "libascendcl.so libascendcl.so"]


def test_soc_from_npu_smi_a2_and_a3(jit):
    """No reset between the calls: a miss is not remembered (npu-smi may appear later), a changed PATH asks
    again; an npu-smi that fails says nothing, whatever it printed."""
    assert toolchain.detect_soc()[0] is None
    fake_cann.write_npu_smi(jit.bin, "910B3")
    assert toolchain.detect_soc() == ("Ascend910B3", "npu-smi info")
    a3 = jit.tmp / "a3-bin"
    fake_cann.write_npu_smi(a3, "Ascend910", chip="Ascend910", npu_name="9392")
    jit.mp.setenv("PATH", f"{a3}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.detect_soc() == ("Ascend910_9392", "npu-smi info")
    failing = jit.tmp / "failing-bin"
    smi = fake_cann.write_npu_smi(failing, "910B3")
    smi.write_text(smi.read_text() + "sys.exit(1)\n")  # the table printed, then a driver error
    jit.mp.setenv("PATH", f"{failing}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.detect_soc()[0] is None


def test_npu_smi_runs_in_the_environment_the_compiler_gets(jit):
    """``npu-smi`` (``detect_soc``) gets what ``--version`` and the compiler get (``toolpath.compiler_env``):
    no variable through which a program or the loader takes code from elsewhere, PATH cut to places nobody
    else can write, ccache off."""
    open_dir = jit.tmp / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    seen = jit.tmp / "seen.json"
    smi = fake_cann.write_npu_smi(jit.bin, "910B3")
    names = ["CPATH", "LD_AUDIT", "CCACHE_DISABLE", "PATH"]
    smi.write_text(
        smi.read_text()
        + f"import json, os\nopen({str(seen)!r}, 'w').write(json.dumps([os.environ.get(n) for n in {names!r}]))\n"
    )
    jit.mp.setenv("CPATH", str(jit.tmp))
    jit.mp.setenv("LD_AUDIT", str(open_dir / "audit.so"))  # not there: the loader says so and goes on
    jit.mp.setenv("PATH", f"{open_dir}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.detect_soc() == ("Ascend910B3", "npu-smi info")
    cpath, audit, ccache, path = json.loads(seen.read_text())
    assert (cpath, audit, ccache) == (None, None, "1") and str(open_dir) not in path.split(os.pathsep)
    assert str(jit.bin) in path.split(os.pathsep)


def test_arch_override_and_undetectable_arch(jit):
    with pytest.raises(UnsupportedArchError, match="--arch dav-2201.*ASCEND_RMSNORM_ARCH"):
        toolchain.detect_arch()
    jit.mp.setenv("ASCEND_RMSNORM_ARCH", "2201")
    assert toolchain.detect_arch() == toolchain.ArchInfo(None, "dav-2201", None, "$ASCEND_RMSNORM_ARCH")


def test_only_dav_2201_is_supported():
    assert toolchain.check_supported("dav-2201") == "dav-2201"
    assert toolchain.check_supported("2201") == toolchain.check_supported(" DAV-2201 ") == "dav-2201"
    with pytest.raises(UnsupportedArchError, match=r"SoC Ascend950PR_9599 \(arch dav-3510\).*supported: dav-2201"):
        toolchain.check_supported("dav-3510", soc="Ascend950PR_9599")


def test_importing_the_jit_modules_runs_nothing(tmp_path):
    """No discovery, no subprocess and no filelock/platformdirs import until a function is called."""
    import subprocess

    code = (
        "import subprocess, sys, _ascend_rmsnorm_cli\n"
        "_ascend_rmsnorm_cli.defer_package_init()  # torch-free, as the console script\n"
        "def boom(*a, **k): raise SystemExit('a subprocess ran at import')\n"
        "subprocess.Popen = boom\n"
        "import ascend_rmsnorm.jit.cache, ascend_rmsnorm.jit.admin, ascend_rmsnorm.jit.locks, ascend_rmsnorm.cli.main\n"
        "print(sorted(m for m in ('filelock', 'platformdirs') if m in sys.modules))\n"
    )
    env = {**os.environ, "ASCEND_HOME_PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert Path(toolchain.__file__).exists()


def test_a_missing_install_is_not_remembered(jit):
    assert toolchain.find_cann() is None
    fake = jit.cann("9.0.0")  # e.g. installed, or set_env.sh sourced, after a first look
    assert toolchain.find_cann().root == fake.root


@pytest.mark.parametrize(
    "version", [".", "..", "tmp", "failed", "quarantine", "trash", "emu", "a/b", "a\0b", ".hidden", "8" * 100, "-x"]
)
def test_a_cann_version_that_is_not_a_plain_name_never_becomes_a_cache_path_component(version):
    tc = toolchain.Toolchain("npu", "/x/bisheng", "/x/bisheng", "v", "asc", cann_version=version)
    name = tc.cache_dirname
    assert name.startswith("cann-") and "/" not in name and "\0" not in name and len(name) <= 64
    assert name not in (".", "..") and name.lower() not in toolchain.RESERVED_DIRNAMES
    other = toolchain.Toolchain("npu", "/x/bisheng", "/x/bisheng", "v", "asc", cann_version=version + "!")
    assert other.cache_dirname != name  # the hash keeps distinct versions apart


def test_a_cann_version_with_no_release_number_is_refused_as_a_toolchain_error():
    """A version file that holds no MAJOR.MINOR (a vendor's build tag, say): the command-line family cannot
    be chosen, which is said as a toolchain error naming the version, not a bare ValueError."""
    with pytest.raises(ToolchainNotFoundError, match=r"^CANN version 'tmp' is not one this package can read; set "):
        toolchain.generation("tmp")


@pytest.mark.parametrize("version", ["8.5.0", "8.3.RC2", "9.0.0-beta.1"])
def test_a_plain_cann_version_is_its_own_cache_dir(version):
    assert toolchain.Toolchain("npu", "/b", "/b", "v", "asc", cann_version=version).cache_dirname == version


@pytest.mark.parametrize(
    "change",
    [
        {"compiler_real": "/y/bisheng"},
        {"compiler_version": "BiSheng 2"},
        {"generation": "cce"},
        {"cann_version": "8.5.1"},  # a CANN patch that keeps bisheng's --version text
        {"compiler_info": "8"},  # a compiler hotfix: only compiler/version.info says so
    ],
)
def test_each_thing_that_identifies_the_compiler_is_in_its_fingerprint(change):
    """The fingerprint goes into the cache key: a library built by one compiler is never taken for
    another's. Only where the compiler is run from (a link to it, a wrapper's name) is left out."""
    import dataclasses

    tc = toolchain.Toolchain("npu", "/x/b", "/x/bisheng", "BiSheng 1", "asc", cann_version="8.5.0", compiler_info="7")
    assert dataclasses.replace(tc, **change).fingerprint() != tc.fingerprint()
    assert dataclasses.replace(tc, compiler="/link/to/bisheng").fingerprint() == tc.fingerprint()


# --------------------------------------------------------------------------------------------------- trust

OPT_OUT = "ASCEND_RMSNORM_SKIP_PERMISSION_CHECK"


def _open_dir(path: Path) -> Path:
    """A directory everyone may write (as a shared bin dir a careless admin left 777)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


def test_an_unsafe_dir_on_path_is_skipped_and_named_and_the_opt_out_uses_it(jit):
    jit.use(jit.cann("8.5.0", bisheng=False))
    shared = _open_dir(jit.tmp / "shared-bin")
    fake_cann.write_compiler(shared / "bisheng", mode="bisheng", version_text="theirs 1.0")
    fake_cann.write_compiler(shared / "c++", mode="cxx")
    fake_cann.write_npu_smi(shared, "910B3")
    jit.mp.setenv("PATH", f"{shared}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"bisheng: {shared / 'bisheng'} on PATH (not used: {shared} is writable by everyone (mode 0777)" in text
    assert f"fix: `chmod o-w {shared}`" in text and f"{OPT_OUT}=1" in text
    assert toolchain.get_toolchain("emu").compiler != str(shared / "c++")  # the next c++ on PATH
    assert toolchain.detect_soc()[0] is None  # npu-smi is not run
    jit.mp.setenv(OPT_OUT, "1")
    assert toolchain.get_toolchain("npu").compiler == str(shared / "bisheng")
    assert toolchain.get_toolchain("emu").compiler == str(shared / "c++")
    assert toolchain.detect_soc() == ("Ascend910B3", "npu-smi info")


@pytest.mark.parametrize("variable, kind", [("ASCEND_RMSNORM_BISHENG", "npu"), ("ASCEND_RMSNORM_CXX", "emu")])
def test_an_explicit_unsafe_compiler_is_refused_with_the_fix_and_the_opt_out_uses_it(jit, variable, kind):
    jit.use(jit.cann("8.5.0"))
    shared = _open_dir(jit.tmp / "shared")
    compiler = fake_cann.write_compiler(shared / "cc", mode="bisheng" if kind == "npu" else "cxx", version_text="1")
    jit.mp.setenv(variable, str(compiler))
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain(kind)
    text = str(info.value)
    assert f"refusing to use the compiler {compiler} (${variable}" in text
    assert f"{shared} is writable by everyone (mode 0777); fix: `chmod o-w {shared}`" in text
    assert f"{OPT_OUT}=1" in text
    jit.mp.setenv(OPT_OUT, "1")
    assert toolchain.get_toolchain(kind).compiler == str(compiler)


def test_an_empty_or_relative_path_entry_does_not_search_the_current_dir(jit):
    fake = jit.use(jit.cann("8.5.0", bisheng=False))
    here = jit.tmp / "cwd"
    fake_cann.write_compiler(here / "bisheng", mode="bisheng", version_text="planted 1.0")
    fake_cann.write_npu_smi(here, "910B3")
    jit.mp.chdir(here)
    jit.mp.setenv("PATH", f"{os.pathsep}.{os.pathsep}{os.environ['PATH']}")  # "", ".", then the rest
    assert toolchain.find_bisheng(fake.root)[0] is None
    assert toolchain.detect_soc()[0] is None


def test_a_file_on_path_that_is_not_executable_is_passed_over(tmp_path, monkeypatch):
    """A name on PATH that is a plain file without an execute bit is no program (as for ``shutil.which``):
    the search goes on to the next entry, and a path naming it is not one either."""
    from ascend_rmsnorm.jit import toolpath

    first, second = tmp_path / "a", tmp_path / "b"
    for where, mode in ((first, 0o644), (second, 0o755)):
        where.mkdir()
        (where / "tool").write_text("#!/bin/sh\n")
        (where / "tool").chmod(mode)
    monkeypatch.setenv("PATH", f"{first}{os.pathsep}{second}")
    assert toolpath.which("tool") == str(second / "tool")
    assert toolpath.which(str(first / "tool")) is None


def test_an_unsafe_cann_root_is_refused_or_skipped_and_the_opt_out_uses_it(jit):
    fake = jit.cann("8.5.0")  # at a default location, and named by ASCEND_HOME_PATH
    lib64 = _open_dir(fake.root / "lib64")  # what -L and the kernel library's run path point at
    fake_cann.build_fake_libascendcl(lib64)
    jit.mp.setenv("FAKE_ACL_SOC", "Ascend910_9392")
    jit.use(fake)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    text = str(info.value)
    assert f"refusing to use the CANN root {fake.alias} -> {fake.root} ($ASCEND_HOME_PATH)" in text
    assert f"{lib64} is writable by everyone (mode 0777); fix: `chmod o-w {shlex.quote(str(lib64))}`" in text
    assert f"{OPT_OUT}=1" in text
    assert toolchain.find_cann() is None
    assert toolchain.acl_library(fake.root) is None and toolchain.detect_soc(fake.root)[0] is None
    jit.mp.delenv("ASCEND_HOME_PATH")
    with pytest.raises(ToolchainNotFoundError, match=r"\(default location: not used: .* is writable by everyone"):
        toolchain.get_toolchain("npu")
    jit.mp.setenv(OPT_OUT, "1")
    assert toolchain.get_toolchain("npu").cann_root == fake.root
    assert toolchain.detect_soc(fake.root) == ("Ascend910_9392", "aclrtGetSocName")
    jit.mp.delenv(OPT_OUT)  # what was found with the test off is not remembered once it is on again
    assert toolchain.find_cann() is None
    with pytest.raises(ToolchainNotFoundError, match="is writable by everyone"):
        toolchain.get_toolchain("npu")


def test_a_cann_root_others_can_add_names_to_is_refused_though_what_it_holds_is_yours(jit):
    """bisheng and the loader look names up below the root (``lib64``, its own dirs): a root anyone may add
    a name to, sticky as /tmp is, is refused as a PATH entry would be, though each entry in it is yours."""
    fake = jit.use(jit.cann("9.0.0"))
    _sticky_dir(fake.root)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    assert f"refusing to use the CANN root {fake.alias} -> {fake.root} ($ASCEND_HOME_PATH)" in str(info.value)
    assert f"{fake.root} is writable by everyone (mode 1777), and names are looked up or made in it" in str(info.value)


def test_a_place_that_cannot_be_looked_into_is_passed_over_never_raised(jit, tmp_path):
    """Discovery looks at PATH entries and CANN roots that other accounts may own. Another account that
    makes one of them a directory of its own, mode 700, turns each lookup there into EACCES; that must
    skip the place (it is no place to find anything in), not raise out of rms_norm, warm and info
    (a raw PermissionError: no fallback to the torch path catches it). Root never gets EACCES, so the
    test takes the other way a lookup fails with more than "no such file": a name too long to look up
    (ENAMETOOLONG), which pathlib's is_file/is_dir raise for just the same."""
    import ascend_rmsnorm._env as env

    blocked = f"{tmp_path}/{'x' * 300}"
    fake = jit.cann("8.5.0")
    before = toolchain.emu_toolchain().compiler, toolchain.find_bisheng(fake.root)[0]
    jit.mp.setenv("PATH", f"{blocked}/bin{os.pathsep}{os.environ['PATH']}")
    toolchain.reset()
    # the next place on PATH; then CANN's own places; npu-smi is looked up on PATH too
    assert (toolchain.emu_toolchain().compiler, toolchain.find_bisheng(fake.root)[0]) == before
    assert toolchain.detect_soc()[0] is None
    jit.mp.setenv("ASCEND_HOME_PATH", f"{blocked}/cann")
    toolchain.reset()
    found = toolchain.find_cann()  # the variable's place is not a directory it can use: the defaults next
    assert found is not None and found.root == fake.root.resolve()
    assert f"{blocked}/cann ($ASCEND_HOME_PATH: not a directory)" in toolchain.cann_search_report()
    assert [row["status"] for row in env.report() if row["name"] == "ASCEND_HOME_PATH"] == ["ignored"]


def _sticky_dir(path: Path) -> Path:
    """A directory everyone may add names to, sticky as /tmp is (the names in it stay their owners')."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def test_a_compiler_in_a_directory_others_can_add_names_to_is_not_used(jit, caplog):
    """A compiler of yours (or root's) is safe in itself in a sticky directory anyone may write, as /tmp,
    but a clang-based one (bisheng is one) runs its linker and assembler from the directory it was
    started from before PATH (clang's InstalledDir: the named path's directory, links kept), and from
    the one its binary lies in: anyone can add an ``ld`` there, which runs as you and makes the library
    that is cached and loaded; and the prefix above it (``../lib/gcc``) holds the GCC installation clang
    links with. So those directories are judged as PATH's entries are: skipped on PATH, refused when a
    variable names the compiler, skipped in CANN's places."""
    fake = jit.use(jit.cann("8.5.0"))
    shared = _sticky_dir(jit.tmp / "sticky-bin")
    (shared / "c++").symlink_to(fake_cann.REAL_CXX)  # yours, to the real compiler: only the directory is wrong
    fake_cann.write_compiler(shared / "bisheng", mode="bisheng", version_text="in a sticky dir 1.0")
    jit.mp.setenv("PATH", f"{shared}{os.pathsep}{os.environ['PATH']}")
    toolchain.reset()
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert toolchain.get_toolchain("emu").compiler != str(shared / "c++")  # the next c++ on PATH
        assert toolchain.get_toolchain("npu").compiler == str(fake.root / "compiler/ccec_compiler/bin/bisheng")
    for name in ("c++", "bisheng"):  # each passed over with a warning, not silently
        assert f"skipped {shared / name}" in caplog.text and f"not used: {shared} is writable" in caplog.text
    for variable, kind, compiler in [
        ("ASCEND_RMSNORM_CXX", "emu", shared / "c++"),
        ("ASCEND_RMSNORM_BISHENG", "npu", shared / "bisheng"),
    ]:
        jit.mp.setenv(variable, str(compiler))
        toolchain.reset()
        with pytest.raises(ToolchainNotFoundError) as info:
            toolchain.get_toolchain(kind)
        text = str(info.value)
        assert f"refusing to use the compiler {compiler} (${variable}" in text
        assert f"{shared} is writable by everyone (mode 1777), and names are looked up or made in it" in text
        jit.mp.delenv(variable)
    # a directory of yours, 0755, inside the sticky one: the sticky one is the prefix above the compiler,
    # where clang looks for the GCC installation it links with (lib/gcc/<triple>/<version>: crtbeginS.o,
    # libstdc++ and its headers) and gcc for cc1plus and as (lib/gcc, libexec/gcc)
    mine = shared / "mine"
    mine.mkdir(mode=0o755)
    (mine / "c++").symlink_to(fake_cann.REAL_CXX)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(mine / "c++"))
    toolchain.reset()
    with pytest.raises(ToolchainNotFoundError, match=f"{shared} is writable by everyone .mode 1777., and names"):
        toolchain.get_toolchain("emu")
    # a link in a directory of yours to a compiler in the sticky one: the directory the binary really lies
    # in counts (clang's second place); and a compiler others may write is refused wherever it lies
    safe = jit.tmp / "safe-bin"
    safe.mkdir(mode=0o755)
    (safe / "c++").symlink_to(fake_cann.write_compiler(shared / "cxx", mode="cxx", version_text="1"))
    open_cxx = fake_cann.write_compiler(safe / "open-c++", mode="cxx", version_text="1")
    open_cxx.chmod(0o777)
    for compiler, why in [(safe / "c++", f"{shared} is writable by everyone (mode 1777), and names"),
                          (open_cxx, f"{open_cxx} is writable by everyone (mode 0777)")]:  # fmt: skip
        jit.mp.setenv("ASCEND_RMSNORM_CXX", str(compiler))
        toolchain.reset()
        with pytest.raises(ToolchainNotFoundError) as info:
            toolchain.get_toolchain("emu")
        assert why in str(info.value)
    jit.mp.delenv("ASCEND_RMSNORM_CXX")
    # CANN's own place: the directory its bisheng really lies in (compiler/ccec_compiler is a link to it)
    jit.mp.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    real_bin = _sticky_dir(fake.root / f"{fake_cann.HOST}-linux/ccec_compiler/bin")
    toolchain.reset()
    bisheng, searched = toolchain.find_bisheng(fake.root)
    assert bisheng is None
    assert any(f"not used: {real_bin} is writable by everyone (mode 1777), and names" in line for line in searched)
    jit.mp.setenv(OPT_OUT, "1")
    toolchain.reset()
    assert toolchain.find_bisheng(fake.root)[0] == str(fake.root / "compiler/ccec_compiler/bin/bisheng")


@pytest.mark.parametrize("name", ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"])
def test_a_relative_cann_root_variable_is_ignored_with_one_warning(jit, caplog, name):
    """README ("Directory paths must be absolute") and docs/design.md §5: a relative CANN root names
    another directory in each process's working directory, so it is ignored with one warning (as
    `info` marks it: IGNORED) and the default places are searched, never a CANN that the working
    directory happens to hold."""
    import logging

    fake = jit.cann("8.5.0", base=jit.tmp / "here")  # not at a default place
    jit.mp.chdir(jit.tmp)
    relative = os.path.relpath(fake.alias, jit.tmp)
    jit.mp.setenv(name, relative)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert toolchain.find_cann() is None
        toolchain.find_cann()
    said = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert said == [
        f"{name}={relative!r} is a relative path, which each process would take against its own "
        "working directory (give an absolute path); using the default (the default CANN locations) instead"
    ]
    assert f"{relative} (${name}: a relative path, ignored)" in toolchain.cann_search_report()


_GCC_E_V = """Using built-in specs.
COLLECT_GCC=c++
Target: x86_64-linux-gnu
gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)
ignoring duplicate directory "/usr/include/x86_64-linux-gnu/c++/12"
ignoring nonexistent directory "/usr/local/include/x86_64-linux-gnu"
ignoring nonexistent directory "/usr/lib/gcc/x86_64-linux-gnu/12/include-fixed"
#include "..." search starts here:
 {quoted}
#include <...> search starts here:
 /usr/include/c++/12
 /usr/lib/gcc/x86_64-linux-gnu/12/include
 /usr/local/include
 /usr/include
End of search list.
COMPILER_PATH={tmp}/libexec/:{tmp}/libexec/:{tmp}/no-such-libexec/
LIBRARY_PATH={tmp}/lib/:relative/lib
COLLECT_GCC_OPTIONS='-E' '-v' '-shared-libgcc' '-mtune=generic' '-march=x86-64'
"""

_CLANG_E_V = """Debian clang version 14.0.6
InstalledDir: /usr/bin
Selected GCC installation: /usr/bin/../lib/gcc/x86_64-linux-gnu/12
 "/usr/lib/llvm-14/bin/clang" -cc1 -triple x86_64-pc-linux-gnu -E -v -internal-isystem /usr/local/include
clang -cc1 version 14.0.6 based upon LLVM 14.0.6 default target x86_64-pc-linux-gnu
ignoring nonexistent directory "/include"
#include "..." search starts here:
#include <...> search starts here:
 /usr/bin/../lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12
 /usr/lib/llvm-14/lib/clang/14.0.6/include
 /usr/local/include
 /Library/Frameworks (framework directory)
 /usr/include
End of search list.
"""


def test_the_default_search_dirs_are_read_from_gcc_and_clang_output(tmp_path, monkeypatch):
    """``-x c++ -E -v`` output as gcc 12 and clang 14 (bisheng is clang-based) print it: both search lists
    (``"..."`` and ``<...>``), the dirs said not to be there, gcc's COMPILER_PATH and LIBRARY_PATH (an
    entry that is not a directory counts as missing; a relative one is left out, even where it names a
    directory from here: the compiler ran from ``/``), each dir once."""
    (tmp_path / "libexec").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "relative" / "lib").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    gcc = _GCC_E_V.format(tmp=tmp_path, quoted=tmp_path / "quoted")
    assert toolchain.parse_search_dirs(gcc) == (
        (
            f"{tmp_path / 'quoted'}",
            "/usr/include/c++/12",
            "/usr/lib/gcc/x86_64-linux-gnu/12/include",
            "/usr/local/include",
            "/usr/include",
            f"{tmp_path}/libexec/",
            f"{tmp_path}/lib/",
        ),
        (
            "/usr/local/include/x86_64-linux-gnu",
            "/usr/lib/gcc/x86_64-linux-gnu/12/include-fixed",
            f"{tmp_path}/no-such-libexec/",
        ),
    )
    assert toolchain.parse_search_dirs(_CLANG_E_V) == (
        (
            "/usr/bin/../lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12",
            "/usr/lib/llvm-14/lib/clang/14.0.6/include",
            "/usr/local/include",
            "/Library/Frameworks",
            "/usr/include",
        ),
        ("/include",),
    )
    # a wrapper that cannot preprocess lists none
    assert toolchain.parse_search_dirs("cc-wrapper: error: no output file (-o)\n") == ((), ())


def _listing_cxx(path: Path, listed: list[Path], counter: Path) -> Path:
    """A C++ compiler (the real one) whose ``-E -v`` lists ``listed`` as its <...> search list and gcc's
    LIBRARY_PATH (and counts those runs in ``counter``)."""
    dirs = "".join(f"echo ' {d}' >&2; " for d in listed)
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$3" = -E ]; then echo x >> {counter}; echo "#include <...> search starts here:" >&2; {dirs}'
        f'echo "End of search list." >&2; echo "LIBRARY_PATH={listed[-1]}/" >&2; exit 0; fi\n'
        f'exec {fake_cann.REAL_CXX} "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a root-owned dir writable by the group users")
def test_a_compiler_whose_default_search_dir_others_can_write_is_skipped_or_refused(jit, caplog):
    """A compiler takes headers (and gcc programs and libraries) from default dirs no command line names:
    gcc's <...> search goes through /usr/local/include before /usr/include, which Debian long made group
    ``staff``'s, mode 2775, so anyone in the group can put a <math.h> into every build. Each dir its
    ``-x c++ -E -v`` lists is judged as PATH's entries are: a c++ on PATH that lists such a dir is skipped,
    with a warning naming the dir, and the next one is used; one ``ASCEND_RMSNORM_CXX`` names, or a bisheng,
    is refused or skipped likewise; a listed dir that is not there is judged by the dir above it, where it
    would be made. ``ASCEND_RMSNORM_SKIP_PERMISSION_CHECK=1`` uses it without asking."""
    staff = jit.tmp / "local-include"
    staff.mkdir()
    os.chown(staff, 0, 100)  # root's, the group "users": other people
    staff.chmod(0o2775)
    safe = jit.tmp / "safe-include"
    safe.mkdir(mode=0o755)
    bindir = jit.tmp / "listing-bin"
    bindir.mkdir(mode=0o755)
    counter = jit.tmp / "asked"
    cxx = _listing_cxx(bindir / "c++", [safe, staff], counter)
    jit.mp.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    toolchain.reset()
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert toolchain.get_toolchain("emu").compiler != str(cxx)  # the next c++ on PATH
    why = f"{staff} is writable by the group users (mode 2775) (a directory {cxx} takes headers"
    assert f"skipped {cxx} (not used: {why}" in caplog.text
    assert f"fix: `chmod g-w {staff}`; or use another compiler" in caplog.text
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(cxx))
    toolchain.reset()
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("emu")
    assert f"refusing to use the compiler {cxx} ($ASCEND_RMSNORM_CXX" in str(info.value) and why in str(info.value)
    # a listed dir that is not there: the one above it, where it would be made
    _listing_cxx(cxx, [safe, staff / "x86_64-linux-gnu"], counter)
    toolchain.reset()
    with pytest.raises(ToolchainNotFoundError, match=f"above {staff}/x86_64-linux-gnu, which it would search"):
        toolchain.get_toolchain("emu")
    # the opt-out: used, and not even asked
    asked = len(counter.read_text().splitlines())
    jit.mp.setenv(OPT_OUT, "1")
    toolchain.reset()
    assert toolchain.get_toolchain("emu").compiler == str(cxx)
    assert len(counter.read_text().splitlines()) == asked
    jit.mp.delenv(OPT_OUT)
    jit.mp.delenv("ASCEND_RMSNORM_CXX")
    # bisheng (clang-based) likewise: skipped on PATH, then refused where a variable names it
    fake = jit.use(jit.cann("8.5.0"))
    on_path = fake_cann.write_compiler(bindir / "bisheng", mode="bisheng", version_text="listing 1.0")
    jit.mp.setenv("FAKE_COMPILER_SEARCH_DIRS", f"{safe}{os.pathsep}{staff}")
    toolchain.reset()
    bisheng, searched = toolchain.find_bisheng(fake.root)
    assert bisheng is None  # CANN's own bisheng lists the same dirs (the knob is the environment's)
    assert any(line.startswith(f"{on_path} on PATH (not used: {staff} is writable") for line in searched)
    jit.mp.setenv("ASCEND_RMSNORM_BISHENG", str(on_path))
    with pytest.raises(ToolchainNotFoundError, match=f"refusing to use the compiler {on_path}"):
        toolchain.find_bisheng(fake.root)
    jit.mp.delenv("ASCEND_RMSNORM_BISHENG")
    jit.mp.setenv("FAKE_COMPILER_SEARCH_DIRS", str(safe))
    toolchain.reset()
    assert toolchain.find_bisheng(fake.root)[0] == str(on_path)


def _saying_cxx(path: Path, said: str) -> Path:
    """A C++ compiler (the real one) whose ``-x c++ -E -v`` prints ``said`` on stderr."""
    path.parent.mkdir(mode=0o755, exist_ok=True)
    (path.parent / "said.txt").write_text(said)
    path.write_text(
        f'#!/bin/sh\nif [ "$3" = -E ]; then cat {path.parent / "said.txt"} >&2; exit 0; fi\n'
        f'exec {fake_cann.REAL_CXX} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _listed(*dirs: object) -> str:
    return "#include <...> search starts here:\n" + "".join(f" {d}\n" for d in dirs) + "End of search list.\n"


@pytest.mark.parametrize("case", ["sticky", "nonexistent", "dotdot", "through-an-open-dir"])
def test_each_listed_dir_is_judged_as_searched_as_written_and_where_it_leads(jit, tmp_path, case):
    """``compiler_problem`` judges each dir a compiler lists as PATH's entries are: a sticky one others may
    write (as /tmp) is refused, as is a dir the compiler says it ignores as not there (by the dir above it,
    where anyone who can write it could make it); a listed path is judged where it really leads (``..``
    after a link: ``/usr/bin/../lib/...`` as clang lists its dirs) and as written (through a dir others may
    write, whose link to a safe dir anyone could swap)."""
    base = tmp_path / "dirs"
    safe = base / "safe-include"
    safe.mkdir(parents=True)
    open_dir = base / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    if case == "sticky":
        open_dir.chmod(0o1777)
        said, unsafe = _listed(safe, open_dir), open_dir
    elif case == "nonexistent":
        # two levels below the nearest dir that is there (gcc's "/usr/x86_64-linux-gnu/include", say)
        said = f'ignoring nonexistent directory "{open_dir}/x86_64-linux-gnu/include"\n' + _listed(safe)
        unsafe = open_dir
    elif case == "dotdot":
        (base / "a" / "include").mkdir(parents=True)  # where `..` taken as written leads: safe
        (base / "b" / "sub").mkdir(parents=True)
        (base / "b" / "include").mkdir(mode=0o777)
        (base / "b" / "include").chmod(0o777)  # where the compiler really looks
        (base / "a" / "link").symlink_to(base / "b" / "sub")
        said, unsafe = _listed(safe, base / "a" / "link" / ".." / "include"), base / "b" / "include"
    else:
        (base / "c" / "include").mkdir(parents=True)  # where it leads: safe
        (open_dir / "link").symlink_to(base / "c")  # in a dir anyone may write: anyone may swap it
        said, unsafe = _listed(safe, open_dir / "link" / "include"), open_dir
    cxx = _saying_cxx(tmp_path / "bin" / "c++", said)
    problem = toolchain.compiler_problem(cxx)
    assert problem is not None and problem.startswith(f"{unsafe} is writable by everyone"), problem
    assert f"a directory {cxx} takes headers, programs or libraries from by default" in problem
    _saying_cxx(tmp_path / "bin2" / "c++", _listed(safe))  # the same compiler listing only the safe dir
    assert toolchain.compiler_problem(tmp_path / "bin2" / "c++") is None


def test_the_search_dirs_are_asked_once_per_compiler_from_the_root_dir(jit, tmp_path):
    """``-x c++ -E -v /dev/null`` runs once per compiler binary (memoised as ``--version``), from ``/``."""
    seen = tmp_path / "seen"
    cxx = tmp_path / "asking" / "c++"
    cxx.parent.mkdir()
    cxx.write_text(
        f'#!/bin/sh\nif [ "$3" = -E ]; then echo "$* $(pwd)" >> {seen}; fi\nexec {fake_cann.REAL_CXX} "$@"\n'
    )
    cxx.chmod(0o755)
    assert toolchain.compiler_problem(cxx) is None
    assert toolchain.compiler_problem(cxx) is None
    assert seen.read_text().splitlines() == [f"-x c++ -E -v {os.devnull} /"]
    assert "/usr/include" in toolchain.compiler_search_dirs(str(cxx))[0]
