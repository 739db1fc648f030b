"""Building one entry and publishing it atomically (docs/design.md §5 "Publish").

Every build happens in a private directory under ``tmp/`` and is published by one ``rename`` of that
directory, so readers see either nothing or a complete entry with its manifest. Each step goes through
directory fds, so what is renamed into place is the directory this process built in.
"""

from __future__ import annotations

import contextvars
import errno
import hashlib
import json
import logging
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .._log import get_logger, log_once
from ..errors import KernelCompileError
from . import build, toolpath, trust
from ._fs import others_uid
from ._fs import remove_tree_at as _remove_tree_at
from ._fs import safe_mode as _safe_mode
from .elf import ELF_MAGIC, NotELFError, symbols_in
from .key import ABI_SYMBOL, CACHE_FORMAT, KERNEL_NAME, KERNEL_SOURCES, LIB_NAME, BuildSpec, kernel_files
from .layout import LOG_NAME, MANIFEST_NAME, entry_dir, failed_dir, sweep_leftovers
from .locks import lock_dir
from .process_tag import build_dir_name
from .verify import entry_identity, entry_problem, quarantine

_NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph", "fuse")

log = get_logger  # called, never at import

#: Why a build happens now, for its "compiling ..." log line: a library call's first use (None, then
#: ``_first_use`` says which warm command precompiles it), unless ``cache.ensure_built`` (what ``warm``
#: runs) builds ahead of use.
why_now: contextvars.ContextVar[str | None] = contextvars.ContextVar("why_now", default=None)


def _first_use(spec: BuildSpec) -> str:
    if spec.kernel != KERNEL_NAME:  # the calibration kernels: bench --calibrate builds them, warm does not
        return "first use only"
    extra = " --toolchain emu" if spec.toolchain.kind == "emu" else ""  # plain warm builds the npu kernels
    return f"first use only; `ascend-rmsnorm warm{extra}` precompiles"


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories
    finally:
        os.close(fd)


def _open_output(work_fd: int, symbol: str = ABI_SYMBOL) -> tuple[int | None, bytes, str | None]:
    """(fd, bytes, None) of the library the compiler left in the build dir ``work_fd``, or (None, b"", why
    it is unusable). Opened without following links; a file that is not ours is not our build."""
    try:
        fd = os.open(LIB_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=work_fd)
    except OSError as err:
        return None, b"", f"no output library: {err.strerror or err}"
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        problem = f"{LIB_NAME} is not a regular file made by this build"
    data = b"" if problem else trust.read_all(fd)
    if problem is None and data[:4] != ELF_MAGIC:
        problem = f"{LIB_NAME} is not an ELF file"
    if problem is None:
        try:
            if symbol not in symbols_in(data):
                problem = f"{LIB_NAME} does not export {symbol}"
        except NotELFError as err:
            problem = f"{LIB_NAME} is not a readable shared object: {err}"
    if problem is not None:
        os.close(fd)
        return None, b"", problem
    return fd, data, None


def _fs_type(path: Path) -> str | None:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, fstype = "", None
    target = os.path.realpath(path)
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
    return fstype


def _note_network_fs(root: Path) -> None:
    fstype = _fs_type(root)
    if fstype and fstype.split(".")[0] in _NETWORK_FS:
        log_once(
            f"fs:{root}",
            logging.INFO,
            "kernel cache %s is on %s; build locks are node-local (%s)",
            root,
            fstype,
            lock_dir(),
        )


def describe(spec: BuildSpec) -> str:
    what = "kernels" if spec.kernel == KERNEL_NAME else f"{spec.kernel} kernels"
    return f"ascend-rmsnorm {what} for {spec.arch} with {spec.toolchain.describe()}"


