"""A shared node is a hostile place: each attack a second account could make on a victim that runs this
package is run for real, against throwaway accounts, and must load no foreign code and clobber no file.

1. the link-flip race: a link flipped between the victim's cache and a foreign tree, 2,000 loads;
2. a cache tree pre-created by the attacker, the build dir swapped mid-compile for one whose build.log is a
   symlink to a victim file;
3. lock-holder files through planted symlinks: a foreign ASCEND_RMSNORM_LOCK_DIR, and
   /dev/shm/ascend_rmsnorm-<uid> -> /dev/shm (in a private mount namespace);
4. an account whose primary group is the owner's private group overwriting the library in place;
5. a cache dir pre-created by the attacker whose quarantine/ and failed/ link to the victim's files, cleaned;
6. an ``as`` planted in a shared sticky dir on the victim's PATH, where gcc looks for its assembler;
7. an ``ld`` planted beside the victim's link to clang++ in a shared sticky dir, where clang looks first.

The victim is root (CI, and containers over a shared /tmp); see ``hostile.py`` for the accounts and programs.
Every wait reads content (a pipe line, a JSON result), bounded by a timeout that fails the test.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import json
import logging
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import hostile
import pytest
from ns_helpers import run_in_mount_ns, unshare_prefix

from ascend_rmsnorm.cli import main as cli
from ascend_rmsnorm.errors import UnsafeLibraryError
from ascend_rmsnorm.jit import cache, locks

pytestmark = pytest.mark.skipif(hostile.missing_tools() is not None, reason=str(hostile.missing_tools()))

SUPPORT = Path(__file__).resolve().parents[1] / "support"
VICTIM = SUPPORT / "hostile_victim.py"
WORKER = SUPPORT / "jit_worker.py"
RACE_LOADS = 2000  # library calls per race, plus one `cache verify` per three of them
SECRET_TEXT = "the victim's own file, mode 600\n"


@pytest.fixture(scope="module")
def attacker():
    account = hostile.create_account("a")
    try:
        yield account
    finally:
        hostile.remove_account(account, own_group=True)


@dataclass
class Node:
    base: Path  # a shared sticky dir like /tmp, where the attacker can create names
    tool: Path  # the attacker's C program (hostile.ATTACK_SOURCE)
    marker: Path  # grows by one byte per run of an attacker library's constructor
    secret: Path  # a mode-600 file of the victim's that no attack may change

    def secret_intact(self) -> bool:
        return self.secret.read_text() == SECRET_TEXT and os.stat(self.secret).st_mode & 0o777 == 0o600


@pytest.fixture
def node(tmp_path):
    base = hostile.make_node_dir()  # named for this process: a killed run's is removed by the next
    try:
        base.chmod(0o1777)
        markers = base / "markers"
        markers.mkdir()
        markers.chmod(0o777)
        secret = tmp_path / "secret.txt"
        secret.write_text(SECRET_TEXT)
        secret.chmod(0o600)
        yield Node(base, hostile.build_attack_tool(base), markers / "foreign-loads", secret)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _unprotected(knob_name: str):
    """``fs.<knob_name>`` at 0 for one test, restored afterwards; skipped where it cannot be set (the kernel
    then refuses those links itself, and the attack would prove nothing about this package)."""
    knob = Path("/proc/sys/fs") / knob_name
    with contextlib.ExitStack() as setting:
        try:  # noted first: if this run is killed, the next one puts it back
            setting.enter_context(hostile.host_setting(knob, "0"))
        except OSError as err:
            pytest.skip(f"cannot set {knob} to 0 (the kernel refuses these links itself then): {err}")
        yield


@pytest.fixture
def unprotected_symlinks():
    """The issue's host setting: the kernel follows links in sticky dirs whoever owns them."""
    yield from _unprotected("protected_symlinks")


