"""The ``ascend-rmsnorm`` console script. It lives outside the package so that starting it does not run
the package's ``__init__``, which imports torch (about 3 s of CPU) and builds on import: ``--help``,
``--version``, ``warm`` and ``cache`` never need torch, and ``info`` must build nothing. Each command
imports the parts of the package it uses.

This works because no module of the package reads a name from the package object itself (every
``from .. import X`` names a submodule), so the package behaves alike with its ``__init__`` run or not;
``tests/cli/test_cli.py`` checks that rule and runs every command this way.
"""

import importlib.util
import sys

PACKAGE = "ascend_rmsnorm"


def defer_package_init() -> None:
    """Register the package object, with its path but without running its ``__init__``, so that its
    submodules import as usual without torch. Nothing to do when the package is imported already; when
    it cannot be found, the import that follows says so."""
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.submodule_search_locations is not None:
        sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)


def main() -> int:
    try:
        defer_package_init()
        from ascend_rmsnorm.cli.main import main as run
    except KeyboardInterrupt:  # a job cancelled as it starts: one line and 130, as the commands end
        if sys.stderr is not None:
            print("ascend-rmsnorm: interrupted", file=sys.stderr, flush=True)
        return 130
    return run()


if __name__ == "__main__":  # `python _ascend_rmsnorm_cli.py ARGS` (the tests run it so)
    sys.exit(main())