def _copy_sources(src: Path, dst_fd: int, dst: Path) -> dict[str, str]:
    """Copy the kernel sources into the directory ``dst_fd`` (shown as ``dst``), each file created
    ``O_EXCL | O_NOFOLLOW``; returns the sha256 of what was written, by relative name. A failure is one
    ``OSError`` naming the path being written."""
    written: dict[str, str] = {}
    for rel, path in kernel_files(src):
        parts = rel.split("/")
        fd = os.dup(dst_fd)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    os.mkdir(part, _safe_mode(0o755), dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as err:
                    raise OSError(err.errno, err.strerror, str(dst.joinpath(*parts[: i + 1]))) from err
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = sub
            data = path.read_bytes()
            trust.create_file(fd, parts[-1], data, 0o644, shown=dst / rel)
            written[rel] = hashlib.sha256(data).hexdigest()
        finally:
            os.close(fd)
    return written


def publish_build(spec: BuildSpec, root: Path) -> Path:
    """Compile ``spec`` in a private dir under ``root`` and rename it into place; returns the entry dir.

    Everything goes through directory fds: the build dir is made (mode 0700) inside the checked
    ``tmp/`` fd, the sources, the log and the manifest are created in it ``O_EXCL | O_NOFOLLOW``, the
    compiler runs with that very directory as its working directory, its output is opened there without
    following links, and what is renamed into place is checked to be that directory. Any exception
    leaves nothing behind but a kept failure in ``failed/<key>`` (a compile error, with its log and
    sources); an ``OSError`` (full disk, read-only, not safe to write) propagates for ``cache._build_locked``.
    """
    base = root / f"v{CACHE_FORMAT}"
    sweep_leftovers(root)
    tmp = base / "tmp"
    tmp_fd = trust.open_path(tmp, create=True, directory=True)
    try:
        name = build_dir_name()
        work = tmp / name
        try:
            os.mkdir(name, 0o700, dir_fd=tmp_fd)
            work_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(work)) from err
        try:
            made = os.fstat(work_fd)
            if made.st_uid != os.getuid() or stat.S_IMODE(made.st_mode) & 0o077:
                raise _replaced(work, tmp)
            return _build_in(spec, root, work, _WorkDir(tmp_fd, name, work_fd, made))
        finally:
            os.close(work_fd)
    finally:
        os.close(tmp_fd)


@dataclass(frozen=True)
class _WorkDir:
    """A build dir: the ``tmp/`` fd, its name there, its own fd and its stat when made (its identity)."""

    tmp_fd: int
    name: str
    fd: int
    made: os.stat_result

    def still_named(self) -> bool:
        try:
            return trust.same_file(os.stat(self.name, dir_fd=self.tmp_fd, follow_symlinks=False), self.made)
        except OSError:
            return False

    def remove(self) -> None:
        """Delete the build dir, by name only while the name is still this directory."""
        if self.still_named():
            try:
                _remove_tree_at(self.tmp_fd, self.name)
            except OSError:
                pass  # left for the sweep


def _replaced(work: Path, tmp: Path) -> trust.Untrusted:
    return trust.Untrusted(
        work,
        f"the build dir {work} was replaced while this process was building in it, so someone else can "
        f"write {tmp}; nothing was published (fix: use a cache only you can write)",
    )


def _build_in(spec: BuildSpec, root: Path, work: Path, wd: _WorkDir) -> Path:
    keep_at = failed_dir(root, spec)
    what = describe(spec)
    kept = False
    try:
        try:
            os.mkdir("src", _safe_mode(0o755), dir_fd=wd.fd)
            src_fd = os.open("src", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(work / "src")) from err
        try:
            written = _copy_sources(spec.kernels_dir, src_fd, work / "src")
        finally:
            os.close(src_fd)
        if written != spec.key_input["sources"]:
            raise KernelCompileError(f"the kernel sources in {spec.kernels_dir} changed during the build; retry")
        # the compiler's temp files in the build dir (a shared TMPDIR would let someone swap them), and
        # its PATH and library paths cut to places nobody else can write (toolpath.compiler_env)
        os.mkdir(".tmp", 0o700, dir_fd=wd.fd)
        commands = [list(c) for c in spec.commands]
        env = toolpath.compiler_env(commands[0][0], work / ".tmp")
        _note_network_fs(root)
        log().info("compiling %s; %s", what, why_now.get() or _first_use(spec))
        try:
            result = build.run_compiler(
                commands, work, work / LOG_NAME, failed_dir=keep_at, what=what, env=env, dir_fd=wd.fd
            )
        except KernelCompileError:
            kept = True  # moved to failed/<key> (or, if that was impossible, left for the sweep)
            raise
        lib_fd, data, problem = _open_output(wd.fd, KERNEL_SOURCES[spec.kernel][1])
        if problem is not None:
            fd = os.open(LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
            try:
                os.write(fd, os.fsencode(f"# rejected: {problem}\n"))
            finally:
                os.close(fd)
            bad = build.CompileResult(
                result.argv, 0, result.output + f"\n[ascend-rmsnorm] {problem}\n", result.seconds, result.log_path
            )
            kept = True
            raise build.compile_failure(bad, work, keep_at, what + " (the compiler said ok but its output is unusable)")
        try:
            entry = _commit(spec, root, work, wd, lib_fd, data, result)
        finally:
            os.close(lib_fd)
    except BaseException as err:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT) and not hasattr(err, "free_bytes"):
            err.free_bytes = build.free_bytes(work)  # type: ignore[attr-defined]  # before the cleanup frees it
        if not kept:
            wd.remove()  # no half-finished build left behind (a no-op once renamed)
        raise
    log().info("built %s in %.1f s -> %s", what, result.seconds, entry)
    return entry


