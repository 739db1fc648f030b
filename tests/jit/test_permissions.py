"""Nobody else's code gets loaded: a library in a file or directory that others may write, or that belongs to
another user, is refused (as ssh refuses such key files), with the fix in the message; an opt-out variable
that skips only that test; what is loaded is the inode that was opened and hashed; our own builds never
create such places, whatever the umask, and never write into one; a shared prebuilt tier laid out as the
README and the cluster example say passes. The multi-user attacks are in test_hostile_node.py."""

from __future__ import annotations

import errno
import grp
import hashlib
import json
import logging
import os
import shutil
import signal
import stat
import struct
import subprocess
from pathlib import Path

import jit_helpers
import pytest
from jit_helpers import NOBODY, as_root

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.errors import (
    CacheWriteError,
    KernelCompileError,
    KernelNotCachedError,
    LibraryLoadError,
    UnsafeLibraryError,
)
from ascend_rmsnorm.jit import build, cache, library, locks, toolchain, trust, verify
from ascend_rmsnorm.jit.key import canonical_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def built(jit):
    tc = jit.emu()
    _, entry = cache.ensure_built(tc, "dav-2201")
    return tc, entry


def test_a_world_writable_entry_is_refused_with_the_fix_and_the_opt_out_works(built, jit, monkeypatch):
    tc, entry = built
    entry.chmod(0o777)
    with pytest.raises(UnsafeLibraryError) as info:
        cache.get_library(tc, "dav-2201")
    text = str(info.value)
    assert f"refusing to load the kernel library {entry / 'librmsnorm.so'}" in text
    assert f"{entry} is writable by everyone (mode 0777); fix: `chmod o-w {entry}`" in text
    assert "ASCEND_RMSNORM_SKIP_PERMISSION_CHECK=1" in text
    assert "shared tier" not in text  # a dir of yours others may write: the chmod, not a kernel cache's advice
    assert entry.is_dir() and not (jit.cache / "v1" / "quarantine").exists()  # refused, not moved
    monkeypatch.setenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", "1")
    assert cache.get_library(tc, "dav-2201")._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert cache.unsafe_reason(entry / "librmsnorm.so") is None  # what `cache verify` and the model ask too


def test_a_writable_directory_higher_up_is_refused_but_a_sticky_one_like_tmp_is_not(built, jit):
    tc, entry = built
    jit.cache.chmod(0o777)
    assert "is writable by everyone (mode 0777)" in cache.unsafe_reason(entry / "librmsnorm.so")
    jit.cache.chmod(0o1777)  # others may add names there, but cannot rename or remove ours
    assert cache.unsafe_reason(entry / "librmsnorm.so") is None
    jit.cache.chmod(0o755)


def test_a_symlink_into_an_unsafe_place_is_followed_and_refused(built, tmp_path):
    _, entry = built
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    target = open_dir / "lib.so"
    target.write_bytes((entry / "librmsnorm.so").read_bytes())
    link = tmp_path / "link.so"
    link.symlink_to(target)
    assert f"{open_dir} is writable by everyone" in cache.unsafe_reason(link)


@as_root
def test_a_foreign_library_with_a_matching_manifest_is_neither_loaded_nor_called_ok(built, jit, capsys, caplog):
    """The issue's case: someone else's .so, with a manifest whose hash matches. In a prebuilt tier it is
    refused loudly; in the writable root it is passed over (neither loaded nor moved) and the process builds
    its own copy privately, with one warning: a directory someone plants at a key's path must not stop
    anyone's kernels. The fix never says to take someone else's file over with chown."""
    tc, entry = built
    so = entry / "librmsnorm.so"
    os.chown(so, NOBODY, NOBODY)  # now nobody's file, as if another user had put it there
    problem, untrusted = verify.check_entry(entry)
    assert untrusted == "foreign" and "belongs to nobody" in problem  # the hashes match: only ownership tells
    assert "chown" not in problem.split("fix:")[1].replace("do not take it over with chown", "")
    assert problem.endswith(trust.CACHE_ADVICE)  # a kernel cache tier: its own advice too
    os.chown(so, os.getuid(), os.getgid())  # the manifest is owner-tested as well
    os.chown(entry / "manifest.json", NOBODY, NOBODY)
    assert verify.check_entry(entry)[1] == "foreign"
    os.chown(entry / "manifest.json", os.getuid(), os.getgid())
    os.chown(so, NOBODY, NOBODY)
    jit.mp.setenv("ASCEND_RMSNORM_JIT", "off")
    with pytest.raises(KernelNotCachedError, match="passed over the entry there.*belongs to nobody"):
        cache.get_library(tc, "dav-2201")
    cache.reset()
    jit.mp.setenv("ASCEND_RMSNORM_JIT", "lazy")
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
    assert not lib.path.is_relative_to(jit.cache)  # the private copy
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "belongs to nobody" in warnings[0] and "private temp dir" in warnings[0]
    with pytest.raises(CacheWriteError) as info:  # `warm`: no private copy; the entry's problem, advised once
        cache.ensure_built(tc, "dav-2201", cache_dir=jit.cache, private_ok=False, target_only=True)
    assert "belongs to nobody" in str(info.value) and str(info.value).count(trust.CACHE_ADVICE) == 1, info.value
    cache.reset()
    jit.mp.setenv("ASCEND_RMSNORM_CACHE_DIR", str(tmp := jit.cache.parent / "empty-cache"))
    tmp.mkdir()
    jit.mp.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(jit.cache))
    jit.mp.setenv("ASCEND_RMSNORM_JIT", "off")
    with pytest.raises(UnsafeLibraryError, match=r"belongs to nobody, not to you \(root\) or root"):
        cache.get_library(tc, "dav-2201")  # a prebuilt tier is the admin's: refused loudly
    jit.mp.setenv("ASCEND_RMSNORM_PREBUILT_DIR", "")
    jit.mp.setenv("ASCEND_RMSNORM_CACHE_DIR", str(jit.cache))
    assert cli.main(["cache", "verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"unsafe {entry}: {so} belongs to nobody") and out[0].endswith("(not loaded, not moved)")
    assert entry.exists() and so.stat().st_uid == NOBODY


@as_root
def test_a_prebuilt_root_others_can_add_names_to_is_passed_over_not_refused(built, jit, caplog, capsys):
    """A prebuilt tier in a shared sticky directory: anyone could have made its entry (here it belongs to
    nobody), so the tier is passed over with one warning and the user's own cache serves; the admin's
    mistake is said, not turned into everyone's failure. The same tier made root's own (mode 0755)
    refuses that entry loudly again."""
    tc, entry = built
    shared = jit.cache.parent / "shared-prebuilt"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / entry.relative_to(jit.cache)
    shutil.copytree(entry, planted)
    for path in [planted, *planted.parents][: len(planted.relative_to(shared).parts)]:
        os.chown(path, NOBODY, NOBODY)
    for path in planted.iterdir():
        os.chown(path, NOBODY, NOBODY)
    jit.mp.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(shared))
    cache.reset()
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
        cache.reset()
        cache.get_library(tc, "dav-2201")
    assert lib.path.is_relative_to(jit.cache)  # the user's own entry
    said = [r.getMessage() for r in caplog.records if "prebuilt cache tier" in r.getMessage()]
    assert len(said) == 1 and f"{shared} is writable by everyone (mode 1777)" in said[0]
    assert cli.main(["cache", "path"]) == 0  # the status commands say so too
    assert f"prebuilt  {shared}  (read-only, passed over: {shared} is writable by everyone" in capsys.readouterr().out
    assert cli.main(["info", "--json"]) == 0
    tier = json.loads(capsys.readouterr().out)["cache"]["tiers"][0]
    assert tier["kind"] == "prebuilt" and "can add a name" in tier["problem"]
    shared.chmod(0o755)
    cache.reset()
    with pytest.raises(UnsafeLibraryError, match="belongs to nobody"):
        cache.get_library(tc, "dav-2201")


@as_root
def test_a_prebuilt_tier_of_someone_elses_is_passed_over_with_the_kernel_caches_advice(tmp_path):
    """``prebuilt_problem`` (what lookup warns, ``cache path`` and ``info`` show) for a tier root another
    account owns: the walk's fix, then the kernel cache's own advice (``unsafe_reason``'s ``advice``)."""
    theirs = tmp_path / "theirs-prebuilt"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    problem = cache.prebuilt_problem(theirs)
    assert problem is not None and "belongs to nobody" in problem, problem
    assert problem.endswith(trust.CACHE_ADVICE) and problem.count(trust.CACHE_ADVICE) == 1, problem


@as_root
def test_warm_into_a_cache_below_someone_elses_directory_is_refused_with_the_kernel_caches_advice(jit):
    """``describe_os_error`` (every cache write refusal) adds the kernel cache's advice to the walk's fix
    for a component another account owns: here `warm --cache-dir` below nobody's directory."""
    theirs = jit.tmp / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(CacheWriteError) as info:
        cache.ensure_built(jit.emu(), "dav-2201", cache_dir=theirs / "c", private_ok=False, target_only=True)
    assert "belongs to nobody" in str(info.value) and trust.CACHE_ADVICE in str(info.value), info.value
    assert list(theirs.iterdir()) == []


@as_root
def test_a_prebuilt_tier_with_a_directory_inside_others_can_add_names_to_is_passed_over(built, jit, caplog):
    """The same for a sticky directory anyone may write inside a tier whose root is fine (an admin made
    ``v1`` 1777 so that everyone could add builds): anyone could have made the entry below it, so the tier
    is passed over with one warning naming that directory, and the user's own cache serves. Before, the
    entry was refused loudly (UnsafeLibraryError): any account could plant a directory there and stop
    every user's kernels."""
    tc, entry = built
    tier = jit.cache.parent / "admin-prebuilt"
    tier.mkdir(mode=0o755)
    planted = tier / entry.relative_to(jit.cache)
    shutil.copytree(entry, planted)
    (tier / "v1").chmod(0o1777)
    for path in [planted, planted.parent, planted.parent.parent, *planted.iterdir()]:
        os.chown(path, NOBODY, NOBODY)
    jit.mp.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(tier))
    cache.reset()
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
    assert lib.path.is_relative_to(jit.cache)  # the user's own entry
    said = [r.getMessage() for r in caplog.records if "prebuilt cache tier" in r.getMessage()]
    assert len(said) == 1 and f"{tier / 'v1'} is writable by everyone (mode 1777), and names" in said[0]


