"""Which programs discovery may run: PATH is searched in its absolute entries only, and each candidate
passes the ownership test of ``trust.py`` (someone else's compiler runs as you, and what it builds is
cached and loaded). ``toolchain.py`` applies it to bisheng, the emu C++ compiler, CANN roots and npu-smi:
a place a variable names is refused (``refusal``), a place found by searching is skipped and listed."""

from __future__ import annotations

import os
from pathlib import Path

from .. import _env
from ..errors import ToolchainNotFoundError
from . import trust

#: How a place that fails the ownership test (``trust.unsafe_reason``) shows in a "searched" line.
NOT_USED = "not used: "
OPT_OUT = f"if you trust everyone who can write there, set {_env.SKIP_PERMISSION_CHECK}=1"


def executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def on_path(name: str):
    """Each executable ``name`` in PATH's absolute entries, in order; a name with a directory is itself.

    An empty or relative entry names the current directory (or one below it), which is wherever the
    process happens to run (a shared /tmp, someone's checkout), so it is never searched."""
    if os.path.dirname(name):
        if executable(Path(name)):
            yield name
        return
    seen = set()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(entry, name)
        if os.path.isabs(entry) and candidate not in seen and executable(Path(candidate)):
            seen.add(candidate)
            yield candidate


def which(name: str) -> str | None:
    """Like ``shutil.which``, but over PATH's absolute entries only (see ``on_path``)."""
    return next(on_path(name), None)


def first_trusted(candidates, suffix: str = "") -> tuple[str | None, list[str]]:
    """(the first candidate that passes the ownership test, each one before it with why it was skipped)."""
    skipped = []
    for candidate in candidates:
        problem = trust.unsafe_reason(candidate)
        if problem is None:
            return candidate, skipped
        skipped.append(f"{candidate}{suffix} ({NOT_USED}{problem})")
    return None, skipped


def warn_skipped(skipped: list[str]) -> None:
    """Say once per place that an unsafe one was passed over (a later one, or nothing, was used instead)."""
    if skipped:
        import logging

        from .._log import log_once

        for line in skipped:
            log_once(f"untrusted {line}", logging.WARNING, "skipped %s; %s", line, OPT_OUT)


def refusal(what: str, path: object, how: str, problem: str) -> ToolchainNotFoundError:
    """The error for an explicitly chosen compiler or CANN root that fails the ownership test."""
    return ToolchainNotFoundError(
        f"refusing to use {what} {path} ({how}): {problem}. Whoever can write there could put their own "
        "program or libraries in its place: they would run as you, and what they build is cached and "
        f"loaded by this package. Choose a copy nobody else can write, or, {OPT_OUT}"
    )


def searched_tail(lines: list[str]) -> list[str]:
    """The opt-out, for a not-found error whose searched lines skipped a place as unsafe."""
    if not any(NOT_USED in line for line in lines):
        return []
    return [f"places marked '{NOT_USED.strip()}' fail the ownership test; {OPT_OUT}"]
