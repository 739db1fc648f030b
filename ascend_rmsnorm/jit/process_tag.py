"""Whose a build dir or private root is: a name that says which process made it, and whether that process
still runs.

A build dir in ``tmp/`` (``build_dir_name``) and a private root (``layout.private_root``) are named after
their process: ``<host>-<pid>.<pid space>.<start time>``. The sweep and ``cache clean`` read the name back
(``builder_gone``, ``builder_running``) to tell a killed builder's leftovers from a build in progress:
only where the name is this host's, this boot's and this pid namespace's does its pid mean anything here,
and only with its start time does it name one process, not a later one given the same number.
"""

from __future__ import annotations

import os
import socket
import uuid


def _pid_space() -> str | None:
    """Which pids this process sees: ``<pid namespace>_<boot>``, the namespace's inode under /proc and the
    first 12 digits of this kernel's boot id, or None where the namespace cannot be told. The inode alone
    names a namespace on this boot of this host only (the host's own is 4026531836 on every Linux), and a
    host name may be every node's (a container's fixed ``hostname``): nodes sharing a cache judged each
    other's builders by their pids. Without a readable boot id, the inode alone."""
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().decode("ascii").strip().replace("-", "")[:12]
    except (OSError, UnicodeDecodeError):
        return ns
    return f"{ns}_{boot}" if boot.isalnum() else ns


def _host() -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname()) or "host"


def _proc_is_ours() -> bool:
    """Whether ``/proc`` numbers processes as this pid namespace does: a process in a pid namespace of its
    own that sees its parent's ``/proc`` (``unshare -p -f`` without ``--mount-proc``, a sandbox that bind
    mounts the host's) would read another process's ``/proc/<pid>`` for each of its own pids. ``NSpid``
    lists a pid in every namespace from ``/proc``'s down to the process's own: one entry where they are
    the same (a kernel before 4.1 has no such line, and is taken at its word)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return len(line.split()) == 2
    except OSError:
        return False
    return True


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (``/proc/<pid>/stat`` field 22, clock ticks since boot), or None: with its
    pid, it names one process, where a pid alone may be a later process's that was given the same number.
    None too where ``/proc`` is another pid namespace's (``_proc_is_ours``)."""
    if not _proc_is_ours():
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the command's name, which may hold anything
        return fields[19].decode("ascii") if fields[19].isdigit() else None
    except (OSError, IndexError):
        return None


def process_tag() -> str:
    """``<host>-<pid>[.<pid space>[.<start time>]]``: this process, as ``builder_gone`` reads it back."""
    ns, start = _pid_space(), _start_time(os.getpid())
    tag = f"{_host()}-{os.getpid()}"
    return f"{tag}.{ns}.{start}" if ns and start else f"{tag}.{ns}" if ns else tag


def build_dir_name() -> str:
    """``<process tag>-<random>``: whose build a ``tmp/`` dir is (``builder_gone``)."""
    return f"{process_tag()}-{uuid.uuid4().hex[:12]}"


def _builder_runs(name: str) -> bool | None:
    """Whether the builder of the build dir ``name`` (``build_dir_name``) still runs: True or False where it
    can be told (made on this host, in this pid namespace of this boot: ``_pid_space``), None elsewhere.
    Containers share host names, and a pid in another namespace says nothing here, so a name without this
    namespace is never judged by its pid. Its start time, where the name has one, tells the builder from a
    later process given the same pid, which would otherwise keep a dead builder's dir for as long as it runs
    (``builder_running``)."""
    parts = name.rsplit("-", 2)
    if len(parts) != 3 or parts[0] != _host():
        return None
    pid, _, rest = parts[1].partition(".")
    ns, _, start = rest.partition(".")
    if not (pid.isascii() and pid.isdigit()) or not ns or ns != _pid_space():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of someone else's has that pid (the start time says whether ours)
        pass
    except (OSError, OverflowError):
        return None
    # the pid runs; a start time in the name that is not its own means a later process was given that pid
    return not start or _start_time(int(pid)) in (start, None)


def builder_gone(name: str) -> bool:
    """Whether the build dir ``name`` (``build_dir_name``) is a dead builder's: made on this host, in this
    pid namespace, by a pid that no longer runs (``_builder_runs``)."""
    return _builder_runs(name) is False


def builder_running(name: str) -> bool:
    """Whether the build dir ``name`` is a running builder's (this host and pid namespace, its pid alive):
    never a leftover, however old its mtime looks. Its age is the mtime against this host's clock, and a
    cache on a server whose clock is behind (NFS), a clock stepped forward or a long compile make a build
    in progress look an hour old; removing it made that builder fail."""
    return _builder_runs(name) is True
