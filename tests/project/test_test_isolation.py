"""The test suite never writes to the user's own kernel cache: not from a test, and not from a fixture
made for a whole module (``tests/conftest.py``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def module_env(session_cache):
    """What a module-scoped fixture (one that builds the emu library for its module, say) sees."""
    return {name: value for name, value in os.environ.items() if name.startswith("ASCEND_RMSNORM_")}


def test_a_module_fixture_sees_the_sessions_cache_and_no_other_package_setting(module_env, session_cache):
    assert module_env == {
        "ASCEND_RMSNORM_CACHE_DIR": str(session_cache[0]),
        "ASCEND_RMSNORM_LOCK_DIR": str(session_cache[1]),
    }


def test_a_test_sees_the_same(session_cache):
    assert os.environ["ASCEND_RMSNORM_CACHE_DIR"] == str(session_cache[0])
    assert os.environ["ASCEND_RMSNORM_LOCK_DIR"] == str(session_cache[1])
