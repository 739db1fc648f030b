"""``ascend-rmsnorm info``: its parser and handler. What the report holds is ``cli.info``'s."""

from __future__ import annotations

import argparse

from .output import out


def run(args: argparse.Namespace) -> int:
    """Print the report (as JSON with ``--json``); builds nothing and exits 0."""
    import json

    from . import info

    data = info.gather(import_torch_npu=True)
    out(json.dumps(data, indent=2) if args.json else info.format_report(data))
    return 0


def register_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="what this host has (NPU, CANN, bisheng, cache tiers) and what backend auto would use",
        description="Package and framework versions, the NPU's SoC/arch/vector cores, the CANN root and version, "
        "bisheng, the cache tiers and whether each is writable, torch.compile's on-disk cache and whether it "
        "is yours, which backend auto picks and why, the device's float overflow mode, and every environment "
        "variable the package reads that is set (ignored values and unknown ASCEND_RMSNORM_* names marked). "
        "Builds nothing; exits 0.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
