"""Every environment variable the package reads: the table, the parsers and ``read`` (no logging).

The bottom of the package: it imports nothing of ours but ``_userns`` (which imports nothing), so ``_log``
can read its level here and ``_env`` (which warns through ``_log``) can sit above both.

Why one module: a nonsense value (``ASCEND_RMSNORM_LOCK_TIMEOUT=abc``, ``..._LOG_LEVEL=LOUD``) must never
crash a call or be silently taken for something else. ``read`` returns a usable value and, when the
raw text makes no sense, the reason; ``_env.get`` logs **one** warning that names the variable, the
value and the default used instead. ``ascend-rmsnorm info`` lists every variable that is set, through
``report()``, and marks the ones that were ignored (and ``ASCEND_RMSNORM_*`` names that nothing reads: typos).

Values are read from ``os.environ`` on every call (tests and users change them at run time); only the
warning is once per (variable, value). Nothing here runs at import.

The C++ emulation reads ``ASCEND_RMSNORM_EMU_SEED``, ``..._EMU_AUTOSYNC`` and ``..._EMU_SATURATE`` itself
(``kernels/emu``); its parsing follows the rules below (``emu_seed``/``flag``), and the emu backend calls
``_env.check_emu()`` when it loads the library so that a bad value is reported once.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._userns import unmapped

PREFIX = "ASCEND_RMSNORM_"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Invalid(ValueError):
    """A raw value that makes no sense; the message says what was expected."""


@dataclass(frozen=True)
class Var:
    """One variable: how to parse it, what it defaults to, and how the default reads in messages."""

    name: str
    parse: Callable[[str], object]
    default: object
    default_text: str
    doc: str
    #: What happens to an invalid value: "default" (warn, use the default) or "error" (the reader raises;
    #: used for an explicit compiler, which must never be swapped for another one behind the user's back).
    on_invalid: str = "default"
    #: A check of the parsed value against the machine (a lock dir that cannot be created): a problem or None.
    check: Callable[[object], str | None] | None = None


# --------------------------------------------------------------------------------------------------- parsers

# Each parser gets the text of a variable that is set and not blank (``read`` and ``_path_list`` pass blank
# ones over), and raises ``Invalid`` with what is wrong with it.


def _choice(*options: str, aliases: dict[str, str] | None = None) -> Callable[[str], str]:
    aliases = aliases or {}

    def parse(raw: str) -> str:
        text = raw.strip().lower()
        if text in options:
            return text
        if text in aliases:
            return aliases[text]
        raise Invalid(f"not one of {', '.join(options)}")

    return parse


def parse_flag(raw: str) -> bool:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` or empty -> False; anything else is invalid."""
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE or not text:
        return False
    raise Invalid("not a switch (1/true/yes/on or 0/false/no/off)")


def _seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise Invalid("not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise Invalid("not a finite number of seconds >= 0")
    return value


_RELATIVE = "which each process would take against its own working directory (give an absolute path)"


def _path(raw: str) -> Path:
    """An absolute path, or one from ``~``: a relative one would be taken against each process's own
    working directory (ranks started from different ones would use different caches or locks, and a
    relative CANN root is refused for the reason a relative ``PATH`` entry is never searched)."""
    text = raw.strip()
    path = os.path.expanduser(text)
    if not os.path.isabs(path):  # ~name of no known user stays as written: relative too
        what = "a path from the home of an unknown user" if text.startswith("~") else "a relative path"
        raise Invalid(f"{what}, {_RELATIVE}")
    return Path(os.path.abspath(path))


def _path_list(raw: str) -> list[Path]:
    """``os.pathsep``-separated ``_path``s; empty entries are passed over, a relative one refuses the list."""
    paths, relative = [], []
    for entry in filter(None, (e.strip() for e in raw.split(os.pathsep))):
        try:
            paths.append(_path(entry))
        except Invalid:
            relative.append(entry)
    if relative:
        raise Invalid(f"a list with relative entries ({', '.join(map(repr, relative))}), {_RELATIVE}")
    return paths


def _log_level(raw: str) -> int:
    text = raw.strip()
    if text.isascii() and text.isdigit() and 0 <= int(text) <= 50:
        return int(text)
    level = logging.getLevelName(text.upper())
    if isinstance(level, int):
        return level
    raise Invalid("not a logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL or 0-50)")


def parse_emu_seed(raw: str) -> int:
    """1 to 20 decimal digits below 2**64, nothing else (no sign, no spaces): what ``emu_launch.h`` accepts."""
    if not re.fullmatch(r"[0-9]{1,20}", raw) or int(raw) >= 2**64:
        raise Invalid("not a decimal integer in [0, 2**64)")
    return int(raw)


def _users(raw: str) -> tuple[int, ...]:
    """User names or uids, separated by commas or spaces, as the uids they are on this host."""
    import pwd

    uids = set()
    for item in re.split(r"[\s,]+", raw.strip()):
        if not item:
            continue
        if item.isascii() and item.isdigit():  # int() refuses other digits isdigit() takes ("²")
            uids.add(int(item))
            continue
        try:
            uids.add(pwd.getpwnam(item).pw_uid)
        except KeyError:
            raise Invalid(f"no user named {item!r} on this host") from None
    if not uids:
        raise Invalid("no user named")
    return tuple(sorted(uids))


_ARCH = re.compile(r"(?:dav-)?(\d{4})")


def _arch(raw: str) -> str:
    m = _ARCH.fullmatch(raw.strip().lower())
    if m is None:
        raise Invalid("not an arch of the form dav-NNNN (e.g. dav-2201)")
    return f"dav-{m.group(1)}"


def _program(raw: str) -> str:
    return raw.strip()


def _rank(raw: str) -> int:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()):  # int() refuses other digits isdigit() takes ("²")
        raise Invalid("not a non-negative integer")
    return int(text)


