"""A kernel launch the runtime refuses is an error, not silently unwritten outputs (kernels/host/launch_check.h).

The emulation's runtime refuses a launch when a test asks it to (emu/emu_launch.h), through the same
RMSNORM_LAUNCH the NPU build uses; the NPU build's lookup of aclrtPeekAtLastError / aclrtGetLastError
in the loaded libascendcl.so runs here against a fake one, in a subprocess of its own.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ascend_rmsnorm import rms_norm
from ascend_rmsnorm.backends import emu, npu
from ascend_rmsnorm.cli import selftest
from ascend_rmsnorm.errors import KernelLaunchError

from helpers import assert_same_bits, make_input, make_weight

CXX = shutil.which(os.environ.get("ASCEND_RMSNORM_CXX", "c++")) or "c++"
REFUSED = 507035  # an ACL runtime code (acl/error_codes/rt_error_codes.h: 5070xx, device task errors)


@pytest.fixture(scope="module")
def emu_runtime():
    """The emu library's runtime hooks: refuse(after, code), set_error(code), error()."""
    lib = emu.library()
    refuse = lib.symbol("ascend_rmsnorm_emu_refuse_launch")
    refuse.argtypes, refuse.restype = [ctypes.c_int64, ctypes.c_int32], None
    set_error = lib.symbol("ascend_rmsnorm_emu_set_thread_error")
    set_error.argtypes, set_error.restype = [ctypes.c_int32], None
    error = lib.symbol("ascend_rmsnorm_emu_thread_error")
    error.restype = ctypes.c_int32
    peak = lib.symbol("ascend_rmsnorm_emu_peak_ub")
    peak.argtypes, peak.restype = [ctypes.c_char_p], ctypes.c_uint32
    reset = lib.symbol("ascend_rmsnorm_emu_reset_stats")
    yield lib, refuse, set_error, error, (peak, reset)
    refuse(-1, 0)
    set_error(0)


def test_a_refused_forward_raises_with_the_runtime_code_and_the_next_call_works(emu_runtime):
    lib, refuse, set_error, error, _ = emu_runtime
    assert lib.launch_check_state() == 0
    set_error(107002)
    assert lib.launch_check_state() == 107002
    set_error(0)
    x, w = make_input(6, 256, torch.bfloat16, seed=3), make_weight(256, torch.bfloat16)
    refuse(0, REFUSED)
    with pytest.raises(KernelLaunchError, match=rf"ascend_rmsnorm_fwd: the runtime refused .*ACL error {REFUSED}"):
        rms_norm(x, w, backend="emu")
    assert error() == 0  # the launcher took the error it reported
    assert_same_bits(rms_norm(x, w, backend="emu"), rms_norm(x, w, backend="torch"), "y after the refusal")


def test_a_refused_backward_launches_nothing_after_it(emu_runtime):
    _, refuse, _, error, (peak, reset) = emu_runtime
    rows, hidden = 3000, 128  # several dw chunks: the backward kernel, then the dw reduce
    x = make_input(rows, hidden, torch.float16, seed=4).requires_grad_()
    w = make_weight(hidden, torch.float16).requires_grad_()
    y = rms_norm(x, w, backend="emu")
    dy = make_input(rows, hidden, torch.float16, seed=5)
    reset()
    refuse(0, REFUSED)  # the backward kernel itself
    with pytest.raises(KernelLaunchError, match=rf"ascend_rmsnorm_bwd: .*ACL error {REFUSED}.*nothing after it"):
        torch.autograd.grad(y, (x, w), dy, retain_graph=True)
    assert peak(b"rmsnorm_bwd_f16_f16_f16") == 0 and peak(b"rmsnorm_dw_f16") == 0  # no block of either ran
    refuse(1, REFUSED + 1)  # the dw reduce, after a backward kernel that ran
    with pytest.raises(KernelLaunchError, match=rf"ascend_rmsnorm_bwd: .*ACL error {REFUSED + 1}"):
        torch.autograd.grad(y, (x, w), dy, retain_graph=True)
    assert peak(b"rmsnorm_bwd_f16_f16_f16") > 0 and peak(b"rmsnorm_dw_f16") == 0
    assert error() == 0
    grads = torch.autograd.grad(y, (x, w), dy)
    assert peak(b"rmsnorm_dw_f16") > 0
    expected = torch.autograd.grad(rms_norm(x, w, backend="torch"), (x, w), dy)
    assert_same_bits(grads[0], expected[0], "dx after the refusals")
    assert_same_bits(grads[1], expected[1], "dw after the refusals")


def test_an_error_the_thread_had_before_is_left_alone(emu_runtime):
    """Not ours to report or to clear: the launch runs unchecked and the error stays for its owner."""
    _, _, set_error, error, (peak, reset) = emu_runtime
    x = make_input(4, 64, torch.float32, seed=6)
    set_error(107002)
    try:
        reset()
        assert_same_bits(rms_norm(x, None, backend="emu"), rms_norm(x, None, backend="torch"), "y")
        assert peak(b"rmsnorm_fwd_f32_f32_f32") > 0, "the emu kernel did not run: the error met no launch"
        assert error() == 107002
    finally:
        set_error(0)