def _trees(jit, node: Node, attacker: hostile.Account) -> tuple[cache.BuildSpec, Path, Path, os.stat_result]:
    """The victim's good entry (its own tree) and the attacker's, for the same key with a matching manifest."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    good = hostile.build_stub(node.base / "good.so")
    evil = hostile.build_stub(node.base / "evil.so", marker=node.marker)
    mine, theirs = node.base / "mine", node.base / "theirs"
    mine.mkdir(mode=0o755)
    theirs.mkdir(mode=0o755)
    good_entry = hostile.write_entry(mine, spec, good)
    hostile.write_entry(theirs, spec, evil)
    hostile.chown_tree(theirs, attacker)
    return spec, mine, theirs, os.stat(good_entry / cache.LIB_NAME)


def _race(flipper: subprocess.Popen, entry: Path, good: os.stat_result, env: dict) -> tuple[dict, int, str]:
    """Run the victim loop while ``flipper`` flips; (tally, flips made, victim stderr)."""
    try:
        assert flipper.stdout.readline() == "ready\n"  # the link exists and is flipping
        done = subprocess.run(
            [sys.executable, str(VICTIM), "race", str(RACE_LOADS * 4 // 3), str(entry), str(good.st_dev),
             str(good.st_ino)],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    finally:
        flipper.terminate()
        out, _ = flipper.communicate(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    tally, flips = json.loads(done.stdout), int(out.split()[-1])
    print(f"victim tally {tally} while the link flipped {flips} times")  # shown with -s, and on failure
    return tally, flips, done.stderr


def test_attack1_a_foreign_link_flipping_between_your_cache_and_theirs_is_never_followed(
    jit, node, attacker, unprotected_symlinks
):
    """The issue's race: /tmp/share -> the victim's cache, flipped by its owner to a tree of her own and back;
    the victim uses /tmp/share as its cache dir. Every load refuses the link, naming it and its owner (with
    ASCEND_RMSNORM_JIT=off, in the not-cached error: the writable root's entry is passed over)."""
    spec, mine, theirs, good = _trees(jit, node, attacker)
    share = node.base / "share"
    flipper = attacker.run(
        [str(node.tool), "flip", str(share), str(mine), str(theirs)], stdout=subprocess.PIPE, text=True
    )
    env = {
        "ASCEND_RMSNORM_CACHE_DIR": str(share),
        "ASCEND_RMSNORM_JIT": "off",
        "EXPECT_REFUSAL": f"{share} is a symbolic link owned by {attacker.name}, not by you (root) or root",
    }
    tally, flips, stderr = _race(flipper, cache.entry_dir(share, spec), good, env)
    assert hostile.marks(node.marker) == 0, "the attacker's library ran as the victim"
    # A lookup by path may see the manifest of one tree and the library of the other: a miss, never a load.
    assert tally["refused"] + tally["not_cached"] == RACE_LOADS and tally["refused"] > 0, (tally, stderr[-2000:])
    assert tally["verify_unsafe"] == RACE_LOADS // 3, (tally, stderr[-2000:])
    assert tally["good"] == tally["other"] == tally["wrong_refusal"] == tally["wrong_inode"] == 0
    assert flips > RACE_LOADS


def test_attack1_a_link_of_yours_flipped_into_a_foreign_tree_loads_only_the_checked_inode(
    jit, node, attacker, unprotected_symlinks
):
    """The check-to-load window itself: a link the victim owns (a prebuilt tier) is flipped between its good
    tier and a foreign one. Loads through it succeed or are refused, as the walk found it at that instant;
    what runs is always the inode that was checked (the good one), for library calls and `cache verify`."""
    spec, mine, theirs, good = _trees(jit, node, attacker)
    tier = node.base / "tier"
    flipper = subprocess.Popen([str(node.tool), "flip", str(tier), str(mine), str(theirs)], stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    empty = node.base / "empty-cache"
    empty.mkdir(mode=0o755)
    env = {
        "ASCEND_RMSNORM_PREBUILT_DIR": str(tier),
        "ASCEND_RMSNORM_CACHE_DIR": str(empty),
        "ASCEND_RMSNORM_JIT": "off",
        "EXPECT_REFUSAL": f"{theirs} belongs to {attacker.name}, not to you (root) or root",
    }
    tally, flips, stderr = _race(flipper, cache.entry_dir(tier, spec), good, env)
    assert hostile.marks(node.marker) == 0, "the attacker's library ran as the victim"
    assert tally["good"] + tally["refused"] + tally["not_cached"] == RACE_LOADS, (tally, stderr[-2000:])
    assert tally["verify_ok"] + tally["verify_unsafe"] == RACE_LOADS // 3, (tally, stderr[-2000:])
    assert tally["good"] > 0 and tally["refused"] > 0, f"the flip was not live during the loop: {tally}"
    assert tally["other"] == tally["wrong_refusal"] == tally["wrong_inode"] == 0, (tally, stderr[-2000:])
    assert flips > RACE_LOADS


# --------------------------------------------------------------------------------------------------- attack 2

_HANDSHAKE_CC = """#!/bin/sh
# A compiler that tells the attacker where it runs and waits for her to be done, then "links" the stub.
if [ "$1" = --version ]; then echo "handshake-cc 1.0"; exit 0; fi
case " $* " in *" -E "*) exit 0 ;; esac  # discovery's -x c++ -E -v (its default search dirs): it names none
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
pwd -P > "$FIFO_TO_ATTACKER"
read reply < "$FIFO_FROM_ATTACKER"
cp "$STUB" "$out"
"""

_SWAPPER = """
# For each build: if it runs in her tree, swap the build dir for one whose files are links to the victim's file.
while read cwd < "$FIFO_TO_ATTACKER"; do
  case "$cwd" in
    "$VC"/*) mv "$cwd" "$cwd.stolen" && mkdir "$cwd" && chmod 777 "$cwd" &&
             for f in build.log librmsnorm.so manifest.json; do ln -s "$SECRET" "$cwd/$f"; done &&
             echo "swapped $cwd" >> "$LOG" ;;
    *) echo "skipped $cwd" >> "$LOG" ;;
  esac
  echo go > "$FIFO_FROM_ATTACKER"
done
"""


@pytest.mark.parametrize("skip_check", [False, True], ids=["default", "SKIP_PERMISSION_CHECK=1"])
def test_attack2_a_foreign_cache_tree_gets_no_writes_and_a_swapped_build_dir_clobbers_nothing(
    jit, node, attacker, skip_check
):
    """The attacker pre-creates <vc>/v1/tmp (0777) and swaps the victim's build dir mid-compile for one whose
    build.log, library and manifest are links to a victim file. By default the victim refuses her tree before
    the first write (one warning naming it and the fix) and builds privately. With the ownership test
    switched off it builds there, but every file goes through its own dir fd: the swap is noticed, nothing is
    published, and the build is redone privately; the victim's file is never touched."""
    vc = node.base / "vc"
    made = attacker.sh(f"mkdir -p {vc}/v1/tmp && chmod 777 {vc} {vc}/v1 {vc}/v1/tmp")
    assert made.returncode == 0, made.stderr
    fifo_to, fifo_from, log = node.base / "to-attacker", node.base / "from-attacker", node.base / "attacker.log"
    for fifo in (fifo_to, fifo_from):
        os.mkfifo(fifo)
        fifo.chmod(0o666)
    cc = jit.tmp / "handshake-cc"  # the victim's own compiler, in a dir of hers (not the shared one: attack 7)
    cc.write_text(_HANDSHAKE_CC)
    cc.chmod(0o755)
    stub = hostile.build_stub(node.base / "stub.so")
    shared = {"FIFO_TO_ATTACKER": str(fifo_to), "FIFO_FROM_ATTACKER": str(fifo_from)}
    swapper = attacker.run(
        ["/bin/sh", "-c", _SWAPPER], env={**shared, "VC": str(vc), "SECRET": str(node.secret), "LOG": str(log)}
    )
    env = {**os.environ, **shared, "STUB": str(stub), "ASCEND_RMSNORM_CXX": str(cc)}
    env["ASCEND_RMSNORM_CACHE_DIR"] = str(vc)
    if skip_check:
        env["ASCEND_RMSNORM_SKIP_PERMISSION_CHECK"] = "1"
    out = node.base / "result.json"
    try:
        done = subprocess.run([sys.executable, str(WORKER), "get_library", "emu", "dav-2201", str(out)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        swapper.kill()
        swapper.wait(timeout=30)
    result = json.loads(out.read_text())
    assert node.secret_intact(), "the victim's file was written through the attacker's link"
    assert result.get("status") == "loaded", (result, done.stderr)
    entry = Path(result["entry"])
    assert not entry.is_relative_to(vc)  # built in the private root
    said = log.read_text().splitlines()
    private_builds = f"skipped {entry.parents[3] / 'v1' / 'tmp'}/"
    if not skip_check:
        assert len(said) == 1 and said[0].startswith(private_builds)  # the only build ran privately
        assert f"the kernel cache {vc} is not safe to write into: {vc} belongs to {attacker.name}" in done.stderr
        assert [p for p in vc.rglob("*") if p.lstat().st_uid == 0] == []
    else:
        (swapped, skipped) = said
        assert skipped.startswith(private_builds)
        stolen = Path(swapped.split(" ", 1)[1] + ".stolen")  # the victim's own build dir, renamed by her
        assert (stolen / "build.log").read_text().startswith("$ cd ")  # the log went into the victim's own dir
        assert "was replaced while this process was building in it" in done.stderr
        published = vc / "v1" / "emu" / "dav-2201"
        assert not published.exists() or list(published.iterdir()) == []


# --------------------------------------------------------------------------------------------------- attack 3

_KEY = "ab" * 32


def _plant_holder_links(node: Node, directory: str, first_pid: int) -> str:
    """Her links at every holder temp name a victim with a pid from ``first_pid`` on would have used (3,001),
    and at the holder name itself; as a shell command. The lock file is left alone: she wants the victim to
    get the lock, which is when the holder note is written."""
    tool, secret = node.tool, node.secret
    return (
        f"{tool} plant {directory} .{_KEY}.lock. {first_pid} {first_pid + 3000} .tmp {secret} >/dev/null && "
        f"ln -s {secret} {directory}/{_KEY}.lock.holder"
    )


def test_attack3_a_foreign_lock_dir_is_refused_and_planted_holder_links_are_never_followed(
    jit, node, attacker, monkeypatch, caplog, tmp_path
):
    foreign = node.base / "locks"
    planted = attacker.sh(f"mkdir -m 777 {foreign} && " + _plant_holder_links(node, str(foreign), os.getpid() - 1500))
    assert planted.returncode == 0, planted.stderr
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(foreign))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        with locks.build_lock(_KEY) as held:
            pass
    assert node.secret_intact(), "the victim's file was written through her links"
    assert held
    said = [r.getMessage() for r in caplog.records]
    assert any(f"ASCEND_RMSNORM_LOCK_DIR={str(foreign)!r} is owned by {attacker.name}" in m and str(run) in m
               for m in said), said  # fmt: skip
    assert [p for p in foreign.iterdir() if p.lstat().st_uid == 0] == []  # nothing of the victim's in her dir
    assert (run / "ascend_rmsnorm" / f"{_KEY}.lock.holder").read_text().split()[1:3] == ["pid", str(os.getpid())]


def test_attack3_a_planted_holder_link_in_your_own_lock_dir_is_replaced_not_followed(jit, node, tmp_path, monkeypatch):
    """Even in a lock dir that passes, a holder note is a new file (O_EXCL|O_NOFOLLOW, random name)."""
    own = tmp_path / "own-locks"
    own.mkdir(mode=0o700)
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(own))
    done = subprocess.run(["/bin/sh", "-c", _plant_holder_links(node, str(own), os.getpid() - 1500)])
    assert done.returncode == 0
    with locks.build_lock(_KEY) as held:
        pass
    assert node.secret_intact() and held
    holder = own / f"{_KEY}.lock.holder"
    assert not holder.is_symlink() and f"pid {os.getpid()}" in holder.read_text()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_attack3_a_default_lock_dir_she_made_mode_700_first_is_named_with_its_owner(node, attacker, tmp_path):
    """She makes the victim's default lock dir first, mode 700. A victim without root's power to open
    anything (root here, without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: as any other user) cannot open
    it; the warning must say whose it is, not a bare "a directory that cannot be opened (Permission denied)"."""
    planted = attacker.sh(f"mkdir -m 700 {node.base}/ascend_rmsnorm")
    assert planted.returncode == 0, planted.stderr
    temp = tmp_path / "tmp"
    temp.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_RMSNORM_LOCK_DIR"}
    env.update(XDG_RUNTIME_DIR=str(node.base), TMPDIR=str(temp))
    done = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", "--",
         sys.executable, str(VICTIM), "lock", _KEY],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["held"]
    want = f"not using the lock dir {node.base}/ascend_rmsnorm: it is owned by {attacker.name}, not by you"
    assert want in done.stderr, done.stderr


@pytest.mark.skipif(unshare_prefix() is None, reason="no private mount namespace here (unshare -m)")
def test_attack3_a_dev_shm_link_planted_for_roots_lock_dir_is_refused(
    jit, node, attacker, tmp_path, unprotected_symlinks
):
    """As root with no lock dir set: she makes /dev/shm/ascend_rmsnorm-0 -> /dev/shm and plants holder links
    there. A private tmpfs on /dev/shm in a private mount namespace stands for the host's."""
    temp = tmp_path / "tmp"
    temp.mkdir(mode=0o700)
    first = int(Path("/proc/sys/kernel/ns_last_pid").read_text()) + 1
    as_her = f"setpriv --reuid={attacker.uid} --regid={attacker.gid} --clear-groups -- /bin/sh -c"
    plant = "ln -s /dev/shm /dev/shm/ascend_rmsnorm-0 && " + _plant_holder_links(node, "/dev/shm", first)
    script = (
        "mount -t tmpfs -o mode=1777,size=8m tmpfs /dev/shm || exit 99\n"
        f"{as_her} '{plant}' >/dev/null || exit 98\n"
        f'"$PY" {VICTIM} lock {_KEY}\n'
    )
    env = {"ASCEND_RMSNORM_LOCK_DIR": "", "XDG_RUNTIME_DIR": "", "TMPDIR": str(temp)}
    done = run_in_mount_ns(script, env=env, timeout=60)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, out + err
    assert node.secret_intact(), "root's file was written through her links"
    assert json.loads(out) == {"dir": str(temp / "ascend_rmsnorm-0"), "held": True}
    assert "not using the lock dir /dev/shm/ascend_rmsnorm-0: it is a symbolic link" in err


# --------------------------------------------------------------------------------------------------- attack 4


@pytest.fixture
def shares_roots_group():
    """An account whose primary group is root's private group (gid 0), as a site might make by mistake."""
    others = [p.pw_name for p in pwd.getpwall() if p.pw_gid == 0 and p.pw_uid != 0]
    if others:
        pytest.skip(f"{', '.join(others)} already have gid 0 as their primary group: root's group is not private here")
    account = hostile.create_account("g", primary_gid=0)
    try:
        yield account
    finally:
        hostile.remove_account(account, own_group=False)


def test_attack4_an_account_whose_primary_group_is_yours_cannot_get_its_library_loaded(
    jit, node, monkeypatch, capsys, request
):
    """A group-writable entry passes while the group is truly private; once another account has that group as
    its primary group (and is no member in /etc/group) and overwrites the library in place (owner unchanged),
    it is refused, naming that account."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    root = node.base / "group-cache"
    root.mkdir(mode=0o755)
    entry = hostile.write_entry(root, spec, hostile.build_stub(node.base / "good.so"))
    so, manifest = entry / cache.LIB_NAME, entry / cache.MANIFEST_NAME
    for path, mode in ((entry, 0o775), (so, 0o775), (manifest, 0o664)):
        path.chmod(mode)  # root:root, group-writable, as a umask-002 build would leave it
    assert cache.unsafe_reason(so) is None  # root's group is private: nobody else can write through it
    intruder = request.getfixturevalue("shares_roots_group")
    evil = hostile.build_stub(node.base / "evil.so", marker=node.marker)
    evil_manifest = node.base / "evil-manifest"
    hostile.write_entry(node.base / "scratch", spec, evil)
    shutil.copy(cache.entry_dir(node.base / "scratch", spec) / cache.MANIFEST_NAME, evil_manifest)
    done = intruder.sh(f"cat {evil} > {so} && cat {evil_manifest} > {manifest}")
    assert done.returncode == 0, done.stderr
    assert so.stat().st_uid == 0 and so.read_bytes() == evil.read_bytes()  # same owner, her code
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(root))
    monkeypatch.setenv("ASCEND_RMSNORM_JIT", "off")
    want = f"{entry} is writable by the group root (mode 0775), its owner's private group, but {intruder.name} can"
    with pytest.raises(UnsafeLibraryError, match="refusing to load") as info:
        cache.get_library(tc, "dav-2201")
    assert want in str(info.value) and "fix: `chmod g-w" in str(info.value)
    assert cli.main(["cache", "verify"]) == 1
    assert want in capsys.readouterr().out
    assert hostile.marks(node.marker) == 0


def test_attack5_cache_clean_never_deletes_through_a_tree_someone_else_controls(jit, node, attacker, tmp_path, capsys):
    """The attacker pre-creates the victim's cache dir, with v1/quarantine and v1/failed linking to the
    victim's own files. `cache clean` walks the root as a write would, refuses it (naming its owner), and
    deletes nothing: before, it listed the link's target and moved the victim's old files into her trash."""
    precious = tmp_path / "precious"
    (precious / "project").mkdir(parents=True)
    (precious / "project" / "notes.txt").write_text(SECRET_TEXT)
    (precious / "data.bin").write_bytes(b"x" * 100)
    for p in (precious / "project" / "notes.txt", precious / "project", precious / "data.bin"):
        os.utime(p, (0, 0))  # ancient: any age rule would take them
    shared = node.base / "team-cache"
    (shared / "v1").mkdir(parents=True, mode=0o755)
    for sub in ("quarantine", "failed"):
        (shared / "v1" / sub).symlink_to(precious)
    hostile.chown_tree(shared, attacker)
    before = sorted(str(p) for p in precious.rglob("*"))
    for how in (["--older-than", "0"], ["--all"]):
        assert cli.main(["cache", "clean", *how, "--cache-dir", str(shared)]) == 1
        out = capsys.readouterr().out
        assert f"NOT removed {shared / 'v1'}: not safe to write into: {shared} belongs to {attacker.name}" in out, out
    assert sorted(str(p) for p in precious.rglob("*")) == before
    assert (precious / "project" / "notes.txt").read_text() == SECRET_TEXT and shared.exists()


def _team_cache(node: Node, *inside: Path | str) -> Path:
    """A team cache as an admin makes one: ``node.base/team`` and each directory ``inside`` it (with those
    between), root's, sticky and world-writable, so it passes the write walk and anyone may add names."""
    shared = node.base / "team"
    for rel in ("", *inside):
        for d in (*(shared / p for p in reversed(Path(rel).parents)), shared / rel):
            d.mkdir(exist_ok=True)
            d.chmod(0o1777)
    return shared


def test_attack5_a_trash_dir_she_made_beside_your_cache_in_a_shared_root_is_left_alone(jit, node, attacker, capsys):
    """In a cache root others can add names to (a sticky shared dir), she makes <root>/.trash-<32 hex>, the
    name a killed `cache clean --all` of yours leaves, an hour old. `cache clean` and a build's sweep remove
    only such dirs of your own: before, root deleted hers, and any other user got "Permission denied" and
    exit status 1 from every `cache clean`, for good (the path named, its owner not)."""
    from ascend_rmsnorm.jit import layout

    shared = node.base / "team-cache"
    shared.mkdir()
    shared.chmod(0o1777)
    hers = shared / f".trash-{'cd' * 16}"
    done = attacker.sh(f"mkdir {hers} && echo hers > {hers}/f && touch -d '2 hours ago' {hers}")
    assert done.returncode == 0, done.stderr
    code = cli.main(["cache", "clean", "--all", "--cache-dir", str(shared)])
    out = capsys.readouterr().out
    assert code == 0 and str(hers) not in out, out
    assert layout.sweep_leftovers(shared) == []
    assert (hers / "f").read_text() == "hers\n"


def test_attack5_leftovers_she_makes_in_a_shared_sticky_tree_are_not_yours_to_clean(jit, node, attacker, capsys):
    """A team cache whose v1 and its tmp/, quarantine/, failed/ and trash/ are root's, sticky and
    world-writable (an admin's chmod 1777) passes the write walk, and anyone may add names there. Her
    hour-old dirs there are not this user's leftovers: before, root's `cache clean` (and every build's
    sweep) deleted them, and any other user got "permission denied" and exit status 1 from every `cache
    clean`, for good. Now each is kept, and `clean` says whose (`clean --all` too, which removes the rest
    of v1 as asked)."""
    from ascend_rmsnorm.jit import layout, process_tag

    subs = ("tmp", "quarantine", "failed", "trash")
    shared = _team_cache(node, *(f"v1/{sub}" for sub in subs))
    hers = [shared / "v1" / sub / f"{process_tag._host()}-1.1-{sub}" for sub in subs]
    made = attacker.sh(" && ".join(f"mkdir {d} && echo hers > {d}/f && touch -d '2 hours ago' {d}" for d in hers))
    assert made.returncode == 0, made.stderr
    assert layout.sweep_leftovers(shared) == []
    code = cli.main(["cache", "clean", "--older-than", "0", "--cache-dir", str(shared)])
    out = capsys.readouterr().out
    assert code == 0 and all(f"kept {d}: {attacker.name}'s" in out for d in hers[1:]), out  # said, not failed
    assert all((d / "f").read_text() == "hers\n" for d in hers)
    code = cli.main(["cache", "clean", "--all", "--cache-dir", str(shared)])  # asked: all of v1 of this user's
    out = capsys.readouterr().out
    assert code == 0 and all(f"kept {d}: {attacker.name}'s" in out for d in hers), out
    assert all((d / "f").read_text() == "hers\n" for d in hers)


def test_attack5_a_failed_build_she_makes_in_a_shared_sticky_tree_while_you_wait_is_not_taken_for_yours(
    jit, node, attacker, monkeypatch
):
    """A team cache whose v1 and v1/failed are root's, sticky and world-writable (an admin's chmod 1777)
    passes the write walk, and anyone may make failed/<key> there. Made while the victim waited for its
    build lock, hers was reported as "another process's build ... failed while this one waited" (with her
    log's text, or none), and the victim never built. It is not a failure of this user's: the victim builds."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    shared = _team_cache(node, "v1/failed")
    real_lock = cache.build_lock

    @contextlib.contextmanager
    def lock_while_she_plants(key):
        hers = shared / "v1" / "failed" / key
        log = "error: her text\\n# exit status 1 after 0.1 s\\n"
        done = attacker.sh(f"mkdir {hers} && printf '{log}' > {hers}/build.log")
        assert done.returncode == 0, done.stderr
        with real_lock(key) as held:
            yield held

    monkeypatch.setattr(cache, "build_lock", lock_while_she_plants)
    status, entry = cache.ensure_built(tc, "dav-2201", cache_dir=shared)
    assert (status, jit.compiles()) == ("built", 1)
    assert entry == cache.entry_dir(shared, spec)
    assert (shared / "v1" / "failed" / spec.key / "build.log").read_text().startswith("error: her text")


@pytest.mark.parametrize("hers_holds", ["a file", "nothing", "a file, made just before the rename"])
def test_attack5_an_entry_she_makes_at_your_key_in_a_shared_sticky_tree_is_not_moved(
    jit, node, attacker, caplog, hers_holds
):
    """A team cache whose directories down to the arch dir are root's, sticky and world-writable: anyone
    may make an entry dir at the key while this user compiles (one made before is passed over at once).
    It is not this user's to move: the publish uses its own copy (as a non-root user must, the sticky bit
    refusing the rename), where root moved hers into its quarantine, a file of another user's moved as a
    bad entry of its own, or, with her dir empty, renamed over it (rename(2) replaces an empty directory);
    one made after the check before the rename is found hers again once the rename has failed."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    final = cache.entry_dir(node.base / "team", spec)
    shared = _team_cache(node, final.parent.relative_to(node.base / "team"))  # down to the arch dir
    real_lock = cache.build_lock
    plant = f"mkdir {final}" + (f" && echo hers > {final}/f" if hers_holds.startswith("a file") else "")

    @contextlib.contextmanager
    def lock_while_she_plants(key):
        with real_lock(key) as held:
            done = attacker.sh(plant)
            assert done.returncode == 0, done.stderr
            yield held

    real_rename = os.rename

    def rename_after_she_plants(src, dst, **kw):
        if dst == final.name and not final.exists():
            done = attacker.sh(plant)
            assert done.returncode == 0, done.stderr
        return real_rename(src, dst, **kw)

    if hers_holds.endswith("rename"):
        jit.mp.setattr(os, "rename", rename_after_she_plants)
    else:
        jit.mp.setattr(cache, "build_lock", lock_while_she_plants)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        status, entry = cache.ensure_built(tc, "dav-2201", cache_dir=shared)
    assert status == "built" and entry != final and (entry / "manifest.json").is_file(), (status, entry)
    assert os.stat(final).st_uid == attacker.uid
    assert sorted(p.name for p in final.iterdir()) == (["f"] if hers_holds != "nothing" else [])
    assert hers_holds == "nothing" or (final / "f").read_text() == "hers\n"
    assert not any((shared / "v1" / "quarantine").glob("*"))  # a missing dir globs to nothing too
    assert "using this process's own copy" in caplog.text


