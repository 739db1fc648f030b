"""What the ``ascend-rmsnorm cache`` command does: list, verify and clean entries on disk."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LibraryLoadError, UnsafeLibraryError
from . import toolchain, trust
from .elf import NotELFError, symbols_in
from .key import CACHE_FORMAT, KERNEL_NAME, KERNEL_SOURCES, LIB_NAME
from .layout import (
    LEFTOVER_AGE_S,
    NOT_ENTRY_DIRS,
    cache_root,
    children,
    children_at,
    describe_os_error,
    mine,
    remove_tree,
    root_trash,
    tiers,
    tmp_aged_out,
)
from .process_tag import builder_gone
from .trust import owner_name
from .verify import entry_problem, load_entry, missing_dependency, open_library, read_manifest


def manifest_field(manifest: object, *keys: str) -> object:
    """``manifest[k1][k2]...``, or None where a level is missing or not an object: a manifest is only text
    on disk (one in a shared tier may be anyone's), never trusted to have our shape."""
    for key in keys:
        if not isinstance(manifest, dict):
            return None
        manifest = manifest.get(key)
    return manifest


@dataclass
class Entry:
    """One published entry as found on disk (for ``cache list/verify/clean``)."""

    path: Path
    tier: str
    manifest: dict | None
    problem: str | None

    @property
    def key(self) -> str:
        return self.path.name

    @property
    def arch(self) -> str:
        return self.path.parent.name

    @property
    def version_dir(self) -> str:
        return self.path.parent.parent.name

    @property
    def size(self) -> int:
        try:
            return (self.path / LIB_NAME).stat().st_size
        except OSError:
            return 0

    @property
    def built_at(self) -> float:
        try:
            return float(self.manifest["built"]["unix_time"])  # type: ignore[index]
        except (TypeError, KeyError, ValueError, OverflowError):  # OverflowError: a JSON integer past a float
            try:
                return self.path.stat().st_mtime
            except OSError:
                return 0.0


def iter_entries(cache_dir: str | Path | None = None, *, full: bool = False) -> Iterator[Entry]:
    """Every ``<cann-version>/<arch>/<key>`` directory in every tier, with what is wrong with it (if anything)."""
    for tier in tiers(cache_dir):
        base = tier.path / f"v{CACHE_FORMAT}"
        try:
            versions = sorted(p for p in base.iterdir() if p.is_dir() and p.name not in NOT_ENTRY_DIRS)
        except OSError:
            continue
        for vdir in versions:
            for entry in sorted(p for p in vdir.glob("*/*") if p.is_dir()):
                yield Entry(entry, tier.kind, read_manifest(entry), entry_problem(entry, full=full))


def stale_temp_dirs(root: Path, older_than_s: float = LEFTOVER_AGE_S) -> list[Path]:
    """This user's leftovers under ``tmp/``: build dirs whose builder is gone (this host and pid namespace, a
    dead pid: ``process_tag.builder_gone``), and anything older than an hour (a build dir, or a write probe's file
    that a killed process left) but a running builder's dir: ``layout.tmp_aged_out``, as the sweep judges."""
    out = []
    now = time.time()
    for name, st in children(root / f"v{CACHE_FORMAT}" / "tmp"):
        if not mine(st):
            continue
        if (stat.S_ISDIR(st.st_mode) and builder_gone(name)) or tmp_aged_out(name, st, now, older_than_s):
            out.append(root / f"v{CACHE_FORMAT}" / "tmp" / name)
    return out


@dataclass
class CleanResult:
    """What ``clean`` did: removed paths, paths it could not remove (with why), and notes."""

    removed: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def remove(self, path: Path, *, via_trash: bool = True) -> None:
        why = remove_tree(path, via_trash=via_trash)
        if why is None:
            self.removed.append(path)
        else:
            self.failed.append((path, why))

    def remove_if_mine(self, path: Path, st: os.stat_result | None = None, *, via_trash: bool = True) -> None:
        """``remove``, or, for what another user owns (``_fs.mine``: a name anyone may add in a sticky
        tree, or root's from a ``sudo warm``), a note naming the owner: theirs to remove, said, not failed."""
        try:
            st = st or os.lstat(path)
        except OSError:
            return
        if mine(st):
            self.remove(path, via_trash=via_trash)
        else:
            self.notes.append(f"kept {path}: {owner_name(st.st_uid)}'s")


def clean(
    cache_dir: str | Path | None = None,
    *,
    everything: bool = False,
    older_than_days: float | None = None,
    stale_toolchain: bool = False,
) -> CleanResult:
    """Remove entries from the writable root, and report truthfully what could not be removed.

    Prebuilt tiers are never touched. Whatever else is asked, leftovers are swept too: build dirs of
    dead or hour-old builders, quarantined entries older than an hour, and the trash. Leftovers are only
    this user's own (``_fs.mine``): in a tree others may add names to (a sticky ``v<N>``) theirs are kept,
    by ``everything`` too (``_remove_all_mine``).
    """
    root, _ = cache_root(cache_dir)
    base = root / f"v{CACHE_FORMAT}"
    result = CleanResult()
    for name, _ in root_trash(root):  # what a killed `clean --all` left beside v<N> (v<N> may be gone with it)
        result.remove(root / name, via_trash=False)
    try:  # the trust walk, as before any write: never delete inside a tree someone else can change
        os.close(trust.open_path(base, directory=True))
    except FileNotFoundError:
        return result
    except OSError as err:
        result.failed.append((base, describe_os_error(err, base)))
        return result
    if everything:
        _clean_everything(root, result)
        return result
    current: dict[str, dict | None] = {}
    cutoff = time.time() - older_than_days * 86400 if older_than_days is not None else None
    for entry in iter_entries(cache_dir):
        if entry.tier != "writable":
            continue
        drop = False
        if cutoff is not None and entry.built_at < cutoff:
            drop = True
        if stale_toolchain and not drop:
            fp = manifest_field(entry.manifest, "key_input", "toolchain")
            kind = fp.get("kind") if isinstance(fp, dict) else None
            if kind not in current:
                try:
                    current[kind] = toolchain.get_toolchain(kind).fingerprint() if kind else None
                except Exception as err:  # noqa: BLE001 - no toolchain here: keep its entries
                    current[kind] = None
                    result.notes.append(f"kept {kind} entries: no current {kind} toolchain to compare with ({err})")
            if fp is None or (current[kind] is not None and fp != current[kind]):
                drop = True
        if drop:
            result.remove_if_mine(entry.path)
    now = time.time()
    for sub in ("failed", "quarantine"):
        for name, st in children(base / sub):
            old = cutoff is not None and st.st_mtime < cutoff
            leftover = sub == "quarantine" and now - st.st_mtime > LEFTOVER_AGE_S
            if old or leftover:
                result.remove_if_mine(base / sub / name, st)
    for child in stale_temp_dirs(root):
        result.remove(child)
    for name, st in children(base / "trash"):
        result.remove_if_mine(base / "trash" / name, st, via_trash=False)
    return result


def _clean_everything(root: Path, result: CleanResult) -> None:
    """``clean --all``: the whole ``<root>/v<N>``, but never a build in progress. Removing its build dir
    under a running builder made that process fail (a library call, not just ``warm``) with a misleading
    "free some space", or take the cache for one others can write; it is kept, with a note, and what it
    publishes afterwards is a fresh, valid entry."""
    base = root / f"v{CACHE_FORMAT}"
    tmp = base / "tmp"
    stale = set(stale_temp_dirs(root))
    # a build dir of this user's whose builder runs, or anyone else's (a sticky tmp/): kept
    running = [tmp / name for name, st in children(tmp) if stat.S_ISDIR(st.st_mode) and tmp / name not in stale]
    if not running and not _holds_foreign(base):
        result.remove(base)
        return
    for name, st in children(base):
        if name != "tmp":
            _remove_all_mine(base / name, st, result, via_trash=name != "trash")
    for path in sorted(stale):
        result.remove(path)
    with contextlib.suppress(OSError):
        st = os.lstat(base)
        if not mine(st):  # a team root's v<N> someone else made: what of it was this user's is gone
            result.notes.append(f"kept {base}: {owner_name(st.st_uid)}'s")
    for path in running:
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue
        why = "a build in progress (its builder still runs)" if owner == os.getuid() else f"{owner_name(owner)}'s"
        result.notes.append(f"kept {path}: {why}")


def _remove_all_mine(path: Path, st: os.stat_result, result: CleanResult, *, via_trash: bool) -> None:
    """``clean --all`` below ``v<N>``: ``path`` if it is this user's and holds nothing of anyone else's;
    else, for a directory of this user's, what in it is, and the directory itself is kept. In a tree
    others may add names to (a sticky team cache down to its arch dirs, its ``failed/`` and
    ``quarantine/``) an entry, a failed build or a quarantined entry someone else made there is theirs,
    as for every other removal (``_fs.mine``): kept, and said whose."""
    if not mine(st):
        result.notes.append(f"kept {path}: {owner_name(st.st_uid)}'s")
    elif not stat.S_ISDIR(st.st_mode) or not _holds_foreign(path):
        result.remove(path, via_trash=via_trash)
    else:
        for name, child in children(path):
            _remove_all_mine(path / name, child, result, via_trash=via_trash)


def _holds_foreign(path: Path) -> bool:
    """Whether the directory ``path`` is not this user's or has, at any depth, a name that is not (walked
    through fds from the trust walk's, never following a link). False when it cannot be looked into: the
    removal then says why it failed."""
    try:
        fd = trust.open_path(path, directory=True)
    except OSError:
        return False
    try:
        return not mine(os.fstat(fd)) or _foreign_below(fd)
    finally:
        os.close(fd)


def _foreign_below(dir_fd: int) -> bool:
    for name, st in children_at(dir_fd):
        if not mine(st):
            return True
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                if _foreign_below(sub):
                    return True
            finally:
                os.close(sub)
    return False


def verify_entry(entry: Entry) -> tuple[str, str | None]:
    """Re-hash and load-test one entry: ("ok", None), ("bad", why), ("unsafe", why) when others could
    have written it (it is not loaded), or ("untested", why) when this host lacks a library it depends
    on (a login node without the NPU runtime must not quarantine good builds)."""
    so = entry.path / LIB_NAME
    kernel = manifest_field(read_manifest(entry.path), "key_input", "kernel") or KERNEL_NAME
    if not isinstance(kernel, str):
        return "bad", entry_problem(entry.path, full=True) or f"its manifest names no kernel ({kernel!r})"
    try:
        if kernel == KERNEL_NAME:
            load_entry(entry.path)  # the same walk, checks and fd-load as a library call
        elif kernel in KERNEL_SOURCES:
            _check_exports(entry.path, KERNEL_SOURCES[kernel][1])
        else:
            return "untested", f"a library of kernel {kernel!r}, which this version of the package does not build"
    except UnsafeLibraryError as err:  # never loaded, never moved: it may not even be ours
        return "unsafe", getattr(err, "problem", str(err))
    except LibraryLoadError as err:
        missing = missing_dependency(err, so)
        if missing is not None:
            return "untested", f"hashes match; cannot load-test here, {missing} is not found"
        problem = entry_problem(entry.path, full=True)
        return "bad", problem or str(err)
    return "ok", None


def _check_exports(entry: Path, symbol: str) -> None:
    """Another library built from ``kernels/`` (the calibration kernels): the same walk and hash checks as
    a load, and its own symbol in the export table. Loading it as the rmsnorm library would fail on the
    rmsnorm ABI symbol and quarantine a good build."""
    fd = open_library(entry)
    try:
        data = trust.read_all(fd)
    finally:
        os.close(fd)
    try:
        exported = symbols_in(data)
    except NotELFError as err:
        raise LibraryLoadError(f"cannot load kernel library {entry / LIB_NAME}: {err}") from None
    if symbol not in exported:
        raise LibraryLoadError(f"cannot load kernel library {entry / LIB_NAME}: it does not export {symbol}")
