"""``ascend-rmsnorm selftest``: its parser and handler. The checks themselves are ``cli.selftest``'s."""

from __future__ import annotations

import argparse

from .device import check_device
from .output import out


def run(args: argparse.Namespace) -> int:
    """Check the device first (a bad one is one line), then run the checks; 1 if any fails."""
    from ..backends import choice
    from . import selftest

    backend = choice.requested_name(args.backend)
    device = check_device(args.device, backend)
    return selftest.main(backend, device, args.json, args.quick, echo=out)


def register_selftest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selftest",
        help="accuracy and bitwise batch-invariance checks of a backend on this device",
        description="Per dtype: the backend's bits against the torch path on the CPU (the contract), accuracy "
        "against float64, and bitwise invariance over row prefixes, row positions and 3-D vs 2-D inputs. "
        "Prints a pass/fail table; exits 1 if any check fails.",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "npu", "emu", "torch"),
        help="default: ASCEND_RMSNORM_BACKEND or auto; on a CPU, auto checks the emu kernels (built first), "
        "since auto there is the torch path itself",
    )
    p.add_argument("--device", help="torch device to run on (default: npu if present, else cpu)")
    p.add_argument("--quick", action="store_true", help="one hidden size instead of three")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)
