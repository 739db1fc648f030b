"""A builder that SIGKILLs itself at one step of publishing an emu build (for crash tests).

Usage: kill_worker.py STEP
  after-compile   the compiler has returned, nothing checked or written yet
  mid-manifest    half of manifest.json is written in the build dir
  before-rename   the build dir is complete, about to be renamed into place
  after-rename    renamed into place; the parent dir not fsynced, the lock still held, nothing logged

The kill is the process's own ``SIGKILL``: no handler, no ``finally``, no exit hook runs, as when the OOM
killer or a scheduler's ``kill -9`` ends a rank.
"""

import os
import signal
import sys

import _ascend_rmsnorm_cli

_ascend_rmsnorm_cli.defer_package_init()

from ascend_rmsnorm.jit import build, cache, toolchain, trust  # noqa: E402

step = sys.argv[1]
tc = toolchain.get_toolchain("emu")
key = cache.build_spec(tc, "dav-2201").key


def die():
    os.kill(os.getpid(), signal.SIGKILL)


real_run, real_create, real_rename = build.run_compiler, trust.create_file, os.rename


def run_compiler(*args, **kwargs):
    result = real_run(*args, **kwargs)
    if step == "after-compile":
        die()
    return result


def create_file(dir_fd, name, data, mode=0o644, *, shown=None):
    if name == cache.MANIFEST_NAME and step == "mid-manifest":
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
        os.write(fd, data[: len(data) // 2])
        die()
    return real_create(dir_fd, name, data, mode, shown=shown)


def rename(src, dst, **kwargs):
    if dst == key and step == "before-rename":
        die()
    real_rename(src, dst, **kwargs)
    if dst == key and step == "after-rename":
        die()


build.run_compiler, trust.create_file, os.rename = run_compiler, create_file, rename
cache.ensure_built(tc, "dav-2201")
sys.exit(f"not killed at {step}")
