# SPDX-License-Identifier: MIT
import pytest
import torch
from conftest import DEVICE_DTYPES, DEVICES, assert_close_to_float64, float64_leaves, needs_cuda

import jitops
import jitops.ops
from jitops.ops.upfirdn2d import upfirdn2d_ref


@pytest.fixture(autouse=True, scope="module")
def loaded():
    jitops.ops.require("upfirdn2d")


# (up, down, padding, flip_filter, gain): identity, StyleGAN2's upsample and downsample, per-axis
# values, negative padding (crop), flipped filter with gain.
CONFIGS = [
    (1, 1, 0, False, 1.0),
    (2, 1, [2, 1], False, 4.0),  # padding per axis: [x, y]
    (1, 2, [1, 1, 1, 1], False, 1.0),  # downsample2d
    ([2, 1], [1, 2], [1, 2, 0, -1], True, 2.0),
    (3, 2, [-1, 2, 3, -2], False, 1.0),
]
FILTERS = {
    "separable4": lambda device, dtype: torch.tensor([1.0, 3.0, 3.0, 1.0], device=device, dtype=dtype) / 8,
    "2d-3x4": lambda device, dtype: torch.randn(3, 4, device=device, dtype=dtype),
    "none": lambda device, dtype: None,
}


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("filter_name", FILTERS)
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_forward_and_gradient_match_reference(device, dtype, filter_name, config):
    up, down, padding, flip_filter, gain = config
    x = torch.randn(2, 3, 9, 7, device=device, dtype=dtype, requires_grad=True)
    f = FILTERS[filter_name](device, dtype)
    y = jitops.upfirdn2d(x, f, up, down, padding, flip_filter, gain)
    grad = torch.randn_like(y)
    (grad_x,) = torch.autograd.grad(y, x, grad)

    (x64,) = float64_leaves(x)
    f64 = None if f is None else f.double()
    expected = upfirdn2d_ref(x64, f64, up, down, padding, flip_filter, gain)
    (expected_grad,) = torch.autograd.grad(expected, x64, grad.double())
    assert y.shape == expected.shape and y.dtype == dtype
    assert_close_to_float64(y, expected, dtype)
    assert_close_to_float64(grad_x, expected_grad, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_and_gradgradcheck(device):
    x = torch.randn(1, 2, 5, 6, device=device, dtype=torch.float64, requires_grad=True)
    f = torch.tensor([1.0, 3.0, 3.0, 1.0], device=device, dtype=torch.float64)
    for up, down, padding in [(2, 1, [2, 1]), (1, 2, 1), ([1, 3], [2, 1], [0, 1, 2, -1])]:
        fn = lambda x: jitops.upfirdn2d(x, f, up, down, padding, gain=2.0)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_and_non_contiguous(device):
    f = torch.tensor([1.0, 2.0, 1.0], device=device)
    empty = torch.randn(0, 3, 8, 8, device=device)
    assert jitops.upfirdn2d(empty, f, up=2, padding=[1, 1, 2, 0]).shape == (0, 3, 16, 16)
    x = torch.randn(2, 9, 8, 4, device=device).permute(0, 3, 1, 2)  # channels_last-like view
    torch.testing.assert_close(jitops.upfirdn2d(x, f, down=2, padding=1), upfirdn2d_ref(x, f, down=2, padding=1))


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opcheck(device, dtype):
    x = torch.randn(2, 3, 6, 5, device=device, dtype=dtype, requires_grad=True)
    f = torch.randn(4, 4, device=device, dtype=dtype)
    torch.library.opcheck(torch.ops.jitops.upfirdn2d.default, (x, f, [2, 2], [1, 1], [2, 1, 2, 1], False, 4.0))
    torch.library.opcheck(torch.ops.jitops.upfirdn2d.default, (x, f, [1, 1], [2, 2], [1, 1, 1, 1], True, 1.0))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    f = torch.tensor([1.0, 3.0, 3.0, 1.0], device=device)
    conv = torch.nn.Conv2d(4, 4, 3, padding=1).to(device)

    def block(x):
        return conv(jitops.upfirdn2d(x, f, up=2, padding=[2, 1, 2, 1], gain=4)).square().mean()  # StyleGAN2's upsample2d

    x = torch.randn(2, 4, 8, 8, device=device, requires_grad=True)
    loss = torch.compile(block, fullgraph=True)(x)
    (grad,) = torch.autograd.grad(loss, x)
    expected = block(x)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, x)[0])


def test_bad_inputs():
    x, f = torch.randn(1, 2, 4, 4), torch.ones(3)
    with pytest.raises(RuntimeError, match=r"x must have shape \(N, C, H, W\), got \[2, 4, 4\]"):
        jitops.upfirdn2d(x[0], f)
    with pytest.raises(ValueError, match=r"f must be 1-D \(separable\) or 2-D, got shape \[1, 1, 3\]"):
        jitops.upfirdn2d(x, f[None, None])
    with pytest.raises(ValueError, match=r"up must be an int or \[x, y\], got \[1, 2, 3\]"):
        jitops.upfirdn2d(x, f, up=[1, 2, 3])
    with pytest.raises(ValueError, match=r"padding must be an int, \[x, y\] or \[x0, x1, y0, y1\], got \[1, 2, 3\]"):
        jitops.upfirdn2d(x, f, padding=[1, 2, 3])
    with pytest.raises(RuntimeError, match=r"down must be >= 1 per axis, got down=\[0, 1\]"):
        jitops.upfirdn2d(x, f, down=[0, 1])
    with pytest.raises(RuntimeError, match=r"smaller than the filter \[3, 3\]: no output pixel"):
        jitops.upfirdn2d(x, f, padding=-1)
    with pytest.raises(RuntimeError, match="x and f must have the same dtype"):
        torch.ops.jitops.upfirdn2d(x, torch.ones(3, 3, dtype=torch.float64), [1, 1], [1, 1], [0, 0, 0, 0], False, 1.0)
    with pytest.raises(RuntimeError, match="x must be float32 or float64.*got Int"):
        jitops.upfirdn2d(x.int(), None)


@needs_cuda
def test_device_mix_is_an_error():
    x = torch.randn(1, 2, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="x and f must be on the same device"):
        torch.ops.jitops.upfirdn2d(x, torch.ones(3, 3), [1, 1], [1, 1], [1, 1, 1, 1], False, 1.0)
