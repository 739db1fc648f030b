"""Exported programs and AOTInductor packages call this package's ops, so the process that loads them
must ``import ascend_rmsnorm`` first: shown in fresh processes, with the error torch gives without it.
(One AOTInductor compile: tens of seconds.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "support" / "export_worker.py"
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


def test_loading_needs_the_import_and_says_which_op_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    # aoti_load_package unpacks into a temporary directory it never removes: keep those under tmp_path,
    # not in the machine's /tmp
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")

    def process(*args):
        done = subprocess.run([sys.executable, str(WORKER), *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.splitlines()[-1])

    made = process("make", str(tmp_path))
    bare = process("load", str(tmp_path))
    assert bare["imported"] is False
    # (torch 2.8 says it with a KeyError of its archive reader)
    failed = ("RuntimeError: We ran into an error when deserializing", "KeyError: \"There is no item named 'version'")
    assert bare["program"].startswith(failed), bare
    assert bare["aoti"] == "RuntimeError: Could not find schema for ascend_rmsnorm::add_rms_norm.", bare
    loaded = process("load", str(tmp_path), "--import")
    assert loaded == {"program": made["eager"], "aoti": made["eager"], "imported": True}, (loaded, made)
