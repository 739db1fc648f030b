"""An NPU's float overflow mode (saturation vs INF/NaN), with a fake torch.npu, a fake torch_npu module and a
fake libascendcl.so whose ``aclrtGetDeviceSatMode`` answers per device: read once per device, one warning
under saturation, its ``info`` lines and its own ``selftest`` line."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import types
import warnings
from types import SimpleNamespace

import pytest
import torch

from ascend_rmsnorm.backends import choice, npu, overflow_mode
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.cli import info, selftest
from ascend_rmsnorm.cli import main as cli


class FakeNpu:
    """The parts of ``torch.npu`` read here; ``device(i)`` makes i current for the fake ACL too."""

    def __init__(self, current: int = 0):
        self.current = current
        self.entered: list[int] = []

    def is_available(self):
        return True

    def current_device(self):
        return self.current

    @contextlib.contextmanager
    def device(self, index):
        self.entered.append(index)
        before = os.environ.get("FAKE_ACL_DEVICE")
        os.environ["FAKE_ACL_DEVICE"] = str(index)
        try:
            yield
        finally:
            if before is None:
                del os.environ["FAKE_ACL_DEVICE"]
            else:
                os.environ["FAKE_ACL_DEVICE"] = before


@pytest.fixture
def npu_host(jit, monkeypatch):
    """A fake CANN whose lib64 holds the fake libascendcl.so, and a fake torch.npu; returns (fake npu, lib)."""
    lib_path = jit.acl(jit.use(jit.cann("8.5.0")))
    monkeypatch.delenv("FAKE_ACL_DEVICE", raising=False)
    fake_npu = FakeNpu()
    monkeypatch.setattr(torch, "npu", fake_npu, raising=False)
    return fake_npu, ctypes.CDLL(str(lib_path))


def _acl_calls(lib) -> int:
    return ctypes.c_int.in_dll(lib, "fake_acl_sat_mode_calls").value


def _fake_torch_npu(monkeypatch, inf_nan):
    """A stand-in torch_npu module in sys.modules whose ``npu.utils.is_support_inf_nan()`` says ``inf_nan``."""
    module = types.ModuleType("torch_npu")
    module.npu = SimpleNamespace(utils=SimpleNamespace(is_support_inf_nan=lambda: inf_nan))
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return module


def test_inf_nan_mode_is_read_from_acl_with_the_device_current_and_says_nothing(npu_host, monkeypatch):
    fake_npu, lib = npu_host
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", "1,1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = overflow_mode.of_device(1)
    assert found == overflow_mode.OverflowMode(1, overflow_mode.INF_NAN, "aclrtGetDeviceSatMode")
    assert fake_npu.entered == [1] and "the contract's Inf/NaN rules hold" in found.describe()


def test_saturation_warns_once_and_each_device_is_read_once(npu_host, monkeypatch):
    fake_npu, lib = npu_host
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", "1,0,0")  # npu:0 INF/NaN, npu:1 and npu:2 saturating
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert overflow_mode.of_device(0).mode == overflow_mode.INF_NAN
        assert caught == []
        first = overflow_mode.of_device(1)
        again = overflow_mode.of_device(1)
        other = overflow_mode.of_device(2)
    assert first is again and first.saturating and other.saturating
    assert _acl_calls(lib) == 3  # one read per device, none for the repeat
    assert len(caught) == 1 and caught[0].category is RuntimeWarning  # once per process, not per device
    text = str(caught[0].message)
    assert "npu:1 is in saturation mode (aclrtGetDeviceSatMode)" in text
    assert "Inf/NaN" in text and "ordinary rows are not affected" in text and "INF_NAN_MODE_FORCE_DISABLE" in text
    assert [m.device for m in overflow_mode.known()] == [0, 1, 2]
    overflow_mode.reset()
    with pytest.warns(RuntimeWarning, match="saturation mode"):
        overflow_mode.of_device(1)  # after a reset it is read, and said, again


def test_without_acl_torch_npus_own_setting_is_used(npu_host, monkeypatch):
    monkeypatch.delenv("FAKE_ACL_SAT_MODE", raising=False)  # ACL answers with an error
    _fake_torch_npu(monkeypatch, inf_nan=False)
    with pytest.warns(RuntimeWarning):
        found = overflow_mode.of_device(0)
    assert found.mode == overflow_mode.SATURATION
    assert found.source.startswith("torch_npu.npu.utils.is_support_inf_nan()")
    assert "aclrtGetDeviceSatMode returned error 107002" in found.source


@pytest.mark.parametrize("earlier, left", [(None, 0), ("507035", 107002)])  # not clean before: nothing taken
def test_a_failed_read_takes_the_thread_error_it_left_and_no_other(npu_host, monkeypatch, earlier, left):
    """A failed aclrtGetDeviceSatMode records its code as this thread's last error; left there, it would keep
    every later kernel launch of the thread unchecked (kernels/host/launch_check.h checks only a clean
    thread's launches). The read takes its own error, never one an earlier call left."""
    _, lib = npu_host
    monkeypatch.delenv("FAKE_ACL_SAT_MODE", raising=False)  # ACL answers with an error
    if earlier is not None:
        monkeypatch.setenv("FAKE_ACL_THREAD_ERROR", earlier)
    found = overflow_mode.of_device(0)
    assert "aclrtGetDeviceSatMode returned error 107002" in found.source
    assert lib.aclrtPeekAtLastError(0) == left


def test_a_mode_nobody_can_read_is_unknown_and_not_a_warning(npu_host, monkeypatch):
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", "2")  # ACL_RT_OVERFLOW_MODE_UNDEF
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = overflow_mode.of_device(0)
    assert found.mode == overflow_mode.UNKNOWN
    assert "gave mode 2 (undefined)" in found.source and "torch_npu is not imported" in found.source


class _NpuTensor:
    """What the chooser reads from an NPU tensor (this host has none)."""

    def __init__(self, index):
        self.index = index

    def get_device(self):
        return self.index


def test_every_npu_call_notes_the_device_and_only_the_first_reads_it(npu_host, monkeypatch):
    fake_npu, lib = npu_host
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", "0")
    with pytest.warns(RuntimeWarning, match="npu:0 is in saturation mode"):
        assert choice.for_npu("torch", _NpuTensor(0)) is torch_backend  # the torch path on an NPU saturates too
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            choice.for_npu("torch", _NpuTensor(0))
    assert _acl_calls(lib) == 1 and fake_npu.entered == [0]


def _npu_info(monkeypatch, **kwargs) -> dict:
    monkeypatch.setattr(npu, "npu_present", lambda: True)
    return info.gather(**kwargs)


@pytest.mark.parametrize("modes, line", [("1", "npu:0 INF/NaN mode"), ("0", "npu:0 saturation mode")])
def test_info_shows_the_mode_in_text_and_json(npu_host, monkeypatch, capsys, modes, line):
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", modes)
    _fake_torch_npu(monkeypatch, inf_nan=True)
    monkeypatch.setattr(npu, "npu_present", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["info", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        overflow_mode.reset()
        assert cli.main(["info"]) == 0
    mode = overflow_mode.SATURATION if modes == "0" else overflow_mode.INF_NAN
    assert data["npu"]["overflow_mode"] == {
        "devices": [{"device": 0, "mode": mode, "source": "aclrtGetDeviceSatMode"}],
        "note": None,
    }
    text = capsys.readouterr().out
    assert f"  float mode    {line} (aclrtGetDeviceSatMode)" in text


def test_info_says_why_the_mode_was_not_read(npu_host, monkeypatch):
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", "1")
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    data = _npu_info(monkeypatch)  # the library's info() never imports torch_npu
    assert data["npu"]["overflow_mode"]["devices"] == []
    assert "not read: torch_npu is not imported" in data["npu"]["overflow_mode"]["note"]
    assert "float mode    not read: torch_npu is not imported" in info.format_report(data)
    data = _npu_info(monkeypatch, import_torch_npu=True)  # the CLI tries, and torch_npu is not installed here
    assert data["npu"]["overflow_mode"]["note"].startswith("not read: torch_npu cannot be imported")


def test_info_without_an_npu_has_no_float_mode_line(jit):
    data = info.gather()
    assert data["npu"]["overflow_mode"] == {"devices": [], "note": "no NPU"}
    assert "float mode" not in info.format_report(data)


@pytest.mark.parametrize(
    "modes, result, says",
    [
        ("1", True, "INF/NaN mode (aclrtGetDeviceSatMode): the contract's Inf/NaN rules hold"),
        ("0", False, "saturation mode (aclrtGetDeviceSatMode): rows holding Inf/NaN"),
        ("", None, "not known: aclrtGetDeviceSatMode returned error 107002"),
    ],
)
def test_selftest_gives_the_mode_its_own_line(npu_host, monkeypatch, modes, result, says):
    monkeypatch.setenv("FAKE_ACL_SAT_MODE", modes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (check,) = selftest.device_checks(SimpleNamespace(type="npu", index=0))
    assert check.name == "device: float overflow mode (npu:0)" and check.dtype == "-"
    assert check.passed is result and says in check.detail
    row = selftest.format_table([check]).splitlines()[1]
    assert {True: " PASS ", False: " FAIL ", None: " SKIP "}[result] in row


def test_a_skipped_check_neither_passes_nor_fails_the_selftest(monkeypatch, capsys):
    skip = selftest.Check("device: float overflow mode (npu:0)", "-", None, "not known: ...")
    monkeypatch.setattr(selftest, "run_checks", lambda *a, **k: [skip, selftest.Check("x", "fp32", True, "ok")])
    assert cli.main(["selftest", "--backend", "torch", "--quick"]) == 0
    out = capsys.readouterr().out
    assert " SKIP " in out and "1 passed, 0 failed, 1 skipped" in out
    assert cli.main(["selftest", "--backend", "torch", "--quick", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"][0]["passed"] is None


def test_the_device_line_comes_first_and_only_on_an_npu(monkeypatch):
    assert selftest.device_checks(torch.device("cpu")) == []
    line = selftest.Check("device: float overflow mode (npu:0)", "-", True, "INF/NaN")
    monkeypatch.setattr(selftest, "device_checks", lambda device: [line])
    checks = selftest.run_checks(torch_backend, torch.device("cpu"), hidden_sizes=(8,), dtypes=(torch.float32,))
    assert checks[0] is line and len([c for c in checks if c is line]) == 1


def test_importing_the_package_reads_no_mode_and_imports_neither_torch_npu_nor_this_module():
    import subprocess

    code = (
        "import sys, ascend_rmsnorm\n"
        "print(sorted(m for m in ('torch_npu', 'ascend_rmsnorm.backends.overflow_mode') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
