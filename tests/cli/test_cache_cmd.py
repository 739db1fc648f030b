"""``ascend-rmsnorm cache path|list|verify|clean`` (``cli/cache_cmd.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import fake_cann
import pytest
from jit_helpers import NOBODY, age_entry, as_root

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.jit import cache, toolchain


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def _corrupt_library(entry) -> bytes:
    """Flip a byte in the middle of ``entry``'s library: same size, other bytes, a new inode (a process
    that loaded the old one keeps its mapping, and a mapped file must not change). Returns the new bytes."""
    so = entry / "librmsnorm.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    so.unlink()
    so.write_bytes(bytes(data))
    return bytes(data)


def _prebuilt_entry(capsys, monkeypatch, pre):
    """The emu entry `warm` puts in ``pre``, which is then the prebuilt tier (ASCEND_RMSNORM_PREBUILT_DIR)."""
    assert run(capsys, "warm", "--toolchain", "emu", "--cache-dir", str(pre))[0] == 0
    (entry,) = (pre / "v1" / "emu" / "dav-2201").iterdir()
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(pre))
    return entry


def test_cache_path(jit, capsys, monkeypatch):
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(jit.tmp / "pre"))
    code, out = run(capsys, "cache", "path")
    assert code == 0
    assert out[0] == f"prebuilt  {jit.tmp / 'pre'}  (read-only, missing)"
    assert out[1] == f"writable  {jit.cache}  (writable, made by the first build)"
    assert out[2] == f"locks     {jit.locks}"


def test_cache_path_and_info_look_at_a_cache_root_without_making_it(jit, capsys, monkeypatch):
    """``cache path`` and ``info`` only look: a root not made yet stays unmade (before, their writability
    probe made ``<root>/v1/tmp``), and they say whether the first build could make it; a file in the way
    is named, as before, and a build still makes a missing root."""
    root = jit.tmp / "not" / "yet"
    monkeypatch.delenv("ASCEND_RMSNORM_PREBUILT_DIR", raising=False)  # out[0] is then the writable tier
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(root))
    code, out = run(capsys, "cache", "path")
    assert code == 0 and out[0] == f"writable  {root}  (writable, made by the first build)", out
    assert cli.main(["info"]) == 0
    assert f"writable      {root}  (writable, made by the first build)" in capsys.readouterr().out
    assert not (jit.tmp / "not").exists()

    (jit.tmp / "a-file").write_text("")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(jit.tmp / "a-file" / "cache"))
    code, out = run(capsys, "cache", "path")
    assert code == 0 and out[0].startswith(f"writable  {jit.tmp / 'a-file' / 'cache'}  (NOT writable: "), out
    assert "not a directory" in out[0], out

    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(root))
    assert cache.writable_error(root) is None and (root / "v1" / "tmp").is_dir()
    code, out = run(capsys, "cache", "path")
    assert out[0] == f"writable  {root}  (writable)", out


def test_cache_path_names_a_directory_inside_the_prebuilt_tier_that_lookups_pass_over(jit, capsys, monkeypatch):
    """Lookups pass a prebuilt tier over when a directory between its root and an entry (an admin's
    ``chmod 1777 v1``) lets anyone add names (``cache.prebuilt_problem`` with the spec); ``cache path`` and
    ``info`` say the same. Before, they checked the root only and called such a tier "present"."""
    pre = jit.tmp / "pre"
    (pre / "v1" / "emu" / "dav-2201").mkdir(parents=True)
    (pre / "v1").chmod(0o1777)
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(pre))
    code, out = run(capsys, "cache", "path")
    assert code == 0
    assert out[0].startswith(f"prebuilt  {pre}  (read-only, passed over: {pre / 'v1'} is writable by everyone"), out


def test_cache_list_verify_and_quarantine(jit, capsys):
    tc = jit.npu("8.5.0")
    assert run(capsys, "cache", "list") == (0, ["no cache entries"])
    _, entry = cache.ensure_built(tc, "dav-2201")
    code, out = run(capsys, "cache", "list")
    assert code == 0 and len(out) == 2
    fields = out[1].split()
    assert fields[:4] == ["writable", "8.5.0", "dav-2201", "rmsnorm"]  # the main kernels, not calibrate's
    assert entry.name[:12] in fields and str(entry) in fields
    code, out = run(capsys, "cache", "verify")
    assert code == 0 and out == [f"ok   {entry}", "1 entries, 0 bad"]

    _corrupt_library(entry)  # verify loaded the old one into this process
    code, out = run(capsys, "cache", "verify")
    assert code == 1
    assert out[0].startswith(f"bad  {entry}: librmsnorm.so sha256 differs") and "moved to" in out[0]
    assert not entry.exists() and len(list((jit.cache / "v1" / "quarantine").iterdir())) == 1
    assert run(capsys, "cache", "verify") == (0, ["0 entries, 0 bad"])


def test_cache_list_gives_an_entrys_age_in_seconds_minutes_hours_or_days(jit, capsys):
    _, entry = cache.ensure_built(jit.npu("8.5.0"), "dav-2201")
    for age, shown in ((30, "30s"), (600, "10m"), (3 * 3600, "3h"), (5 * 86400, "5d")):
        age_entry(entry, time.time() - age)
        code, out = run(capsys, "cache", "list")
        assert code == 0 and out[1].split()[6] == shown, out


def test_cache_clean(jit, capsys):
    tc = jit.npu("8.5.0")
    _, npu_entry = cache.ensure_built(tc, "dav-2201")
    _, emu_entry = cache.ensure_built(jit.emu(), "dav-2201")
    # A bad command line (exit 2) says what to remove on stderr after clean's usage, as argparse's errors
    # do; stdout stays empty.
    assert cli.main(["cache", "clean"]) == 2
    said = capsys.readouterr()
    err = said.err.splitlines()
    assert said.out == "" and err[0].startswith("usage: ascend-rmsnorm cache clean "), err
    assert err[-1] == "ascend-rmsnorm cache clean: say what to remove: --all, --older-than DAYS or --stale-toolchain"
    for bad in ("-5", "nan", "inf", "soon"):  # -5 would match every entry, as --all does
        with pytest.raises(SystemExit) as info:
            cli.main(["cache", "clean", "--older-than", bad])
        assert info.value.code == 2 and "--older-than" in capsys.readouterr().err
    assert npu_entry.exists() and emu_entry.exists()

    code, out = run(capsys, "cache", "clean", "--older-than", "1")
    assert code == 0 and npu_entry.exists() and emu_entry.exists()
    age_entry(emu_entry, time.time() - 3 * 86400)
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


def test_clean_never_touches_the_prebuilt_tier(jit, capsys, monkeypatch, tmp_path):
    """A site's prebuilt tier is read-only to this package: an old entry there is not the writable cache's
    to remove, whatever ``--older-than`` matches."""
    jit.emu()
    pre = tmp_path / "pre"
    pre_entry = _prebuilt_entry(capsys, monkeypatch, pre)
    _, entry = cache.ensure_built(jit.npu("8.5.0"), "dav-2201")
    age_entry(pre_entry, 0)
    age_entry(entry, 0)
    code, out = run(capsys, "cache", "clean", "--older-than", "0")
    assert code == 0 and f"removed {entry}" in out and not entry.exists()
    assert pre_entry.is_dir() and cache.entry_problem(pre_entry) is None
    assert not any(str(pre) in line for line in out)


def test_clean_stale_toolchain_keeps_the_entries_of_a_toolchain_this_host_lacks(jit, capsys, monkeypatch):
    """On a login node without CANN, ``--stale-toolchain`` has nothing to compare the npu entries with:
    they are kept (and said so), not taken for stale."""
    _, npu_entry = cache.ensure_built(jit.npu("8.5.0"), "dav-2201")
    _, emu_entry = cache.ensure_built(jit.emu(), "dav-2201")
    nameless = emu_entry.parent / ("f" * 64)  # its manifest names no toolchain: stale, whatever is here
    shutil.copytree(emu_entry, nameless)
    (nameless / "manifest.json").write_text("{}")
    monkeypatch.delenv("ASCEND_HOME_PATH")
    monkeypatch.setattr(toolchain, "DEFAULT_CANN_ROOTS", ())
    toolchain.reset()
    code, out = run(capsys, "cache", "clean", "--stale-toolchain")
    assert code == 0 and npu_entry.is_dir() and emu_entry.is_dir()
    assert any(line.startswith("kept npu entries: no current npu toolchain to compare with") for line in out)
    assert not nameless.exists() and out[-1] == "1 removed"


def test_clean_keeps_a_fresh_quarantined_entry_for_an_hour(jit, capsys):
    """A quarantined entry is kept for a while so that its reason.txt and library can be looked at; only
    one older than an hour is a leftover that any clean sweeps."""
    _, entry = cache.ensure_built(jit.emu(), "dav-2201")
    moved = cache.quarantine(entry, "a test reason")
    assert moved is not None and moved.is_dir()
    code, out = run(capsys, "cache", "clean", "--older-than", "100")
    assert code == 0 and moved.is_dir() and out == ["0 removed"]
    old = time.time() - 2 * 3600
    os.utime(moved, (old, old))
    failed = jit.cache / "v1" / "failed" / ("0" * 64)  # a failed build's log and sources as old: no leftover
    failed.mkdir(parents=True)
    os.utime(failed, (old, old))
    code, out = run(capsys, "cache", "clean", "--older-than", "100")
    assert code == 0 and out == [f"removed {moved}", "1 removed"] and not moved.exists() and failed.is_dir()
    code, out = run(capsys, "cache", "clean", "--older-than", "0.01")  # 14 minutes: the failed build is older
    assert code == 0 and f"removed {failed}" in out and not failed.exists()


def test_verify_reports_a_bad_prebuilt_entry_and_never_moves_it(jit, capsys, monkeypatch, tmp_path):
    """The prebuilt tier is the site's: a bad entry there is reported (exit 1) and left where it is, for
    its owner to rebuild; only the writable cache's bad entries go to quarantine."""
    jit.emu()
    pre = tmp_path / "pre"
    entry = _prebuilt_entry(capsys, monkeypatch, pre)
    data = _corrupt_library(entry)
    code, out = run(capsys, "cache", "verify")
    assert code == 1 and out == [f"bad  {entry}: librmsnorm.so sha256 differs from the manifest", "1 entries, 1 bad"]
    assert (entry / "librmsnorm.so").read_bytes() == data and not (pre / "v1" / "quarantine").exists()


