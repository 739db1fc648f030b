"""A hostile shared node for tests: throwaway accounts, a shared sticky dir, attacker programs, stub libraries.

The victim is root (as CI and as containers over a shared /tmp run); attackers are accounts made here with
``useradd`` and removed again, and their programs run under ``setpriv``. They run only ``/bin/sh`` and
``attack`` (a small C program compiled here, see ``ATTACK_SOURCE``), never this package's interpreter, which
another account may not be able to read.

A stub kernel library exports every launcher of the ABI (``library._PROTOTYPES``) and reports ABI version
2, so the package's own checks accept it; the attacker's stub also has an ELF constructor that appends a
byte to a marker file: the marker's size is the number of foreign loads.

A run killed before its teardown (SIGKILL, a CI timeout) leaves nothing the next run does not clean up:
its accounts and node dir are named for their maker (pid and start tick) and removed once it is gone,
the link flipper ends with its parent, and a host setting it changed is noted first and put back.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ascend_rmsnorm.jit import cache, library

CC = shutil.which("cc") or shutil.which("gcc")
TOOLS = ("useradd", "userdel", "groupdel", "setpriv")


def missing_tools() -> str | None:
    """Why the multi-user tests cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "needs root: it creates throwaway accounts and files owned by them"
    missing = [t for t in TOOLS if shutil.which(t) is None] + ([] if CC else ["cc"])
    return f"needs {', '.join(missing)}" if missing else None


#: How long an account tool is retried while a peer holds /etc/passwd's lock: a bound for a lock that is
#: never released, not a guess at how long a peer holds it (seconds, on a loaded machine).
ADMIN_LOCK_BOUND_S = 120.0


def _admin(argv: list[str]) -> None:
    """Run an account tool; other sessions on this host may hold /etc/passwd's lock for a while."""
    deadline = time.monotonic() + ADMIN_LOCK_BOUND_S
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            return
        if "lock" not in (done.stderr + done.stdout).lower() or time.monotonic() >= deadline:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        time.sleep(0.1)  # back off from a peer's lock, then try again (not a wait for a result)


