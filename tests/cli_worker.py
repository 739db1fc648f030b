"""Run ``ascend-rmsnorm ARGS...`` in a fresh process without importing torch (~0.1 s instead of ~2 s).

The package's ``__init__`` imports torch; the ``warm`` and ``cache`` commands need nothing from it, so a
bare package object is registered first (as ``jit_worker.py`` does). Used where a test needs a real
process: a mount namespace (full or read-only filesystems), real stdout bytes, real signals.
"""

import importlib.util
import sys
import types

spec = importlib.util.find_spec("ascend_rmsnorm")
package = types.ModuleType("ascend_rmsnorm")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["ascend_rmsnorm"] = package

from ascend_rmsnorm.cli import main as cli  # noqa: E402

sys.exit(cli.main(sys.argv[1:]))