def test_a_code_that_could_pass_for_an_argument_status_is_still_a_refusal(emu_runtime):
    _, refuse, _, _, _ = emu_runtime
    x = make_input(4, 64, torch.float32, seed=7)
    refuse(0, 5)  # 5 is ST_TOO_LARGE's number: the launcher must not return it as such
    with pytest.raises(KernelLaunchError, match="refused a kernel launch .no ACL error code"):
        rms_norm(x, None, backend="emu")


HARNESS = r"""
#include "host/launch_check.h"
// One launch as RMSNORM_LAUNCH makes it, the runtime recording `code` for it: the launcher's status, or
// -1 when the launch could not be checked.
extern "C" int harness_launch(int code)
{
    if (!rmsnorm_host::launch::CanCheck()) return -1;
    reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "fake_acl_set_thread_error"))(code);
    return rmsnorm_host::launch::Outcome();
}
"""

FAKE_ACL = r"""
static __thread int thread_error;
void fake_acl_set_thread_error(int code) { thread_error = code; }
int aclrtPeekAtLastError(int level) { return level == 0 ? thread_error : 100000; }
int aclrtGetLastError(int level) { int e = thread_error; if (level != 0) return 100000; thread_error = 0; return e; }
const char *aclGetRecentErrMsg(void) { return "EZ9999: fake inner error"; }
"""

CHILD = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from ascend_rmsnorm.jit.library import recent_acl_message, refused_launch_text
    acl_path, harness_path, with_acl = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if with_acl:
        acl = ctypes.CDLL(acl_path, mode=os.RTLD_GLOBAL)
    h = ctypes.CDLL(harness_path)
    got = {"state": h.ascend_rmsnorm_launch_check_state(), "launch": h.harness_launch(507035),
           "recent": recent_acl_message()}
    if with_acl:
        got.update(clean=h.harness_launch(0), after=acl.aclrtPeekAtLastError(0), small=h.harness_launch(5))
        acl.fake_acl_set_thread_error(107002)  # as an earlier call of this thread would leave it
        got.update(stale=h.harness_launch(507035), kept=acl.aclrtPeekAtLastError(0),
                   stale_state=h.ascend_rmsnorm_launch_check_state(),
                   text=refused_launch_text("ascend_rmsnorm_fwd", 507035))
    print(json.dumps(got))
    """
)


@pytest.fixture(scope="module")
def npu_build(tmp_path_factory):
    """(fake libascendcl.so with the thread-error functions, the launch check built as the NPU build has it)."""
    tmp = tmp_path_factory.mktemp("launch_check")
    (tmp / "acl.c").write_text(FAKE_ACL)
    acl = tmp / "libascendcl.so"
    cc = shutil.which("cc") or shutil.which("gcc") or CXX
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libascendcl.so", "-x", "c", str(tmp / "acl.c"), "-o",
                    str(acl)], check=True)  # fmt: skip
    (tmp / "harness.cpp").write_text(HARNESS)
    harness = tmp / "harness.so"
    done = subprocess.run(
        [CXX, "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror", "-I", str(emu.KERNELS), str(tmp / "harness.cpp"),
         "-o", str(harness), "-ldl"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return acl, harness


def _child(npu_build, with_acl: bool) -> dict:
    acl, harness = npu_build
    # the fake is on the search path either way: only a library the process has loaded may be used
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), LD_LIBRARY_PATH=str(acl.parent))
    # the limit bounds a hang only: the child imports torch, which takes a minute on a loaded machine
    done = subprocess.run([sys.executable, "-c", CHILD, str(acl), str(harness), "1" if with_acl else "0"],
                          capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_npu_build_finds_the_runtime_error_functions_in_the_loaded_libascendcl(npu_build):
    got = _child(npu_build, with_acl=True)
    assert (got["state"], got["launch"], got["after"]) == (0, 507035, 0)  # reported, and taken
    assert (got["clean"], got["small"]) == (0, 7)
    # an error from before: the launch goes unchecked, the error stays where it was, the state names it
    assert (got["stale"], got["kept"], got["stale_state"]) == (-1, 107002, 107002)
    assert got["recent"] == "EZ9999: fake inner error"
    assert "ACL error 507035: EZ9999: fake inner error" in got["text"]


def test_without_them_the_npu_build_loads_and_launches_unchecked(npu_build):
    assert _child(npu_build, with_acl=False) == {"state": -1, "launch": -1, "recent": ""}


@pytest.mark.parametrize(
    ("state", "passed", "says"),
    [(0, True, "aclrtGetLastError after each launch"), (-1, None, "without an error"), (107002, None, "error 107002")],
)
def test_selftest_says_whether_the_npu_kernels_launches_are_checked(monkeypatch, state, passed, says):
    monkeypatch.setattr(npu, "library", lambda: SimpleNamespace(launch_check_state=lambda: state))
    (line,) = selftest.launch_checks(npu.BACKEND)
    assert line.name == "kernels: refused launches reported"
    assert line.passed is passed and says in line.detail  # unchecked is a SKIP, never a pass
    assert selftest.launch_checks(emu.BACKEND) == []
