"""NPU-host facts, with a fake ``torch.npu`` (there is no NPU here): a 0 stream is an error and never a
launch; vector cores come from the device properties, then the platform ini, then the table; a stream's
core limit caps the blocks."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest
import torch

from ascend_rmsnorm.backends import npu
from ascend_rmsnorm.errors import KernelLaunchError
from ascend_rmsnorm.jit import toolchain


class FakeNpu:
    """The parts of ``torch.npu`` the npu backend touches, with knobs."""

    def __init__(self, stream=0xABC, props_cores=None, name="Ascend910B3", stream_limit=None):
        self.stream, self.props_cores, self.name, self.stream_limit = stream, props_cores, name, stream_limit
        self.limit_calls = 0

    def current_stream(self, device=None):
        return SimpleNamespace(npu_stream=self.stream)

    def current_device(self):
        return 0

    def get_device_properties(self, device):
        if self.props_cores is None:
            return SimpleNamespace(name=self.name)  # an older torch_npu: no vector_core_num
        return SimpleNamespace(name=self.name, vector_core_num=self.props_cores)

    def get_device_name(self, device=None):
        return self.name

    def device(self, device):
        import contextlib

        return contextlib.nullcontext()

    def __getattr__(self, name):
        if name == "get_stream_limit" and self.stream_limit is not None:

            def get_stream_limit(stream):
                self.limit_calls += 1
                if isinstance(self.stream_limit, Exception):
                    raise self.stream_limit
                if callable(self.stream_limit):
                    return self.stream_limit()
                return self.stream_limit

            return get_stream_limit
        raise AttributeError(name)


@pytest.fixture
def fake_npu(monkeypatch):
    def install(**kwargs):
        fake = FakeNpu(**kwargs)
        monkeypatch.setattr(torch, "npu", fake, raising=False)
        return fake

    return install


class RecordingLib:
    def __init__(self):
        self.launches = []

    def forward(self, stream, block_dim, *rest):
        self.launches.append(("forward", stream, block_dim))

    def backward(self, stream, block_dim, *rest):
        self.launches.append(("backward", stream, block_dim))

    def workspace_bytes(self, rows, hidden):
        return -(-rows // 64) * hidden * 4


def test_a_null_stream_is_an_error_and_nothing_is_launched(fake_npu, monkeypatch):
    fake_npu(stream=0, props_cores=48)
    lib = RecordingLib()
    monkeypatch.setattr(npu, "library", lambda: lib)
    backend = npu.KernelBackend("npu", lambda: lib, npu._stream, npu._block_dim, npu._guard)
    x = torch.ones(4, 8)
    with pytest.raises(KernelLaunchError, match="null stream for cpu: draining its task queue failed.*Nothing was"):
        backend.forward(x, torch.ones(8), 1e-6)
    with pytest.raises(KernelLaunchError, match="null stream"):
        backend.backward(x, x, torch.ones(8), torch.ones(4))
    assert lib.launches == []
    torch.npu.stream = 0x1234
    backend.forward(x, torch.ones(8), 1e-6)
    assert lib.launches == [("forward", 0x1234, 48)]


@pytest.mark.parametrize(
    "props, arch_cores, name, want",
    [
        (40, 48, "Ascend910_9392", (40, "torch.npu.get_device_properties")),  # the device itself wins
        (None, 40, "Ascend910B3", (40, "test arch")),  # then what the arch detection read (ini or table)
        (None, None, "Ascend910_9362", (40, "Ascend910_9362 built-in table")),  # ASCEND_RMSNORM_ARCH: by name
        (None, None, "Ascend910B2", (48, "Ascend910B2 built-in table")),
        (0, None, "Ascend999", (npu.FALLBACK_VECTOR_CORES, "fallback (vector core count unknown)")),
    ],
)
def test_vector_cores_come_from_the_device_then_the_ini_then_the_table(fake_npu, props, arch_cores, name, want, jit):
    fake_npu(props_cores=props, name=name)
    npu._state["arch"] = toolchain.ArchInfo(None, "dav-2201", arch_cores, "test arch")
    # (without torch_npu there is no "npu" device type: a cpu device with an index stands in)
    assert npu.vector_cores(torch.device("cpu", 0)) == want
    assert npu._block_dim(torch.ones(1)) == want[0]


def test_vector_cores_from_the_platform_ini_by_device_name(fake_npu, jit):
    fake = jit.use(jit.cann("8.5.0"))  # its inis: Ascend910B3 has 40, Ascend910_9392 48
    assert fake.root
    fake_npu(props_cores=None, name="Ascend910_9392")
    npu._state["arch"] = toolchain.ArchInfo(None, "dav-2201", None, "$ASCEND_RMSNORM_ARCH")
    assert npu.vector_cores(torch.device("cpu", 0)) == (48, "Ascend910_9392 platform ini")


@pytest.mark.parametrize(
    "limit, want",
    [
        ({"cube_core_num": 12, "vector_core_num": 24}, 24),
        ({"cube_core_num": -1, "vector_core_num": -1}, 48),  # no limit set
        ({"vector_core_num": 64}, 48),  # a limit above the device: the device
        ({}, 48),
        (RuntimeError("not supported on this SoC"), 48),
    ],
)
def test_a_streams_core_limit_caps_the_block_count(fake_npu, limit, want):
    fake = fake_npu(props_cores=48, stream_limit=limit)
    x = torch.ones(1)
    assert npu._block_dim(x) == want
    assert npu._block_dim(x) == want
    if isinstance(limit, dict):
        assert fake.limit_calls == 2  # read at every launch: a limit may be set between launches
    else:
        assert fake.limit_calls == 1  # an error means "unsupported": asked once


@pytest.mark.parametrize("earlier, left", [(None, 0), ("507035", 107002)])  # not clean before: nothing taken
def test_a_failed_stream_limit_read_takes_the_thread_error_it_left_and_no_other(
    fake_npu, jit, monkeypatch, earlier, left
):
    """A stream-limit read that fails inside the runtime leaves its code as the thread's last error, which
    would keep every later launch of the thread unchecked (kernels/host/launch_check.h checks only a clean
    thread's launches): the first failed read takes it, never one an earlier call left."""
    lib = ctypes.CDLL(str(jit.acl(jit.use(jit.cann("8.5.0")))))
    monkeypatch.delenv("FAKE_ACL_SAT_MODE", raising=False)  # the fake's getter fails: error 107002
    if earlier is not None:
        monkeypatch.setenv("FAKE_ACL_THREAD_ERROR", earlier)

    def failing_read():
        lib.aclrtGetDeviceSatMode(ctypes.byref(ctypes.c_int()))  # a runtime call that fails, as the read's
        raise RuntimeError("aclrtGetStreamResLimit failed")

    npu_fake = fake_npu(props_cores=48, stream_limit=failing_read)
    assert npu._block_dim(torch.ones(1)) == 48 and npu_fake.limit_calls == 1
    assert lib.aclrtPeekAtLastError(0) == left


def test_a_stream_limit_set_between_launches_is_seen(fake_npu):
    fake = fake_npu(props_cores=40, stream_limit={"vector_core_num": -1})
    x = torch.ones(1)
    assert npu._block_dim(x) == 40
    fake.stream_limit = {"vector_core_num": 8}
    assert npu._block_dim(x) == 8


@pytest.mark.parametrize(
    "soc, cores",
    [
        ("Ascend910B1", 48),
        ("Ascend910B2", 48),
        ("Ascend910B2C", 48),
        ("Ascend910B3", 40),
        ("Ascend910B4", 40),
        ("Ascend910B4-1", 40),
        ("Ascend910_9362", 40),
        ("Ascend910_9372", 40),
        ("Ascend910_9381", 48),
        ("Ascend910_9382", 48),
        ("Ascend910_9391", 48),
        ("Ascend910_9392", 48),
        ("Ascend910_9399", None),  # not in CANN 8.1's platform configs: unknown, not guessed
    ],
)
def test_the_core_table_follows_the_platform_configs(soc, cores):
    assert toolchain.soc_arch(soc).vector_cores == cores


def test_each_launch_runs_with_x_s_device_made_current(fake_npu, monkeypatch):
    """A tensor on another NPU than the current one is launched with its own device made current
    (``torch.npu.device(x.device)``) around reading the stream and the launch: the stream and the
    kernel's context are x's device's, not whatever device the thread had current."""
    import contextlib

    fake = fake_npu(props_cores=48)
    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(d)
        yield

    fake.device = device
    lib = RecordingLib()
    backend = npu.KernelBackend("npu", lambda: lib, npu._stream, npu._block_dim, npu._guard)
    x = torch.ones(4, 8)
    backend.forward(x, torch.ones(8), 1e-6)
    backend.backward(x, x, torch.ones(8), torch.ones(4))
    assert entered == [x.device, x.device] and [launch[0] for launch in lib.launches] == ["forward", "backward"]


def test_the_stream_is_read_with_x_s_device_current(fake_npu, monkeypatch):
    """Reading ``npu_stream`` is what submits the ops torch_npu queued before the launch, and without
    PER_STREAM_QUEUE torch_npu drains the queue of the *current* device then (torch_npu NPUStream.cpp,
    ``NPUStream::stream()``: ``getDefaultNPUStream()`` with no index). Read while another device is
    current, it would leave the ops that made x on x's device queued, and the kernel would overtake them.
    So the stream (and the core limit) must be read inside the device guard, not before it."""
    import contextlib

    fake = fake_npu(props_cores=48, stream_limit={"vector_core_num": -1})
    x = torch.ones(4, 8)
    current = ["the thread's own device"]
    reads = []

    @contextlib.contextmanager
    def device(d):
        before, current[0] = current[0], d
        try:
            yield
        finally:
            current[0] = before

    class Stream:
        @property
        def npu_stream(self):
            reads.append(current[0])
            return 0xABC

    fake.device = device
    fake.current_stream = lambda device=None: Stream()
    lib = RecordingLib()
    lib.add_forward = lambda stream, block_dim, *rest: lib.launches.append(("add_forward", stream, block_dim))
    backend = npu.KernelBackend("npu", lambda: lib, npu._stream, npu._block_dim, npu._guard)
    backend.forward(x, torch.ones(8), 1e-6)
    backend.forward(x, torch.ones(8), 1e-6, residual=torch.ones(4, 8))
    backend.backward(x, x, torch.ones(8), torch.ones(4))
    assert [launch[0] for launch in lib.launches] == ["forward", "add_forward", "backward"]
    assert reads == [x.device] * 3, f"npu_stream read while {reads} was current"


class PointerLib:
    """Records the tensor addresses each launch passes (the positions of ascend_rmsnorm_fwd/_bwd's pointers)."""

    def __init__(self):
        self.forwards, self.backwards = [], []

    def forward(self, stream, block_dim, x_code, w_code, y_code, x, w, y, rstd, *rest):
        self.forwards.append({"x": x, "w": w, "y": y, "rstd": rstd})

    def add_forward(self, stream, block_dim, x_code, w_code, y_code, x, res, w, y, rstd, res_out, *rest):
        self.forwards.append({"x": x, "residual": res, "w": w, "y": y, "rstd": rstd, "residual_out": res_out})

    def backward(self, stream, block_dim, x_code, w_code, dy_code, dy, x, w, rstd, gro, dx, dw, ws, *rest):
        self.backwards.append({"dy": dy, "x": x, "w": w, "rstd": rstd, "grad_residual": gro, "dx": dx})

    def workspace_bytes(self, rows, hidden):
        return 0


def fake_torch_npu(monkeypatch, internal: list[torch.Tensor]):
    """A torch_npu with the two format functions as the real one has them (torch_npu/csrc/aten/
    npu_native_functions.yaml: ``get_npu_format(Tensor self) -> int``, ``npu_format_cast(Tensor self, int
    acl_format) -> Tensor``): the tensors in ``internal`` are in FRACTAL_NZ (29), every other one in ND (2);
    a cast gives a new ND tensor of the same values."""
    import sys
    import types

    module = types.ModuleType("torch_npu")
    casts = []

    def get_npu_format(t):
        return 29 if any(t is s for s in internal) else 2

    def npu_format_cast(t, acl_format):
        out = t.clone()
        casts.append((t, acl_format, out))
        return out

    module.get_npu_format, module.npu_format_cast = get_npu_format, npu_format_cast
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return casts


def test_tensors_in_an_internal_npu_format_reach_the_kernels_as_nd(fake_npu, monkeypatch):
    """The kernels read row-major bytes. A tensor in a torch_npu internal format (FRACTAL_NZ from
    ``npu_format_cast(t, 29)``) is ``contiguous()`` already and its ``data_ptr`` holds tiled bytes, and
    torch_npu's ``empty_like`` gives an output in that format too (TensorFactories.cpp ``empty_like_npu``:
    ``ApplyTensorWithFormat(..., npu_format)`` for a non-base format): each such tensor is cast to ND first,
    so the kernels read and write the layout they assume."""
    fake_npu(props_cores=48)
    x, w, res, dy = torch.randn(4, 32), torch.randn(32), torch.randn(4, 32), torch.randn(4, 32)
    rstd_in, gro = torch.rand(4) + 1, torch.randn(4, 32)  # a backward's rstd and grad_residual, handed in
    casts = fake_torch_npu(monkeypatch, [x, w, res, dy, rstd_in, gro])
    lib = PointerLib()
    backend = npu.BACKEND
    monkeypatch.setattr(backend, "_library", lambda: lib)
    y, rstd, _ = backend.forward(x, w, 1e-6)
    backend.forward(x, w, 1e-6, residual=res)
    backend.backward(dy, x, w, rstd)
    backend.backward(dy, x, w, rstd_in, grad_residual=gro)
    nd_of: dict[int, set[int]] = {}  # id of a tensor in FRACTAL_NZ -> addresses of its ND casts
    for src, fmt, out in casts:
        assert fmt == 2  # ACL_FORMAT_ND
        nd_of.setdefault(id(src), set()).add(out.data_ptr())
    internal = (("x", x), ("w", w), ("residual", res), ("dy", dy), ("rstd", rstd_in), ("grad_residual", gro))
    for name, t in internal:
        assert id(t) in nd_of, f"{name} in FRACTAL_NZ was not cast to ND"
    inputs = [(launch, internal[:3]) for launch in lib.forwards] + [(lib.backwards[0], internal[:4])]
    for launch, tensors in [*inputs, (lib.backwards[1], internal)]:  # rstd is an output of the forwards
        for name, t in tensors:
            if name in launch:
                assert launch[name] in nd_of[id(t)], f"the kernels got {name}'s internal-format bytes"
    assert lib.forwards[0]["y"] not in nd_of[id(x)]  # y is an output of its own (ND, as x's cast is)


def test_nd_tensors_are_passed_as_they_are(fake_npu, monkeypatch):
    fake_npu(props_cores=48)
    x, w = torch.randn(4, 32), torch.randn(32)
    casts = fake_torch_npu(monkeypatch, [])
    lib = PointerLib()
    backend = npu.BACKEND
    monkeypatch.setattr(backend, "_library", lambda: lib)
    backend.forward(x, w, 1e-6)
    assert casts == [] and lib.forwards[0]["x"] == x.data_ptr() and lib.forwards[0]["w"] == w.data_ptr()
