"""What the commands print: result lines on stdout, the one-line complaint on stderr, and streams that
survive paths that are not UTF-8. Shared by every command and by ``main``."""

from __future__ import annotations

import codecs
import errno
import sys

from .._log import to_stderr, visible

#: What an ASCII-only stdout (``PYTHONIOENCODING=ascii``, ``LC_ALL=C`` with ``PYTHONUTF8=0``) gets for the
#: non-ASCII characters our tables and help use; others are written ``\xNN`` or ``\uNNNN``.
_SPELLED = {"\u00b5": "u", "\u03bc": "u", "\u00b1": "+-", "\u00d7": "x"}


def _stdout_errors(err: UnicodeError) -> tuple[str | bytes, int]:
    """stdout's encoding error handler: a path's byte that is not UTF-8 (a surrogate U+DC80..U+DCFF) is
    written as the byte it is, as ``surrogateescape`` does; a character the encoding cannot hold (``µs`` on
    an ASCII stdout) is spelled in ASCII instead of failing the command."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    piece = err.object[err.start : err.end]
    if all("\udc80" <= ch <= "\udcff" for ch in piece):
        return bytes(ord(ch) - 0xDC00 for ch in piece), err.end
    return "".join(_SPELLED.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii") for ch in piece), err.end


_STDOUT_ERRORS = "ascend_rmsnorm.stdout"
codecs.register_error(_STDOUT_ERRORS, _stdout_errors)


def out(line: str = "") -> None:
    """One result line on stdout, flushed at once (a long ``warm`` or ``cache verify`` shows progress).
    A process started with stdout closed (``cmd >&-``) has ``sys.stdout = None``, where ``print`` writes
    nothing and the command would exit 0 with its result lost: that fails instead, as a full disk does."""
    if sys.stdout is None:
        raise OSError(errno.EBADF, "standard output is closed: the result cannot be written")
    print(visible(line), flush=True)


def say(text: str) -> None:
    """``ascend-rmsnorm: <text>`` on stderr: how a command ends when it cannot do its job."""
    to_stderr(f"ascend-rmsnorm: {text}")


def tolerant_output() -> None:
    """Paths are bytes on Linux: print non-UTF-8 ones as the bytes they are instead of dying on them, and
    spell in ASCII what an ASCII-only stdout cannot hold (``_stdout_errors``). Called before the command
    line is parsed: ``--help`` prints through it too."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=_STDOUT_ERRORS if stream is sys.stdout else "backslashreplace")
            except (ValueError, OSError):
                pass
