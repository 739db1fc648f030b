"""The one default-device rule of the command line, and the check of a device the user names.

``check_device(None, backend)`` is the default every command uses (``selftest``, ``bench`` and their
library entries alike): ``npu`` when this host has one torch_npu can use (never for the emu backend),
else ``cpu``. A named device is checked before any work, so a typo or a missing device is one line.
"""

from __future__ import annotations

import sys

from .errors import CliError, UsageError
from .output import say


def import_torch_npu() -> str | None:
    """Import torch_npu (the CLI may; the library never does): None when it worked, else why not."""
    if "torch_npu" in sys.modules:
        return None
    try:
        import torch_npu  # noqa: F401
    except Exception as err:  # noqa: BLE001 - a broken install raises anything
        return f"torch_npu cannot be imported ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None


def npu_usable() -> str | None:
    """None when torch sees an NPU; else why not."""
    import torch

    problem = import_torch_npu()
    if problem is not None:
        return problem
    try:
        if not torch.npu.is_available():
            return "torch_npu is installed but sees no NPU (driver not loaded, or ASCEND_RT_VISIBLE_DEVICES hides them)"
    except Exception as err:  # noqa: BLE001
        return f"torch.npu.is_available() failed: {err}"
    return None


def check_device(text: str | None, backend: str | None, option: str = "--device") -> str:
    """The device a command runs on, checked before any work: a string ``torch.device`` accepts.

    Default: ``npu`` when this host has one that torch_npu can use (the emu backend: ``cpu``), else ``cpu``.
    Raises ``UsageError`` for text that is no device and ``CliError`` for a device this host lacks or
    that cannot hold data (``meta``), or that the backend cannot run on.
    """
    import torch

    from ..backends import npu

    if text is None:
        text = "cpu"
        if backend != "emu" and npu.npu_present():
            why = npu_usable()
            if why is None:
                text = "npu"
            elif backend != "npu":
                say(f"this host has an NPU, but {why}; running on the CPU")
        given = False
    else:
        given = True
    shown = f"{option} {text}" if given else f"the default device {text}"
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        if text.split(":")[0].strip().lower() == "npu" and import_torch_npu() is None:
            try:
                dev = torch.device(text)
            except (RuntimeError, ValueError, TypeError) as err:
                raise UsageError(f"{option} {text!r} is not a device: {err}") from None
        elif text.split(":")[0].strip().lower() == "npu":
            raise CliError(f"{option} {text}: this host cannot run on an NPU: {import_torch_npu()}") from None
        else:
            raise UsageError(
                f"{option} {text!r} is not a torch device; give one such as cpu, npu, npu:1 or cuda:0"
            ) from None
    if dev.type == "meta":
        raise CliError(f"{shown}: meta tensors hold no data, so nothing can be checked or timed; use cpu or npu")
    if dev.type == "npu":
        problem = npu_usable()
        if problem is not None:
            raise CliError(f"{shown}: no usable NPU: {problem}")
    elif dev.type != "cpu":
        module = getattr(torch, dev.type, None)
        available = getattr(module, "is_available", None)
        try:
            ok = bool(available()) if callable(available) else True
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            raise CliError(f"{shown}: torch has no {dev.type} device on this host")
    if dev.type != "cpu" and dev.index is not None:
        count = getattr(getattr(torch, dev.type, None), "device_count", None)
        try:
            n = int(count()) if callable(count) else None
        except Exception:  # noqa: BLE001
            n = None
        if n is not None and dev.index >= n:
            raise CliError(f"{shown}: there is no {dev} (this host has {n} {dev.type} device(s))")
    try:
        torch.empty(1, device=dev)
    except Exception as err:  # noqa: BLE001 - every way a device can refuse an allocation
        raise CliError(f"{shown}: cannot allocate a tensor there: {one_line(err)}") from None
    if backend == "emu" and dev.type != "cpu":
        raise CliError(f"the emu backend runs on the CPU; {shown} is not (use --device cpu)")
    if backend == "npu" and dev.type != "npu":
        why = npu_usable() if not given else None
        raise CliError(
            f"the npu backend runs on an NPU; {shown} is not"
            + (f" (this host has no usable NPU: {why})" if why else "")
            + "; see `ascend-rmsnorm info`"
        )
    return str(dev)


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
