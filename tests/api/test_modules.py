"""``RMSNorm`` as a drop-in for ``torch.nn.RMSNorm`` (a numpy np.int64 shape included)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ascend_rmsnorm
from ascend_rmsnorm import RMSNorm

from helpers import assert_same_bits, make_input, make_weight


@pytest.mark.parametrize("shape", [64, (64,), (4, 16), torch.Size([2, 3, 5])])
def test_state_dicts_load_both_ways_with_nn_rmsnorm(shape):
    ours, theirs = RMSNorm(shape, eps=1e-5), torch.nn.RMSNorm(shape, eps=1e-5)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert ours.weight.shape == theirs.weight.shape and ours.normalized_shape == theirs.normalized_shape
    assert repr(ours) == repr(theirs)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(5, 7, *theirs.normalized_shape)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        ours.weight.mul_(2)
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-6)


def test_several_trailing_dims_are_one_row_bit_for_bit():
    m = RMSNorm((4, 8), eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(make_weight(32, torch.float32).view(4, 8))
    x = make_input(6, 32, torch.bfloat16, seed=1).view(2, 3, 4, 8).requires_grad_()
    m = m.to(torch.bfloat16)
    y = m(x)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    x2 = x.detach().reshape(6, 32).requires_grad_()
    w2 = m.weight.detach().reshape(32).requires_grad_()
    y2 = ascend_rmsnorm.rms_norm(x2, w2, 1e-6)
    assert_same_bits(y.reshape(6, 32), y2, "y")
    dy = make_input(6, 32, torch.bfloat16, seed=2)
    gx, gw = torch.autograd.grad(y, (x, m.weight), dy.view(x.shape))
    gx2, gw2 = torch.autograd.grad(y2, (x2, w2), dy)
    assert gw.shape == (4, 8)
    assert_same_bits(gx.reshape(6, 32), gx2, "dx")
    assert_same_bits(gw.reshape(32), gw2, "dw")
    with pytest.raises(ValueError, match="normalized_shape"):
        m(torch.ones(3, 8, 4, dtype=torch.bfloat16))


def test_eps_none_is_what_nn_rmsnorm_really_uses():
    """nn.RMSNorm(eps=None) adds float32's epsilon for fp32, bf16 and fp16 inputs alike (its docs say
    finfo(x.dtype).eps, which for bf16 is 2**-7 and would change these rows visibly)."""
    x = (torch.randn(4, 64) * 1e-3).to(torch.bfloat16)
    ours, theirs = RMSNorm(64).to(torch.bfloat16), torch.nn.RMSNorm(64).to(torch.bfloat16)
    assert ours.eps is None and theirs.eps is None
    torch.testing.assert_close(ours(x).float(), theirs(x).float(), rtol=1e-2, atol=1e-2)
    docs = torch.nn.functional.rms_norm(x, (64,), None, torch.finfo(torch.bfloat16).eps)
    assert (theirs(x).float() - docs.float()).abs().max() > 0.1  # so the test can tell the two apart
    assert_same_bits(ours(x), RMSNorm(64, eps=torch.finfo(torch.float32).eps).to(torch.bfloat16)(x), "eps=None")


def test_shapes_operator_index_accepts():
    assert RMSNorm(np.int64(8)).normalized_shape == (8,)
    assert RMSNorm((np.int32(2), 4)).normalized_shape == (2, 4)
    assert RMSNorm(torch.tensor(8)).normalized_shape == (8,)
    assert RMSNorm([3, 5]).hidden_size == 15
    for bad, err in ((0, ValueError), ((), ValueError), ((2, -1), ValueError), (2.0, TypeError),
                     ("8", TypeError), (b"\x08", TypeError), (True, TypeError), ([4, None], TypeError)):  # fmt: skip
        with pytest.raises(err, match="normalized_shape"):
            RMSNorm(bad)


@pytest.mark.parametrize("mode, offset", [("fp32", 0.0), ("llama", 0.0), ("gemma", 1.0), ("fp32", 0.5)])
def test_modes_offset_and_reset_parameters(mode, offset):
    m = RMSNorm(48, eps=1e-6, casting_mode=mode, offset=offset, dtype=torch.bfloat16)
    assert m.casting_mode == mode and m.offset == offset
    assert torch.equal(m.weight, torch.full((48,), 1.0 - offset, dtype=torch.bfloat16))  # the identity scale
    x = make_input(5, 48, torch.bfloat16, seed=3)
    assert_same_bits(m(x), ascend_rmsnorm.rms_norm(x, None, 1e-6), "a fresh module scales by 1")
    with torch.no_grad():
        m.weight.copy_(make_weight(48, torch.bfloat16))
    want = ascend_rmsnorm.rms_norm(x, m.weight, 1e-6, casting_mode=mode, offset=offset)
    assert_same_bits(m(x), want, mode)
    m.reset_parameters()
    assert torch.equal(m.weight, torch.full((48,), 1.0 - offset, dtype=torch.bfloat16))
    if mode != "fp32" or offset:
        assert f"casting_mode={mode!r}" in repr(m)
    gemma = RMSNorm(8, casting_mode="gemma")  # offset left out: gemma's is 1, its identity weight 0
    assert gemma.offset == 1.0 and torch.equal(gemma.weight, torch.zeros(8))
    with pytest.raises(ValueError, match="offset"):
        RMSNorm(8, casting_mode="gemma", offset=0.5)
    with pytest.raises(ValueError, match="casting_mode"):
        RMSNorm(8, casting_mode="Llama")


def test_forward_with_residual_returns_y_and_residual_out():
    m = RMSNorm((2, 16), eps=1e-6)
    x = make_input(6, 32, torch.float16, seed=4).view(3, 2, 2, 16).requires_grad_()
    r = make_input(6, 32, torch.float16, seed=5).view(3, 2, 2, 16).requires_grad_()
    m = m.half()
    y, r_out = m(x, r)
    assert y.shape == r_out.shape == x.shape
    y2, r2 = ascend_rmsnorm.add_rms_norm(x.reshape(6, 32), r.reshape(6, 32), m.weight.reshape(32), 1e-6)
    assert_same_bits(y.reshape(6, 32), y2, "y")
    assert_same_bits(r_out.reshape(6, 32), r2, "residual_out")
    (y.float().sum() + r_out.float().sum()).backward()
    assert x.grad is not None and r.grad is not None
    assert_same_bits(x.grad, r.grad, "d(x) and d(residual): the same sum's gradient")


def test_no_affine():
    m = RMSNorm((4, 4), elementwise_affine=False, eps=1e-6)
    assert m.weight is None and list(m.state_dict()) == []
    m.reset_parameters()
    x = make_input(3, 16, torch.float32, seed=6).view(3, 4, 4)
    assert_same_bits(m(x).reshape(3, 16), ascend_rmsnorm.rms_norm(x.reshape(3, 16), None, 1e-6), "y")


def test_a_true_drop_in_subclass_with_one_eps_default_and_a_clear_float64_error():
    """isinstance(RMSNorm(H), nn.RMSNorm) for wrap policies and init code; eps=None is float32's epsilon
    in RMSNorm, rms_norm() and F.rms_norm alike (and variance_epsilon says so); float64 names what to use."""
    m = RMSNorm(64)
    assert isinstance(m, torch.nn.RMSNorm) and repr(m) == repr(torch.nn.RMSNorm(64))
    assert repr(RMSNorm(64, backend="torch")) == "RMSNorm((64,), eps=None, elementwise_affine=True, backend='torch')"
    assert m.eps is None and m.variance_epsilon == torch.finfo(torch.float32).eps
    assert RMSNorm(64, eps=1e-5).variance_epsilon == 1e-5
    with torch.no_grad():
        m.weight.copy_(make_weight(64, torch.float32))
    x = make_input(6, 64, torch.float32, seed=7) * 1e-3  # small rows: the eps shows in the bits
    by_default = ascend_rmsnorm.rms_norm(x, m.weight)
    assert_same_bits(m(x), by_default, "RMSNorm(H) and rms_norm(x, w) add the same eps by default")
    assert not torch.equal(by_default, ascend_rmsnorm.rms_norm(x, m.weight, 1e-6))  # so this can tell them apart
    torch.testing.assert_close(by_default, torch.nn.functional.rms_norm(x, (64,), m.weight), rtol=1e-6, atol=1e-7)
    y, r_out = ascend_rmsnorm.add_rms_norm(x, x, m.weight)
    assert_same_bits(y, ascend_rmsnorm.rms_norm(r_out, m.weight), "add_rms_norm's default eps too")
    for call in (lambda: m(x.double()), lambda: ascend_rmsnorm.rms_norm(x.double(), None)):
        with pytest.raises(TypeError, match=r"float64.*torch\.nn\.RMSNorm.*x\.float\(\)"):
            call()
    assert m.double()(x).dtype == torch.float32  # a float64 *weight* is fine: widened, as the contract says


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"eps": -1e-6}, ValueError, "eps must be finite and >= 0"),
        ({"eps": float("nan")}, ValueError, "eps must be finite"),
        ({"eps": float("inf")}, ValueError, "eps must be finite"),
        ({"eps": 1e-40}, ValueError, "smallest normal"),
        ({"offset": float("nan")}, ValueError, "offset must be finite"),
        ({"offset": "1"}, TypeError, "offset must be a real number"),
        ({"eps": "1e-6"}, TypeError, "eps must be a real number"),
        ({"eps": True}, TypeError, "eps must be a real number"),
        ({"eps": torch.tensor(1e-6)}, TypeError, "(a one-element tensor: pass .item())"),
        ({"offset": torch.tensor(1.0)}, TypeError, "(a one-element tensor: pass .item())"),
        ({"backend": "cuda"}, ValueError, "unknown backend 'cuda'"),
        ({"backend": 1}, TypeError, "backend must be a str"),
        ({"casting_mode": "none"}, ValueError, "RMSNorm: casting_mode must be one of"),
        ({"casting_mode": 1}, TypeError, "RMSNorm: casting_mode must be a str"),
        ({"elementwise_affine": "no"}, TypeError, "RMSNorm: elementwise_affine"),
        ({"casting_mode": "gemma", "offset": 0.5}, ValueError, "RMSNorm: casting_mode='gemma'"),
    ],
)
def test_bad_settings_are_refused_when_the_layer_is_built_not_at_its_first_forward(kwargs, exc, words):
    """A layer built with an eps, offset or backend no call would take raises at construction (as a bad
    casting_mode does), naming it, instead of at the first forward deep inside a training step."""
    with pytest.raises(exc, match="RMSNorm") as info:
        RMSNorm(8, **kwargs)
    assert words in str(info.value)


def test_a_residual_of_another_shape_is_named_with_both_shapes():
    with pytest.raises(ValueError, match=r"residual must be a tensor of x's shape \(2, 8\), got \(1, 8\)"):
        RMSNorm(8)(torch.ones(2, 8), torch.ones(1, 8))
    with pytest.raises(ValueError, match=r"residual must be a tensor of x's shape \(2, 8\), got list"):
        RMSNorm(8)(torch.ones(2, 8), [1.0] * 8)
    with pytest.raises(ValueError, match=r"input of shape list does not end in normalized_shape \(8,\)"):
        RMSNorm(8)([1.0] * 8)


@pytest.mark.parametrize("dtype", (torch.int32, torch.bool, torch.complex64), ids=str)
def test_a_weight_dtype_no_call_takes_is_refused_by_name(dtype):
    """nn.RMSNorm(H, dtype=torch.int32) fails inside nn.Parameter ("Only Tensors of floating point and
    complex dtype can require gradients"), and a complex weight only at the first forward: both are a
    TypeError here that names the dtype; without a weight the dtype is unused, as in nn.RMSNorm."""
    with pytest.raises(TypeError, match=rf"RMSNorm: dtype {dtype} .*floating dtype"):
        RMSNorm(8, dtype=dtype)
    assert RMSNorm(8, elementwise_affine=False, dtype=dtype).weight is None


def test_variance_epsilon_is_writable_as_on_hugging_faces_norms():
    """HF's RMSNorm layers keep ``variance_epsilon`` as a plain attribute, which code may set; on this
    RMSNorm (and so on every norm patch_transformers swapped in) it was a read-only property:
    ``AttributeError: property 'variance_epsilon' ... has no setter``. Setting it sets ``eps``, checked."""
    m = RMSNorm(64)
    x = make_input(6, 64, torch.float32, seed=7) * 1e-3  # small rows: the eps shows in the bits
    m.variance_epsilon = 1e-5
    assert m.eps == 1e-5 and m.variance_epsilon == 1e-5
    assert_same_bits(m(x), ascend_rmsnorm.rms_norm(x, m.weight, 1e-5), "y with the eps set")
    with pytest.raises(ValueError, match="eps must be finite and >= 0"):
        m.variance_epsilon = -1.0
    assert m.eps == 1e-5
