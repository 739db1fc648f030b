"""``ascend-rmsnorm warm`` (``cli/warm_cmd.py``): one line per target, hit, built or failed, and what to
pass where there is no arch to build for."""

from __future__ import annotations

import fake_cann

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.jit import cache


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_warm_emu_builds_then_hits(jit, capsys):
    jit.emu()
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 0 and len(out) == 1
    status, kind, arch, path = out[0].split(" ", 3)
    assert (status, kind, arch) == ("built", "emu", "dav-2201")
    assert path.startswith(str(jit.cache / "v1" / "emu" / "dav-2201"))
    assert run(capsys, "warm", "--toolchain", "emu") == (0, [f"hit emu dav-2201 {path}"])
    assert jit.compiles() == 1


def test_warm_npu_detects_the_arch_and_writes_to_cache_dir(jit, capsys, tmp_path):
    jit.use(jit.cann("9.0.0"))
    fake_cann.write_npu_smi(jit.bin, "910B3")
    target = tmp_path / "shared cache"
    code, out = run(capsys, "warm", "--cache-dir", str(target))
    assert code == 0, out
    assert out[0].startswith(f"built npu dav-2201 {target / 'v1' / '9.0.0' / 'dav-2201'}")
    assert not jit.cache.exists()


def test_warm_several_arches_reports_each_and_fails_on_any(jit, capsys):
    jit.use(jit.cann("8.5.0"))
    code, out = run(capsys, "warm", "--arch", "dav-2201", "--arch", "dav-3510")
    assert code == 1
    assert out[0].startswith("built npu dav-2201 ")
    assert out[1].startswith("failed npu dav-3510 ascend-rmsnorm has no kernels for arch dav-3510")


def test_warm_without_a_detectable_arch_says_what_to_pass(jit, capsys, caplog):
    jit.use(jit.cann("8.5.0"))
    code, out = run(capsys, "warm")
    assert code == 1 and out[0].startswith("failed npu (no-arch) cannot tell which NPU arch")
    assert "pass --arch dav-2201" in out[1] and "--toolchain emu" in out[1]
    jit.mp.setenv("ASCEND_RMSNORM_ARCH", "dav-2201")
    with caplog.at_level("INFO", logger="ascend_rmsnorm"):
        code, out = run(capsys, "warm")
    assert code == 0 and out[0].startswith("built npu dav-2201")
    (compiling,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiling")]
    assert "ahead of use" in compiling and "first use" not in compiling, compiling  # warm is the warm


def test_warm_on_a_host_without_npu_or_cann_says_what_to_pass(jit, capsys):
    code, out = run(capsys, "warm")
    assert code == 1 and out[0].startswith("failed npu (no-arch) ") and " ? " not in out[0]
    assert "pass --arch dav-2201" in out[1] and "--toolchain emu" in out[1]
    assert out[2].startswith("also: no CANN bisheng compiler found")


def test_warm_prints_a_compile_error_and_exits_non_zero(jit, capsys):
    jit.use(jit.cann("8.3.RC2"))
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    code, out = run(capsys, "warm", "--arch", "dav-2201")
    assert code == 1
    assert out[0].startswith("failed npu dav-2201 compiling ascend-rmsnorm kernels for dav-2201")
    text = "\n".join(out)
    assert "exit status 3" in text and "-xcce" in text and "fake failure number 100" in text
    assert "full log: " in text and "/v1/failed/" in text


def test_warm_without_a_toolchain(jit, capsys):
    code, out = run(capsys, "warm", "--arch", "dav-2201")
    assert code == 1 and out[0].startswith("failed npu dav-2201 no CANN bisheng compiler found")


def test_warm_names_an_arch_no_toolchain_could_build_before_the_missing_toolchain(jit, capsys):
    """No CANN here: for dav-3510 the answer is that there are no kernels for it, not to install CANN."""
    code, out = run(capsys, "warm", "--arch", "3510", "--arch", "dav-2201")
    assert code == 1 and out[0].startswith("failed npu dav-3510 ascend-rmsnorm has no kernels for arch dav-3510")
    assert out[1].startswith("failed npu dav-2201 no CANN bisheng compiler found")
    jit.mp.setenv("ASCEND_RMSNORM_ARCH", "dav-3510")  # the emulation takes the arch the variable names too
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and out[0].startswith("failed emu dav-3510 ascend-rmsnorm has no kernels")


def test_warm_that_cannot_publish_says_so_not_that_its_build_is_invalid(jit, capsys, caplog):
    """An invalid entry at the key's path that cannot be moved aside (here its quarantine/ is a file): the
    build is good, but the publish keeps it as this process's own copy in tmp/, which a later run never
    finds. ``warm`` failed, rightly, but said the build was "not valid after building it: manifest key ...
    != <the tmp dir's name>", blaming a good build for the publish that could not happen."""
    tc = jit.emu()
    final = cache.entry_dir(jit.cache, cache.build_spec(tc, "dav-2201"))
    final.mkdir(parents=True)
    (final / "junk").write_text("not an entry")
    (jit.cache / "v1" / "quarantine").write_text("in the way")
    code, out = run(capsys, "warm", "--toolchain", "emu")
    assert code == 1 and len(out) == 1, out
    assert out[0].startswith(f"failed emu dav-2201 the library was built but not published at {final}"), out
    assert "not valid" not in out[0] and "manifest key" not in out[0], out
    assert (final / "junk").is_file()  # the invalid entry is left as it was
    assert "cannot quarantine" in caplog.text and "using this process's own copy" in caplog.text  # the why