def test_list_and_verify_take_any_manifest_a_shared_tier_holds(jit, capsys, monkeypatch):
    """A prebuilt tier in a shared directory that anyone may add names to (passed over by lookups, still
    listed) can hold any manifest.json another account writes: a key_input that is not an object, a
    toolchain that is not one, a build time too large for a float. ``cache list`` and ``cache verify`` show
    such entries as what they are; before, ``list`` died on the first ("unexpected AttributeError ... This
    is a bug") and so did ``verify`` on a key_input that is not an object."""
    shared = jit.tmp / "shared-prebuilt"
    shared.mkdir()
    shared.chmod(0o1777)
    manifests = {
        "a" * 64: '{"key_input": "not an object"}',
        "b" * 64: '{"key_input": {"toolchain": "not an object", "kernel": ["x"]}}',
        "c" * 64: '{"key_input": {}, "built": {"unix_time": 1' + "0" * 400 + "}}",
    }
    for key, text in manifests.items():
        entry = shared / "v1" / "emu" / "dav-2201" / key
        entry.mkdir(parents=True)
        (entry / "manifest.json").write_text(text)
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(shared))
    code, out = run(capsys, "cache", "list")
    assert code == 0 and len(out) == 4, out
    assert all(line.startswith("prebuilt ") and "INVALID" in line for line in out[1:])
    code, out = run(capsys, "cache", "verify")
    assert code == 1 and out[-1] == "3 entries, 3 bad", out