@as_root
def test_a_directory_someone_plants_at_a_keys_path_does_not_stop_the_build(jit, caplog):
    """Another user creates the key's entry directory (empty, theirs) in a cache root others can add names
    to: the entry is passed over and the process builds its own copy privately, with one warning."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    planted = cache.entry_dir(jit.cache, spec)
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
    assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION and not lib.path.is_relative_to(jit.cache)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"{planted} belongs to nobody" in warnings[0]
    assert planted.is_dir() and not any(planted.iterdir())  # left as it was
    cache.reset()  # a new process, with JIT off: the miss names the entry it passed over
    jit.mp.setenv("ASCEND_RMSNORM_JIT", "off")
    with pytest.raises(KernelNotCachedError) as info:
        cache.get_library(tc, "dav-2201")
    assert f"(passed over the entry there, which someone else could have put there: {planted} belongs" in str(
        info.value
    )


@as_root
def test_a_directory_someone_plants_above_a_keys_path_costs_one_build(jit, caplog):
    """Someone else's ``v1/emu`` (no entry below it): the build goes private at once, with one warning,
    instead of compiling in the shared tmp/ and failing to publish there."""
    tc = jit.emu()
    planted = jit.cache / "v1" / "emu"
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
    assert not lib.path.is_relative_to(jit.cache) and jit.compiles() == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"{planted} belongs to nobody" in warnings[0]


@as_root
def test_group_write_is_fine_for_a_private_group_only(built, monkeypatch):
    _, entry = built
    so = entry / "librmsnorm.so"
    entry.chmod(0o775)  # group root: root's own private group (named after it, nobody else in it)
    assert cache.unsafe_reason(so) is None
    real = grp.getgrgid
    listed = grp.struct_group(("root", "x", 0, ["mallory"]))
    with monkeypatch.context() as m:  # a member listed in /etc/group can write through it too
        m.setattr(grp, "getgrgid", lambda gid: listed if gid == 0 else real(gid))
        assert "its owner's private group, but mallory can write through it too" in cache.unsafe_reason(so)
    os.chown(entry, 0, 100)  # the group "users": other people
    assert f"{entry} is writable by the group users (mode 0775); fix: `chmod g-w {entry}`" in cache.unsafe_reason(so)
    entry.chmod(0o755)
    assert cache.unsafe_reason(so) is None


def _set_acl(path: Path, entries: list[tuple[int, int, int]]) -> None:
    """``setfacl`` without the tool: the kernel's xattr form of an access ACL (acl(5))."""
    entries = sorted(entries)  # the kernel takes them in tag order only
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)
    try:
        os.setxattr(path, "system.posix_acl_access", raw)
    except OSError as err:  # pragma: no cover - a filesystem without ACLs
        pytest.skip(f"no POSIX ACLs on {path}'s filesystem: {err}")


USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def test_an_acl_that_lets_another_user_write_is_refused_though_the_group_bits_look_private(built):
    """With an ACL the group mode bits are its mask: `setfacl -m u:nobody:rwx` shows as g+w on a file
    whose group is root's private one, which alone would pass. The named entries decide."""
    _, entry = built
    so = entry / "librmsnorm.so"
    any_id = 0xFFFFFFFF
    base = [(USER_OBJ, 7, any_id), (GROUP_OBJ, 5, any_id), (OTHER, 5, any_id)]
    _set_acl(entry, [*base, (USER, 7, NOBODY), (MASK, 7, any_id)])
    assert stat.S_IMODE(entry.stat().st_mode) & stat.S_IWGRP  # what the mode shows: the mask
    problem = cache.unsafe_reason(so)
    assert problem is not None and f"{entry} is writable by nobody through its ACL" in problem
    assert f"fix: `setfacl -b {entry}`" in problem
    _set_acl(entry, [*base, (GROUP, 7, NOBODY), (MASK, 7, any_id)])
    assert f"{entry} is writable by the group {grp.getgrgid(NOBODY).gr_name} through its ACL" in cache.unsafe_reason(so)
    _set_acl(entry, [*base, (USER, 5, NOBODY), (MASK, 7, any_id)])  # may read, not write: fine
    assert cache.unsafe_reason(so) is None
    _set_acl(entry, [*base, (USER, 7, NOBODY), (MASK, 5, any_id)])  # the mask takes the write away
    assert cache.unsafe_reason(so) is None


@as_root
def test_an_acl_whose_owning_group_is_other_people_is_judged_by_that_groups_entry(built):
    """The ACL's owning-group entry is the group bits: writable by the group "users" (other people) is
    refused, readable is fine, and chmod, which sets the mask, takes a named entry's write away."""
    _, entry = built
    so = entry / "librmsnorm.so"
    any_id = 0xFFFFFFFF
    base = [(USER_OBJ, 7, any_id), (GROUP_OBJ, 5, any_id), (OTHER, 5, any_id)]
    os.chown(entry, 0, 100)  # the group "users": other people
    _set_acl(entry, [*base, (USER, 5, NOBODY), (MASK, 7, any_id)])  # its owning group may not write: fine
    assert cache.unsafe_reason(so) is None
    _set_acl(entry, [*base[:1], (GROUP_OBJ, 7, any_id), base[2], (USER, 5, NOBODY), (MASK, 7, any_id)])
    assert f"{entry} is writable by the group users (mode 0775)" in cache.unsafe_reason(so)  # but now it may
    os.chown(entry, 0, 0)
    _set_acl(entry, [*base, (USER, 7, NOBODY), (MASK, 7, any_id)])
    entry.chmod(0o755)  # chmod sets the mask: the named entry can no longer write either
    assert cache.unsafe_reason(so) is None


