"""A hung test ends the run, with every thread's traceback, instead of hanging it.

A kernel slip can loop for good in the emulation as it would on an NPU (a zero-length DMA is a legal
no-op on both, so nothing aborts), and a lock bug can block a test for good; either used to show as a
CI job that never ended and said nothing. pyproject.toml arms pytest's faulthandler timeout with
exit on timeout, far above the slowest test on a loaded machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_this_run_is_guarded(request):
    assert float(request.config.getini("faulthandler_timeout")) > 0
    assert request.config.getini("faulthandler_exit_on_timeout") is True


def test_a_hung_test_ends_the_run_with_its_traceback(tmp_path):
    """The project's own pytest configuration, its timeout cut to a second: the blocked test's run exits
    non-zero, naming where it stood."""
    body = tmp_path / "test_blocks.py"
    body.write_text("import threading\n\n\ndef test_blocks_for_good():\n    threading.Event().wait()\n")
    argv = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)]
    argv += ["-p", "no:cacheprovider", "-o", "faulthandler_timeout=1", str(body)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)  # the bound only if it hangs
    assert done.returncode != 0
    assert "Timeout (0:00:01)!" in done.stderr, done.stderr[-2000:]
    assert f'File "{body}", line 5 in test_blocks_for_good' in done.stderr, done.stderr[-2000:]