def test_list_shows_control_characters_in_names_instead_of_sending_them_to_the_terminal(jit, capsys, monkeypatch):
    """Names in a shared tier are anyone's: a directory named with an escape sequence (here one that
    retitles the terminal and one that clears it) is printed as ``\\x1b...``, never as the sequence."""
    shared = jit.tmp / "shared-prebuilt"
    entry = shared / "v1" / "emu" / "dav-2201\x1b]0;owned\x07" / ("d" * 64)
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text('{"key_input": {"toolchain": {"kind": "emu\\u001b[2J"}}}')
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(shared))
    code, out = run(capsys, "cache", "list")
    text = "\n".join(out)
    assert code == 0 and len(out) == 2, out
    assert not any(c in text for c in "\x1b\x07"), text
    assert "dav-2201\\x1b]0;owned\\x07" in text and "emu\\x1b[2J" in text


def test_list_shows_a_c1_control_byte_in_a_name_that_is_not_utf8(jit, monkeypatch):
    """A name is bytes: 0x9b alone is no UTF-8, so it reaches Python as the surrogate U+DC9B, which stdout
    (surrogateescape, ``output.tolerant_output``) wrote back as the byte 0x9b, the 8-bit CSI a terminal
    not in UTF-8 acts on as ESC [ (here: clear the screen). It is shown as ``\\x9b``, as ESC is."""
    shared = jit.tmp / "shared-prebuilt"
    entry = os.fsencode(shared / "v1" / "emu") + b"/dav-2201\x9b2J/" + b"d" * 64
    os.makedirs(entry)
    with open(entry + b"/manifest.json", "w") as f:
        f.write("{}")
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(shared))
    done = subprocess.run([sys.executable, "-m", "ascend_rmsnorm", "cache", "list"], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert b"\x9b" not in done.stdout and b"dav-2201\\x9b2J" in done.stdout, done.stdout


@as_root
def test_clean_all_keeps_a_link_someone_else_made_in_a_shared_v1_whatever_it_points_to(jit, capsys):
    """A team cache whose v1 is sticky and world-writable (an admin's chmod 1777): anyone may add a name
    there. A link she made there is hers, even where it points to a directory of this user's (its owner
    is the link's, never its target's): `cache clean --all` keeps it and says whose, removes this user's
    names beside it, and never goes through it."""
    shared = jit.tmp / "team"
    (shared / "v1" / "failed" / ("0" * 64)).mkdir(parents=True)  # this user's
    (shared / "v1").chmod(0o1777)
    target = jit.tmp / "my-dir"
    target.mkdir()
    (target / "f").write_text("mine\n")
    link = shared / "v1" / "hers"
    link.symlink_to(target, target_is_directory=True)
    os.lchown(link, NOBODY, NOBODY)
    code, out = run(capsys, "cache", "clean", "--all", "--cache-dir", str(shared))
    assert code == 0 and f"kept {link}: nobody's" in out, out
    assert os.lstat(link).st_uid == NOBODY and not (shared / "v1" / "failed").exists(), out
    assert (target / "f").read_text() == "mine\n"


@as_root
def test_clean_all_keeps_a_v1_someone_else_made_and_removes_only_your_names_in_it(jit, capsys, monkeypatch):
    """A team cache whose v1 another user made (sticky and world-writable, as an admin makes one; she is
    trusted) and in which only this user's names are: v1 is hers, so `cache clean --all` removes this user's
    names in it and keeps v1 itself, instead of removing it as a whole."""
    shared = jit.tmp / "team"
    mine = [shared / "v1" / "failed" / ("0" * 64), shared / "v1" / "8.5.0" / "dav-2201" / ("1" * 64)]
    for d in mine:
        d.mkdir(parents=True)
        (d / "f").write_text("mine\n")
    v1 = shared / "v1"
    os.chown(v1, NOBODY, NOBODY)
    v1.chmod(0o1777)
    monkeypatch.setenv("ASCEND_RMSNORM_TRUSTED_USERS", "nobody")  # else v1 fails the walk and nothing is cleaned
    code, out = run(capsys, "cache", "clean", "--all", "--cache-dir", str(shared))
    assert code == 0 and f"removed {v1}" not in out and f"kept {v1}: nobody's" in out, out
    assert os.stat(v1).st_uid == NOBODY and not any(d.exists() for d in mine), out
    assert set(os.listdir(v1)) <= {"trash"}, out  # the removals' own trash dir, emptied
