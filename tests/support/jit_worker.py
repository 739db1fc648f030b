"""A separate process that uses the JIT cache, for race, crash and relocation tests.

Usage: jit_worker.py ACTION KIND ARCH OUT [GO_FILE]
  ACTION  get_library | ensure_built | key
  OUT     JSON result file ({"status", "entry", "error", "key"})
  GO_FILE if given, write OUT.ready, then wait until GO_FILE exists before starting (so many workers
          start together)

The package's ``__init__`` (torch, ~1 s) is skipped as the console script skips it: the JIT modules
need nothing from it, and 16 workers on 2 cores start in well under a second this way.
With FAKE_NO_FLOCK=1 every flock() fails with ENOLCK, as on a filesystem without locks.
"""

import errno
import json
import os
import sys
import time

import _ascend_rmsnorm_cli

_ascend_rmsnorm_cli.defer_package_init()

if os.environ.get("FAKE_NO_FLOCK"):
    import fcntl

    def _no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    fcntl.flock = _no_flock

from ascend_rmsnorm.jit import cache, toolchain  # noqa: E402

action, kind, arch, out = sys.argv[1:5]
go = sys.argv[5] if len(sys.argv) > 5 else None
if go:
    open(out + ".ready", "w").close()  # at the start line: the test touches GO once every worker is here
while go and not os.path.exists(go):  # GO's existence is all it says
    time.sleep(0.005)
result = {"pid": os.getpid(), "package": sys.modules["ascend_rmsnorm"].__path__[0]}
try:
    tc = toolchain.get_toolchain(kind)
    if action == "key":
        result["key"] = cache.build_spec(tc, arch).key
    elif action == "ensure_built":
        result["status"], entry = cache.ensure_built(tc, arch)
        result["entry"] = str(entry)
    else:
        lib = cache.get_library(tc, arch)
        result["status"] = "loaded"
        result["entry"] = str(lib.path.parent)
        result["abi"] = lib._lib.ascend_rmsnorm_abi_version()
except Exception as err:  # noqa: BLE001 - reported to the test
    result["error"] = f"{type(err).__name__}: {err}"
with open(out + ".tmp", "w") as f:
    json.dump(result, f)
os.replace(out + ".tmp", out)
