"""``python -m ascend_rmsnorm`` is the ``ascend-rmsnorm`` command."""

import sys

from .cli.main import main

sys.exit(main())
