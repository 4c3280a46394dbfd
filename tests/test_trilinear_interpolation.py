# SPDX-License-Identifier: MIT
import pytest
import torch
from conftest import DEVICE_DTYPES, DEVICES, assert_close_to_float64, float64_leaves, needs_cuda
from hypothesis import strategies as st
from properties import check, dtypes_for, property_test, tensor

import jitops
import jitops.ops._framework
from jitops.ops.trilinear_interpolation import trilinear_interpolation_ref


@pytest.fixture(autouse=True, scope="module")
def loaded():
    jitops.ops._framework.require("trilinear_interpolation")


# (N, F): empty, one channel, odd channel counts (scalar loads), multiples of every vector width.
SHAPES = [(0, 4), (3, 0), (1, 1), (5, 3), (17, 7), (33, 32), (64, 256), (300, 9)]


def make_inputs(n, f, device, dtype, requires_grad=False):
    feats = torch.randn(n, 8, f, device=device, dtype=dtype, requires_grad=requires_grad)
    points = (torch.rand(n, 3, device=device, dtype=dtype) * 2 - 1).requires_grad_(requires_grad)
    return feats, points


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradients_match_reference(device, dtype, shape):
    feats, points = make_inputs(*shape, device, dtype, requires_grad=True)
    out = jitops.trilinear_interpolation(feats, points)
    grad_out = torch.randn_like(out)
    grad_feats, grad_points = torch.autograd.grad(out, (feats, points), grad_out)

    feats64, points64 = float64_leaves(feats, points)
    expected = trilinear_interpolation_ref(feats64, points64)
    expected_grads = torch.autograd.grad(expected, (feats64, points64), grad_out.double())
    assert out.shape == (shape[0], shape[1]) and out.dtype == dtype
    assert_close_to_float64(out, expected, dtype)
    assert_close_to_float64(grad_feats, expected_grads[0], dtype)
    assert_close_to_float64(grad_points, expected_grads[1], dtype)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_feats_only_gradient(device, dtype):
    # points without grad takes the backward that never reads feats; same grad_feats.
    feats, points = make_inputs(40, 24, device, dtype)
    feats.requires_grad_()
    out = jitops.trilinear_interpolation(feats, points)
    grad_out = torch.randn_like(out)
    (grad_feats,) = torch.autograd.grad(out, feats, grad_out)
    expected, _ = torch.ops.jitops._trilinear_interpolation_backward(grad_out, feats.detach(), points)
    torch.testing.assert_close(grad_feats, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_and_misaligned_inputs(device):
    base_feats = torch.randn(16, 30, 8, device=device)
    feats = base_feats.transpose(1, 2)[:, :, 2:26]  # (16, 8, 24), strided
    points = (torch.rand(3, 16, device=device) * 2 - 1).t()  # (16, 3), transposed
    offset_feats = torch.randn(16 * 8 * 24 + 1, device=device)[1:].view(16, 8, 24)  # not 16-byte aligned
    for f in (feats, offset_feats):
        f = f.detach().requires_grad_()
        p = points.detach().requires_grad_()
        out = jitops.trilinear_interpolation(f, p)
        grads = torch.autograd.grad(out.square().sum(), (f, p))
        f64, p64 = float64_leaves(f, p)
        expected = trilinear_interpolation_ref(f64, p64)
        expected_grads = torch.autograd.grad(expected.square().sum(), (f64, p64))
        assert_close_to_float64(out, expected, torch.float32)
        for got, want in zip(grads, expected_grads):
            assert_close_to_float64(got, want, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    feats, points = make_inputs(6, 5, device, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(jitops.trilinear_interpolation, (feats, points))
    # Each input alone, so both backward ops are checked.
    assert torch.autograd.gradcheck(lambda f: jitops.trilinear_interpolation(f, points.detach()), (feats,))
    assert torch.autograd.gradcheck(lambda p: jitops.trilinear_interpolation(feats.detach(), p), (points,))


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opcheck(device, dtype):
    feats, points = make_inputs(7, 9, device, dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.jitops.trilinear_interpolation.default, (feats, points))
    grad_out = torch.randn(7, 9, device=device, dtype=dtype)
    torch.library.opcheck(torch.ops.jitops._trilinear_interpolation_backward.default, (grad_out, feats.detach(), points.detach()))
    torch.library.opcheck(torch.ops.jitops._trilinear_interpolation_backward_feats.default, (grad_out, points.detach()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.slow
def test_torch_compile_fullgraph(device):
    # A small feature-grid model: interpolate, then an MLP layer; forward and backward compiled.
    layer = torch.nn.Linear(16, 4).to(device)

    def model(feats, points):
        return layer(jitops.trilinear_interpolation(feats, points).relu()).square().mean()

    compiled = torch.compile(model, fullgraph=True)
    feats, points = make_inputs(32, 16, device, torch.float32, requires_grad=True)
    loss = compiled(feats, points)
    grads = torch.autograd.grad(loss, (feats, points))
    expected = model(feats, points)
    expected_grads = torch.autograd.grad(expected, (feats, points))
    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_bad_inputs_name_the_argument():
    feats, points = make_inputs(4, 5, "cpu", torch.float32)
    cases = [
        ((feats[0], points), r"feats must have shape \(N, 8, F\).*got \[8, 5\]"),
        ((torch.randn(4, 7, 5), points), r"feats must have shape \(N, 8, F\), 8 corner.*got \[4, 7, 5\]"),
        ((feats, points[:3]), r"points must have shape \(N, 3\) with N = 4 \(feats.size\(0\)\), got \[3, 3\]"),
        ((feats, points[:, :2]), r"points must have shape \(N, 3\).*got \[4, 2\]"),
        ((feats, points[0]), r"points must have shape \(N, 3\).*got \[3\]"),
        ((feats, points.double()), "feats and points must have the same dtype, got float32 and float64"),
        ((feats.int(), points.int()), "feats must be float32 or float64.*got int32"),
        ((feats.half(), points.half()), "feats must be float32 or float64.*got float16 on cpu"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=message):
            jitops.trilinear_interpolation(*args)
    # The private backward ops check too: opcheck and users reach them directly.
    with pytest.raises(RuntimeError, match=r"grad_out must have shape \(N, F\) = \(4, 5\), got \[4, 6\]"):
        torch.ops.jitops._trilinear_interpolation_backward(torch.randn(4, 6), feats, points)
    with pytest.raises(RuntimeError, match=r"grad_out must have shape \(N, F\) = \(4, F\), got \[3, 5\]"):
        torch.ops.jitops._trilinear_interpolation_backward_feats(torch.randn(3, 5), points)
    with pytest.raises(TypeError, match="points must be a Tensor, got list"):
        jitops.trilinear_interpolation(feats, [[0.0, 0.0, 0.0]] * 4)


def test_bad_inputs_are_rejected_while_tracing():
    # The fake kernel repeats the C++ checks, so torch.compile fails the same way.
    feats, points = make_inputs(4, 5, "cpu", torch.float32)
    compiled = torch.compile(jitops.trilinear_interpolation, fullgraph=True)
    with pytest.raises(Exception, match=r"points must have shape \(N, 3\) with N = 4"):
        compiled(feats, points[:3])


@needs_cuda
def test_device_mix_is_an_error():
    feats, points = make_inputs(4, 5, "cpu", torch.float32)
    with pytest.raises(RuntimeError, match="feats and points must be on the same device"):
        jitops.trilinear_interpolation(feats.cuda(), points)


@property_test
def test_trilinear_interpolation_on_drawn_shapes_dtypes_strides_and_arguments(device, data):
    """The property (tests/properties.py): every drawn case matches trilinear_interpolation_ref or raises a clean error."""
    dtype = data.draw(st.sampled_from(dtypes_for(device)))
    n, f = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 9))
    corners = data.draw(st.sampled_from([8, 8, 8, 7]))
    feats = data.draw(tensor([n, corners, f], device, dtype))
    points = data.draw(tensor([n, data.draw(st.sampled_from([3, 3, 3, 2]))], device, dtype))
    if dtype.is_floating_point:
        points = points.clamp(-1, 1)
    valid = corners == 8 and points.shape[1] == 3 and dtype.is_floating_point
    check(lambda: jitops.trilinear_interpolation(feats, points), lambda: trilinear_interpolation_ref(feats, points), valid, dtype)
