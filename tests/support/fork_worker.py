"""Fork while another thread of this process builds the emu kernels; the child then asks for them too.

Usage: fork_worker.py OUT
  The compiler ($ASCEND_RMSNORM_CXX) is a wrapper that, on a real compile, writes its pid to
  $BLOCK_PIDS and then waits for a line on the FIFO $BLOCK_FIFO. A thread calls ``emu.library()``;
  once its compiler runs (so the thread holds the backend's and the cache's locks), the main thread
  forks. The child calls ``emu.library()`` as a DataLoader worker's first kernel call would; the
  parent then lets the compile finish (a line on the FIFO) and waits for the child.
  OUT gets {"parent": path, "child": path or "error: ..."}; the child writes OUT.child.

A child that inherited a held lock never returns: the test bounds this process, not a sleep.
"""

import json
import os
import sys
import threading
import time

import _ascend_rmsnorm_cli

_ascend_rmsnorm_cli.defer_package_init()

from ascend_rmsnorm.backends import emu  # noqa: E402


def wait_for_line(path: str) -> None:
    """Until ``path`` holds a whole line (the compiler has written its pid: it runs, and waits)."""
    while True:
        try:
            with open(path) as f:
                if f.read().endswith("\n"):
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)


out = sys.argv[1]
fifo = os.environ["BLOCK_FIFO"]
builder = threading.Thread(target=emu.library)
builder.start()
wait_for_line(os.environ["BLOCK_PIDS"])  # the thread's compile runs: it holds the locks now
pid = os.fork()
if pid == 0:
    os.environ.pop("BLOCK_FIFO")  # the child's own compile, if it makes one, must not wait for a line
    try:
        result = str(emu.library().path)
    except BaseException as err:  # noqa: BLE001 - reported to the test
        result = f"error: {type(err).__name__}: {err}"
    with open(out + ".child", "w") as f:
        f.write(result)
    os._exit(0)
with open(fifo, "w") as f:
    f.write("go\n")
builder.join()
_, status = os.waitpid(pid, 0)
with open(out + ".child") as f:
    child = f.read()
with open(out, "w") as f:
    json.dump({"parent": str(emu.library().path), "child": child, "child_status": status}, f)
