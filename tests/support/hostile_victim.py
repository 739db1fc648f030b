"""The victim of the hostile-node tests: runs the package's own open-check-load path many times in one process.

Usage:
  hostile_victim.py race COUNT ENTRY DEV INO   COUNT times what a library call does from scratch
      (``cache.get_library`` with the environment's tiers, JIT off) or, every fourth time, what ``cache
      verify`` does with ENTRY, each followed by a dlclose of whatever was loaded and cleared memos; prints
      the tally as JSON. A load counts as ``good`` only if the inode that was loaded is DEV:INO.
      ``EXPECT_REFUSAL`` (env): text a refusal must contain.
  hostile_victim.py lock KEY   take the build lock of KEY as a build does; prints {"dir", "held"} as JSON.

The toolchain is found once, before the loop; every iteration then walks, checks, hashes and dlopens
anew. As the console script does, the package's ``__init__`` (torch) is skipped.
"""

import _ctypes
import json
import os
import sys
from pathlib import Path

import _ascend_rmsnorm_cli

_ascend_rmsnorm_cli.defer_package_init()

from ascend_rmsnorm.errors import KernelNotCachedError, LibraryLoadError, UnsafeLibraryError  # noqa: E402
from ascend_rmsnorm.jit import admin, cache, library, locks, toolchain  # noqa: E402

GOOD, REFUSED, OTHER, WRONG_REFUSAL, WRONG_INODE, VERIFY_OK, VERIFY_UNSAFE, NOT_CACHED = range(8)
NAMES = ["good", "refused", "other", "wrong_refusal", "wrong_inode", "verify_ok", "verify_unsafe", "not_cached"]


def attempt(i: int, tc, entry: str, want: tuple[int, int]) -> int:
    expect = os.environ.get("EXPECT_REFUSAL", "")
    try:
        if i % 4 == 3:
            status, why = admin.verify_entry(admin.Entry(Path(entry), "prebuilt", None, None))
            if status == "ok":
                return VERIFY_OK
            if status == "unsafe" and expect in (why or ""):
                return VERIFY_UNSAFE
            sys.stderr.write(f"verify: {status} {why}\n")
            return OTHER
        lib = cache.get_library(tc, "dav-2201")
        if lib.identity != want or lib._lib.ascend_rmsnorm_abi_version() != library.ABI_VERSION:
            return WRONG_INODE
        return GOOD
    except KernelNotCachedError as err:
        if expect and expect in str(err):  # passed over as someone else's (the writable root): refused
            return REFUSED
        return NOT_CACHED  # the lookup (by path) saw one tree's manifest and the other's library: a miss
    except UnsafeLibraryError as err:
        if expect in str(err):
            return REFUSED
        sys.stderr.write(f"refused for another reason: {err}\n")
        return WRONG_REFUSAL
    except (LibraryLoadError, OSError, Exception) as err:  # noqa: BLE001 - reported
        sys.stderr.write(f"{type(err).__name__}: {err}\n")
        return OTHER


def _unload_everything() -> None:
    """Forget and dlclose every library loaded so far, so that the next load is a fresh dlopen of whatever
    inode the walk then finds (an attacker's constructor would run again, and be counted)."""
    for lib in library._loaded.values():
        _ctypes.dlclose(lib._lib._handle)
        os.close(lib._fd)
    library._loaded.clear()
    cache._libraries.clear()


def race(count: int, entry: str, dev: int, ino: int) -> None:
    tc = toolchain.get_toolchain("emu")
    tally = [0] * len(NAMES)
    for i in range(count):
        tally[attempt(i, tc, entry, (dev, ino))] += 1
        _unload_everything()
    print(json.dumps(dict(zip(NAMES, tally))))


def lock(key: str) -> None:
    with locks.build_lock(key) as held:
        print(json.dumps({"dir": str(locks.lock_dir()), "held": held}))


if __name__ == "__main__":
    if sys.argv[1] == "race":
        race(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        lock(sys.argv[2])
