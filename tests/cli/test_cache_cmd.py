"""``ascend-rmsnorm cache path|list|verify|clean`` (``cli/cache_cmd.py``)."""

from __future__ import annotations

import json
import time

import fake_cann
import pytest

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.jit import cache, toolchain


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_cache_path(jit, capsys, monkeypatch):
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(jit.tmp / "pre"))
    code, out = run(capsys, "cache", "path")
    assert code == 0
    assert out[0] == f"prebuilt  {jit.tmp / 'pre'}  (read-only, missing)"
    assert out[1] == f"writable  {jit.cache}  (writable)"
    assert out[2] == f"locks     {jit.locks}"


def test_cache_list_verify_and_quarantine(jit, capsys):
    tc = jit.npu("8.5.0")
    assert run(capsys, "cache", "list") == (0, ["no cache entries"])
    _, entry = cache.ensure_built(tc, "dav-2201")
    code, out = run(capsys, "cache", "list")
    assert code == 0 and len(out) == 2
    fields = out[1].split()
    assert fields[:3] == ["writable", "8.5.0", "dav-2201"]
    assert entry.name[:12] in fields and str(entry) in fields
    code, out = run(capsys, "cache", "verify")
    assert code == 0 and out == [f"ok   {entry}", "1 entries, 0 bad"]

    so = entry / "librmsnorm.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    so.unlink()  # a new inode: verify loaded the old one into this process, and a mapped file must not change
    so.write_bytes(bytes(data))
    code, out = run(capsys, "cache", "verify")
    assert code == 1
    assert out[0].startswith(f"bad  {entry}: librmsnorm.so sha256 differs") and "moved to" in out[0]
    assert not entry.exists() and len(list((jit.cache / "v1" / "quarantine").iterdir())) == 1
    assert run(capsys, "cache", "verify") == (0, ["0 entries, 0 bad"])


def test_cache_clean(jit, capsys):
    tc = jit.npu("8.5.0")
    _, npu_entry = cache.ensure_built(tc, "dav-2201")
    _, emu_entry = cache.ensure_built(jit.emu(), "dav-2201")
    assert run(capsys, "cache", "clean")[0] == 2  # says what to remove
    for bad in ("-5", "nan", "inf", "soon"):  # -5 would match every entry, as --all does
        with pytest.raises(SystemExit) as info:
            cli.main(["cache", "clean", "--older-than", bad])
        assert info.value.code == 2 and "--older-than" in capsys.readouterr().err
    assert npu_entry.exists() and emu_entry.exists()

    code, out = run(capsys, "cache", "clean", "--older-than", "1")
    assert code == 0 and npu_entry.exists() and emu_entry.exists()
    manifest = json.loads((emu_entry / "manifest.json").read_text())
    manifest["built"]["unix_time"] = time.time() - 3 * 86400
    (emu_entry / "manifest.json").write_text(json.dumps(manifest))
    code, out = run(capsys, "cache", "clean", "--older-than", "2")
    assert code == 0 and f"removed {emu_entry}" in out and not emu_entry.exists() and npu_entry.exists()

    fake_cann.make_cann(jit.usr, "8.5.0", extra_version_text=" hotfix-2")  # today's bisheng differs
    toolchain.reset()
    _, fresh = cache.ensure_built(toolchain.get_toolchain("npu"), "dav-2201")
    code, out = run(capsys, "cache", "clean", "--stale-toolchain")
    assert code == 0 and f"removed {npu_entry}" in out
    assert not npu_entry.exists() and fresh.exists()

    code, out = run(capsys, "cache", "clean", "--all")
    assert code == 0 and not (jit.cache / "v1").exists()
