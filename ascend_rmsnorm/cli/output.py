"""What the commands print: result lines on stdout, the one-line complaint on stderr, and streams that
survive paths that are not UTF-8. Shared by every command and by ``main``."""

from __future__ import annotations

import sys

from .._log import to_stderr, visible


def out(line: str = "") -> None:
    """One result line on stdout, flushed at once (a long ``warm`` or ``cache verify`` shows progress)."""
    print(visible(line), flush=True)


def say(text: str) -> None:
    """``ascend-rmsnorm: <text>`` on stderr: how a command ends when it cannot do its job."""
    to_stderr(f"ascend-rmsnorm: {text}")


def tolerant_output() -> None:
    """Paths are bytes on Linux: print non-UTF-8 ones as the bytes they are instead of dying on them."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="surrogateescape" if stream is sys.stdout else "backslashreplace")
            except (ValueError, OSError):
                pass
