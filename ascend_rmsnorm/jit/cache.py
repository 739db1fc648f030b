"""The kernel-library cache (docs/design.md §5): find an entry in the tiers, else build it under the
lock, then load it once per process; a library that fails to load is quarantined and rebuilt once.

Correctness never depends on the lock: every build is published by one ``rename`` (``publish.py``), so
readers see either nothing or a complete entry. The node-local ``flock`` only keeps several ranks of
one node from compiling the same key. The pieces: the key in ``key.py``; roots, tiers and paths in
``layout.py``; manifest checks, the fd-checked open and quarantine in ``verify.py``; the ownership walk
in ``trust.py``; the locks in ``locks.py``; listing, verifying and cleaning (the ``cache`` command) in
``admin.py``.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shlex
import shutil
import stat
import threading
from pathlib import Path

from .. import _env
from .._forksafe import renew_in_child
from .._log import get_logger, log_once
from ..errors import CacheWriteError, KernelCompileError, KernelNotCachedError, LibraryLoadError, UnsafeLibraryError
from . import build, layout, library, publish, toolchain, trust
from ._fs import fd_dir_problem, others_uid
from .key import (
    CACHE_FORMAT,
    KERNEL_NAME,
    KERNEL_SOURCES,
    KERNELS_DIR,
    LIB_NAME,
    MAIN_SOURCE,
    PACKAGE_DIR,
    BuildSpec,
    build_spec,
    source_hashes,
)
from .key import reset as _reset_key
from .layout import (
    ENV_CACHE_DIR,
    ENV_PREBUILT_DIR,
    LOG_NAME,
    MANIFEST_NAME,
    Tier,
    cache_root,
    describe_os_error,
    entry_dir,
    failed_dir,
    prebuilt_dirs,
    private_root,
    tiers,
    unwritable_error,
    writable_error,
)
from .locks import build_lock
from .toolchain import Toolchain
from .trust import Untrusted, unsafe_reason
from .verify import (
    check_entry,
    entry_identity,
    entry_problem,
    load_entry,
    missing_dependency,
    noexec_mount,
    open_library,
    quarantine,
)

#: What other modules and tests use from here; each name lives in the module that imports it above.
__all__ = [
    "CACHE_FORMAT",
    "ENV_CACHE_DIR",
    "ENV_JIT",
    "ENV_PREBUILT_DIR",
    "KERNEL_NAME",
    "KERNEL_SOURCES",
    "KERNELS_DIR",
    "LIB_NAME",
    "LOG_NAME",
    "MAIN_SOURCE",
    "MANIFEST_NAME",
    "PACKAGE_DIR",
    "BuildSpec",
    "Tier",
    "build_spec",
    "cache_root",
    "describe_os_error",
    "ensure_built",
    "entry_dir",
    "entry_problem",
    "get_library",
    "jit_mode",
    "load_entry",
    "lookup",
    "open_library",
    "prebuilt_dirs",
    "prebuilt_problem",
    "private_root",
    "quarantine",
    "reset",
    "source_hashes",
    "tiers",
    "unsafe_reason",
    "warm_command",
    "writable_error",
]

ENV_JIT = _env.JIT

_UNWRITABLE_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}

log = get_logger  # called, never at import


def jit_mode() -> str:
    """``import`` (default: build when ``import ascend_rmsnorm`` finds an NPU), ``lazy`` or ``off`` (never compile)."""
    return _env.get(ENV_JIT)


#: Entries that failed to load in this process and could not be moved (a read-only tier), by path, with the
#: identity of the directory that failed: a peer's fresh entry at the same path is not passed over.
_bad_entries: dict[Path, tuple[int, int] | None] = {}


def _is_mine(entry: Path) -> bool:
    """Whether ``entry`` is this user's (``_fs.mine``), or gone; one that cannot be looked at is not."""
    try:
        return others_uid(entry) is None
    except OSError:
        return False


def _known_bad(entry: Path) -> bool:
    return entry in _bad_entries and _bad_entries[entry] == entry_identity(entry)