def test_attack5_cache_verify_moves_no_entry_of_hers_in_a_shared_sticky_tree(jit, node, attacker, capsys):
    """A team cache whose directories down to the arch dir are root's, sticky and world-writable: anyone
    may make an entry dir at a key there. One whose manifest names no kernel str is reported bad without
    the trust walk a load does; `cache verify` then moved it into its quarantine as root (only root may
    move another's name in a sticky dir), a dir of hers moved as a bad entry of its own, where the publish,
    the sweep and `cache clean` leave her names alone. It is reported, not moved, and whose it is said."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    final = cache.entry_dir(node.base / "team", spec)
    shared = _team_cache(node, final.parent.relative_to(node.base / "team"))  # down to the arch dir
    made = attacker.sh(f'mkdir {final} && echo \'{{"key_input": {{"kernel": 5}}}}\' > {final}/manifest.json')
    assert made.returncode == 0, made.stderr
    code = cli.main(["cache", "verify", "--cache-dir", str(shared)])
    out = capsys.readouterr().out
    assert code == 1 and f"bad  {final}: " in out and f"(not moved: {attacker.name}'s)" in out, out
    assert os.stat(final).st_uid == attacker.uid and (final / "manifest.json").is_file()
    assert not any((shared / "v1" / "quarantine").glob("*"))


@pytest.mark.parametrize("hers_holds", ["a file", "nothing"])
def test_attack5_a_failed_build_she_made_at_your_key_is_not_replaced_by_yours(jit, node, attacker, hers_holds):
    """A team cache whose v1 and v1/failed are root's, sticky and world-writable: anyone may make
    failed/<key> there. When this user's build of that key fails, its log is kept at failed/<key>,
    replacing an older failure: of its own, not hers. Root deleted her dir to make room, or, with her dir
    empty, renamed over it (rename(2) replaces an empty directory); anyone else fails on it. Hers is
    kept; the build dir is left for the sweep, as when failed/ cannot be written."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    shared = _team_cache(node, "v1/failed")
    hers = shared / "v1" / "failed" / spec.key
    made = attacker.sh(f"mkdir {hers}" + (f" && echo hers > {hers}/f" if hers_holds == "a file" else ""))
    assert made.returncode == 0, made.stderr
    before = sorted(p.name for p in hers.iterdir())
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(Exception, match="fake failure"):
        cache.ensure_built(tc, "dav-2201", cache_dir=shared)
    assert os.stat(hers).st_uid == attacker.uid and sorted(p.name for p in hers.iterdir()) == before
    assert all((hers / name).read_text() == "hers\n" for name in before)