# --------------------------------------------------------------------------------------------------- checks


def private_dir_problem(st: os.stat_result) -> str | None:
    """Why a directory with ``st`` (from ``lstat``/``fstat``, never following a link) is not one only this
    user can write, as a lock dir must be (None if it is): a link, not a directory, another owner, or
    group/other write."""
    import stat

    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not a directory of your own (fix: remove it, or name the real directory)"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if unmapped(st.st_uid):
        return (
            f"owned by uid {st.st_uid}, which this user namespace shows for every owner it does not map, so "
            "it may be anyone's (fix: use a directory of your own, mode 700, made inside the container)"
        )
    if st.st_uid != os.getuid():
        import pwd

        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = f"uid {st.st_uid}"
        return f"owned by {owner}, not by you (uid {os.getuid()}) (fix: use a directory of your own, mode 700)"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}; fix: `chmod go-w` it)"
    return None


def _check_dir(path: object) -> str | None:
    """Why ``path`` cannot serve as a private directory we create files in, such as the lock dir
    (None if it can), judged by ``lstat``; a missing one passes (its user creates it, through parents it
    has checked: jit/locks.py), and nothing is created here, where no parent is checked."""
    p = Path(path)  # type: ignore[arg-type]
    try:
        problem = private_dir_problem(os.lstat(p))
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"a path that cannot be examined ({err.strerror or err})"
    if problem is None and not os.access(p, os.W_OK | os.X_OK):
        return "not writable"
    return problem


def _check_executable(program: object) -> str | None:
    import shutil

    text = os.path.expanduser(str(program))
    found = shutil.which(text) if os.sep not in text else (text if os.access(text, os.X_OK) else None)
    if not found or not os.path.isfile(found):
        return "not an executable file (nor a program on PATH)"
    return None


def _check_is_dir(path: object) -> str | None:
    return None if os.path.isdir(path) else "not a directory"  # type: ignore[arg-type]  # never raises


# --------------------------------------------------------------------------------------------------- the table

BACKEND = "ASCEND_RMSNORM_BACKEND"
STRICT = "ASCEND_RMSNORM_STRICT"
JIT = "ASCEND_RMSNORM_JIT"
CACHE_DIR = "ASCEND_RMSNORM_CACHE_DIR"
PREBUILT_DIR = "ASCEND_RMSNORM_PREBUILT_DIR"
ARCH = "ASCEND_RMSNORM_ARCH"
BISHENG = "ASCEND_RMSNORM_BISHENG"
CXX = "ASCEND_RMSNORM_CXX"
LOG_LEVEL = "ASCEND_RMSNORM_LOG_LEVEL"
LOCK_DIR = "ASCEND_RMSNORM_LOCK_DIR"
LOCK_TIMEOUT = "ASCEND_RMSNORM_LOCK_TIMEOUT"
SKIP_PERMISSION_CHECK = "ASCEND_RMSNORM_SKIP_PERMISSION_CHECK"
TRUSTED_USERS = "ASCEND_RMSNORM_TRUSTED_USERS"
EMU_SEED = "ASCEND_RMSNORM_EMU_SEED"
EMU_AUTOSYNC = "ASCEND_RMSNORM_EMU_AUTOSYNC"
EMU_SATURATE = "ASCEND_RMSNORM_EMU_SATURATE"
HOME_PATH = "ASCEND_HOME_PATH"
TOOLKIT_HOME = "ASCEND_TOOLKIT_HOME"
LOCAL_RANK = "LOCAL_RANK"
SWEEP_SEED = "ASCEND_RMSNORM_SWEEP_SEED"  # read by the tests' kernel sample (tests/support/sweep.py), not the package

LOCK_TIMEOUT_DEFAULT_S = 600.0