def lookup(spec: BuildSpec, cache_dir: str | Path | None = None, *, only: Path | None = None) -> Path | None:
    """The first entry for ``spec`` in the tiers (or in the root ``only``) that loading would take, or None.

    Each candidate gets loading's own checked open (``check_entry``), so a lookup never blocks on a planted
    FIFO or reads through someone else's link. A broken entry is passed over. One that others may write is
    returned, so that loading it refuses it loudly (``UnsafeLibraryError``, with the fix) instead of a
    silent rebuild hiding it; so is one a part of which belongs to someone else in a prebuilt tier. In the
    writable root such an entry is passed over with one warning, and the build goes private: another user
    who plants a directory at a key's path there must not stop anyone's kernels. For the same reason a
    prebuilt root that others can add names to (a shared sticky directory, as /tmp) is no tier at all:
    it is passed over, with one warning, whatever it holds."""
    for tier in tiers(cache_dir) if only is None else [Tier("writable", only)]:
        entry = entry_dir(tier.path, spec)
        if not os.path.isdir(entry) or _known_bad(entry):
            continue
        if tier.kind == "prebuilt":
            shared = prebuilt_problem(tier.path, spec)
            if shared is not None:
                log_once(f"prebuilt tier {tier.path}", logging.WARNING, "passing over the prebuilt cache tier %s "
                         "(ASCEND_RMSNORM_PREBUILT_DIR): %s", tier.path, shared)  # fmt: skip
                continue
        problem, untrusted = check_entry(entry, spec.key)
        if problem is None:
            return entry
        if untrusted == "foreign" and tier.kind == "writable":
            log().debug("passing over the cache entry %s: %s", entry, problem)
            continue
        if untrusted:
            return entry
        log().debug("cache entry %s is not usable: %s", entry, problem)
    return None


def _tier_dirs(root: Path, spec: BuildSpec | None) -> list[Path]:
    """The directories between the tier ``root`` and ``spec``'s entry (``v<N>``, the toolchain's, the
    arch's); without ``spec``, ``v<N>`` and every toolchain and arch directory there is below it."""
    if spec is not None:
        entry = entry_dir(root, spec)
        return [entry.parents[2], entry.parents[1], entry.parent]
    base = Path(root) / f"v{CACHE_FORMAT}"
    out = [base]
    for name, st in layout.children(base):
        if stat.S_ISDIR(st.st_mode) and name not in layout.NOT_ENTRY_DIRS:
            out.append(base / name)
            out += [base / name / arch for arch, st2 in layout.children(base / name) if stat.S_ISDIR(st2.st_mode)]
    return out


def prebuilt_problem(root: Path, spec: BuildSpec | None = None) -> str | None:
    """Why the prebuilt tier ``root`` is passed over (others can add names to it, so anyone could have
    made its entries), or None; ``cache path`` and ``info`` say the same (without ``spec``: for any entry).

    The directories between the root and an entry (``v<N>``, the toolchain's, the arch's) count too: one
    that passes the ownership test only as a sticky directory anyone may write (an admin's ``chmod 1777
    v1``) lets anyone add the entry below it just as a sticky root does. One that fails the test itself
    is left to the entry's check, which refuses it loudly."""
    if not os.path.isdir(root):
        return None
    problem = unsafe_reason(root, searched=True, advice=trust.CACHE_ADVICE)
    if problem is not None:
        return problem
    for directory in _tier_dirs(root, spec):
        if not os.path.isdir(directory):
            continue
        problem = unsafe_reason(directory, searched=True)
        if problem is not None and unsafe_reason(directory) is None:  # sticky, not failing outright
            return problem
    return None


def _foreign_entry(root: Path, spec: BuildSpec) -> str | None:
    """Why ``spec``'s entry in the writable ``root`` is someone else's (a part of it belongs to another
    user: ``lookup`` passed it over), or None: a build then goes private and says so once."""
    # a missing entry is a plain not-found, unless a directory above it is someone else's (that the
    # walk reports before it gets there)
    problem, untrusted = check_entry(entry_dir(root, spec), spec.key, full=False)
    return problem if untrusted == "foreign" else None


