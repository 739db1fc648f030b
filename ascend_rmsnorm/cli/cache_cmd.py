"""``ascend-rmsnorm cache path|list|verify|clean``: look at the kernel cache and tidy it.

The work is ``jit.admin``'s (and ``jit.cache``'s); this module turns it into lines and exit statuses.
No torch is imported.
"""

from __future__ import annotations

import argparse
import os
import time

from .errors import UsageError
from .output import out


def _human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def run_path(args: argparse.Namespace) -> int:
    """The tiers in the order they are read, whether each is there or writable, and the lock dir."""
    from ..jit import cache, locks

    root, is_default = cache.cache_root(args.cache_dir)
    for path in cache.prebuilt_dirs():
        shared = cache.prebuilt_problem(path)
        # os.path.isdir: below a folder you may not search (someone else's, mode 000) it is not there for you
        state = f"passed over: {shared}" if shared else ("present" if os.path.isdir(path) else "missing")
        out(f"prebuilt  {path}  (read-only, {state})")
    err = cache.writable_error(root, create=False)  # looks, makes nothing
    state = "writable" if err is None else f"NOT writable: {cache.describe_os_error(err, root)}"
    if err is None and not os.path.isdir(root):
        state += ", made by the first build"
    out(f"writable  {root}  ({state}{', default' if is_default else ''})")
    out(f"locks     {locks.lock_dir() or 'none usable (lockless)'}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """One line per entry of every tier: toolchain, arch, size, age, key, path, and what is wrong with it."""
    from ..jit import admin
    from ..jit.layout import human_bytes

    now = time.time()
    entries = list(admin.iter_entries(args.cache_dir))
    if not entries:
        out("no cache entries")
        return 0
    out(f"{'tier':9} {'toolchain':9} {'arch':9} {'kernels':9} {'size':>10} {'age':>5}  key           path")
    for e in entries:
        kind = admin.manifest_field(e.manifest, "key_input", "toolchain", "kind")
        kind = kind if isinstance(kind, str) else "?"
        kernel = admin.manifest_field(e.manifest, "key_input", "kernel")  # rmsnorm, or calibrate's kernels
        kernel = kernel if isinstance(kernel, str) else "?"
        note = f"  INVALID: {e.problem}" if e.problem else ""
        out(
            f"{e.tier:9} {e.version_dir if kind == 'npu' else kind:9} {e.arch:9} {kernel:9} {human_bytes(e.size):>10} "
            f"{_human_age(now - e.built_at):>5}  {e.key[:12]}  {e.path}{note}"
        )
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Re-hash and load-test every entry; a bad one is quarantined (never in the prebuilt tier, never an unsafe
    one, which is not even loaded, nor another user's, ``_fs.mine``); 1 if any is bad."""
    from ..jit import admin, cache, verify

    bad = 0
    count = 0
    for entry in admin.iter_entries(args.cache_dir):
        count += 1
        seen = verify.entry_identity(entry.path)  # what is checked here; a job may replace it meanwhile
        status, problem = admin.verify_entry(entry)
        if status == "ok":
            out(f"ok   {entry.path}")
            continue
        if status == "untested":
            out(f"untested {entry.path}: {problem}")
            continue
        if status == "unsafe":
            bad += 1
            out(f"unsafe {entry.path}: {problem} (not loaded, not moved)")
            continue
        bad += 1
        owner = _owner_if_not_mine(entry.path) if entry.tier != "prebuilt" else None
        if owner is not None:  # anyone may make a name in a sticky shared tree: theirs, not ours to move
            out(f"bad  {entry.path}: {problem} (not moved: {owner}'s)")
            continue
        moved = cache.quarantine(entry.path, problem, expect=seen) if entry.tier != "prebuilt" else None
        where = f" -> moved to {moved}" if moved else ""
        out(f"bad  {entry.path}: {problem}{where}")
    out(f"{count} entries, {bad} bad")
    return 1 if bad else 0


def _owner_if_not_mine(path) -> str | None:
    """The owner's name of ``path`` when it is not this user's (``_fs.mine``), else None (gone: None)."""
    from ..jit._fs import others_uid
    from ..jit.trust import owner_name

    try:
        uid = others_uid(path)
    except OSError:
        return None
    return None if uid is None else owner_name(uid)


def run_clean(args: argparse.Namespace) -> int:
    """Remove what the options name from the writable cache; 2 when they name nothing, 1 if a removal failed."""
    from ..jit import admin

    if not (args.all or args.older_than is not None or args.stale_toolchain):
        raise UsageError("say what to remove: --all, --older-than DAYS or --stale-toolchain")
    result = admin.clean(
        args.cache_dir, everything=args.all, older_than_days=args.older_than, stale_toolchain=args.stale_toolchain
    )
    for path in result.removed:
        out(f"removed {path}")
    for path, why in result.failed:
        out(f"NOT removed {path}: {why}")
    for note in result.notes:
        out(note)
    summary = f"{len(result.removed)} removed"
    if result.failed:
        summary += f", {len(result.failed)} could not be removed"
    out(summary)
    return 1 if result.failed else 0


def _days(text: str) -> float:
    """``--older-than``'s DAYS: a finite number >= 0 (a negative or NaN age would match every entry, or none)."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not 0 <= days < float("inf"):
        raise argparse.ArgumentTypeError(f"DAYS must be a finite number >= 0, got {text!r}")
    return days


def register_cache(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="inspect and tidy the kernel cache")
    actions = p.add_subparsers(dest="action", metavar="{path,list,verify,clean}")
    actions.required = True
    for name, func, text in (
        ("path", run_path, "print the cache tiers, whether they are writable, and the lock dir in use"),
        ("list", run_list, "list cached kernel libraries"),
        (
            "verify",
            run_verify,
            "re-hash, permission-check and load-test every entry; quarantine bad ones, report unsafe ones "
            "(exit 1 if any is bad or unsafe)",
        ),
        ("clean", run_clean, "remove entries: --all, --older-than DAYS, --stale-toolchain"),
    ):
        q = actions.add_parser(name, help=text, description=text)
        q.add_argument("--cache-dir", help="writable cache root (default: ASCEND_RMSNORM_CACHE_DIR or the user cache)")
        q.set_defaults(func=func)
        if name == "clean":
            group = q.add_mutually_exclusive_group()
            group.add_argument(
                "--all",
                action="store_true",
                help="remove the writable cache but builds in progress and others' entries (each kept one is said)",
            )
            group.add_argument("--older-than", type=_days, metavar="DAYS", help="entries built more than DAYS ago")
            group.add_argument(
                "--stale-toolchain", action="store_true", help="entries built by another compiler than today's"
            )
