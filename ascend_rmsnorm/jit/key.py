"""The cache key (docs/design.md §5 "Key"): what is compiled, how, and the sha256 that names the result.

Nothing here depends on where the package is installed or on the cache's location, so one key means
one library everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from . import build
from .toolchain import Toolchain

#: Bump by hand when the layout, the manifest or the key's meaning changes.
CACHE_FORMAT = 1
KERNEL_NAME = "rmsnorm"
MAIN_SOURCE = "rmsnorm.asc"
LIB_NAME = "librmsnorm.so"
ABI_SYMBOL = "ascend_rmsnorm_abi_version"
#: Every library built from ``kernels/``: name -> (its source, the symbol a good build exports). Each has
#: its own key (the name is in it) and so its own entry; the calibration kernels (``bench --calibrate``)
#: are loaded by ``perf/calibrate.py``, never as the rmsnorm library.
KERNEL_SOURCES = {
    KERNEL_NAME: (MAIN_SOURCE, ABI_SYMBOL),
    "calibrate": ("calibrate.asc", "ascend_rmsnorm_calibrate_version"),
}

#: Environment variables that change generated code and so belong in the key (none yet; keep the list).
KEY_ENV_VARS: tuple[str, ...] = ()

#: The shipped kernel sources; every file below is hashed by content and compiled from a copy.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
KERNELS_DIR = PACKAGE_DIR / "kernels"


def canonical_json(obj: object) -> bytes:
    """The one JSON spelling the key is hashed from (the manifest's key is checked against it too)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kernel_files(kernels_dir: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of every file under ``kernels_dir``, sorted: what is hashed is what is copied."""
    out = []
    for dirpath, dirnames, filenames in os.walk(kernels_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            path = Path(dirpath) / name
            out.append((path.relative_to(kernels_dir).as_posix(), path))
    return sorted(out)


_hash_memo: dict[tuple, dict[str, str]] = {}


def source_hashes(kernels_dir: Path | None = None) -> dict[str, str]:
    """sha256 of every file under ``kernels/`` by relative name (memoised on the files' stat)."""
    kernels_dir = Path(kernels_dir or KERNELS_DIR)
    files = kernel_files(kernels_dir)
    stats = [(rel, p.stat()) for rel, p in files]
    stamp = (str(kernels_dir),) + tuple((rel, st.st_size, st.st_mtime_ns, st.st_ino) for rel, st in stats)
    found = _hash_memo.get(stamp)
    if found is None:
        found = _hash_memo[stamp] = {rel: sha256_file(p) for rel, p in files}
    return found


def _host_abi() -> dict[str, str]:
    import platform

    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    return {"machine": platform.machine(), "libc": libc}


@dataclass(frozen=True)
class BuildSpec:
    """One target: what to compile, how, and the key that names the result."""

    toolchain: Toolchain
    arch: str
    kernels_dir: Path
    argv: tuple[str, ...]  # run inside the build dir: relative source and output (the last command)
    key_input: dict
    key: str
    commands: tuple[tuple[str, ...], ...] = ()  # every command, in order (one for every generation today)
    kernel: str = KERNEL_NAME  # which of KERNEL_SOURCES

    @property
    def short(self) -> str:
        return self.key[:12]


def build_spec(tc: Toolchain, arch: str, kernels_dir: Path | None = None, kernel: str = KERNEL_NAME) -> BuildSpec:
    """The key and command for ``tc`` + ``arch``; nothing here depends on where the package is installed."""
    kernels_dir = Path(kernels_dir or KERNELS_DIR)
    if kernel not in KERNEL_SOURCES:
        raise ValueError(f"unknown kernel library {kernel!r}; known: {', '.join(KERNEL_SOURCES)}")
    commands = build.compile_commands(tc, arch, f"src/{KERNEL_SOURCES[kernel][0]}", LIB_NAME)
    argv = commands[-1]
    placeholders = {str(PACKAGE_DIR): "$PKG", str(kernels_dir): "$KERNELS"}
    key_input = {
        "cache_format": CACHE_FORMAT,
        "package_version": __version__,
        "kernel": kernel,
        "sources": source_hashes(kernels_dir),
        "toolchain": tc.fingerprint(),
        "arch": arch,
        "argv": build.normalise_argv(argv, placeholders)
        if len(commands) == 1
        else [build.normalise_argv(c, placeholders) for c in commands],
        "env": {name: os.environ.get(name) for name in KEY_ENV_VARS},
        "host": _host_abi(),
    }
    key = hashlib.sha256(canonical_json(key_input)).hexdigest()
    return BuildSpec(tc, arch, kernels_dir, tuple(argv), key_input, key, tuple(tuple(c) for c in commands), kernel)


def reset() -> None:
    """Forget the memoised source hashes (tests; ``cache.reset`` calls it)."""
    _hash_memo.clear()