def _commit(
    spec: BuildSpec, root: Path, work: Path, wd: _WorkDir, lib_fd: int, data: bytes, result: build.CompileResult
) -> Path:
    """Write the manifest last (with the sha256 of the bytes read from ``lib_fd``), fsync, rename into place."""
    for scratch in ("src", ".tmp"):
        _remove_tree_at(wd.fd, scratch)
    manifest = {
        "manifest_format": 1,
        "key": spec.key,
        "key_input": spec.key_input,
        "library": {"file": LIB_NAME, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)},
        "built": {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "unix_time": time.time(),
            "seconds": round(result.seconds, 3),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": list(spec.argv) if len(spec.commands) == 1 else [list(c) for c in spec.commands],
        },
    }
    os.fchmod(lib_fd, _safe_mode(0o755))
    os.fsync(lib_fd)
    log_fd = os.open(LOG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wd.fd)
    try:
        os.fchmod(log_fd, _safe_mode(0o644))
        os.fsync(log_fd)
    finally:
        os.close(log_fd)
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    # last: it marks the entry complete
    trust.create_file(wd.fd, MANIFEST_NAME, text.encode("utf-8", "surrogateescape"), 0o644, shown=work / MANIFEST_NAME)
    os.fchmod(wd.fd, _safe_mode(0o755))
    try:
        os.fsync(wd.fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories
    return _rename_into_place(work, entry_dir(root, spec), spec, wd)


def _rename_into_place(work: Path, final: Path, spec: BuildSpec, wd: _WorkDir) -> Path:
    """Publish ``work`` as ``final``; a peer's valid entry wins; a stale invalid one is quarantined first.

    Only the directory this process built in is published: its name is checked to still be it before
    the rename, and the name it lands on after it (a swap in between is undone into quarantine)."""
    tmp = work.parent
    parent_fd = trust.open_path(final.parent, create=True, directory=True)
    try:
        for attempt in range(2):
            if not wd.still_named():
                raise _replaced(work, tmp)
            if others_uid(final.name, parent_fd) is not None:
                break  # made while this process built (a sticky arch dir): the rename would replace an empty one
            try:
                os.rename(wd.name, final.name, src_dir_fd=wd.tmp_fd, dst_dir_fd=parent_fd)
            except OSError as err:
                # EEXIST/ENOTEMPTY: an entry is there; ENOTDIR: something not a directory is (a stray
                # file, a dangling link), a stale invalid entry too, quarantined below (never followed)
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise
            else:
                landed = os.stat(final.name, dir_fd=parent_fd, follow_symlinks=False)
                if not trust.same_file(landed, wd.made):
                    quarantine(final, "not the build dir this process made (it was swapped during the rename)")
                    raise _replaced(work, tmp)
                _fsync_path(final.parent)
                return final
            seen = entry_identity(final)
            problem = entry_problem(final, spec.key)
            if problem is None:  # another builder won the race: use its entry
                wd.remove()
                return final
            if others_uid(final.name, parent_fd) is not None:
                break  # someone else's (anyone may add a name in a sticky arch dir): not ours to move
            if attempt == 0:
                quarantine(final, f"replaced by a fresh build: {problem}", expect=seen)
    finally:
        os.close(parent_fd)
    log().warning("cannot publish %s at %s; using this process's own copy", spec.short, final)
    return work
