"""The ``ascend-rmsnorm`` console script. It lives outside the package so that starting it does not run
the package's ``__init__``, which imports torch (about 3 s of CPU) and builds on import: ``--help``,
``--version``, ``warm`` and ``cache`` never need torch, and ``info`` must build nothing. Each command
imports the parts of the package it uses.
"""

import importlib.util
import sys


def main() -> int:
    if "ascend_rmsnorm" not in sys.modules:
        spec = importlib.util.find_spec("ascend_rmsnorm")
        # the package object with its path, its __init__ not run: submodules import as usual
        sys.modules["ascend_rmsnorm"] = importlib.util.module_from_spec(spec)
    from ascend_rmsnorm.cli.main import main as run

    return run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
