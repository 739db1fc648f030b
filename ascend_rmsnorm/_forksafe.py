"""Module locks that a forked child gets back free.

Why: ``os.fork`` copies every lock as it is, but only the thread that forked. A lock that another
thread held at that moment stays held in the child for ever: a kernel build in a background thread
holds the backend's and the cache's locks for its whole compile, so a child forked meanwhile (a
DataLoader worker, a ``multiprocessing`` fork pool, an inference engine's forked workers) hangs on its
first kernel call. What these locks guard changes by single assignments (a memo entry is there or it
is not), so the child may start with fresh locks, as ``logging`` does for its handlers, and redo what
the parent's thread had not finished; the build lock itself is a ``flock`` (``jit/locks.py``), which
the child waits for like any other process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping


def renew_in_child(namespace: MutableMapping[str, object], **factories: Callable[[], object]) -> None:
    """In every child this process forks from now on, replace each named lock of ``namespace`` (a
    module's ``globals()``) with a new one from its factory (``threading.Lock``, ``threading.RLock``), or
    other per-process state with its initial value (``lambda: None``)."""

    def renew() -> None:
        for name, factory in factories.items():
            namespace[name] = factory()

    if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
        os.register_at_fork(after_in_child=renew)