def test_attack5_a_failed_build_she_makes_at_your_key_between_the_look_and_the_rename_is_kept(
    jit, node, attacker, monkeypatch
):
    """The window the second look closes: failed/<key> was free when the build looked, and hers (not
    empty) is there when the rename runs, which then fails on it. Hers is not removed to make room."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    shared = _team_cache(node, "v1/failed")
    hers = shared / "v1" / "failed" / spec.key
    real_rename = os.rename

    def rename(src, dst, **kwargs):
        if dst == spec.key and not hers.exists():  # the move of the failed build aside, after its look
            made = attacker.sh(f"mkdir {hers} && echo hers > {hers}/f")
            assert made.returncode == 0, made.stderr
        return real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    jit.mp.setenv("FAKE_COMPILER_FAIL", "1")
    with pytest.raises(Exception, match="fake failure"):
        cache.ensure_built(tc, "dav-2201", cache_dir=shared)
    assert os.stat(hers).st_uid == attacker.uid and (hers / "f").read_text() == "hers\n"


# --------------------------------------------------------------------------------------------------- attack 6

_PLANTED_AS = """#!/bin/sh
echo "$(id -u) $*" >> {marker}
exec /usr/bin/as "$@"
"""


def test_attack6_an_assembler_planted_in_a_shared_dir_on_path_never_runs(jit, node, attacker, tmp_path):
    """A shared sticky dir on the victim's PATH (as /tmp can be): the attacker adds an ``as`` there that
    runs her code and then the real one, so the build still works. The sticky bit keeps the victim's names
    hers, not that one out, so the compiler never gets that dir: a real build of the emu kernels, as the
    victim, runs the real assembler only and says which entry it left out."""
    planted = node.base / "as"
    made = attacker.sh(f"cat > {planted} <<'EOF'\n{_PLANTED_AS.format(marker=node.marker)}EOF\nchmod 755 {planted}")
    assert made.returncode == 0 and planted.stat().st_uid == attacker.uid, made.stderr
    env = {**os.environ, "PATH": f"{node.base}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env["ASCEND_RMSNORM_CACHE_DIR"] = str(tmp_path / "cache")
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(WORKER), "get_library", "emu", "dav-2201", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    result = json.loads(out.read_text())
    assert result.get("status") == "loaded", (result, done.stderr)
    assert not node.marker.exists(), f"the planted as ran: {node.marker.read_text()}"
    assert f"PATH entry {node.base} left out of the compiler's environment" in done.stderr


# --------------------------------------------------------------------------------------------------- attack 7

_PLANTED_LD = """#!/bin/sh
echo "$(id -u) $*" >> {marker}
exec /usr/bin/ld "$@"
"""


@pytest.mark.skipif(shutil.which("clang++") is None, reason="needs clang++ (whose linker lookup this is)")
def test_attack7_a_linker_planted_beside_a_compiler_in_a_shared_dir_never_runs(jit, node, attacker, tmp_path):
    """The victim's own link to clang++ in a shared sticky dir (the link is hers: nobody can change it).
    clang runs ``ld`` from the directory it was started from before PATH (its InstalledDir, links kept),
    so the attacker adds an ``ld`` there that runs her code, then the real one. Before, the victim's build
    ran it (and cached and loaded what it linked); now the compiler is refused, naming the
    directory, and nothing of the attacker's runs."""
    planted = node.base / "ld"
    made = attacker.sh(f"cat > {planted} <<'EOF'\n{_PLANTED_LD.format(marker=node.marker)}EOF\nchmod 755 {planted}")
    assert made.returncode == 0 and planted.stat().st_uid == attacker.uid, made.stderr
    compiler = node.base / "clang++"
    compiler.symlink_to(shutil.which("clang++"))
    env = {**os.environ, "ASCEND_RMSNORM_CXX": str(compiler), "ASCEND_RMSNORM_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(WORKER), "get_library", "emu", "dav-2201", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    result = json.loads(out.read_text())
    assert not node.marker.exists(), f"the planted ld ran: {node.marker.read_text()}"
    assert result.get("status") is None, (result, done.stderr)
    assert f"refusing to use the compiler {compiler} ($ASCEND_RMSNORM_CXX" in result["error"]
    assert f"{node.base} is writable by everyone (mode 1777), and names are looked up" in result["error"]


# --------------------------------------------------------------------------------------------------- attack 8


def _dead_pid() -> int:
    """The pid of a process that has exited (the kernel may reuse it, but not within this test)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)


def test_attack8_a_dir_renamed_to_a_dead_private_roots_name_in_a_shared_tmpdir_is_not_deleted(
    node, attacker, monkeypatch
):
    """TMPDIR is a shared scratch dir anyone may write, without the sticky bit. The victim keeps a private
    dir of results there; the attacker cannot read or delete what is in it, but can rename it: to the name
    of a private build root whose process died (this user's, this host's and pid namespace's, a dead pid).
    When the victim next needs a private root (the attacker can make the cache unusable for that), the
    sweep of dead roots deleted her results, and only then was the temp dir found not safe. Now a temp
    dir that fails the trust walk is refused before anything in it is touched."""
    from ascend_rmsnorm.errors import CacheWriteError
    from ascend_rmsnorm.jit import layout, process_tag

    ns = process_tag._pid_space()
    if ns is None:
        pytest.skip("no pid namespace to tell a dead process by")
    scratch = node.base / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)  # writable by everyone, not sticky
    results = scratch / "results"
    results.mkdir(mode=0o700)
    (results / "notes.txt").write_text(SECRET_TEXT)
    planted = scratch / f"ascend_rmsnorm-{os.getuid()}-{process_tag._host()}-{_dead_pid()}.{ns}-planted0"
    moved = attacker.sh(f"mv {results} {planted}")
    assert moved.returncode == 0, moved.stderr
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    layout.reset()
    try:
        with pytest.raises(CacheWriteError, match=f"{scratch} is writable by everyone"):
            layout.private_root()
    finally:
        layout.reset()
    assert (planted / "notes.txt").read_text() == SECRET_TEXT
    assert sorted(p.name for p in scratch.iterdir()) == [planted.name]  # and no private root was made there


# --------------------------------------------------------------------------------------------------- attack 9

_PLANTED_HEADER = """{original}
#ifndef PLANTED_ONCE
#define PLANTED_ONCE
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {{
  int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0666);
  if (fd >= 0) {{ (void)write(fd, "x", 1); close(fd); }}
}}
#endif
"""


def _model_kernel_source(node: Node, tmp_path: Path) -> Path:
    """The victim's own copy of the package's kernel in the shared dir, as `bench --model --kernel-source` takes."""
    from ascend_rmsnorm.backends.emu import KERNELS

    source = node.base / "exp.asc"
    shutil.copyfile(KERNELS / "rmsnorm.asc", source)
    source.chmod(0o644)
    return source


def test_attack9_a_header_planted_beside_a_kernel_source_is_not_built_in(jit, node, attacker, tmp_path, caplog):
    """The victim models her own copy of the kernel, kept in a shared sticky dir (`bench --model
    --kernel-source /tmp/exp.asc`). A file beside the source at the path of one of the package's headers
    overrides it, so the attacker adds ``common/platform.h`` there: the package's header plus a constructor.
    It was compiled into the library the victim then loaded (her process ran it). Now a header of someone
    else's is passed over (one warning naming it) and the package's own is used; a source of someone
    else's is refused."""
    import torch

    from ascend_rmsnorm.backends.emu import KERNELS
    from ascend_rmsnorm.perf import kernel as perf_kernel

    source = _model_kernel_source(node, tmp_path)
    original = (KERNELS / "common" / "platform.h").read_text()
    text = _PLANTED_HEADER.format(original=original, marker=node.marker)
    made = attacker.sh(f"mkdir {node.base}/common && cat > {node.base}/common/platform.h <<'EOF'\n{text}EOF\n")
    assert made.returncode == 0, made.stderr
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        kernel = perf_kernel.ModelKernel.from_source(source, cache_dir=tmp_path / "builds")
    assert kernel.plan("fwd", torch.float32, torch.float32, 8, 1024, 8) is not None
    assert hostile.marks(node.marker) == 0, "the planted header was built and run"
    assert f"{node.base / 'common'} belongs to {attacker.name}" in caplog.text
    theirs = node.base / "theirs.asc"
    assert attacker.sh(f"cp {source} {theirs}").returncode == 0
    with pytest.raises(ValueError, match=f"{theirs} belongs to {attacker.name}"):
        perf_kernel.ModelKernel.from_source(theirs, cache_dir=tmp_path / "builds")
    assert hostile.marks(node.marker) == 0


# --------------------------------------------------------------------------------------------------- attack 10


def test_attack10_a_kernel_source_staged_in_a_shared_tmpdir_cannot_be_swapped(jit, node, attacker, tmp_path,
                                                                              monkeypatch):  # fmt: skip
    """`--kernel-source` stages the source and its headers in a temp dir before building them. With TMPDIR a
    shared scratch dir anyone may write (not sticky), the attacker renames the victim's staging dir away
    and puts her own kernels in its place before the build reads them (here at that window, as a race
    would). They were compiled and loaded. Now such a TMPDIR is refused before anything is staged."""
    from ascend_rmsnorm.backends.emu import KERNELS
    from ascend_rmsnorm.jit import cache as jit_cache
    from ascend_rmsnorm.perf import kernel as perf_kernel

    source = _model_kernel_source(node, tmp_path)
    scratch = node.base / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    evil = node.base / "evil-kernels"
    shutil.copytree(KERNELS, evil, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(KERNELS / "rmsnorm.asc", evil / "rmsnorm.asc")
    platform = evil / "common" / "platform.h"
    platform.write_text(_PLANTED_HEADER.format(original=platform.read_text(), marker=node.marker))
    hostile.chown_tree(evil, attacker)
    real = jit_cache.ensure_built

    def race_won(tc, arch, *, kernels_dir, **kw):  # the attacker's swap, at the window before the build reads
        staged = Path(kernels_dir)
        swap = attacker.sh(f"mv {staged.parent} {staged.parent}.gone && mkdir {staged.parent} && "
                           f"cp -r {evil} {staged}")  # fmt: skip
        assert swap.returncode == 0, swap.stderr
        return real(tc, arch, kernels_dir=kernels_dir, **kw)

    monkeypatch.setattr(jit_cache, "ensure_built", race_won)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(jit_cache.CacheWriteError, match=f"{scratch} is writable by everyone"):
        perf_kernel.ModelKernel.from_source(source, cache_dir=tmp_path / "builds")
    assert hostile.marks(node.marker) == 0, "the attacker's kernels were built and run"


# --------------------------------------------------------------------------------------------------- attack 11


def _without_bypass(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """This Python run as root without the capabilities that bypass file permissions, so that it meets a
    folder's mode as any other account would (the venv lies under /root, which the throwaway accounts
    cannot reach)."""
    no_bypass = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", sys.executable]
    return subprocess.run([*no_bypass, *argv], env=env, capture_output=True, text=True, timeout=300)


def test_attack11_a_folder_you_cannot_search_beside_a_kernel_source_does_not_crash_the_model(node, attacker, tmp_path):
    """Beside the victim's kernel source in a shared sticky dir, the attacker makes an empty ``common``
    folder of mode 000. Looking for an override of ``common/*.h`` there raised PermissionError, and `bench
    --model --kernel-source` died with it; now a place that cannot be looked into holds no override (the
    package's header is used). The victim is root without the capabilities that bypass permissions, so it
    meets the mode as any other account would."""
    source = _model_kernel_source(node, tmp_path)
    made = attacker.sh(f"mkdir {node.base}/common && chmod 000 {node.base}/common")
    assert made.returncode == 0, made.stderr
    probe = (  # the lookup `bench --model --kernel-source` makes before it stages and builds anything
        "from pathlib import Path; from ascend_rmsnorm.backends.emu import KERNELS; "
        "from ascend_rmsnorm.perf import kernel; "
        f"found = kernel._kernel_headers(Path({str(source)!r})); "
        "print(found['common/platform.h'] == KERNELS / 'common' / 'platform.h')"
    )
    done = _without_bypass("-c", probe)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"


# --------------------------------------------------------------------------------------------------- attack 12


def test_attack12_a_calibration_folder_you_cannot_search_does_not_stop_bench_model(node, attacker, tmp_path):
    """A team cache in a shared sticky dir: the attacker makes its ``calibration/`` folder first, mode 000.
    Looking for this CANN's calibration file there raised PermissionError, so `bench --model` failed
    ("Permission denied") until the victim passed a preset; now a place that cannot be looked into holds no
    calibration, and nothing of the attacker's is ever read. The victim is root without the capabilities
    that bypass permissions, so it meets the mode as any other account would."""
    team = node.base / "team-cache"
    made = attacker.sh(f"mkdir -p {team}/calibration && chmod 000 {team}/calibration")
    assert made.returncode == 0, made.stderr
    probe = (
        "from ascend_rmsnorm.perf import calibrate; "
        f"print(calibrate.find_calibration('Ascend910B2', '8.1.RC1', {str(team)!r}))"
    )
    done = _without_bypass("-c", probe)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"


# --------------------------------------------------------------------------------------------------- attack 13


def test_attack13_a_tier_below_a_folder_you_cannot_search_does_not_stop_info_cache_path_or_the_model(
    node, attacker, tmp_path
):
    """The victim's prebuilt dir is a place in a shared sticky dir that is not there yet; the attacker makes
    the folder above it first, mode 000. `ascend-rmsnorm info` and `cache path` (what one runs to see why)
    and `bench --model`'s calibration lookup died with PermissionError; now such a tier is simply not there
    (nothing in it can be read). The victim is root without the capabilities that bypass permissions."""
    made = attacker.sh(f"mkdir {node.base}/team && chmod 000 {node.base}/team")
    assert made.returncode == 0, made.stderr
    prebuilt = node.base / "team" / "prebuilt"
    env = {**os.environ, "ASCEND_RMSNORM_PREBUILT_DIR": str(prebuilt), "ASCEND_RMSNORM_CACHE_DIR": str(tmp_path)}
    probe = "from ascend_rmsnorm.perf import calibrate; print(calibrate.find_calibration('Ascend910B2', '8.1.RC1'))"
    for argv, want in (
        (["-m", "ascend_rmsnorm", "cache", "path"], f"prebuilt  {prebuilt}  (read-only, missing)"),
        (["-m", "ascend_rmsnorm", "info"], str(prebuilt)),
        (["-c", probe], "None"),
    ):
        done = _without_bypass(*argv, env=env)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
        assert want in done.stdout, (argv, done.stdout)


@pytest.fixture
def maker():
    """A running process that stands for a test run which leaves something behind; the test ends it
    (``_end``) as a killed run ends."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        _end(proc)


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=60)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_throwaway_account_whose_maker_is_gone_is_swept_and_a_live_makers_is_kept(attacker, maker):
    """A run killed before its teardown leaves its accounts (one with gid 0 as primary group would make
    later runs skip attack 4): the next run removes those whose maker is gone, and no other."""
    name = f"arn{os.getpid() % 100000}z"
    try:
        comment = f"{hostile.ACCOUNT_MARK} {hostile.maker_note(maker.pid)}"
        hostile._admin(["useradd", "-M", "-s", "/usr/sbin/nologin", "-U", "-c", comment, name])
        assert name not in hostile.sweep_leftover_accounts()  # its maker runs
        _end(maker)
        assert name in hostile.sweep_leftover_accounts()
        names = {p.pw_name for p in pwd.getpwall()}
        groups = {g.gr_name for g in grp.getgrall()}
        assert name not in names and name not in groups
        assert attacker.name in names  # made by this process, which runs
    finally:
        if name in {p.pw_name for p in pwd.getpwall()}:
            hostile.remove_account(hostile.Account(name, 0, 0), own_group=True)


def test_the_sweep_passes_over_a_leftover_it_cannot_remove_and_one_a_peer_removed_first(attacker, monkeypatch):
    """The sweep is housekeeping before a fixture makes its account: an account a killed run left with a
    process still running as it (its attacker program, which runs until SIGTERM; userdel refuses such an
    account), or one a concurrent run's sweep removed between this one's listing and its userdel, must
    not fail the fixture."""
    name = f"arn{os.getpid() % 100000}y"
    comment = f"{hostile.ACCOUNT_MARK} pid={_dead_pid()} start=0"
    hostile._admin(["useradd", "-M", "-s", "/usr/sbin/nologin", "-U", "-c", comment, name])
    entry = pwd.getpwnam(name)
    account = hostile.Account(name, entry.pw_uid, entry.pw_gid)
    # it runs as the account once it says so: before setpriv's switch, userdel would find no process of it
    leftover = account.run(["/bin/sh", "-c", "echo running; exec sleep 600"], stdout=subprocess.PIPE, text=True)
    try:
        assert leftover.stdout.readline() == "running\n"
        assert name not in hostile.sweep_leftover_accounts()  # userdel refuses it while its process runs
        assert name in {p.pw_name for p in pwd.getpwall()}
        _end(leftover)
        listed = pwd.getpwall()  # a peer's sweep removes it after this listing, before this one's userdel
        if hostile._user_exists(name):  # (unless a real peer's sweep was first)
            hostile.remove_account(account, own_group=True)
        monkeypatch.setattr(hostile.pwd, "getpwall", lambda: listed)
        assert name not in hostile.sweep_leftover_accounts()
    finally:
        _end(leftover)
        monkeypatch.undo()
        if name in {p.pw_name for p in pwd.getpwall()}:
            hostile.remove_account(account, own_group=True)


_START_FLIPPER = """
import subprocess, sys
uid, gid, tool, link, a, b = sys.argv[1:]
as_them = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
p = subprocess.Popen([*as_them, tool, "flip", link, a, b], stdout=subprocess.PIPE, text=True)
assert p.stdout.readline() == "ready\\n"
print(p.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_an_attackers_flipper_ends_with_the_run_that_started_it(node, attacker):
    """A run killed before its teardown (SIGKILL: no fixture runs) must not leave its link flipper running
    as the throwaway account: it would keep a core busy, and the next run's sweep could not remove the
    account while it runs. The flipper asks for SIGTERM at its parent's death."""
    a, b = node.base / "flip-a", node.base / "flip-b"
    a.mkdir()
    b.mkdir()
    argv = [str(attacker.uid), str(attacker.gid), str(node.tool), str(node.base / "flip-link"), str(a), str(b)]
    starter = subprocess.Popen(
        [sys.executable, "-c", _START_FLIPPER, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    pid = int(starter.stdout.readline())
    pidfd = os.pidfd_open(pid)
    try:
        starter.kill()
        starter.wait(timeout=60)
        gone = select.poll()
        gone.register(pidfd, select.POLLIN)
        assert gone.poll(60_000), "the flipper outlived the process that started it"  # a bound, not a wait
    finally:
        os.close(pidfd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_host_setting_a_killed_run_changed_is_put_back_by_the_next(maker):
    """fs.protected_symlinks=0 (the attacks' host setting) left by a run killed before its teardown would
    let every user's links in sticky dirs be followed: ``host_setting`` notes the old value first, and the
    next run's ``restore_left_settings`` puts it back once the maker is gone, not before."""
    knob = Path("/proc/sys/fs/protected_symlinks")
    original = knob.read_text().strip()
    other = "1" if original == "0" else "0"
    with hostile.host_setting(knob, other) as before:
        (record,) = hostile.SETTINGS_DIR.glob(f"protected_symlinks.{os.getpid()}")
        assert before == original and knob.read_text().strip() == other
        assert record.read_text().split("\n")[:2] == [str(knob), original]
    assert knob.read_text().strip() == original and not record.exists()

    left = hostile.SETTINGS_DIR / f"protected_symlinks.{maker.pid}"  # a run killed with its setting changed
    try:
        left.write_text(f"{knob}\n{original}\n{hostile.maker_note(maker.pid)}")
        knob.write_text(other)
        assert hostile.restore_left_settings() == [] and knob.read_text().strip() == other  # its maker runs
        _end(maker)
        assert hostile.restore_left_settings() == [f"{knob}={original}"]
        assert knob.read_text().strip() == original and not left.exists()
    finally:
        knob.write_text(original)
        left.unlink(missing_ok=True)


def test_a_node_dir_a_killed_run_left_is_removed_by_the_next_and_a_live_ones_is_kept(tmp_path, maker):
    """The node dir holds files of throwaway accounts, which a killed run leaves behind in /tmp."""
    dead = tmp_path / f"{hostile.NODE_PREFIX}{maker.pid}-{hostile._start_ticks(maker.pid)}-abc"
    (dead / "theirs").mkdir(parents=True)
    mine = hostile.make_node_dir(tmp_path)
    assert hostile.sweep_left_node_dirs(tmp_path) == [] and dead.exists()  # its maker runs
    _end(maker)
    assert hostile.sweep_left_node_dirs(tmp_path) == [dead] and not dead.exists()
    assert mine.is_dir()  # this process's own


# --------------------------------------------------------------------------------------------------- attack 14


@pytest.mark.parametrize("hard_links", [True, False], ids=["link", "no-hard-links"])
def test_attack14_a_results_file_she_made_at_your_out_path_in_a_shared_sticky_dir_is_not_replaced(
    node, attacker, monkeypatch, hard_links
):
    """``bench --calibrate --emu --out`` / ``--against-measured --out`` (or its default in the working
    directory) in a shared sticky dir such as /tmp, where she already made a file of that name: the write
    walk passes the sticky dir, and root's rename replaced her file with the results (only root may
    replace another's name there; anyone else failed, after the whole run). It is hers: refused, named,
    before a run and at the write, and left as it was."""
    from ascend_rmsnorm.errors import CacheWriteError
    from ascend_rmsnorm.perf import calibrate

    if not hard_links:  # a filesystem that refuses them: the same test, then the rename

        def no_link(*args, **kwargs):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", no_link)
    hers = node.base / "results.json"
    made = attacker.sh(f"echo hers > {hers}")
    assert made.returncode == 0, made.stderr
    with pytest.raises(CacheWriteError, match=f"belongs to {attacker.name}"):
        calibrate._check_writable(hers)
    with pytest.raises(CacheWriteError, match=f"belongs to {attacker.name}"):
        calibrate.write_json(hers, {"mine": 1})
    assert hers.read_text() == "hers\n" and os.lstat(hers).st_uid == attacker.uid
    assert [p.name for p in node.base.iterdir() if p.name.startswith(".results.json")] == []  # no temp file left
    mine = node.base / "mine.json"  # a name of your own there is replaced, as before
    mine.write_text("old\n")
    assert calibrate.write_json(mine, {"mine": 1}) == mine and json.loads(mine.read_text()) == {"mine": 1}
    assert calibrate.write_json(node.base / "new.json", {"new": 1}).is_file()


def test_attack5_clean_all_keeps_her_entry_failed_build_and_quarantine_in_a_shared_sticky_tree(
    jit, node, attacker, capsys
):
    """A team cache whose directories down to the arch dir, and failed/ and quarantine/, are root's, sticky
    and world-writable: anyone may make an entry at a key, a failed/<key> and a quarantined entry there.
    `cache clean --all` removed all of v1 as root, hers with it (anyone else got "permission denied" and
    exit status 1 from it, for good), where every other removal keeps another user's names and says
    whose. Now it removes everything of this user's and keeps hers (and the dirs that hold them)."""
    tc = jit.npu("8.5.0")
    spec = cache.build_spec(tc, "dav-2201")
    final = cache.entry_dir(node.base / "team", spec)
    shared = _team_cache(node, final.parent.relative_to(node.base / "team"), "v1/failed", "v1/quarantine")
    hers = [final, shared / "v1" / "failed" / spec.key, shared / "v1" / "quarantine" / f"{spec.key}-old"]
    made = attacker.sh(" && ".join(f"mkdir {d} && echo hers > {d}/f" for d in hers))
    assert made.returncode == 0, made.stderr
    mine = [shared / "v1" / "failed" / "mykey", final.parent / "mykey"]
    for d in mine:
        d.mkdir()
        (d / "f").write_text("mine\n")
    code = cli.main(["cache", "clean", "--all", "--cache-dir", str(shared)])
    out = capsys.readouterr().out
    assert code == 0 and all(f"kept {d}: {attacker.name}'s" in out for d in hers), out
    assert all((d / "f").read_text() == "hers\n" and os.stat(d).st_uid == attacker.uid for d in hers)
    assert not any(d.exists() for d in mine), out


def test_attack5_a_trusted_users_entry_that_fails_to_load_is_passed_over_not_moved(jit, node, attacker, caplog):
    """A team cache whose directories down to the arch dir are root's, sticky and world-writable, and
    ``ASCEND_RMSNORM_TRUSTED_USERS`` names her: her entry at the key passes the checks and is loaded, and
    when it fails to load root moved it into its own quarantine (a dir of hers no sweep or clean of root's
    ever removes), where `cache verify` leaves a bad entry of another user's where it is. It is passed
    over, not moved, and this process builds its own copy."""
    tc = jit.emu()
    spec = cache.build_spec(tc, "dav-2201")
    final = cache.entry_dir(node.base / "team", spec)
    shared = _team_cache(node, final.parent.relative_to(node.base / "team"))  # down to the arch dir
    bad = node.base / "bad.so"
    bad.write_bytes(b"not an ELF file")
    staged = hostile.write_entry(node.base / "stage", spec, bad)
    shutil.copytree(staged, final, dirs_exist_ok=True)
    hostile.chown_tree(final, attacker)
    jit.mp.setenv("ASCEND_RMSNORM_TRUSTED_USERS", attacker.name)
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        cache.get_library(tc, "dav-2201", cache_dir=shared)
    assert os.stat(final).st_uid == attacker.uid and (final / cache.MANIFEST_NAME).is_file()
    assert not any((shared / "v1" / "quarantine").glob("*")), caplog.text
    assert "using this process's own copy" in caplog.text


# --------------------------------------------------------------------------------------------------- attack 15


@pytest.fixture
def unprotected_hardlinks():
    """A host where anyone may hard-link a file they do not own (the kernel's own default; the sysctl
    ``fs.protected_hardlinks=1`` of most distributions refuses it, and the attack with it)."""
    yield from _unprotected("protected_hardlinks")


def test_attack15_a_hard_link_she_makes_to_your_file_in_a_team_calibration_folder_is_not_a_calibration(
    node, attacker, unprotected_hardlinks, caplog
):
    """A team cache whose ``calibration/`` is root's, sticky and world-writable (an admin's chmod 1777). On
    a host that lets anyone hard-link a file they do not own, she links a params file of the victim's (the
    closed loop's emulation result, in the same cache) at this SoC's calibration name: a file of the
    victim's, so it passed the ownership test, and `bench --model` modelled with the emulation's numbers as
    "prices fitted on an NPU". Its link count does not tell: once the victim runs the closed loop again,
    the planted name is the old file's only one. In such a folder a file is taken only where it says it is
    the NPU calibration of this SoC and of the CANN its name holds; the victim's own, written there, still is."""
    from ascend_rmsnorm.perf import calibrate as cal

    soc = "Ascend910B2"
    shared = _team_cache(node, "calibration")
    emu_record = {"source": "emulation", "soc": soc, "cann": None}
    emu = cal.write_json(cal.emu_result_path("pess", soc, shared), {"preset": "pess", "launch_us": 99.0,
                                                                      "calibration": emu_record})  # fmt: skip
    planted = shared / "calibration" / cal.calibration_name(soc, "8.5.RC1")
    made = attacker.sh(f"ln {emu} {planted}")
    assert made.returncode == 0, made.stderr
    cal.write_json(emu, {"preset": "pess", "launch_us": 98.0, "calibration": emu_record})  # the loop run again
    assert os.stat(planted).st_uid == 0 and os.stat(planted).st_nlink == 1
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        assert cal.find_calibration(soc, "8.5.RC1", shared) is None
        assert cal.find_calibration(soc, None, shared) is None
        assert cal.model_params([soc], shared) == {}
    assert f"passed over {planted}: it was not measured on an NPU" in caplog.text
    record = {"source": "npu events", "soc": soc, "cann": "8.3.RC1"}
    mine = cal.write_json(shared / "calibration" / cal.calibration_name(soc, "8.3.RC1"),
                          {"launch_us": 2.0, "calibration": record})  # fmt: skip
    assert cal.find_calibration(soc, "8.5.RC1", shared) == mine  # this SoC's newest that is a calibration
    ((params, path),) = cal.model_params([soc], shared).values()
    assert path == mine and params.launch_us == 2.0
    elsewhere = shared / "calibration" / cal.calibration_name(soc, "9.0.RC1")  # her link to it, at another CANN
    made = attacker.sh(f"ln {mine} {elsewhere}")
    assert made.returncode == 0, made.stderr
    assert cal.find_calibration(soc, "9.0.RC1", shared) == mine


# --------------------------------------------------------------------------------------------------- attack 16


def test_attack16_her_file_at_your_calibration_name_in_a_team_cache_is_refused_with_a_usable_fix(node, attacker):
    """A team cache whose ``calibration/`` is root's, sticky and world-writable: she makes this SoC's and
    CANN's calibration name first. `bench --calibrate` refuses before it measures and leaves her file as it
    was, as it must; but it said "give --out a path of your own", and `bench --calibrate` on an NPU refuses
    --out. It names what the NPU calibration can take: a cache of your own; so it does where she made
    the team cache's ``calibration/`` folder herself (it gave the kernel cache's advice, ``warm``)."""
    from ascend_rmsnorm.errors import CacheWriteError
    from ascend_rmsnorm.perf import calibrate as cal
    from ascend_rmsnorm.perf import params as perf_params

    soc = "Ascend910B2"
    shared = _team_cache(node, "calibration")
    hers = shared / "calibration" / cal.calibration_name(soc, "8.5.RC1")
    made = attacker.sh(f"echo hers > {hers}")
    assert made.returncode == 0, made.stderr

    class NotMeasured(cal.EmuRunner):
        def __call__(self, probe):
            raise AssertionError("measured before the write check")

    runner = NotMeasured(perf_params.PRESETS["base"], soc, 48)
    with pytest.raises(CacheWriteError, match=f"belongs to {attacker.name}") as caught:
        cal.calibrate_npu(runner, soc, 48, "8.5.RC1", 1.8, False, print, shared, cal.EMU_SIZES)
    assert "ASCEND_RMSNORM_CACHE_DIR" in str(caught.value) and "give --out" not in str(caught.value)
    assert hers.read_text() == "hers\n" and os.stat(hers).st_uid == attacker.uid
    # she made the team cache's calibration/ itself: the same fix, not the kernel cache's (`warm --cache-dir`)
    other = node.base / "team2"
    other.mkdir()
    other.chmod(0o1777)
    assert attacker.sh(f"mkdir {other}/calibration").returncode == 0
    with pytest.raises(CacheWriteError, match=f"{other / 'calibration'} belongs to {attacker.name}") as caught:
        cal.calibrate_npu(runner, soc, 48, "8.5.RC1", 1.8, False, print, other, cal.EMU_SIZES)
    assert "or set ASCEND_RMSNORM_CACHE_DIR" in str(caught.value) and "warm" not in str(caught.value)
    assert f"set ASCEND_RMSNORM_TRUSTED_USERS={attacker.name}" in str(caught.value)  # the walk's other advice stays


# --------------------------------------------------------------------------------------------------- attack 17


def test_attack17_a_file_she_hard_links_beside_your_kernel_source_in_a_shared_dir_is_not_built_in(
    jit, node, attacker, tmp_path, unprotected_hardlinks, caplog
):
    """The victim models her own copy of the kernel kept in a shared sticky dir (`bench --model
    --kernel-source /tmp/exp.asc`); every ``*.h`` beside it is staged beside it, and the kernel's
    ``#include "kernel_operator.h"`` finds a file there before the emulation's. On a host that lets anyone
    hard-link a file they do not own, she links a root-only file (one she cannot read) there under that
    name: it is root's, so it passed the ownership test, was compiled in, and the compiler quoted its lines
    (to the victim, and into a build log that others may read in a team cache). A header is taken from
    beside the source only where nobody else can add a name (the package's is used, with one warning)."""
    import torch

    from ascend_rmsnorm.perf import kernel as perf_kernel

    source = _model_kernel_source(node, tmp_path)
    vault = node.base / "vault"
    vault.mkdir(mode=0o755)
    secret = vault / "root-only.txt"
    secret.write_text("root-only-secret-line\n")
    secret.chmod(0o600)
    planted = node.base / "kernel_operator.h"
    made = attacker.sh(f"cat {secret} 2>/dev/null; ln {secret} {planted}")
    assert made.returncode == 0 and made.stdout == "", (made.stdout, made.stderr)  # linked, never read by her
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        kernel = perf_kernel.ModelKernel.from_source(source, cache_dir=tmp_path / "builds")
    assert kernel.plan("fwd", torch.float32, torch.float32, 8, 1024, 8) is not None
    assert f"passed over {planted}" in caplog.text


# --------------------------------------------------------------------------------------------------- attack 18

_PLANTED_CXX = """#!/bin/sh
echo "$(id -u) $*" >> {marker}
exec {real} "$@"
"""


@pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (whose settings these are)")
@pytest.mark.parametrize("where", ["team-ccache-dir", "ccache-path", "home"])
def test_attack18_a_ccache_setting_she_controls_never_picks_the_compiler(jit, node, attacker, tmp_path, where):
    """The victim's ``c++`` is ccache's masquerade link (a dir such as Debian's /usr/lib/ccache first on
    PATH). The package runs it with ``CCACHE_DISABLE=1``, so that no object comes from a cache others
    write; but ccache still reads its settings, and one names the compiler it runs: ``compiler`` in the
    ccache.conf of its cache dir (a team's shared ``CCACHE_DIR``, here sticky and world-writable) or of the
    home dir (root after a ``sudo -E`` that kept her ``HOME``), or ``CCACHE_PATH``, the dirs ccache finds
    the real compiler in (a shared sticky one), which the PATH filter never sees. She puts a compiler of
    hers there, which runs her code, then the real one. Before, the victim's toolchain discovery ran it (its
    ``--version``; every build runs the same way); now ccache gets no settings but the package's."""
    real = shutil.which("c++", path="/usr/bin:/bin")
    masquerade = tmp_path / "ccache-bin"
    masquerade.mkdir()
    (masquerade / "c++").symlink_to(shutil.which("ccache"))
    hers = node.base / "her-c++"
    script = _PLANTED_CXX.format(marker=node.marker, real=real)
    made = attacker.sh(f"cat > {hers} <<'EOF'\n{script}EOF\nchmod 755 {hers}")
    assert made.returncode == 0 and hers.stat().st_uid == attacker.uid, made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE_") and k != "XDG_CONFIG_HOME"}
    env["PATH"] = f"{masquerade}:{env['PATH']}"
    env.pop("ASCEND_RMSNORM_CXX", None)
    conf = f"compiler = {hers}"
    if where == "team-ccache-dir":
        team = node.base / "team-ccache"
        team.mkdir()
        team.chmod(0o1777)
        made = attacker.sh(f"echo '{conf}' > {team}/ccache.conf")
        env["CCACHE_DIR"] = str(team)
    elif where == "home":
        home = node.base / "her-home"
        made = attacker.sh(f"mkdir -p {home}/.config/ccache && echo '{conf}' > {home}/.config/ccache/ccache.conf")
        env["HOME"] = str(home)
    else:
        made = attacker.sh(f"ln -s {hers} {node.base}/c++")
        env["CCACHE_PATH"] = str(node.base)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(WORKER), "key", "emu", "dav-2201", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    result = json.loads(out.read_text())
    assert not node.marker.exists(), f"her compiler ran: {node.marker.read_text()}"
    assert "key" in result, (result, done.stderr)


# --------------------------------------------------------------------------------------------------- attack 19

_PLANTED_MATH_H = """#ifndef PLANTED_MATH_H
#define PLANTED_MATH_H
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {{
  int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0666);
  if (fd >= 0) {{ (void)write(fd, "x", 1); close(fd); }}
}}
#endif
#include_next <math.h>
"""


@pytest.mark.skipif(unshare_prefix() is None, reason="needs a private mount namespace (unshare)")
@pytest.mark.parametrize("how", ["path", "explicit"])
def test_attack19_a_compiler_whose_default_header_dir_others_can_write_is_not_used(jit, node, attacker, tmp_path, how):
    """A compiler takes headers from its default include dirs, which no command line names: gcc's ``<...>``
    search goes through /usr/local/include before /usr/include, so a math.h there comes before the C
    library's for the emu kernels' ``<cmath>``. Debian long made /usr/local root's, group ``staff``, mode
    2775: a member of that group plants a math.h that adds a constructor, then includes the real one. The
    package leaves a group-writable PATH entry out of the compiler's environment, but it never looked at
    these dirs: the emu build compiled her header in (the same key as a clean build's) and the victim
    loaded it, her code running as root. Here /usr/local/include is such a dir (root's, her group, 2775)
    in a private mount namespace. The compiler that searches it is not used: one found on PATH is skipped
    and none is left, one ``ASCEND_RMSNORM_CXX`` names is refused; both name the dir."""
    staff = node.base / "usr-local-include"
    staff.mkdir()
    os.chown(staff, 0, attacker.gid)
    staff.chmod(0o2775)
    made = attacker.sh(f"cat > {staff}/math.h <<'EOF'\n{_PLANTED_MATH_H.format(marker=node.marker)}EOF")
    assert made.returncode == 0, made.stderr
    env = {"ASCEND_RMSNORM_CXX": "/usr/bin/c++"} if how == "explicit" else {}
    out = tmp_path / "result.json"
    done = run_in_mount_ns(f'mount --bind {staff} /usr/local/include && "$PY" {WORKER} key emu dav-2201 {out}', env)
    result = json.loads(out.read_text())
    assert "error" in result, (result, done.stderr)
    what = "refusing to use the compiler /usr/bin/c++" if how == "explicit" else "no host C++ compiler 'c++'"
    assert what in result["error"]
    assert f"/usr/local/include is writable by the group {attacker.name} (mode 2775)" in result["error"]
    assert not node.marker.exists()


# --------------------------------------------------------------------------------------------------- attack 20


def test_attack20_a_fifo_she_made_at_a_params_file_name_is_an_error_not_a_hang(node, attacker):
    """``bench --model --params FILE`` (``--calibrate --emu --params`` too) with FILE in a shared sticky dir:
    a team's prices that are not there yet, or a name she can guess. She makes a FIFO there first. The file
    was opened as any file, which for a FIFO nobody writes blocks for ever: the victim's run hung. Now it is
    opened without blocking and read only if it is a regular file: the one line names --params, the path
    and why."""
    from ascend_rmsnorm.perf import params as perf_params

    fifo = node.base / "prices.json"
    made = attacker.sh(f"mkfifo -m 666 {fifo}")
    assert made.returncode == 0, made.stderr
    outcome: dict[str, str] = {}

    def read() -> None:
        try:
            perf_params.load_params(None, None, fifo)
        except ValueError as err:
            outcome["error"] = str(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)  # a bound, not a wait: it returns at once, or never
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked open returns (EOF), and the test fails
        reader.join(timeout=10)
        pytest.fail(f"opening the FIFO {fifo} named as a params file blocked")
    assert outcome.get("error") == f"--params {fifo}: cannot read it (not a regular file)", outcome


# --------------------------------------------------------------------------------------------------- attack 21

#: A kernel source whose whole build is one short compile: a header, and the ABI symbol publishing looks for.
_TINY_KERNEL = '#include <cstddef>\nextern "C" long ascend_rmsnorm_abi_version(void) { return sizeof(std::size_t); }\n'


def _tiny_build(tmp_path: Path) -> Path:
    """Discovery of the emu toolchain (``ASCEND_RMSNORM_CXX``) and a build through the cache of
    ``_TINY_KERNEL``, as the package runs them (``toolpath.compiler_env``): the entry made."""
    from ascend_rmsnorm.jit import toolchain

    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "rmsnorm.asc").write_text(_TINY_KERNEL)
    status, entry = cache.ensure_built(toolchain.get_toolchain("emu"), "dav-2201", kernels_dir=kernels)
    assert status == "built" and (entry / cache.LIB_NAME).is_file()
    return entry


#: A gcc plugin that gcc loads and lets the compile go on: her code is its constructor.
_PLUGIN = """#include <fcntl.h>
#include <unistd.h>
int plugin_is_GPL_compatible;
int plugin_init(void *info, void *version) {{ (void)info; (void)version; return 0; }}
__attribute__((constructor)) static void planted(void) {{
  int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0666);
  if (fd >= 0) {{ (void)write(fd, "x", 1); close(fd); }}
}}
"""


def test_attack21_her_plugin_that_gcc_compare_debug_names_never_loads_in_your_compiler(jit, node, attacker, tmp_path,
                                                                                        monkeypatch):  # fmt: skip
    """gcc runs a second compilation when ``GCC_COMPARE_DEBUG`` is set (its ``-fcompare-debug``), with the
    variable's value as that compilation's options when it starts with a dash: options no command line
    names and the cache key does not hold. The victim's value names a file in a shared sticky dir (a
    team's plugin there, say, ``-fplugin=/tmp/.../checker.so``); the attacker puts a shared object of hers
    at that name, whose constructor runs her code. Before, the victim's build loaded it into cc1plus,
    running as root; now the compiler never sees the variable."""
    plugin = node.base / "checker.so"
    (node.base / "checker.c").write_text(_PLUGIN.format(marker=node.marker))
    subprocess.run([hostile.CC, "-shared", "-fPIC", "-o", str(plugin), str(node.base / "checker.c")], check=True)
    os.lchown(plugin, attacker.uid, attacker.gid)  # hers: she could have built it anywhere and put it there
    gcc = shutil.which("g++", path="/usr/bin:/bin")
    if gcc is None:
        pytest.skip("needs g++ (whose variable this is)")
    monkeypatch.setenv("ASCEND_RMSNORM_CXX", gcc)
    monkeypatch.setenv("GCC_COMPARE_DEBUG", f"-fplugin={plugin}")
    _tiny_build(tmp_path)
    assert hostile.marks(node.marker) == 0, "her plugin was loaded into the victim's compiler"


@pytest.mark.skipif(shutil.which("clang++") is None, reason="needs clang++ (whose variables these are)")
@pytest.mark.parametrize("variable", ["CC_PRINT_OPTIONS", "CC_PRINT_HEADERS"])
def test_attack21_a_clang_trace_file_named_in_a_shared_dir_never_follows_her_link(jit, node, attacker, tmp_path,
                                                                                   monkeypatch, unprotected_symlinks,
                                                                                   variable):  # fmt: skip
    """clang's driver appends its compile command lines (``CC_PRINT_OPTIONS``) or the headers it read
    (``CC_PRINT_HEADERS``; ``CC_LOG_DIAGNOSTICS`` and the ``CC_PRINT_*_STAT`` ones alike) to the file that
    ``<variable>_FILE`` names, following a link there and creating it if missing, as gcc writes
    ``DEPENDENCIES_OUTPUT``. The victim's build tracing names a file in a shared sticky dir; the attacker
    makes that name a link to a file of the victim's first. Before, the victim's build (and toolchain
    discovery's ``-E -v`` run, which every process makes) wrote through her link into the victim's file,
    as root; now the compiler gets none of these variables."""
    log = node.base / "clang-trace.log"
    made = attacker.sh(f"ln -s {node.secret} {log}")
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("ASCEND_RMSNORM_CXX", shutil.which("clang++"))
    monkeypatch.setenv(variable, "1")
    monkeypatch.setenv(f"{variable}_FILE", str(log))
    _tiny_build(tmp_path)
    assert node.secret_intact(), f"the victim's file was written through her link: {node.secret.read_text()[:300]!r}"


# --------------------------------------------------------------------------------------------------- attack 22

_PLANTED_MODULE = """import os
fd = os.open("{marker}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
os.write(fd, b"x")
os.close(fd)


def main():
    return 0
"""


def test_attack22_the_cluster_example_run_from_a_shared_dir_imports_nothing_from_it(jit, node, attacker, tmp_path):
    """CANN's ``set_env.sh`` puts its dirs before the old value (``...:$PYTHONPATH``, ``...:$LD_LIBRARY_PATH``),
    so on a node where one was unset it leaves an empty entry, which Python (and the dynamic loader) take as
    the working directory. Root runs ``examples/warm_cache_cluster.sh`` from a shared dir such as /tmp; the
    attacker has put a ``_ascend_rmsnorm_cli.py`` there, the module the ``ascend-rmsnorm`` console script
    imports (and a ``filelock.py``, which a build imports: in the tests the package itself may come from an
    earlier entry; and a ``sitecustomize.py``, which every Python start imports). Before, the script's
    ``warm`` and ``cache verify`` ran hers, as root; now the script keeps only the absolute entries of
    those variables before it runs anything."""
    fake = jit.use(jit.cann("8.5.0"))
    # the console script's module; one a build imports; one every Python start imports (site), whatever
    # else is installed where, and whether or not a build runs
    for name in ("_ascend_rmsnorm_cli", "filelock", "sitecustomize"):
        made = attacker.sh(f"cat > {node.base}/{name}.py <<'EOF'\n{_PLANTED_MODULE.format(marker=node.marker)}EOF")
        assert made.returncode == 0, made.stderr
    shared = tmp_path / "shared"
    env = {**os.environ, "SHARED": str(shared), "ASCEND_HOME_PATH": str(fake.alias)}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    # as set_env.sh leaves it: its dirs, then the old value (ours, where the tests run with one), then nothing
    old = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([f"{fake.alias}/python/site-packages", *old, ""])
    example = Path(__file__).resolve().parents[2] / "examples" / "warm_cache_cluster.sh"
    done = subprocess.run(["bash", str(example)], cwd=node.base, env=env, capture_output=True, text=True, timeout=300)
    assert not node.marker.exists(), f"her module ran {hostile.marks(node.marker)} times as root"
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   " in done.stdout
