import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def threads():
    """Set torch's intra-op thread count for one test and restore it afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch):
    """Tests choose backends explicitly; a developer's ASCEND_RMSNORM_* settings must not leak in."""
    for name in list(os.environ):
        if name.startswith("ASCEND_RMSNORM_"):
            monkeypatch.delenv(name)