def _failure_mark(root: Path, spec: BuildSpec) -> tuple[int, int, int] | None:
    """The identity of ``spec``'s kept failure in ``root`` (each failed build renames a new directory there)."""
    try:
        st = os.stat(failed_dir(root, spec), follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _peer_failure(spec: BuildSpec, root: Path, cache_dir: str | Path | None) -> KernelCompileError | None:
    """The error for a build that another process ran and failed while this one waited for its lock, or
    None when its compiler was killed by a signal (status 128 + N: the OOM killer, a kill), which says
    nothing about the sources, or when that failure is not this user's own (it fails the trust walk): this
    process builds then.

    The same key is the same sources, compiler, flags and arch: compiling again would fail again, and
    on a node whose ranks all wait for one lock each would pay the whole compile in turn. The log is
    opened as every file of the cache (the trust walk, never blocking: a FIFO there is no log) and read
    from its end, where the compiler's error is."""
    where = failed_dir(root, spec)
    log_path = where / LOG_NAME
    try:
        dir_fd = trust.open_path(where, directory=True)
        try:
            fd = trust.open_regular(dir_fd, where, LOG_NAME)
        finally:
            os.close(dir_fd)
        try:
            lines = _read_end(fd, _PEER_LOG_LIMIT).decode("utf-8", "replace").splitlines()
        finally:
            os.close(fd)
    except Untrusted:
        # someone else's (a shared sticky v<N> lets anyone make failed/<key>), or others may write it: no
        # failure of a peer of this user's, whatever it says; this process builds
        return None
    except OSError:
        lines = []
    statuses = [int(m.group(1)) for m in map(_EXIT_STATUS.match, lines) if m]
    if statuses and statuses[-1] >= 128:
        return None
    tail = lines[-build.TAIL_LINES :]
    return KernelCompileError(
        "\n".join(
            [
                f"another process's build of {publish.describe(spec)} (key {spec.short}) failed while this one "
                "waited for it; the same build is not run again here.",
                *(["end of its log:"] + [f"  {line}" for line in tail] if tail else []),
                f"full log: {log_path}",
                f"fix its cause, then retry (`{warm_command(spec, cache_dir=cache_dir)}` shows the whole error)",
            ]
        )
    )


def _read_end(fd: int, limit: int) -> bytes:
    """The last ``limit`` bytes of the open file ``fd`` (from a line's start, where it does not start at 0)."""
    start = max(0, os.fstat(fd).st_size - limit)
    data = trust.read_all(fd, limit, start)
    return data.split(b"\n", 1)[-1] if start else data


#: The last line ``build.run_compiler`` writes in a build's log (the supervisor's status: 128 + N for signal N).
_EXIT_STATUS = re.compile(r"# exit status (\d+) after ")


#: How much of a peer's failed build log is read for its tail.
_PEER_LOG_LIMIT = 4 << 20


def _build_locked(
    spec: BuildSpec, cache_dir: str | Path | None, *, private_ok: bool = True, target_only: bool = False
) -> tuple[str, Path]:
    """Build ``spec`` unless a peer does it first (re-checked after taking the lock).

    ``private_ok``: when the cache root cannot be written (up front, or ENOSPC/EROFS/EACCES mid-build),
    build into this process's private temp root instead, with one warning; without it, that is a
    ``CacheWriteError``. Every ``OSError`` of a build comes out as a ``CacheWriteError`` naming the path.
    """
    root = cache_root(cache_dir)[0]
    err = writable_error(root)
    foreign = _foreign_entry(root, spec) if err is None else None
    if foreign is not None:  # that key's path there is someone else's (lookup passed it over)
        err = Untrusted(entry_dir(root, spec), foreign, foreign=True)
    if err is not None:
        if not private_ok:
            raise unwritable_error(root, err, cache_dir)
        root = layout.use_private(root, err)
    only = root if target_only else None
    before = _failure_mark(root, spec)
    try:
        with build_lock(spec.key):
            found = lookup(spec, cache_dir, only=only)
            if found is not None:
                return "hit", found
            if _failure_mark(root, spec) not in (None, before):
                failure = _peer_failure(spec, root, cache_dir)
                if failure is not None:
                    raise failure
            try:
                return "built", publish.publish_build(spec, root)
            except OSError as err:
                if not private_ok or layout.is_private(root) or err.errno not in _UNWRITABLE_ERRNOS:
                    raise
                layout.note_unwritable(cache_root(cache_dir)[0], err)
                return "built", publish.publish_build(spec, layout.use_private(root, err))
    except OSError as err:
        raise CacheWriteError(
            f"building {publish.describe(spec)} into {root} failed: {describe_os_error(err, root)}. Nothing was "
            f"published and nothing partial is left. {_write_advice(err)}"
        ) from err
    except shutil.Error as err:  # not raised by our own copy; kept so that no raw list ever escapes
        raise CacheWriteError(f"building {publish.describe(spec)} into {root} failed: {err}") from err


def _write_advice(err: OSError) -> str:
    """What to do about an error writing a build: free space helps a full disk or quota only."""
    where = f"{ENV_CACHE_DIR} (warm: --cache-dir)"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"Free some space or point {where} at another filesystem"
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"Point {where} at a directory you can write"
    if err.errno == errno.ENOENT:  # the build dir, or the cache with it, was removed from elsewhere
        return "A directory of the cache was removed while this build ran; run it again"
    return f"Check that filesystem, or point {where} at another"


def warm_command(spec_or_kind: BuildSpec | str, arch: str | None = None, cache_dir: str | Path | None = None) -> str:
    """The exact ``ascend-rmsnorm warm`` command line that would build this target."""
    if isinstance(spec_or_kind, BuildSpec):
        kind, arch = spec_or_kind.toolchain.kind, spec_or_kind.arch
    else:
        kind = spec_or_kind
    argv = ["ascend-rmsnorm", "warm", "--arch", str(arch), "--toolchain", kind]
    root, is_default = cache_root(cache_dir)
    if not is_default:
        argv += ["--cache-dir", str(root)]
    return shlex.join(argv)


def _not_cached(spec: BuildSpec, cache_dir: str | Path | None, extra: str = "") -> KernelNotCachedError:
    searched = "\n".join(f"  {t.kind}: {entry_dir(t.path, spec)}" for t in tiers(cache_dir))
    return KernelNotCachedError(
        f"no cached ascend-rmsnorm kernel library for {spec.toolchain.kind} {spec.arch} "
        f"({spec.toolchain.describe()}, key {spec.short}) and {ENV_JIT}=off forbids compiling.{extra}\n"
        f"Searched:\n{searched}\n"
        f"Build it once with:\n  {warm_command(spec, cache_dir=cache_dir)}"
    )


def ensure_built(
    tc: Toolchain,
    arch: str,
    *,
    cache_dir: str | Path | None = None,
    kernels_dir: Path | None = None,
    private_ok: bool = True,
    target_only: bool = False,
    kernel: str = KERNEL_NAME,
) -> tuple[str, Path]:
    """("hit" | "built", entry dir) for ``tc`` + ``arch``; compiles if missing, whatever ``ASCEND_RMSNORM_JIT`` says.

    This is what ``ascend-rmsnorm warm`` runs; it does not load the library (a build host may lack the NPU
    runtime), but a build is only published after its ELF export table shows the ABI symbol. With
    ``private_ok=False`` an unwritable cache root is an error instead of a per-process temp dir. With
    ``target_only`` only the writable root counts as a hit (``warm --cache-dir D`` fills D).
    """
    arch = toolchain.check_supported(arch)
    if (no_proc := fd_dir_problem()) is not None:
        raise CacheWriteError(no_proc)
    spec = build_spec(tc, arch, kernels_dir, kernel)
    found = lookup(spec, cache_dir, only=cache_root(cache_dir)[0] if target_only else None)
    if found is not None:
        result = ("hit", found)
    else:
        token = publish.why_now.set("ahead of use, once per toolchain and arch")
        try:
            result = _build_locked(spec, cache_dir, private_ok=private_ok, target_only=target_only)
        finally:
            publish.why_now.reset(token)
    if noexec_mount(result[1]):  # warm said "built" for a library no process could load from there
        log().warning("%s: %s", _noexec_where(result[1]), _NOEXEC_FIX)
    return result


_libraries: dict[tuple, library.KernelLibrary] = {}
_libraries_lock = threading.RLock()
renew_in_child(globals(), _libraries_lock=threading.RLock)  # a forked child's first call must not hang


def get_library(
    tc: Toolchain, arch: str, *, cache_dir: str | Path | None = None, kernels_dir: Path | None = None
) -> library.KernelLibrary:
    """The loaded kernel library for ``tc`` + ``arch``: process memo, then the tiers, then a build under lock.

    With ``ASCEND_RMSNORM_JIT=off`` a miss raises ``KernelNotCachedError`` naming the warm command. A
    cached library that fails to load is quarantined and rebuilt once; a second failure raises with both.
    """
    memo_key = (
        tc,
        arch,
        str(kernels_dir or KERNELS_DIR),
        str(cache_dir or ""),
        os.environ.get(ENV_CACHE_DIR),
        os.environ.get(ENV_PREBUILT_DIR),
    )
    found = _libraries.get(memo_key)
    if found is not None:
        return found
    if tc.kind == "emu":
        _env.check_emu()  # the C++ emulation reads these itself; a bad value is reported here, once
    with _libraries_lock:
        found = _libraries.get(memo_key)
        if found is None:
            try:
                found = _load_or_build(tc, arch, cache_dir, kernels_dir)
            except OSError as err:  # a package error, so that `auto` falls back with its one warning
                why = describe_os_error(err)
                raise CacheWriteError(f"getting the kernel library for {arch} failed: {why}") from err
            _libraries[memo_key] = found
        return found


def _find_or_build(spec: BuildSpec, cache_dir: str | Path | None, extra: str = "") -> Path:
    found = lookup(spec, cache_dir)
    if found is not None:
        return found
    if jit_mode() == "off":
        passed = _foreign_entry(cache_root(cache_dir)[0], spec)
        if passed is not None:
            extra += f" (passed over the entry there, which someone else could have put there: {passed})"
        raise _not_cached(spec, cache_dir, extra)
    return _build_locked(spec, cache_dir)[1]


def _load_or_build(tc: Toolchain, arch: str, cache_dir: str | Path | None, kernels_dir: Path | None):
    arch = toolchain.check_supported(arch)
    if (no_proc := fd_dir_problem()) is not None:
        raise LibraryLoadError(no_proc)
    spec = build_spec(tc, arch, kernels_dir)
    entry = _find_or_build(spec, cache_dir)
    seen = entry_identity(entry)  # the entry this process loads: a peer may replace it by the same name
    try:
        return load_entry(entry, spec.key)
    except UnsafeLibraryError:
        raise  # refused, never quarantined: it is not ours to move
    except LibraryLoadError as first:
        missing = missing_dependency(first, entry / LIB_NAME)
        if missing is not None:  # the environment's fault, not the entry's: keep it, say what to fix
            raise LibraryLoadError(
                f"{first}\nThe library itself is fine, but the dynamic linker cannot find {missing}, which it needs: "
                "`source` CANN's set_env.sh (it sets LD_LIBRARY_PATH) on this host"
            ) from first
        if noexec_mount(entry):  # the mount's fault: a rebuild there would fail the same way
            if _tier_kinds(entry, spec, cache_dir) != {"prebuilt"}:
                raise LibraryLoadError(f"{first}\n{_noexec_text(entry)}") from first
            # a prebuilt tier's mount: its good entry is kept and passed over; the writable root may do
            log().warning("passing over a prebuilt entry: %s; using the writable cache instead", _noexec_where(entry))
            with _libraries_lock:
                _bad_entries[entry] = seen
        elif seen is None:  # gone before it was looked at: nothing of it to move (a peer's build may be there now)
            pass
        elif not _is_mine(entry):  # root's from a `sudo warm`, or a trusted user's: theirs to move, not ours
            with _libraries_lock:
                _bad_entries[entry] = seen
        elif quarantine(entry, str(first), expect=seen) is None and entry_identity(entry) == seen:
            with _libraries_lock:
                _bad_entries[entry] = seen  # still there and not movable (a read-only tier): skip it from now on
        # else it was moved, by this process or by a peer that met the same failure; a peer's fresh build
        # there is found by the lookup below
        try:
            entry2 = _find_or_build(spec, cache_dir, f" (the cached library {entry} failed to load: {first})")
        except KernelNotCachedError:
            raise
        except Exception as second:
            raise LibraryLoadError(
                f"the kernel library for {arch} failed to load and rebuilding it failed too.\n"
                f"first ({entry}): {first}\nrebuild: {second}"
            ) from second
        try:
            # A rebuilt entry may reuse the path of one that is still mapped; loading goes by inode and
            # through a fresh fd name, so it is the new library that runs.
            return load_entry(entry2, spec.key)
        except UnsafeLibraryError:
            raise
        except LibraryLoadError as second:
            why = f"\n{_noexec_text(entry2)}" if noexec_mount(entry2) else ""
            raise LibraryLoadError(
                f"the kernel library for {arch} failed to load twice, even after a rebuild.\n"
                f"first ({entry}): {first}\nafter rebuilding ({entry2}): {second}{why}"
            ) from second


def _tier_kinds(entry: Path, spec: BuildSpec, cache_dir: str | Path | None) -> set[str]:
    """The kinds of the tiers whose entry for ``spec`` is ``entry`` (prebuilt, writable, private: a root
    named as a prebuilt tier may be the writable one too)."""
    return {t.kind for t in tiers(cache_dir) if entry_dir(t.path, spec) == entry}


def _noexec_where(entry: Path) -> str:
    """What a cache entry on a noexec mount is told by (the load error, warm's warning, a prebuilt one passed over)."""
    return (
        f"{entry} is on a filesystem mounted noexec, from which no library can be loaded "
        f"(`findmnt -T {shlex.quote(str(entry))}` shows its options)"
    )


_NOEXEC_FIX = f"point {ENV_CACHE_DIR} (warm: --cache-dir) at a filesystem that allows it"


def _noexec_text(entry: Path) -> str:
    return f"The library itself is fine, but {_noexec_where(entry)}: {_NOEXEC_FIX}"


def reset() -> None:
    """Forget memoised libraries, hashes, probes and the private root (tests)."""
    with _libraries_lock:
        _libraries.clear()
        _bad_entries.clear()
        layout.reset()
        _reset_key()
