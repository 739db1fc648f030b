"""Backend choice (auto, fallback, strict), the kernel backend's launch plumbing, build on import."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest
import torch

from ascend_rmsnorm.backends import choice, emu, npu
from ascend_rmsnorm.backends import torch as torch_backend
from ascend_rmsnorm.backends.kernel import KernelBackend
from ascend_rmsnorm.errors import KernelCompileError, ToolchainNotFoundError
from ascend_rmsnorm.jit import cache


def _npu_tensor():
    """Stands in for an NPU tensor: resolve() only looks at the device type."""
    return SimpleNamespace(device=SimpleNamespace(type="npu", index=0), get_device=lambda: 0)


def test_auto_uses_the_torch_path_off_the_npu():
    assert choice.resolve(None, torch.ones(2, 4)) is torch_backend
    assert choice.resolve("auto", torch.ones(2, 4, device="meta")) is torch_backend


def test_the_torch_backend_has_one_name(monkeypatch):
    """``torch`` is what users pass (any case, spaces around it, argument or variable) and what reports show."""
    x = torch.ones(2, 4)
    for spelling in ("torch", " Torch ", "TORCH"):
        assert choice.resolve(spelling, x) is torch_backend
        monkeypatch.setenv("ASCEND_RMSNORM_BACKEND", spelling)
        assert choice.resolve(None, x) is torch_backend
    assert torch_backend.name == choice.name_of(torch_backend) == choice.describe(torch_backend) == "torch"
    assert "torch" in choice.BACKEND_NAMES and "reference" not in choice.BACKEND_NAMES


@pytest.mark.parametrize("which", ["torch", "emu", "npu"])
def test_each_backend_satisfies_the_protocol(which):
    """Not just the attributes (``isinstance``): the same positional arity and keyword-only names and defaults."""
    import inspect

    from ascend_rmsnorm.backends.base import Backend

    impl = {"torch": torch_backend, "emu": emu.BACKEND, "npu": npu.BACKEND}[which]
    assert isinstance(impl, Backend)
    assert impl.name == which == choice.name_of(impl)
    for method in ("forward", "backward"):
        want = list(inspect.signature(getattr(Backend, method)).parameters.values())[1:]  # without self
        got = list(inspect.signature(getattr(impl, method)).parameters.values())
        positional = lambda ps: [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # noqa: E731
        keyword = lambda ps: [(p.name, p.default) for p in ps if p.kind is p.KEYWORD_ONLY]  # noqa: E731
        assert len(positional(got)) == len(positional(want)), (which, method)
        assert all(p.default is p.empty for p in positional(got)), (which, method)
        assert keyword(got) == keyword(want), (which, method)


def test_explicit_backends():
    x = torch.ones(2, 4)
    assert choice.resolve("torch", x) is torch_backend
    assert choice.resolve("EMU", x) is emu.BACKEND
    with pytest.raises(ValueError, match="needs tensors on an NPU"):
        choice.resolve("npu", x)


def test_auto_falls_back_once_with_the_reason_when_npu_kernels_are_missing(jit):
    # No CANN anywhere in the jit world: the npu toolchain cannot be found.
    with pytest.warns(RuntimeWarning, match="torch path.*bisheng") as record:
        assert choice.resolve(None, _npu_tensor()) is torch_backend
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call warns no more
        assert choice.resolve(None, _npu_tensor()) is torch_backend


def test_strict_turns_the_fallback_into_an_error(jit, monkeypatch):
    monkeypatch.setenv("ASCEND_RMSNORM_STRICT", "1")
    with pytest.raises(ToolchainNotFoundError, match="ASCEND_RMSNORM_STRICT"):
        choice.resolve(None, _npu_tensor())
    with pytest.raises(ToolchainNotFoundError):
        choice.resolve("npu", _npu_tensor())


def test_a_failure_is_remembered_not_retried_per_call(jit, monkeypatch):
    calls = []
    real = npu.library

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(npu, "library", counting)
    with pytest.warns(RuntimeWarning):
        for _ in range(5):
            choice.resolve(None, _npu_tensor())
    assert len(calls) == 1


class _RecordingLib:
    """A kernel library that records what each launch saw, and fills outputs like the real one."""

    def __init__(self, log):
        self.log = log

    def forward(
        self, stream, block_dim, dtype, w_dtype, y_dtype, x, w, y, rstd, rows, hidden, eps, inv_h, offset, formula
    ):
        self.log.append(("forward", stream, block_dim, rows, hidden))

    def backward(
        self, stream, block_dim, dtype, w_dtype, dy_dtype, dy, x, w, rstd, gro, dx, dw, ws, rows, hidden, inv_h, offset
    ):
        self.log.append(("backward", stream, block_dim, dw is not None, ws is not None))

    def workspace_bytes(self, rows, hidden):
        return -(-rows // 64) * hidden * 4


def test_kernel_backend_reads_the_stream_inside_the_guard_right_before_each_launch():
    log = []
    streams = iter(range(100, 200))

    class Guard:
        def __enter__(self):
            log.append("enter")

        def __exit__(self, *exc):
            log.append("exit")

    def stream(x):
        log.append("stream")
        return next(streams)

    be = KernelBackend("fake", lambda: _RecordingLib(log), stream, lambda x: 48, lambda x: Guard())
    x = torch.ones(3, 8, dtype=torch.bfloat16)
    w = torch.ones(8, dtype=torch.float32)
    be.forward(x, w, 1e-6)
    be.forward(x, w, 1e-6)
    be.backward(x, x, w, torch.ones(3), need_dw=True)
    be.backward(x, x, None, torch.ones(3))
    assert log == [
        "enter", "stream", ("forward", 100, 48, 3, 8), "exit",
        "enter", "stream", ("forward", 101, 48, 3, 8), "exit",
        "enter", "stream", ("backward", 102, 48, True, True), "exit",
        "enter", "stream", ("backward", 103, 48, False, False), "exit",
    ]  # fmt: skip


def test_the_emu_backends_outputs_start_indeterminate(monkeypatch):
    """On an NPU a launch's outputs and workspace hold whatever the allocator's memory held; on the CPU a
    freed buffer of an earlier identical call often holds the very bits the kernel is to write, so a
    store the kernel misses could pass. The emu backend's start as 0xFF bytes: a library that launches
    nothing leaves every byte of them so (the npu one's are left as allocated)."""
    from ascend_rmsnorm.backends import emu

    class Lib(_RecordingLib):
        def add_forward(self, *args):
            pass

    for be in (emu.BACKEND, emu.with_block_dim(7)):
        monkeypatch.setattr(be, "_library", lambda: Lib([]))
        x = torch.ones(5, 40, dtype=torch.bfloat16)
        w = torch.ones(40, dtype=torch.float32)
        y, rstd, _ = be.forward(x, w, 1e-6)
        _, _, res_out = be.forward(x, w, 1e-6, residual=x)
        dx, dw = be.backward(x, x, w, torch.ones(5), need_dw=True)
        for t in (y, rstd, res_out, dx, dw, be.workspace):
            assert t.numel() and bool((t.view(torch.uint8) == 0xFF).all()), t
        be.backward(x[:0], x[:0], w, torch.ones(0), need_dw=True)  # launches nothing, so has no workspace
        assert be.workspace is None


def test_build_on_import_builds_once_with_a_log_line_and_is_silent_on_a_hit(jit, monkeypatch, caplog):
    jit.use(jit.cann("8.5.0"))
    monkeypatch.setenv("ASCEND_RMSNORM_ARCH", "dav-2201")
    monkeypatch.setattr(npu, "npu_present", lambda: True)
    with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
        npu.build_on_import()
    assert jit.compiles() == 1
    assert any("compiling" in r.getMessage() or "built" in r.getMessage() for r in caplog.records)
    npu.reset()
    cache.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ascend_rmsnorm"):
        npu.build_on_import()
    assert jit.compiles() == 1 and caplog.records == []


def test_a_build_that_failed_at_import_is_not_run_again_by_the_first_call(jit, monkeypatch):
    """No real bisheng has compiled the kernels yet, so a failed build is the likely first contact: it
    costs one compile per process (minutes, and each rank of a node waits for the others' under the
    lock), not one at import and another at the first call."""
    jit.use(jit.cann("8.5.0"))
    monkeypatch.setenv("ASCEND_RMSNORM_ARCH", "dav-2201")
    monkeypatch.setenv("FAKE_COMPILER_FAIL", "1")
    monkeypatch.setattr(npu, "npu_present", lambda: True)
    npu.build_on_import()
    assert jit.compiles() == 1
    with pytest.raises(KernelCompileError, match="fake failure number 100"):
        choice._npu_backend()  # the first call (auto falls back with this)
    with pytest.raises(KernelCompileError, match="fake failure number 100"):
        npu.library()  # backend="npu", or warmup()
    assert jit.compiles() == 1
    choice.reset()  # the public route after fixing the environment: built again
    with pytest.raises(KernelCompileError):
        npu.library()
    assert jit.compiles() == 2


@pytest.mark.parametrize("mode", ["lazy", "off"])
def test_build_on_import_respects_the_jit_mode(jit, monkeypatch, mode):
    jit.use(jit.cann("8.5.0"))
    monkeypatch.setenv("ASCEND_RMSNORM_ARCH", "dav-2201")
    monkeypatch.setenv("ASCEND_RMSNORM_JIT", mode)
    monkeypatch.setattr(npu, "npu_present", lambda: True)
    npu.build_on_import()
    assert jit.compiles() == 0


def test_build_on_import_never_raises(jit, monkeypatch, caplog):
    monkeypatch.setattr(npu, "npu_present", lambda: True)  # an NPU but no CANN at all
    with caplog.at_level(logging.WARNING, logger="ascend_rmsnorm"):
        npu.build_on_import()
    assert any("unavailable at import" in r.getMessage() for r in caplog.records)


def test_import_without_an_npu_touches_no_cache(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ASCEND_RMSNORM_CACHE_DIR": str(tmp_path / "c")}
    done = subprocess.run(
        [sys.executable, "-c", "import ascend_rmsnorm, sys; print(sorted(m for m in sys.modules if 'torch_npu' in m))"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # torch_npu is never imported by us
    assert not (tmp_path / "c").exists()
    assert done.stderr == ""
