"""The environment variables as the package uses them: ``get`` gives a usable value and warns once.

The table, the parsers and ``read`` live in ``_envvars`` (the bottom module, which ``_log`` reads its
level from); this module adds the warning, through ``_log``, and re-exports the rest so that callers
keep one name, ``_env``. Values are read from ``os.environ`` on every call; only the warning is once
per (variable, value).
"""

from __future__ import annotations

import os

from ._envvars import (
    ARCH,
    BACKEND,
    BISHENG,
    CACHE_DIR,
    CXX,
    EMU_AUTOSYNC,
    EMU_SATURATE,
    EMU_SEED,
    HOME_PATH,
    JIT,
    LOCAL_RANK,
    LOCK_DIR,
    LOCK_TIMEOUT,
    LOCK_TIMEOUT_DEFAULT_S,
    LOG_LEVEL,
    PREBUILT_DIR,
    PREFIX,
    SKIP_PERMISSION_CHECK,
    STRICT,
    TOOLKIT_HOME,
    TRUSTED_USERS,
    VARS,
    Invalid,
    Var,
    message,
    parse_emu_seed,
    parse_flag,
    private_dir_problem,
    raw,
    read,
    report,
)
from ._log import warn_once

__all__ = [
    "PREFIX",
    "Invalid",
    "Var",
    "parse_flag",
    "parse_emu_seed",
    "private_dir_problem",
    "BACKEND",
    "STRICT",
    "JIT",
    "CACHE_DIR",
    "PREBUILT_DIR",
    "ARCH",
    "BISHENG",
    "CXX",
    "LOG_LEVEL",
    "LOCK_DIR",
    "LOCK_TIMEOUT",
    "SKIP_PERMISSION_CHECK",
    "TRUSTED_USERS",
    "EMU_SEED",
    "EMU_AUTOSYNC",
    "EMU_SATURATE",
    "HOME_PATH",
    "TOOLKIT_HOME",
    "LOCAL_RANK",
    "LOCK_TIMEOUT_DEFAULT_S",
    "VARS",
    "raw",
    "read",
    "message",
    "report",
    "warn",
    "get",
    "flag",
    "check_emu",
]


def warn(name: str, problem: str, instead: str | None = None) -> None:
    """Log the warning for ``name``'s current value once per process (per distinct value)."""
    warn_once(f"env:{name}={os.environ.get(name, '')}", "%s", message(name, problem, instead))


def get(name: str, *, check: bool = False):
    """The value of ``name`` to use; a nonsense value warns once and gives the default."""
    value, problem = read(name, check=check)
    if problem is not None and VARS[name].on_invalid == "default":
        warn(name, problem)
    return value


def flag(name: str) -> bool:
    return bool(get(name))


def check_emu() -> None:
    """Validate the variables the C++ emulation reads (called when the emu library is loaded)."""
    for name in (EMU_SEED, EMU_AUTOSYNC, EMU_SATURATE):
        get(name)