@as_root
def test_an_acl_the_check_cannot_read_fails_it(built, monkeypatch):
    """Fail closed: an ACL of another version, without its owning-group entry, without entries, or one that
    cannot be read (a FUSE or network filesystem could give any of them) is refused where the group bits
    allow writing; a filesystem without ACLs is judged by the mode alone."""
    _, entry = built
    so = entry / "librmsnorm.so"
    entry.chmod(0o775)  # group root: root's private group, which passes without an ACL
    assert cache.unsafe_reason(so) is None
    real = os.getxattr
    any_id = 0xFFFFFFFF
    good = [(USER_OBJ, 7, any_id), (GROUP_OBJ, 5, any_id), (OTHER, 5, any_id)]

    def blob(version, entries):
        return struct.pack("<I", version) + b"".join(struct.pack("<HHI", *e) for e in entries)

    def answer(value):
        def getxattr(path, name, *args, **kwargs):
            if name != "system.posix_acl_access":
                return real(path, name, *args, **kwargs)
            if isinstance(value, OSError):
                raise value
            return value

        monkeypatch.setattr(os, "getxattr", getxattr)

    for value in (blob(3, good), blob(2, [good[0], good[2]]), blob(2, []), OSError(errno.EIO, "I/O error")):
        answer(value)
        problem = cache.unsafe_reason(so)
        assert problem is not None and "an ACL this check cannot read" in problem, value
    answer(OSError(errno.ENOTSUP, "Operation not supported"))
    assert cache.unsafe_reason(so) is None
    entry.chmod(0o755)


def test_our_own_builds_are_never_group_or_world_writable_whatever_the_umask(jit, tmp_path, monkeypatch):
    tc = jit.emu()
    old = os.umask(0o000)
    try:
        _, entry = cache.ensure_built(tc, "dav-2201")
    finally:
        os.umask(old)
    made = [p for p in jit.cache.rglob("*")] + [jit.cache]
    loose = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in made if p.stat().st_mode & 0o022]
    assert loose == [], loose
    assert cache.unsafe_reason(entry / "librmsnorm.so") is None
    # built in a 0700 dir, published readable: a shared tier serves other accounts' ranks
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (entry, entry / "librmsnorm.so")] == ["0o755", "0o755"]
    # a failed build is kept with its sources, their folders included
    failing = tmp_path / "failing"
    failing.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo failing 1.0; exit 0; fi\nexit 1\n')
    failing.chmod(0o755)
    monkeypatch.setenv("ASCEND_RMSNORM_CXX", str(failing))
    old = os.umask(0o000)
    try:
        with pytest.raises(KernelCompileError):
            cache.ensure_built(toolchain.get_toolchain("emu"), "dav-2201")
    finally:
        os.umask(old)
    kept = [p for p in jit.cache.rglob("*") if p.is_dir() and p.parent.name == "src"]
    assert kept, "no source folder kept"
    loose = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in jit.cache.rglob("*") if p.stat().st_mode & 0o022]
    assert loose == [], loose


def test_safe_mode_never_gives_group_or_others_write_and_reading_the_umask_leaves_it_as_it_was(monkeypatch):
    """``_fs.safe_mode`` takes group and others' write away whatever the bits asked and the umask (today's
    callers ask 0755 or 0644: this is the guard for one that asks more); ``_fs.umask`` read without
    ``/proc`` (set and put back, as elsewhere than Linux) leaves the process umask as it found it."""
    import pathlib

    from ascend_rmsnorm.jit import _fs

    real_read_text = pathlib.Path.read_text

    def no_proc(self, *args, **kwargs):
        if str(self) == "/proc/self/status":
            raise OSError(errno.ENOENT, "no /proc here")
        return real_read_text(self, *args, **kwargs)

    old = os.umask(0o000)
    try:
        assert (_fs.safe_mode(0o777), _fs.safe_mode(0o666), _fs.safe_mode(0o1777)) == (0o755, 0o644, 0o1755)
        os.umask(0o077)
        monkeypatch.setattr(pathlib.Path, "read_text", no_proc)
        assert _fs.umask() == 0o077 and _fs.safe_mode(0o755) == 0o700
        assert os.umask(0o077) == 0o077  # as it was
    finally:
        os.umask(old)


def test_a_stricter_umask_is_kept_in_what_a_build_makes(jit):
    """Modes are what the umask allows, never more (``_fs.safe_mode``): a user whose umask is 077 gets a
    cache nobody else can read. A team tier is built under umask 022 (README, "Cache")."""
    old = os.umask(0o077)
    try:
        _, entry = cache.ensure_built(jit.npu("8.5.0"), "dav-2201")
    finally:
        os.umask(old)
    made = [p for p in jit.cache.rglob("*")] + [jit.cache]
    open_to_others = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in made if p.stat().st_mode & 0o077]
    assert open_to_others == [], open_to_others
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (entry, entry / "librmsnorm.so")] == ["0o700", "0o700"]


@pytest.mark.parametrize("where", ["tmp", "parent"])
def test_a_build_re_tests_its_tmp_dir_and_its_entrys_parent_whatever_was_found_before(jit, where):
    """``writable_error`` judges the cache once per process; the build walks to ``v1/tmp`` and to the entry's
    parent again with the ownership test, so a folder made writable by everyone since is refused there."""
    from ascend_rmsnorm.jit import layout, publish

    spec = cache.build_spec(jit.npu("8.5.0"), "dav-2201")
    loose = jit.cache / "v1" / "tmp" if where == "tmp" else layout.entry_dir(jit.cache, spec).parent
    loose.mkdir(parents=True)
    loose.chmod(0o777)
    with pytest.raises(trust.Untrusted, match="writable by everyone"):
        publish.publish_build(spec, jit.cache)
    assert jit.entries() == []


