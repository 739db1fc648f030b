"""The one piece of the perf model the backends use: naming host-made GM tensors for a recording.

A leaf module (it imports nothing of the package), so the backends can import it without pulling in
the model, the emu library or the command line.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_local = threading.local()


def note_tensor(name: str, tensor: object) -> None:
    """Name a GM tensor that launch code made itself (e.g. a widened copy of the weight: call
    ``note_tensor("w", w32)``), so its traffic is not reported as "workspace". A no-op unless a
    model recording runs on this thread."""
    names = getattr(_local, "names", None)
    if names is not None:
        names[name] = tensor


@contextlib.contextmanager
def collecting() -> Iterator[dict[str, object]]:
    """The names noted on this thread while the block runs (the model's ``record``)."""
    _local.names = noted = {}
    try:
        yield noted
    finally:
        _local.names = None
