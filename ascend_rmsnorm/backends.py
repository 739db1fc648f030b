"""Which backend runs a call: ``auto``, ``npu``, ``emu`` or ``torch`` (DESIGN.md §2).

A backend is any object with ``forward(x2d, weight, eps) -> (y2d, rstd)`` and
``backward(dy2d, x2d, weight, rstd, need_dw) -> (dx2d, dw)``.
"""

from __future__ import annotations

import os

import torch

from . import reference

BACKEND_NAMES = ("auto", "npu", "emu", "torch")
ENV_BACKEND = "ASCEND_RMSNORM_BACKEND"


def requested_name(name: str | None) -> str:
    """The backend asked for: the argument, else ``ASCEND_RMSNORM_BACKEND``, else ``auto``."""
    chosen = name if name is not None else os.environ.get(ENV_BACKEND, "") or "auto"
    chosen = chosen.strip().lower()
    if chosen not in BACKEND_NAMES:
        source = "backend argument" if name is not None else ENV_BACKEND
        raise ValueError(f"unknown backend {chosen!r} from {source}; choose one of {', '.join(BACKEND_NAMES)}")
    return chosen


def resolve(name: str | None, x: torch.Tensor):
    """The backend object for tensor ``x``."""
    chosen = requested_name(name)
    if chosen == "auto":
        chosen = "torch"
    if chosen == "torch":
        return reference
    if chosen == "emu":
        from . import emu

        return emu.BACKEND
    raise NotImplementedError(f"backend {chosen!r} is not available in this build")


def describe(impl) -> str:
    """A short human name for a backend object."""
    return getattr(impl, "name", None) or ("torch" if impl is reference else type(impl).__name__)
