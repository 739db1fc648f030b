import os
import sys

import pytest
import torch


@pytest.fixture
def threads():
    """Set torch's intra-op thread count for one test and restore it afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """One kernel cache (and lock dir) for the session, so the emu library is compiled once per run."""
    return tmp_path_factory.mktemp("kernel-cache"), tmp_path_factory.mktemp("kernel-locks")


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch, session_cache):
    """Tests choose backends explicitly; a developer's ASCEND_RMSNORM_* settings must not leak in,
    and nothing writes to the user's own cache."""
    for name in list(os.environ):
        if name.startswith("ASCEND_RMSNORM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ASCEND_RMSNORM_CACHE_DIR", str(session_cache[0]))
    monkeypatch.setenv("ASCEND_RMSNORM_LOCK_DIR", str(session_cache[1]))


@pytest.fixture(autouse=True)
def _fresh_jit_state():
    """Discovery and cache memos are per process; tests change the environment, so start each one clean."""

    def reset():
        for name in (
            "ascend_rmsnorm.jit.toolchain",
            "ascend_rmsnorm.jit.cache",
            "ascend_rmsnorm._log",
            "ascend_rmsnorm.backends.choice",
            "ascend_rmsnorm.backends.npu",
            "ascend_rmsnorm.backends.overflow_mode",
        ):
            module = sys.modules.get(name)
            if module is not None:
                module.reset()

    reset()
    yield
    reset()


@pytest.fixture(scope="session")
def compiler_memo(tmp_path_factory):
    """Outputs of the fake compilers, shared by the whole session so each distinct build compiles once."""
    return tmp_path_factory.mktemp("compiler-memo")


@pytest.fixture
def jit(tmp_path, monkeypatch, compiler_memo):
    """An isolated JIT world: its own cache, lock dir, HOME, default CANN roots and a compile counter."""
    from jit_helpers import JitWorld

    return JitWorld.create(tmp_path, monkeypatch, compiler_memo)
