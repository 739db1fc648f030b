"""Real filesystems for failure tests: a command run in a private mount namespace (``unshare``), where it
may mount a tiny tmpfs (a full disk) or remount one read-only, without touching the host's mounts.

As root ``unshare -m`` is enough; an unprivileged user needs user namespaces (``unshare -rm``), where
root's files show as the overflow uid, which the commands are then told to trust. Where neither works
the tests that need it skip, and their in-process fault-injection twins still run.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _ascend_rmsnorm_cli
from ascend_rmsnorm._envvars import TRUSTED_USERS

#: The console script's launcher, run as a script: ``ascend-rmsnorm`` in a fresh process, torch-free for
#: ``warm`` and ``cache`` (it defers the package's ``__init__``).
LAUNCHER = Path(_ascend_rmsnorm_cli.__file__)


@functools.cache
def unshare_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` argv prefix that gives a private mount namespace where tmpfs can be mounted, or None."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    for prefix in ((exe, "-m"), (exe, "-rm")):
        probe = subprocess.run(
            [*prefix, "sh", "-c", 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" && umount "$d"; rc=$?; '
             'rmdir "$d"; exit $rc'],
            capture_output=True,
        )  # fmt: skip
        if probe.returncode == 0:
            return prefix
    return None


def run_in_mount_ns(script: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the shell ``script`` in a private mount namespace; ``$PY`` and ``$CLI`` name the interpreter and
    the console script's launcher (``"$PY" "$CLI" ARGS`` is ``ascend-rmsnorm ARGS``). Call
    ``unshare_prefix()`` first and skip when it is None."""
    prefix = unshare_prefix()
    assert prefix is not None
    full = namespace_env({**os.environ, **(env or {}), "PY": sys.executable, "CLI": str(LAUNCHER)})
    return subprocess.run([*prefix, "sh", "-c", script], env=full, capture_output=True, timeout=timeout)


def namespace_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a command under ``unshare_prefix()``: in a user namespace (``-rm``, an unprivileged
    user's) root's files (the compiler, /usr) show as the overflow uid, which it is told to trust."""
    if "-rm" not in (unshare_prefix() or ()):
        return env
    overflow = Path("/proc/sys/kernel/overflowuid").read_text().strip()
    return {**env, TRUSTED_USERS: ",".join(filter(None, [env.get(TRUSTED_USERS), overflow]))}