@dataclass
class Account:
    name: str
    uid: int
    gid: int

    def run(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` as this account (no supplementary groups)."""
        prefix = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]
        return subprocess.Popen(prefix + argv, **kwargs)

    def sh(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = self.run(["/bin/sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


#: The comment (GECOS field) of every throwaway account, followed by its maker's pid and start time.
ACCOUNT_MARK = "ascend-rmsnorm test account"


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/<pid>/stat field 22); None if none runs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def maker_note(pid: int) -> str:
    """``pid=<pid> start=<tick>``: what an account's comment or a setting's record says of its maker."""
    return f"pid={pid} start={_start_ticks(pid)}"


def _maker_alive(note: str) -> bool:
    """Whether the process a note names (``pid=<pid> start=<tick>`` in an account's comment or a setting's
    record) runs yet: the same pid, started at the same tick (a reused pid is not it)."""
    fields = dict(f.split("=", 1) for f in note.split() if "=" in f)
    pid = fields.get("pid", "")
    return pid.isdigit() and _start_ticks(int(pid)) == fields.get("start")


def sweep_leftover_accounts() -> list[str]:
    """Remove the throwaway accounts (and their private groups) whose maker is gone: a test run killed
    before its fixtures' teardown leaves them behind, and one whose primary group is gid 0 would make
    later runs skip the test that needs such an account. Only accounts with ``ACCOUNT_MARK`` are touched."""
    removed = []
    for entry in pwd.getpwall():
        if not entry.pw_gecos.startswith(ACCOUNT_MARK) or _maker_alive(entry.pw_gecos):
            continue
        try:
            own_group = grp.getgrnam(entry.pw_name).gr_gid == entry.pw_gid
        except KeyError:
            own_group = False
        try:
            remove_account(Account(entry.pw_name, entry.pw_uid, entry.pw_gid), own_group=own_group)
        except RuntimeError:  # a process still runs as it (userdel refuses), or a peer's sweep removed it first
            continue
        removed.append(entry.pw_name)
    return removed


#: A node dir's name: the prefix, its maker's pid and start tick, then mkdtemp's random part.
NODE_PREFIX = "ascend-rmsnorm-node-"


def make_node_dir(parent: Path = Path("/tmp")) -> Path:
    """A fresh node dir in ``parent`` named for this process, after removing those whose maker is gone (a
    run killed before its teardown leaves one, with files of accounts that no longer exist)."""
    sweep_left_node_dirs(parent)
    tag = f"{NODE_PREFIX}{os.getpid()}-{_start_ticks(os.getpid())}-"
    return Path(tempfile.mkdtemp(prefix=tag, dir=parent))


def sweep_left_node_dirs(parent: Path = Path("/tmp")) -> list[Path]:
    """Remove the node dirs in ``parent`` whose maker is gone: root's own directories named as
    ``make_node_dir`` names them (anything else, or another owner's, is left alone)."""
    removed = []
    for entry in parent.iterdir():
        parts = entry.name[len(NODE_PREFIX) :].split("-")
        if not entry.name.startswith(NODE_PREFIX) or len(parts) < 3:
            continue
        st = os.lstat(entry)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or _maker_alive(f"pid={parts[0]} start={parts[1]}"):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


#: Where a run notes a host setting it changed, with its maker, so that the next run puts it back if this
#: one is killed before its teardown: root's own directory, never one others may write (as /tmp).
SETTINGS_DIR = Path("/run/ascend-rmsnorm-tests")


def _settings_dir() -> Path | None:
    """SETTINGS_DIR, made if missing: a directory of root's, mode 700, reached without a link; None where
    /run is not there."""
    if not Path("/run").is_dir():
        return None
    try:
        os.mkdir(SETTINGS_DIR, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(SETTINGS_DIR)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o077:
        raise RuntimeError(f"{SETTINGS_DIR} is not a directory of root's only: {oct(st.st_mode)} uid {st.st_uid}")
    return SETTINGS_DIR


def restore_left_settings() -> list[str]:
    """Put back each host setting a run noted and did not restore (killed before its teardown: SIGKILL, a
    CI timeout), if its maker is gone: a host left with ``fs.protected_symlinks=0`` follows links in sticky
    directories whoever owns them, for every user of the node."""
    where = _settings_dir()
    restored = []
    for record in sorted(where.iterdir()) if where else ():
        knob, value, maker = record.read_text().split("\n", 2)
        if _maker_alive(maker):
            continue
        Path(knob).write_text(value)
        record.unlink()
        restored.append(f"{knob}={value}")
    return restored


@contextmanager
def host_setting(knob: Path, value: str) -> Iterator[str]:
    """``knob`` (a /proc/sys file) set to ``value`` for the block, noted in SETTINGS_DIR first so that
    ``restore_left_settings`` puts it back if this run dies before the block's end; yields the value it
    had (settings earlier runs left are put back first). OSError if it cannot be read or set."""
    restore_left_settings()
    before = knob.read_text().strip()
    if before == value:
        yield before
        return
    where = _settings_dir()
    record = where / f"{knob.name}.{os.getpid()}" if where else None
    if record is not None:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{knob}\n{before}\n{maker_note(os.getpid())}")
    try:
        knob.write_text(value)
        yield before
    finally:
        knob.write_text(before)
        if record is not None:
            record.unlink()


def create_account(tag: str, *, primary_gid: int | None = None) -> Account:
    """A throwaway account without a home or a login shell: its own private group, or ``primary_gid``.
    Its comment names this process, so that a later run removes it if this one is killed first."""
    sweep_leftover_accounts()
    name = f"arn{os.getpid() % 100000}{tag}"[:32]
    comment = f"{ACCOUNT_MARK} {maker_note(os.getpid())}"
    argv = ["useradd", "-M", "-s", "/usr/sbin/nologin", "-c", comment]
    argv += ["-U"] if primary_gid is None else ["-N", "-g", str(primary_gid)]
    _admin(argv + [name])
    entry = pwd.getpwnam(name)
    return Account(name, entry.pw_uid, entry.pw_gid)


def remove_account(account: Account, *, own_group: bool) -> None:
    try:
        _admin(["userdel", account.name])
    finally:
        if own_group and not _user_exists(account.name):  # else groupdel fails too, hiding userdel's error
            try:
                grp.getgrnam(account.name)
            except KeyError:
                return
            _admin(["groupdel", account.name])


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# --------------------------------------------------------------------------------------------------- programs

ATTACK_SOURCE = r"""
/* attack flip LINK A B: point LINK at A, then B, then A ... (symlink + rename) until SIGTERM, which its
 * parent's death sends too; "ready" after the first flip, the number of flips at the end.
 * attack plant DIR PREFIX FIRST LAST SUFFIX TARGET: symlinks DIR/PREFIX<n>SUFFIX -> TARGET for n in FIRST..LAST. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static volatile sig_atomic_t stop_now = 0;
static void on_term(int sig) { (void)sig; stop_now = 1; }

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "flip") == 0) {
        char tmp[4096];
        unsigned long flips = 0;
        snprintf(tmp, sizeof tmp, "%s.flip", argv[2]);
        pid_t parent = getppid();
        signal(SIGTERM, on_term);
        /* a test run killed before its teardown must not leave it flipping (a core busy, its account in use) */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) return 3;
        while (!stop_now) {
            for (int i = 0; i < 2; i++) {
                unlink(tmp);
                if (symlink(argv[3 + i], tmp) != 0 || rename(tmp, argv[2]) != 0) { perror("flip"); return 1; }
                if (++flips == 1) { puts("ready"); fflush(stdout); }
            }
        }
        printf("%lu\n", flips);
        return 0;
    }
    if (argc == 8 && strcmp(argv[1], "plant") == 0) {
        char path[4096];
        long first = atol(argv[4]), last = atol(argv[5]), made = 0;
        for (long n = first; n <= last; n++) {
            snprintf(path, sizeof path, "%s/%s%ld%s", argv[2], argv[3], n, argv[6]);
            if (symlink(argv[7], path) == 0) made++;
        }
        printf("%ld\n", made);
        return 0;
    }
    fprintf(stderr, "usage: attack flip LINK A B | attack plant DIR PREFIX FIRST LAST SUFFIX TARGET\n");
    return 2;
}
"""


def build_attack_tool(directory: Path) -> Path:
    src = directory / "attack.c"
    src.write_text(ATTACK_SOURCE)
    out = directory / "attack"
    subprocess.run([CC, "-O2", "-o", str(out), str(src)], check=True, capture_output=True)
    out.chmod(0o755)
    return out


def stub_source(marker: Path | None, max_hidden: int = 0) -> str:
    lines = ["#include <fcntl.h>", "#include <stdint.h>", "#include <unistd.h>"]
    values = {"ascend_rmsnorm_abi_version": library.ABI_VERSION, "ascend_rmsnorm_max_hidden": max_hidden}
    for name in library._PROTOTYPES:
        value = values.get(name, 0)
        lines.append(f"long {name}(void) {{ return {value}; }}")
    if marker is not None:
        lines.append(
            "__attribute__((constructor)) static void mark(void) {"
            f' int fd = open("{marker}", O_WRONLY | O_CREAT | O_APPEND, 0666);'
            ' if (fd >= 0) { (void)write(fd, "x", 1); close(fd); } }'
        )
    return "\n".join(lines) + "\n"


def build_stub(path: Path, marker: Path | None = None, max_hidden: int = 0) -> Path:
    """A library the package's checks accept (its ``max_hidden`` tells it apart); with ``marker``, loading it
    appends a byte to that file."""
    src = path.with_suffix(".c")
    src.write_text(stub_source(marker, max_hidden))
    subprocess.run([CC, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(path)], check=True, capture_output=True)
    return path


def write_entry(root: Path, spec: cache.BuildSpec, lib: Path) -> Path:
    """A published-looking cache entry for ``spec`` under ``root`` holding a copy of ``lib``, with a manifest
    whose hashes match (as the attacker can always make)."""
    entry = cache.entry_dir(root, spec)
    entry.mkdir(parents=True)
    data = lib.read_bytes()
    (entry / cache.LIB_NAME).write_bytes(data)
    manifest = {
        "manifest_format": 1,
        "key": spec.key,
        "key_input": spec.key_input,
        "library": {"file": cache.LIB_NAME, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)},
    }
    (entry / cache.MANIFEST_NAME).write_text(json.dumps(manifest))
    for p in [entry, *entry.parents]:
        if p == root.parent:
            break
        p.chmod(0o755)
    return entry


def chown_tree(top: Path, account: Account) -> None:
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, account.uid, account.gid)


def marks(marker: Path) -> int:
    """How many times an attacker library's constructor ran."""
    try:
        return marker.stat().st_size
    except FileNotFoundError:
        return 0
