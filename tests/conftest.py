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


def _package_env(session_cache) -> dict[str, str]:
    """The package's environment in a test: none of a developer's ASCEND_RMSNORM_* settings, and the
    session's kernel cache and lock dir instead of the user's own."""
    return {"ASCEND_RMSNORM_CACHE_DIR": str(session_cache[0]), "ASCEND_RMSNORM_LOCK_DIR": str(session_cache[1])}


@pytest.fixture(scope="session", autouse=True)
def _no_backend_env_in_the_session(session_cache):
    """The same for the whole session, so that a module- or session-scoped fixture (one that builds the
    emu library for its module, say), made before any test's own fixtures, never writes to the user's
    cache either; put back as it was at the end."""
    before = {name: value for name, value in os.environ.items() if name.startswith("ASCEND_RMSNORM_")}
    for name in before:
        del os.environ[name]
    os.environ.update(_package_env(session_cache))
    yield
    for name in [n for n in os.environ if n.startswith("ASCEND_RMSNORM_")]:
        del os.environ[name]
    os.environ.update(before)


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch, session_cache):
    """Tests choose backends explicitly; a developer's ASCEND_RMSNORM_* settings must not leak in (nor a
    setting an earlier test made outside monkeypatch), and nothing writes to the user's own cache."""
    for name in list(os.environ):
        if name.startswith("ASCEND_RMSNORM_"):
            monkeypatch.delenv(name)
    for name, value in _package_env(session_cache).items():
        monkeypatch.setenv(name, value)


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