_VARS: tuple[Var, ...] = (
    Var(BACKEND, _choice("auto", "npu", "emu", "torch"), "auto", "auto", "backend when rms_norm(backend=None)"),
    Var(STRICT, parse_flag, False, "0 (fall back to the torch path)", "an unavailable NPU kernel raises"),
    Var(
        JIT,
        _choice("import", "lazy", "off", aliases={"0": "off", "false": "off", "no": "off", "never": "off"}),
        "import",
        "import",
        "when kernels are compiled",
    ),
    Var(CACHE_DIR, _path, None, "the user cache dir", "writable cache root"),
    Var(PREBUILT_DIR, _path_list, [], "no prebuilt tiers", "read-only cache roots, searched first"),
    Var(ARCH, _arch, None, "the detected NPU's arch", "arch to build for"),
    Var(BISHENG, _program, None, "bisheng from PATH or CANN", "the bisheng to use", "error", _check_executable),
    Var(CXX, _program, "c++", "c++", "host C++ compiler for emu", "error", _check_executable),
    Var(LOG_LEVEL, _log_level, None, "INFO", "level of the ascend_rmsnorm logger"),
    Var(LOCK_DIR, _path, None, "the first usable node-local default", "node-local lock directory", check=_check_dir),
    Var(LOCK_TIMEOUT, _seconds, LOCK_TIMEOUT_DEFAULT_S, "600", "seconds to wait for another build"),
    Var(SKIP_PERMISSION_CHECK, parse_flag, False, "0 (check)", "use libraries and compilers from unsafe places anyway"),
    Var(TRUSTED_USERS, _users, (), "none (you and root)", "other owners the ownership test accepts (CANN's installer)"),
    Var(EMU_SEED, parse_emu_seed, None, "a seed that varies per launch", "emu block order seed"),
    Var(EMU_AUTOSYNC, parse_flag, False, "0", "emu models --cce-auto-sync"),
    Var(EMU_SATURATE, parse_flag, False, "0", "emu models the saturation mode (casts, half and int arithmetic)"),
    Var(HOME_PATH, _path, None, "the default CANN locations", "CANN root (set_env.sh)", check=_check_is_dir),
    Var(TOOLKIT_HOME, _path, None, "the default CANN locations", "CANN root (older set_env.sh)", check=_check_is_dir),
    Var(LOCAL_RANK, _rank, 0, "0", "rank on this node (launchers set it): only rank 0 logs INFO"),
    Var(SWEEP_SEED, parse_emu_seed, None, "the CI sample's own", "seed of the kernel sample `make test` draws (tests)"),
)
VARS: dict[str, Var] = {v.name: v for v in _VARS}


# --------------------------------------------------------------------------------------------------- reading


def raw(name: str) -> str | None:
    """The raw text of ``name``, or None when it is unset or blank."""
    value = os.environ.get(name)
    return value if value is not None and value.strip() else None


def read(name: str, *, check: bool = False) -> tuple[object, str | None]:
    """(value, problem) for ``name``: the parsed value, or the default with the reason the raw text was refused.

    With ``check``, the variable's machine check (e.g. that an existing lock dir is yours alone) runs too.
    Never warns; ``get`` does.
    """
    var = VARS[name]
    text = raw(name)
    if text is None:
        return var.default, None
    try:
        value = var.parse(text)
    except Invalid as err:
        return var.default, str(err)
    if check and var.check is not None:
        problem = var.check(value)
        if problem is not None:
            return var.default, problem
    return value, None


def message(name: str, problem: str, instead: str | None = None) -> str:
    """The one-line warning for an ignored value (``instead``: what is used, if not the plain default)."""
    var = VARS[name]
    text = os.environ.get(name, "")
    if var.on_invalid == "error":
        return f"{name}={text!r} is {problem}"
    return f"{name}={text!r} is {problem}; using the default ({instead or var.default_text}) instead"


def report() -> list[dict]:
    """Every variable this package reads that is set, plus unknown ``ASCEND_RMSNORM_*`` names, for ``info``.

    Each row: name, value (raw text), status ("ok", "ignored", "error" or "unknown"), problem, and what is
    used instead for an ignored value.
    """
    rows = []
    for var in _VARS:
        text = os.environ.get(var.name)
        if text is None:
            continue
        _, problem = read(var.name, check=True)
        if problem is None:
            rows.append({"name": var.name, "value": text, "status": "ok"})
        elif var.on_invalid == "error":
            rows.append({"name": var.name, "value": text, "status": "error", "problem": problem})
        else:
            rows.append(
                {"name": var.name, "value": text, "status": "ignored", "problem": problem, "using": var.default_text}
            )
    for name in sorted(os.environ):
        if name.startswith(PREFIX) and name not in VARS:
            rows.append({"name": name, "value": os.environ[name], "status": "unknown", "problem": "nothing reads it"})
    return rows
