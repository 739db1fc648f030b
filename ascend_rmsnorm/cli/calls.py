"""rms_norm with a backend object, for selftest and bench (kept out of the public ``functional``)."""

from __future__ import annotations

import torch

from ..backends import choice
from ..functional import rms_norm


def apply(impl, x: torch.Tensor, weight: torch.Tensor | None, eps: float, return_rstd: bool = False):
    """rms_norm with a backend object (selftest and bench): the package's own backends go through the
    registered ops like any call; another object (a test double) is called directly, forward only."""
    name = choice.name_of(impl)
    if name is not None:
        return rms_norm(x, weight, eps, backend=name, return_rstd=return_rstd)
    hidden = x.shape[-1]
    y2d, rstd, _ = impl.forward(x.reshape(-1, hidden), weight, eps)
    y = y2d.reshape(x.shape)
    return (y, rstd.reshape(x.shape[:-1])) if return_rstd else y
