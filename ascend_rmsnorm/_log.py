"""The package logger, configured on first use (never at import) from ``ASCEND_RMSNORM_LOG_LEVEL``.

A build prints one INFO line when it starts and one when it ends. Python's default "last resort"
handler shows only warnings, so when the application has configured no logging at all we attach one
stderr handler of our own; an application that has set up logging keeps full control, also when it
does so later (a notebook cell running ``logging.basicConfig()`` after a first call): our handler, like
the last-resort one, shows a line only while no other handler would.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from . import _envvars
from ._forksafe import renew_in_child

ENV_LOG_LEVEL = _envvars.LOG_LEVEL
LOGGER_NAME = "ascend_rmsnorm"

_configured = False
_lock = threading.Lock()
renew_in_child(globals(), _lock=threading.Lock)  # a forked child's first call must not hang
_warned: set[str] = set()

# C0 and C1 control characters but newline and tab: what a terminal would act on rather than show. A name
# that is not UTF-8 holds its bytes 0x80-0xFF as the surrogates U+DC80-U+DCFF (os.fsdecode), which the CLI's
# stdout writes back as those bytes (cli/output.py tolerant_output): its C1 bytes are written as \xNN too.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
_CONTROLS.update({0xDC00 + c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})


def visible(text: str) -> str:
    """``text`` with its control characters written as ``\\xNN``. The names we print (cache entries, tier
    and CANN directories, manifests' fields, compilers' paths) can be anyone's on a shared node, and an
    escape sequence in one would act on the reader's terminal instead of showing what is there."""
    return text.translate(_CONTROLS)


def to_stderr(text: str) -> None:
    """One line on stderr, through ``visible`` and flushed: the commands' progress lines and complaints.
    A stderr that is gone is passed over (the exit status still tells): a closed one, and None (fd 2
    closed at start), which ``print`` would take for stdout."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        print(visible(text), file=stream, flush=True)
    except (OSError, ValueError):
        pass


class _VisibleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


class _StandIn(logging.StreamHandler):
    """Our stderr handler, which shows a record only while no other handler on the way from our logger
    to the root (as ``Logger.callHandlers`` walks it) would: logging the application sets up after it was
    attached takes over, rather than every line being printed twice. It writes to ``sys.stderr`` as it is
    at each line, as the last-resort handler does: one attached while a notebook cell's ``%%capture`` (or
    ``contextlib.redirect_stderr``) held stderr must not send every later line to that cell's buffer."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # no stream of its own: the property below

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    def filter(self, record: logging.LogRecord) -> bool:
        node: logging.Logger | None = logging.getLogger(LOGGER_NAME)
        while node is not None:
            if any(h is not self for h in node.handlers):
                return False
            if not node.propagate:
                break
            node = node.parent
        return bool(super().filter(record))


def get_logger() -> logging.Logger:
    """The ``ascend_rmsnorm`` logger, with a level and (only if the app has none) a stderr handler."""
    global _configured
    logger = logging.getLogger(LOGGER_NAME)
    if _configured:
        return logger
    with _lock:
        if _configured:
            return logger
        level, problem = _envvars.read(ENV_LOG_LEVEL)
        rank_problem = None
        if level is not None:
            logger.setLevel(level)
        if not logger.hasHandlers():
            handler = _StandIn()
            handler.setFormatter(_VisibleFormatter("ascend-rmsnorm: %(levelname)s: %(message)s"))
            # In a multi-rank job only local rank 0 says INFO; every rank still reports warnings.
            rank, rank_problem = _envvars.read(_envvars.LOCAL_RANK)
            quiet_rank = rank != 0
            handler.setLevel(logging.WARNING if quiet_rank and level is None else logging.NOTSET)
            logger.addHandler(handler)
            if level is None:
                logger.setLevel(logging.INFO)
        _configured = True
    # Said after configuring, through the configured logger (a bad level falls back to INFO).
    if problem is not None:
        _warn_env(ENV_LOG_LEVEL, problem)
    if rank_problem is not None:
        _warn_env(_envvars.LOCAL_RANK, rank_problem)
    return logger


def log_once(tag: str, level: int, message: str, *args: object) -> None:
    """Log ``message`` once per process for ``tag`` (read-only cache, lockless mode, ...)."""
    with _lock:
        if tag in _warned:
            return
        _warned.add(tag)
    get_logger().log(level, message, *args)


def warn_once(tag: str, message: str, *args: object) -> None:
    log_once(tag, logging.WARNING, message, *args)


def reset() -> None:
    """Forget the once-only warnings and the configuration (tests)."""
    global _configured
    with _lock:
        _warned.clear()
        _configured = False


def _warn_env(name: str, problem: str) -> None:
    """The once-per-value warning for a variable this module reads (``_env.warn`` for the rest)."""
    warn_once(f"env:{name}={os.environ.get(name, '')}", "%s", _envvars.message(name, problem))