def test_the_cluster_example_lays_out_a_shared_tier_that_passes_the_check(jit, tmp_path):
    """examples/warm_cache_cluster.sh, run with a loose umask, leaves a tier that every rank can load from."""
    fake = jit.use(jit.cann("8.5.0"))
    shared = tmp_path / "shared"
    env = {**os.environ, "SHARED": str(shared), "ASCEND_HOME_PATH": str(fake.alias)}
    env["PATH"] = str(Path(os.sys.executable).parent) + os.pathsep + env["PATH"]
    done = subprocess.run(
        ["bash", "-c", f"umask 000 && exec bash {ROOT / 'examples' / 'warm_cache_cluster.sh'}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unsafe" not in done.stdout and "ok   " in done.stdout
    (entry,) = list((shared / "v1" / "8.5.0" / "dav-2201").iterdir())
    assert cache.unsafe_reason(entry / "librmsnorm.so") is None
    assert not shared.stat().st_mode & 0o022
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["key"] == entry.name


# --------------------------------------------------------------------------------------------------- the inode


def test_two_libraries_loaded_through_the_same_fd_number_are_each_themselves(tmp_path):
    """dlopen returns an object already loaded under the same *name*: /proc/self/fd/N reused for another
    file must not hand back the first library."""
    import hostile

    first, second = (hostile.build_stub(tmp_path / f"lib{n}.so", max_hidden=n) for n in (111, 222))
    numbers, loaded = [], []
    for path in (first, second):
        fd = os.open(path, os.O_RDONLY)
        numbers.append(fd)
        loaded.append(library.load_fd(fd, path))
        os.close(fd)
    assert numbers[0] == numbers[1]  # the same number both times, as in a long-running process
    assert [lib.max_hidden() for lib in loaded] == [111, 222]
    assert loaded[0].identity != loaded[1].identity
    assert library.load(first) is loaded[0]  # the same inode again: loaded once per process, no new fd kept


def test_unloaded_fd_name_skips_a_free_fd_number_whose_name_was_loaded(tmp_path, monkeypatch):
    """A library loaded as /proc/self/fd/M, M closed since: the lowest free number is M, and the name the
    function hands out is another, of a duplicate of the same inode that the caller owns; either duplicate
    is close-on-exec (a compiler run later must not inherit it)."""
    import ctypes

    import hostile

    mine, other = (hostile.build_stub(tmp_path / f"lib{n}.so", max_hidden=n) for n in (333, 444))
    fd = os.open(mine, os.O_RDONLY)
    taken = os.open(other, os.O_RDONLY)
    ctypes.CDLL(f"/proc/self/fd/{taken}")
    os.close(taken)
    probe = os.dup(fd)
    os.close(probe)
    assert probe == taken  # the case: the next free number has a loaded name
    try:
        dup, name = library.unloaded_fd_name(fd)
        try:
            assert name == f"/proc/self/fd/{dup}" and dup not in (fd, taken)
            assert name not in library.loaded_names()
            assert os.fstat(dup).st_ino == os.fstat(fd).st_ino and not os.get_inheritable(dup)
            assert ctypes.CDLL(name).ascend_rmsnorm_max_hidden() == 333
        finally:
            os.close(dup)
        monkeypatch.setattr(library, "loaded_names", set)  # no name loaded: the first duplicate is handed out
        dup, _ = library.unloaded_fd_name(fd)
        inheritable = os.get_inheritable(dup)
        os.close(dup)
        assert not inheritable
    finally:
        os.close(fd)


def test_the_opt_out_skips_the_ownership_test_only_and_still_loads_the_inode_it_opened(built, jit, monkeypatch):
    tc, entry = built
    entry.chmod(0o777)
    monkeypatch.setenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", "1")
    lib = cache.get_library(tc, "dav-2201")
    st = os.stat(entry / "librmsnorm.so")
    assert lib.identity == (st.st_dev, st.st_ino)
    entry.chmod(0o755)


def test_a_library_changed_after_its_manifest_is_caught_from_the_bytes_that_are_loaded(built, jit):
    """The hash is taken from the fd that is then loaded, not from a second look at the path."""
    tc, entry = built
    so = entry / "librmsnorm.so"
    data = bytearray(so.read_bytes())
    data[-1] ^= 0xFF  # same size: only the hash tells
    so.write_bytes(bytes(data))
    with pytest.raises(LibraryLoadError, match="sha256 differs from the manifest"):
        cache.open_library(entry)


def test_a_manifest_whose_key_input_does_not_hash_to_its_key_is_no_entry(built):
    """An entry of another build (another package version here) put at this key's path with its manifest's
    key edited to match: the key is the hash of key_input, which still says what was built."""
    _, entry = built
    path = entry / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["key_input"]["package_version"] = "0.0.0+another"
    path.write_text(json.dumps(manifest))
    assert verify.entry_problem(entry) == "manifest key does not match its key_input"
    with pytest.raises(LibraryLoadError, match="manifest key does not match its key_input"):
        cache.open_library(entry)
    manifest["key"] = hashlib.sha256(canonical_json(manifest["key_input"])).hexdigest()  # whole, but another's
    path.write_text(json.dumps(manifest))
    assert verify.entry_problem(entry) == f"manifest key {manifest['key'][:12]} != {entry.name[:12]}"


def test_a_fifo_planted_as_an_entry_s_files_is_passed_over_by_lookups_and_listings_never_waited_on(
    jit, monkeypatch, tmp_path, capsys
):
    """Whoever can add names to a tier can plant FIFOs where the manifest and the library go: opening one
    by name for reading would block for ever. Lookups, `cache list` and `cache verify` open them as loading
    does (no blocking, regular files only), so the entry is broken, not a hang; the build goes on."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    # The kernels' real compile (seconds; minutes on a loaded machine) runs before the alarm, in a scratch
    # cache: the fake compiler's memo then serves the build below at once, so the alarm times only the
    # lookups a FIFO could block, never a slow compile.
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(tmp_path / "scratch-cache"))
    cache.ensure_built(tc, "dav-2201")
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(jit.cache))
    cache.reset()
    prebuilt = tmp_path / "prebuilt"
    planted = cache.entry_dir(prebuilt, spec)
    planted.mkdir(parents=True)
    for name in (cache.MANIFEST_NAME, cache.LIB_NAME):
        os.mkfifo(planted / name)
    monkeypatch.setenv("ASCEND_RMSNORM_PREBUILT_DIR", str(prebuilt))

    class Hung(BaseException):
        """Not an Exception: the CLI's last-resort handler would turn one into an exit status and go on to
        the next open, which then blocks for good (seen: the old AssertionError, swallowed by `cache
        list`, left `cache verify` blocked until CI's limit)."""

    def hung(*_):
        raise Hung("blocked on a planted FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, 120, 5)  # a hang fails the test instead of the whole run; re-fires
    try:
        assert cache.lookup(spec) is None
        assert "not a regular file" in cache.entry_problem(planted)
        lib = cache.get_library(tc, "dav-2201")
        assert lib._lib.ascend_rmsnorm_abi_version() == library.ABI_VERSION
        assert lib.path.is_relative_to(jit.cache) and jit.compiles() == 2  # passed over, and built here
        cli.main(["cache", "list"])
        listed = capsys.readouterr().out
        assert cli.main(["cache", "verify"]) == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr().out
    assert [line for line in listed.splitlines() if str(planted) in line][0].endswith(
        f"not a regular file ({planted / cache.MANIFEST_NAME})"
    ), listed
    assert f"bad  {planted}: unreadable entry: not a regular file" in out, out
    assert stat.S_ISFIFO(os.lstat(planted / cache.LIB_NAME).st_mode)  # a read-only tier is never touched


def test_a_manifest_for_a_listing_is_read_within_its_limit_and_never_through_a_link(tmp_path):
    """``verify.read_manifest`` (what `cache list` shows) reads manifest.json as ``trust.read_regular``: a link
    planted at that name is not followed (it could lead to anyone's file), and no more than the limit is read."""
    theirs = tmp_path / "theirs.json"
    theirs.write_text('{"key": "theirs"}')
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / cache.MANIFEST_NAME).symlink_to(theirs)
    assert verify.read_manifest(entry) is None
    (entry / cache.MANIFEST_NAME).unlink()
    (entry / cache.MANIFEST_NAME).write_text('{"key": "ours"}')
    assert verify.read_manifest(entry) == {"key": "ours"}
    (entry / cache.MANIFEST_NAME).write_text('["not", "a", "manifest"]')  # JSON, but no object to list
    assert verify.read_manifest(entry) is None
    padding = "x" * verify._MANIFEST_LIMIT  # valid JSON past the limit: only its first part is read
    (entry / cache.MANIFEST_NAME).write_text(f'{{"key": "ours", "pad": "{padding}"}}')
    assert verify.read_manifest(entry) is None
    assert trust.read_regular(theirs, 4) == b'{"ke' and trust.read_regular(theirs, 100) == theirs.read_bytes()
    os.mkfifo(tmp_path / "fifo")  # a version file planted as a FIFO: an error, not an empty read
    with pytest.raises(OSError, match="not a regular file"):
        trust.read_regular(tmp_path / "fifo", 100)


# --------------------------------------------------------------------------------------------------- writing


def test_a_cache_root_others_can_write_is_never_written_the_build_goes_private_with_one_warning(
    jit, monkeypatch, caplog
):
    tc = jit.emu()
    loose = jit.tmp / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # not sticky: anyone could swap what is in it
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(loose / "cache"))
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        lib = cache.get_library(tc, "dav-2201")
    assert lib.path.is_relative_to(cache.private_root())
    assert list(loose.iterdir()) == []  # not even the root was created in it
    (warning,) = [r.getMessage() for r in caplog.records if "not safe to write into" in r.getMessage()]
    assert f"the kernel cache {loose / 'cache'} is not safe to write into: {loose} is writable by everyone" in warning
    assert f"fix: `chmod o-w {loose}`" in warning and str(cache.private_root()) in warning
    assert cli.main(["warm", "--toolchain", "emu", "--cache-dir", str(loose / "cache")]) == 1


@pytest.mark.parametrize("planted", ["a link", "a hard link"])
def test_build_files_are_created_never_through_what_is_already_there(tmp_path, planted):
    """A log name that already exists (a planted link, or a hard link to someone's file) is an error, never
    followed, truncated or written over."""
    work = tmp_path / "w"
    work.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    if planted == "a link":
        (work / "build.log").symlink_to(victim)
    else:
        os.link(victim, work / "build.log")
    with pytest.raises(OSError):
        build.run_compiler(["/bin/sh", "-c", "echo hi"], work, work / "build.log")
    assert victim.read_text() == "keep\n"


def test_cache_files_are_created_never_through_what_is_already_there(tmp_path):
    """``trust.create_file`` (sources, manifest, reason.txt): a link or a file already at the name is an
    error naming the path; neither it nor what a link points to is written, truncated or reused."""
    d = tmp_path / "d"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (d / "manifest.json").symlink_to(victim)
    (d / "reason.txt").write_text("theirs\n")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("manifest.json", "reason.txt"):
            with pytest.raises(FileExistsError) as info:
                trust.create_file(fd, name, b"ours\n", shown=d / name)
            assert info.value.filename == str(d / name)
        trust.create_file(fd, "new", b"ours\n")
    finally:
        os.close(fd)
    assert victim.read_text() == "keep\n" and (d / "reason.txt").read_text() == "theirs\n"
    assert (d / "manifest.json").is_symlink() and (d / "new").read_bytes() == b"ours\n"


def test_a_build_is_fsynced_whole_before_it_is_renamed_into_place(jit, monkeypatch):
    """The rename publishes the entry, so its library, log, manifest and directory are synced first: a crash
    after it must not leave a complete-looking entry with a short library (no crash needed to see that); the
    directory it is renamed into is synced after, so the rename itself lasts."""
    synced = jit_helpers.record_fsyncs(monkeypatch)
    _, entry = cache.ensure_built(jit.npu("8.5.0"), "dav-2201")
    files = {(st.st_dev, st.st_ino) for st in synced}
    for path in (entry, *(entry / name for name in ("librmsnorm.so", "build.log", "manifest.json")), entry.parent):
        st = path.stat()
        assert (st.st_dev, st.st_ino) in files, path


def test_removing_a_tree_unlinks_links_and_never_deletes_through_them(tmp_path, monkeypatch):
    """``_fs.remove_tree_at`` (clean, the sweep, a failed build's clean-up): a link, at the top or inside, is
    unlinked, never followed into what it points to; a name already gone, at the top or inside (a peer's
    clean removed it after the listing), is no error."""
    from ascend_rmsnorm.jit import _fs

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep\n")
    d = tmp_path / "d"
    (d / "tree" / "sub").mkdir(parents=True)
    (d / "tree" / "sub" / "inner").symlink_to(victim)
    (d / "top").symlink_to(victim)
    (d / "raced").mkdir()
    (d / "raced" / "f").write_text("")
    real_unlink = os.unlink
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("top", "tree", "gone"):
            _fs.remove_tree_at(fd, name)

        def peer_first(name, *, dir_fd=None):
            real_unlink(name, dir_fd=dir_fd)  # the peer's
            real_unlink(name, dir_fd=dir_fd)  # ours: FileNotFoundError

        monkeypatch.setattr(os, "unlink", peer_first)
        _fs.remove_tree_at(fd, "raced")
    finally:
        os.close(fd)
    assert os.listdir(d) == [] and (victim / "keep").read_text() == "keep\n"


def test_quarantining_a_link_at_an_entrys_path_moves_the_link_and_touches_nothing_it_points_to(jit, tmp_path):
    """A stray link at a key's path is quarantined by its name: it is freshened and moved itself, and the
    times of what it points to (anyone's file) are left as they were."""
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.utime(victim, (1000, 1000))
    entry = jit.cache / "v1" / "emu" / "dav-2201" / ("0" * 64)
    entry.parent.mkdir(parents=True)
    entry.symlink_to(victim)
    moved = verify.quarantine(entry, "a stray link")
    assert moved is not None and moved.is_symlink() and not os.path.lexists(entry)
    assert os.stat(victim).st_mtime == 1000 and victim.read_text() == "keep\n"


def test_cache_files_are_fsynced_whole_before_they_are_closed(tmp_path, monkeypatch):
    """A manifest or a source copy is renamed into place later, so a crash must not leave it short:
    ``trust.create_file`` syncs the file once all its bytes are written (no crash needed to see that)."""
    synced = jit_helpers.record_fsyncs(monkeypatch)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        trust.create_file(fd, "manifest.json", b"x" * 10000)
    finally:
        os.close(fd)
    st = (tmp_path / "manifest.json").stat()
    assert (st.st_ino, 10000) in {(s.st_ino, s.st_size) for s in synced} and st.st_size == 10000


# --------------------------------------------------------------------------------------------------- locks


@pytest.mark.parametrize("how", ["group-writable", "a link"])
def test_a_lock_dir_that_is_not_yours_alone_is_refused_with_one_warning(how, monkeypatch, caplog, tmp_path):
    real = tmp_path / "locks"
    real.mkdir()
    given = real
    if how == "a link":
        given = tmp_path / "link"
        given.symlink_to(real)
    else:
        real.chmod(0o770)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(given))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert locks.lock_dir() == tmp_path / "run" / "ascend_rmsnorm"
        locks.lock_dir()
    (message,) = [r.getMessage() for r in caplog.records]
    want = "writable by group or others (mode 0770" if how != "a link" else "a symbolic link"
    assert f"ASCEND_RMSNORM_LOCK_DIR={str(given)!r} is {want}" in message


@pytest.mark.parametrize(
    "given, why",
    [
        ("{tmp}/f/locks", "a path that cannot be examined (Not a directory)"),  # lstat fails: below a file
        ("/proc/no-such-dir/locks", "under a directory that cannot be reached (No such file or directory)"),
        ("/proc/sys/no-such-dir", "a directory that cannot be created (No such file or directory)"),
    ],
    ids=["below a file", "parent cannot be made", "cannot be made"],
)
def test_a_lock_dir_variable_that_cannot_be_used_is_named_in_a_warning_that_reads(
    given, why, monkeypatch, caplog, tmp_path
):
    """Each reason an ASCEND_RMSNORM_LOCK_DIR cannot be used fits "<variable>=<value> is <reason>": the
    warning read "is cannot be examined: Not a directory" (and "is cannot be reached", "is cannot be created")."""
    (tmp_path / "f").write_text("x")
    given = given.format(tmp=tmp_path)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", given)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert locks.lock_dir() == tmp_path / "run" / "ascend_rmsnorm"
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == (
        f"ASCEND_RMSNORM_LOCK_DIR={given!r} is {why}; using the default ({tmp_path / 'run' / 'ascend_rmsnorm'}) instead"
    )


def test_a_default_lock_dir_whose_parent_is_missing_is_passed_over_silently(monkeypatch, caplog, tmp_path):
    """An XDG_RUNTIME_DIR that does not exist (a session's, gone): not a candidate here, no warning, and
    nothing is made there; the next default is used."""
    monkeypatch.delenv("ASCEND_RMSNORM_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "gone"))
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        found = locks.lock_dir()
    assert found is not None and not found.is_relative_to(tmp_path), found
    assert caplog.records == [] and not (tmp_path / "gone").exists()


def test_a_relative_xdg_runtime_dir_is_no_lock_dir(monkeypatch, tmp_path):
    """The XDG spec has a relative path in XDG_RUNTIME_DIR ignored; taken against the working directory
    it would put each rank's locks where that rank was started, the very thing a relative
    ASCEND_RMSNORM_LOCK_DIR is refused for (_envvars._path). The next default is used."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.delenv("ASCEND_RMSNORM_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run")
    found = locks.lock_dir()
    assert found is None or found.is_absolute(), found
    assert not (tmp_path / "run" / "ascend_rmsnorm").exists()


@as_root
def test_a_lock_dir_reached_through_someone_elses_link_is_neither_created_nor_used(monkeypatch, caplog, tmp_path):
    """Every directory above the lock dir passes the trust walk before anything is created there: a link
    another user owns in a sticky directory (here: nobody's, where a lock dir path runs through it) would
    otherwise have the victim create directories and lock files wherever it points."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (shared / "locks").symlink_to(elsewhere)
    os.lchown(shared / "locks", NOBODY, NOBODY)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(shared / "locks" / "rms"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert locks.lock_dir() == tmp_path / "run" / "ascend_rmsnorm"
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"{shared / 'locks'} is a symbolic link owned by nobody" in message
    assert not (elsewhere / "rms").exists()


def _give_tree(top: Path, uid: int) -> None:
    """Everything under ``top`` (links included, never followed) to ``uid``, as another account's install."""
    os.lchown(top, uid, uid)
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lchown(os.path.join(here, name), uid, uid)


@as_root
def test_a_cann_installed_by_another_account_is_used_once_you_trust_that_account(jit, caplog):
    """CANN installed for everyone by a service account (``--install-for-all`` as HwHiAiUser): refused
    by default, with the variable that trusts its owner in the fix; with that owner trusted, found and
    built with (its include and library dirs are searched dirs of the build); an unknown name trusts
    nobody more, with a warning naming the variable."""
    from ascend_rmsnorm.errors import ToolchainNotFoundError
    from ascend_rmsnorm.jit import toolchain

    fake = jit.use(jit.cann("8.5.0"))
    _give_tree(fake.alias.parent, NOBODY)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    assert "belongs to nobody" in str(info.value) and "ASCEND_RMSNORM_TRUSTED_USERS=nobody" in str(info.value)
    jit.mp.setenv("ASCEND_RMSNORM_TRUSTED_USERS", "nobody")
    tc = toolchain.get_toolchain("npu")
    assert tc.cann_root == fake.root
    assert cache.ensure_built(tc, "dav-2201")[0] == "built" and jit.compiles() == 1
    jit.mp.setenv("ASCEND_RMSNORM_TRUSTED_USERS", "no-such-user-here")
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        with pytest.raises(ToolchainNotFoundError, match="belongs to nobody"):
            toolchain.get_toolchain("npu")
    assert any("ASCEND_RMSNORM_TRUSTED_USERS" in r.getMessage() and "no-such-user-here" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def _advice_fits(message: str, fix: str) -> None:
    """``message`` (a refusal for a place of nobody's that is not a kernel cache) carries ``fix`` and the
    walk's own advice, and not the kernel cache's (``warm --cache-dir`` makes no lock dir, CANN or TMPDIR)."""
    assert "belongs to nobody" in message and "have it removed" in message, message
    assert "ASCEND_RMSNORM_TRUSTED_USERS=nobody" in message and fix in message, message
    assert "shared tier" not in message and "warm --cache-dir" not in message, message


def _nobodys_dir(path: Path) -> Path:
    path.mkdir(mode=0o755)
    os.chown(path, NOBODY, NOBODY)
    return path


@as_root
def test_a_lock_dir_under_someone_elses_directory_is_passed_over_with_a_fix_for_a_lock_dir(
    monkeypatch, caplog, tmp_path
):
    """The lock dir's refusal gives the walk's fix and says what is used instead, not the kernel cache's
    advice (a shared tier, ``warm --cache-dir``), which makes no lock dir."""
    theirs = _nobodys_dir(tmp_path / "theirs")
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(theirs / "rms"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert locks.lock_dir() == tmp_path / "run" / "ascend_rmsnorm"
    (message,) = [r.getMessage() for r in caplog.records]
    _advice_fits(message, f"using the default ({tmp_path / 'run' / 'ascend_rmsnorm'}) instead")
    assert not (theirs / "rms").exists()


@as_root
def test_a_cann_root_of_someone_elses_is_refused_with_a_fix_for_a_cann_install(jit):
    """A CANN root another account owns: the walk's fix (have it removed, or trust the account that
    installed it) and the refusal's own (a copy nobody else can write), not the kernel cache's."""
    from ascend_rmsnorm.errors import ToolchainNotFoundError

    fake = jit.use(jit.cann("8.5.0"))
    _give_tree(fake.alias.parent, NOBODY)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.get_toolchain("npu")
    _advice_fits(str(info.value), "Choose a copy nobody else can write")


@as_root
def test_a_temp_dir_of_someone_elses_is_refused_with_a_fix_for_a_temp_dir(monkeypatch, tmp_path):
    """A TMPDIR another account owns (root running with another user's environment, ``sudo -E``): the
    private build dir is not made there, and the fix is a TMPDIR (or a cache) of your own."""
    import tempfile

    from ascend_rmsnorm.errors import CacheWriteError
    from ascend_rmsnorm.jit import layout

    theirs = _nobodys_dir(tmp_path / "theirs")
    monkeypatch.setattr(layout, "_private_root", None)
    monkeypatch.setattr(tempfile, "tempdir", str(theirs))
    with pytest.raises(CacheWriteError) as info:
        layout.private_root()
    _advice_fits(str(info.value), "or set TMPDIR to a directory of your own")
    assert list(theirs.iterdir()) == []


@as_root
def test_a_compiler_in_someone_elses_directory_is_refused_with_a_fix_for_a_compiler(jit, tmp_path):
    """``ASCEND_RMSNORM_CXX`` naming a compiler in a directory another account owns: the walk's fix and the
    refusal's (a copy nobody else can write), not the kernel cache's."""
    from ascend_rmsnorm.errors import ToolchainNotFoundError

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    cxx = theirs / "c++"
    cxx.write_text("#!/bin/sh\nexit 1\n")
    cxx.chmod(0o755)
    os.chown(theirs, NOBODY, NOBODY)
    jit.mp.setenv("ASCEND_RMSNORM_CXX", str(cxx))
    with pytest.raises(ToolchainNotFoundError, match="refusing to use the compiler") as info:
        toolchain.emu_toolchain()
    _advice_fits(str(info.value), "Choose a copy nobody else can write")


def test_a_root_directory_that_fails_the_test_is_refused_as_any_other_component(tmp_path, monkeypatch):
    """``/`` itself failing the test (a container whose / belongs to an unmapped owner, say) is an ``Untrusted``
    with its fix, judged by the stat of ``/``: before, the fd was closed first and then stat'ed (EBADF, or
    another file's owner where a thread had reused the number). A link to an absolute path, met on a walk
    from an already open dir, has ``/`` tested again."""
    from ascend_rmsnorm.jit import trust

    real = trust.component_problem
    monkeypatch.setattr(
        trust,
        "component_problem",
        lambda path, st, fd=None, **kw: "/ is bad" if str(path) == "/" else real(path, st, fd, **kw),
    )
    with pytest.raises(trust.Untrusted, match="/ is bad") as info:
        trust.open_path("/usr")
    assert info.value.foreign is (os.stat("/").st_uid not in trust.trusted_uids())
    (tmp_path / "abs").symlink_to("/usr")  # a walk from a checked dir meets / again through a link
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(trust.Untrusted, match="/ is bad"):
            trust.open_in(fd, tmp_path, "abs", check=True)
    finally:
        os.close(fd)
    monkeypatch.setattr(trust, "trusted_uids", lambda: frozenset({os.stat("/").st_uid + 1}))  # / is someone else's
    with pytest.raises(trust.Untrusted, match="/ is bad") as info:
        trust.open_path("/usr")
    assert info.value.foreign is True


def test_a_file_where_a_walk_needs_a_directory_is_enotdir_naming_that_file(tmp_path):
    """A regular file in the middle of a path, at its end when a directory is asked for, or before the
    trailing slash of a link's target, is ``NotADirectoryError`` naming that file (never its fd returned)."""
    f = tmp_path / "f"
    f.write_text("x")
    (tmp_path / "l").symlink_to("f/")
    for path, directory in ((f / "x", False), (f, True), (tmp_path / "l", False)):
        with pytest.raises(NotADirectoryError) as info:
            os.close(trust.open_path(path, check=False, directory=directory))
        assert info.value.filename == str(f), path


def test_a_walk_follows_at_most_max_links_links_as_the_kernel_does(tmp_path):
    """Each link on a walk is opened ``O_NOFOLLOW`` and followed by the walk itself, so the kernel's own limit
    never applies: ``trust.MAX_LINKS`` links in a chain are followed, one more is ELOOP (a loop of links ends
    there rather than spinning for good)."""
    (tmp_path / "end").mkdir()
    for i in range(trust.MAX_LINKS + 1):
        (tmp_path / f"l{i}").symlink_to("end" if i == 0 else f"l{i - 1}")
    os.close(trust.open_path(tmp_path / f"l{trust.MAX_LINKS - 1}", check=True, directory=True))
    with pytest.raises(OSError) as info:
        trust.open_path(tmp_path / f"l{trust.MAX_LINKS}", check=True)
    assert info.value.errno == errno.ELOOP


@pytest.mark.parametrize("where", ["/dev/null", "a sticky folder", "nowhere", "a folder with a writable header"])
def test_a_link_in_a_header_tree_is_named_with_what_is_wrong_where_it_leads(tmp_path, monkeypatch, where):
    """``trust.tree_problem`` follows a header tree's links; when what is wrong lies where one leads (anywhere:
    /dev/null, a sticky scratch dir, a target that is gone), the refusal names the link as well, and that
    removing it is a fix too (``chmod o-w /dev/null`` alone would be bad advice)."""
    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", raising=False)
    tree = tmp_path / "include"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "ok.h").write_text("")
    sticky = tmp_path / "scratch"
    sticky.mkdir()
    sticky.chmod(0o1777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.h").write_text("")
    (elsewhere / "x.h").chmod(0o666)
    targets = {"/dev/null": Path("/dev/null"), "a sticky folder": sticky, "nowhere": tmp_path / "gone.h"}
    target = targets.get(where, elsewhere)
    link = tree / "sub" / "x.h"
    link.symlink_to(target)
    problem = trust.tree_problem([tree])
    if where == "a folder with a writable header":  # met inside the folder: named as it is there
        assert problem.startswith(f"{elsewhere / 'x.h'} is writable by everyone")
    else:
        assert problem.startswith(f"{link} is a symbolic link, and where it leads: ")
        assert str(target) in problem and "or have the link removed" in problem
    monkeypatch.setenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", "1")  # the opt-out: no walk, no problem
    assert trust.tree_problem([tree]) is None
    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK")
    link.unlink()
    assert trust.tree_problem([tree]) is None


def test_a_tree_walks_memo_of_the_account_database_ends_with_that_walk(tmp_path, monkeypatch):
    """``tree_problem`` reads the account database once per (owner, group) while it walks; afterwards each check
    reads it again, so an account given the group since is seen (the memo is not left behind)."""
    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", raising=False)
    tree = tmp_path / "include"
    tree.mkdir()
    os.chown(tree, os.getuid(), os.getgid())
    tree.chmod(0o775)
    answer: list[str] = []
    monkeypatch.setattr(trust, "_group_outsiders", lambda st: list(answer))
    assert trust.tree_problem([tree]) is None
    answer.append("mallory")  # given the group after the walk
    assert "but mallory can write through it too" in trust.component_problem(tree, os.stat(tree))


def _unused_id(taken) -> int:
    """An id no account (or group) of this host has: ``taken`` raises KeyError for it."""
    for candidate in range(54321, 54421):
        try:
            taken(candidate)
        except KeyError:
            return candidate
    pytest.skip("no unused id found")


def test_an_owner_or_group_with_no_name_is_named_by_its_number(tmp_path, monkeypatch):
    """Files unpacked from another host's tarball keep ids this host has no name for: the refusal names the
    number ("uid 54321", "gid 54321") rather than failing to look the name up, and a group nobody is named
    for is no one's private group. The fix names the uid as ASCEND_RMSNORM_TRUSTED_USERS takes it: it said
    "ASCEND_RMSNORM_TRUSTED_USERS=uid 54321", a value the variable refuses whole ("no user named 'uid'")."""
    import pwd

    monkeypatch.delenv("ASCEND_RMSNORM_TRUSTED_USERS", raising=False)
    uid, gid = _unused_id(pwd.getpwuid), _unused_id(grp.getgrgid)
    theirs = os.stat_result((stat.S_IFREG | 0o644, 1, 1, 1, uid, os.getgid(), 0, 0, 0, 0))
    problem = trust.component_problem(tmp_path / "x.h", theirs)
    assert problem.startswith(f"{tmp_path / 'x.h'} belongs to uid {uid}, not to you ("), problem
    assert problem.endswith(f"set ASCEND_RMSNORM_TRUSTED_USERS={uid}"), problem  # a value the variable takes
    monkeypatch.setenv("ASCEND_RMSNORM_TRUSTED_USERS", problem.rsplit("=", 1)[1])
    assert trust.component_problem(tmp_path / "x.h", theirs) is None  # the advice, followed, works
    group_writable = os.stat_result((stat.S_IFREG | 0o664, 1, 1, 1, os.getuid(), gid, 0, 0, 0, 0))
    assert trust.component_problem(tmp_path / "x.h", group_writable) == (
        f"{tmp_path / 'x.h'} is writable by the group gid {gid} (mode 0664); fix: `chmod g-w {tmp_path / 'x.h'}`"
    )


def test_a_header_tree_with_a_link_back_up_is_judged_once_not_walked_round_until_too_deep(tmp_path, monkeypatch):
    """A folder met again through a link (``include/self -> ..``, as an install's compatibility links can be)
    is judged once: the tree passes, rather than being walked round the loop to the depth limit."""
    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", raising=False)
    tree = tmp_path / "include"
    (tree / "acl").mkdir(parents=True)
    (tree / "acl" / "up").symlink_to("..")
    assert trust.tree_problem([tree]) is None


def test_a_header_tree_too_deep_to_walk_is_refused_not_a_crash(tmp_path, monkeypatch):
    """A folder nested deeper than Python's recursion limit raised RecursionError out of get_toolchain (not a
    ToolchainNotFoundError); deeper than ``trust.MAX_TREE_LEVELS`` it is a refusal naming the place, and a
    tree just within the limit passes."""
    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", raising=False)
    tree = tmp_path / "include"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1100):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)
    try:
        problem = trust.tree_problem([tree])
        too_deep = tree / "/".join(["d"] * (trust.MAX_TREE_LEVELS + 1))
        assert problem.startswith(f"{too_deep} is more than {trust.MAX_TREE_LEVELS} folders deep"), problem[:300]
        os.rename(too_deep, tmp_path / "cut")
        assert trust.tree_problem([tree]) is None
    finally:
        for top in (tree, tmp_path / "cut"):  # shutil.rmtree (pytest's clean-up too) recurses: unnest it first
            while (top / "d").exists():
                if (top / "d" / "d").exists():
                    os.rename(top / "d" / "d", top / "next")
                    os.rmdir(top / "d")
                    os.rename(top / "next", top / "d")
                else:
                    os.rmdir(top / "d")


def _as_user(uid: int, gid: int, call):
    """``call()`` in a forked child that has become ``uid``/``gid`` (no other groups), so that the kernel's
    permission checks apply as they do to a user: root passes them all. Its answer comes back as JSON (an
    exception in the child fails the test with its traceback). The child runs what this process has already
    loaded (another account may not be able to read this interpreter's files)."""
    import ctypes
    import pwd  # noqa: F401 - loaded here, for the child (trust imports it by name)
    import traceback

    libc = ctypes.CDLL(None, use_errno=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/fd stays ours after setuid
            try:
                answer = ["ok", call()]
            except Exception:  # noqa: BLE001 - told to the parent, which fails the test with it
                answer = ["raised", traceback.format_exc()]
            os.write(write_end, json.dumps(answer).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and answer, f"the child failed (status {status})"
    how, value = json.loads(answer)
    assert how == "ok", f"the child raised:\n{value}"
    return value


def _tree_problem_as(uid: int, gid: int, tree: Path) -> str | None:
    """``trust.tree_problem([tree])`` as ``uid``/``gid`` (``_as_user``)."""
    return _as_user(uid, gid, lambda: trust.tree_problem([tree]))


@as_root
def test_a_folder_you_cannot_search_is_passed_over_one_you_cannot_list_is_refused_with_the_fix(monkeypatch):
    """A folder in a header tree that you may not search (0700, 0744 of another owner) holds nothing you or the
    compiler you run can open, so it is no reason to refuse the tree (before: 'cannot list' or 'cannot check',
    a refusal); one you may search but not list (0711) is refused, as its files can be included by name
    unseen, and the message says how to fix it."""
    import tempfile

    monkeypatch.delenv("ASCEND_RMSNORM_SKIP_PERMISSION_CHECK", raising=False)
    monkeypatch.delenv("ASCEND_RMSNORM_TRUSTED_USERS", raising=False)
    base = Path(tempfile.mkdtemp(prefix="ascend-rmsnorm-tree-", dir="/tmp"))  # a place another user can reach
    try:
        base.chmod(0o755)
        tree = base / "include"
        closed = tree / "closed"
        closed.mkdir(parents=True)
        (tree / "ok.h").write_text("")
        (closed / "inside.h").write_text("")
        (closed / "inside.h").chmod(0o666)
        for mode in (0o700, 0o744):
            closed.chmod(mode)
            assert _tree_problem_as(NOBODY, NOBODY, tree) is None, oct(mode)
        closed.chmod(0o711)
        problem = _tree_problem_as(NOBODY, NOBODY, tree)
        assert problem.startswith(f"cannot list {closed} to check what is in it"), problem
        assert f"`chmod o+r {closed}`" in problem
        closed.chmod(0o755)  # and once it can be looked into, what is in it is judged
        assert _tree_problem_as(NOBODY, NOBODY, tree).startswith(f"{closed / 'inside.h'} is writable by everyone")
    finally:
        shutil.rmtree(base)


@pytest.fixture
def reachable():
    """A directory of root's (0755) in /tmp, where another user can reach what a test puts in it."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="ascend-rmsnorm-nonroot-", dir="/tmp"))
    try:
        base.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base)


def _writable_answer(root: Path, create: bool) -> list | None:
    """``cache.writable_error(root, create=create)``, asked afresh, as its errno's name, path and words."""
    from ascend_rmsnorm.jit import layout

    layout.reset()  # the answer is memoised per process
    err = cache.writable_error(root, create=create)
    return None if err is None else [errno.errorcode[err.errno], err.filename, cache.describe_os_error(err, root)]


@as_root
def test_a_cache_root_you_may_enter_but_not_write_is_unwritable_by_its_probe(reachable):
    """Every directory down to ``<root>/v1/tmp`` is there and passes the ownership test (root's, 0755), but
    this user may not write in ``tmp``: only the probe's real write there finds that out. Its EACCES is the
    answer, for the build (which then goes private) and for ``cache path`` alike, and nothing is left."""
    root = reachable / "cache"
    tmp = root / "v1" / "tmp"
    tmp.mkdir(parents=True)
    for path in (root, root / "v1", tmp):
        path.chmod(0o755)
    for create in (True, False):
        answer = _as_user(NOBODY, NOBODY, lambda create=create: _writable_answer(root, create))
        assert answer is not None, f"create={create}: a root this user cannot write was found writable"
        name, filename, words = answer
        assert name == "EACCES" and filename.startswith(f"{tmp}/.probe-"), answer
        assert words == f"permission denied ({filename})"
    assert os.listdir(tmp) == []


@as_root
def test_a_missing_cache_root_you_may_not_make_is_unwritable_before_anything_is_made(reachable):
    """``writable_error(create=False)`` (``cache path``, ``info``) looks without making anything: a missing
    root whose nearest directory above is there but not this user's to write in (root's, 0755) is not
    writable, as the build's walk finds when it tries to make it; it is the mode bits that say so here,
    and the answer names that directory."""
    root = reachable / "cache"
    looked = _as_user(NOBODY, NOBODY, lambda: _writable_answer(root, False))
    assert looked == ["EACCES", str(reachable), f"permission denied ({reachable})"], looked
    made = _as_user(NOBODY, NOBODY, lambda: _writable_answer(root, True))
    assert made is not None and made[0] == "EACCES", made
    assert not root.exists()


@as_root
def test_an_entry_whose_owner_you_cannot_look_up_is_not_yours(reachable):
    """``cache._is_mine`` decides whether an entry that failed to load is this process's to move into
    ``quarantine/``. One that cannot be looked at (EACCES: below a directory of root's, 0700, this user
    may not search) is not this user's, and asking does not raise; this user's own and a gone one are."""
    hidden = reachable / "hidden"
    (hidden / "entry").mkdir(parents=True)
    hidden.chmod(0o700)
    own = reachable / "own"
    own.mkdir()
    os.chown(own, NOBODY, NOBODY)
    paths = (own, reachable / "gone", hidden / "entry")
    assert _as_user(NOBODY, NOBODY, lambda: [cache._is_mine(p) for p in paths]) == [True, True, False]


def test_a_default_lock_dir_is_made_mode_700_and_one_others_can_write_is_passed_over(monkeypatch, caplog, tmp_path):
    """A default lock dir is made mode 700 whatever the umask, and one that exists but others may write is
    judged on the directory it opened (no variable's rules run for a default): passed over with one warning."""
    monkeypatch.delenv("ASCEND_RMSNORM_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    made = tmp_path / "run" / "ascend_rmsnorm"
    old = os.umask(0o022)
    try:
        assert locks.lock_dir() == made
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o770)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert locks.lock_dir() != made
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"not using the lock dir {made}: it is writable by group or others (mode 0770" in message
    # one that is the user's alone but cannot be written (a read-only mount: root too gets "no" there)
    made.chmod(0o700)
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **k: access(p, m, **k) and os.path.realpath(p) != str(made))
    assert locks.lock_dir() != made  # passed over (its warning was said once above, for this path)
