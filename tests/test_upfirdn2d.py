# SPDX-License-Identifier: MIT
import pytest
import torch
from conftest import DEVICE_DTYPES, DEVICES, assert_close_to_float64, float64_leaves, needs_cuda
from hypothesis import strategies as st
from properties import check, dtypes_for, property_test, tensor

import jitops
import jitops.ops._framework
from jitops.ops.upfirdn2d import _filter_2d, gradient_args, upfirdn2d_ref


@pytest.fixture(autouse=True, scope="module")
def loaded():
    jitops.ops._framework.require("upfirdn2d")


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
@pytest.mark.parametrize("up, down, padding", [(2, 1, [2, 1, 2, 1]), (1, 2, [1, 1, 1, 1]), (3, 2, [-1, 2, 0, 3])])
def test_gradient_is_the_upfirdn2d_gradient_args_give(device, up, down, padding):
    # The C++ autograd (bindings/upfirdn2d.cpp) and gradient_args (what the benchmarks time as the
    # backward) state the same identity twice: hold them together, to the bit.
    x = torch.randn(2, 3, 11, 14, device=device, requires_grad=True)
    f = torch.randn(4, 3, device=device)
    args = ([up, up + 1], [down, down], padding, True, 1.5)
    out = torch.ops.jitops.upfirdn2d(x, f, *args)
    grad = torch.randn_like(out)
    (grad_x,) = torch.autograd.grad(out, x, grad)
    expected = torch.ops.jitops.upfirdn2d(grad, f, *gradient_args(x.shape, out.shape[2:], f.shape, *args))
    assert torch.equal(grad_x, expected)


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
@pytest.mark.slow
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
    with pytest.raises(RuntimeError, match="x must be float32 or float64.*got int32"):
        jitops.upfirdn2d(x.int(), None)


@pytest.mark.parametrize(
    "kwargs",
    [dict(up=2**31), dict(up=2**40), dict(padding=2**40), dict(up=[1, 2**62], padding=[0, 0, 2**62, 2**62])],
    ids=["up-2^31", "up-2^40", "padding-2^40", "beyond-int64"],
)
def test_an_output_too_large_for_a_tensor_is_refused_naming_the_arguments(kwargs):
    x, f = torch.randn(1, 1, 2, 2, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    with pytest.raises(
        RuntimeError,
        match=r"the output would take more than 2\^63 bytes, more than a tensor can hold: "
        r"x \[1, 1, 2, 2\], up=\[.*\], down=\[1, 1\], padding=\[.*\]",
    ):
        jitops.upfirdn2d(x, f, **kwargs)
    with pytest.raises(RuntimeError, match=r"more than a tensor can hold"):  # the fake kernel says the same
        jitops.upfirdn2d(x.to("meta"), f.to("meta"), **kwargs)


def test_an_output_that_cannot_be_allocated_names_its_size_and_the_arguments():
    # 2^61 bytes: a tensor could hold it, no machine's address space can.
    x, f = torch.randn(1, 1, 2, 2, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    with pytest.raises(
        RuntimeError,
        match=r"cannot allocate the output \[1, 1, 536870912, 536870912\] "
        r"\(2305843009213693952 bytes\) for x \[1, 1, 2, 2\], up=\[268435456, 268435456\]",
    ):
        jitops.upfirdn2d(x, f, up=2**28)


@needs_cuda
def test_device_mix_is_an_error():
    x = torch.randn(1, 2, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="x and f must be on the same device"):
        torch.ops.jitops.upfirdn2d(x, torch.ones(3, 3), [1, 1], [1, 1], [1, 1, 1, 1], False, 1.0)


# The tiled CUDA kernel (StyleGAN2's cases) against the general one: the same bits. Each case is
# (x shape, filter, up, down, padding, flip_filter, gain); the shapes are larger than a tile (64 x 64
# outputs at most), of odd and even width and of whole 16-byte chunks (the three ways a tile is
# staged: element by element, by pairs of 16-bit values, by chunks), the paddings odd, even and
# negative (the tile's phase shift), and one case has more planes than a grid's z dimension holds.
TILED_CASES = [
    ((2, 3, 70, 131), "separable4", 2, 1, [2, 1, 2, 1], False, 4.0),  # StyleGAN2's upsample2d
    ((2, 3, 37, 53), "separable4", 2, 1, [1, 2, 3, 0], True, 1.0),
    ((1, 2, 45, 29), "random4x4", 2, 1, [-1, 0, 2, -3], False, 2.0),
    ((2, 3, 131, 70), "separable4", 1, 2, [1, 1, 1, 1], False, 1.0),  # downsample2d
    ((1, 2, 67, 45), "random4x4", 1, 2, [2, -1, 0, 3], True, 1.5),
    ((2, 3, 70, 131), "separable4", 1, 1, [2, 1, 2, 1], False, 1.0),  # filter only
    ((1, 2, 45, 67), "random4x4", 1, 1, [0, 3, -2, 1], True, 3.0),
    ((2, 3, 70, 131), "none", 1, 1, [1, 1, 1, 1], False, 1.0),  # pad only
    ((1, 2, 45, 67), "none", 1, 1, [-3, 2, 2, -1], False, 0.5),
    ((1, 70000, 4, 4), "separable4", 2, 1, [2, 1, 2, 1], False, 4.0),  # planes > 65535
    ((2, 3, 64, 96), "random4x4", 2, 1, [1, 2, 2, 1], False, 4.0),  # even widths from here on
    ((2, 3, 70, 96), "separable4", 1, 1, [2, 1, 2, 1], True, 1.0),
    ((2, 3, 71, 96), "none", 1, 1, [-1, 2, 3, 0], False, 1.0),
    ((2, 3, 66, 128), "separable4", 1, 2, [1, 1, 1, 1], False, 1.0),  # whole 16-byte chunks from here on
    ((1, 2, 40, 64), "random4x4", 1, 2, [-1, 2, 3, 0], True, 1.5),
    ((1, 2, 33, 32), "random4x4", 2, 1, [-3, 2, 1, -2], False, 4.0),
]
TILED_FILTERS = {
    "separable4": lambda: torch.tensor([1.0, 3.0, 3.0, 1.0]).outer(torch.tensor([1.0, 3.0, 3.0, 1.0])) / 64,
    "random4x4": lambda: torch.randn(4, 4),
    "none": lambda: torch.ones(1, 1),
}


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", TILED_CASES, ids=lambda c: f"{c[1]}-up{c[2]}-down{c[3]}-pad{c[4]}-{c[0][1]}planes")
def test_tiled_kernel_gives_the_general_kernels_bits(case, dtype):
    shape, filter_name, up, down, padding, flip_filter, gain = case
    x = torch.randn(shape, device="cuda", dtype=dtype)
    f = TILED_FILTERS[filter_name]().to("cuda", dtype)
    args = (x, f, [up, up], [down, down], padding, flip_filter, gain)
    tiled = torch.ops.jitops._upfirdn2d_kernel(*args, "tiled")
    general = torch.ops.jitops._upfirdn2d_kernel(*args, "general")
    assert torch.equal(tiled, general)
    assert torch.equal(torch.ops.jitops.upfirdn2d(*args), tiled)  # the op picks the tiled kernel


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("up, down", [(2, 1), (1, 2), (1, 1)])
def test_tiled_kernel_on_unaligned_inputs_gives_the_general_kernels_bits(up, down, dtype):
    # A view one element into its storage: rows of whole 16-byte chunks, but no chunk aligned, so
    # the tile is staged element by element (or by pairs) instead.
    x = torch.randn(2 * 3 * 64 * 128 + 1, device="cuda", dtype=dtype)[1:].view(2, 3, 64, 128)
    f = TILED_FILTERS["random4x4"]().to("cuda", dtype)
    args = (x, f, [up, up], [down, down], [2, 1, 1, 2], False, 2.0)
    assert torch.equal(torch.ops.jitops._upfirdn2d_kernel(*args, "tiled"), torch.ops.jitops._upfirdn2d_kernel(*args, "general"))


@needs_cuda
def test_kernel_choice_errors():
    x, f = torch.randn(1, 2, 8, 8, device="cuda"), torch.ones(3, 3, device="cuda")
    with pytest.raises(RuntimeError, match="no tiled kernel"):
        torch.ops.jitops._upfirdn2d_kernel(x, f, [1, 1], [1, 1], [1, 1, 1, 1], False, 1.0, "tiled")  # 3 taps
    with pytest.raises(RuntimeError, match="no tiled kernel"):
        torch.ops.jitops._upfirdn2d_kernel(x.double(), f.double(), [1, 1], [1, 1], [1, 1, 1, 1], False, 1.0, "tiled")
    with pytest.raises(RuntimeError, match="kernel must be 'auto', 'general' or 'tiled', got 'fast'"):
        torch.ops.jitops._upfirdn2d_kernel(x, f, [1, 1], [1, 1], [1, 1, 1, 1], False, 1.0, "fast")


# float16 and bfloat16 against float32 at StyleGAN2's shapes (the tiled kernel), forward and
# gradient: each rounds its inputs and its result, and sums in float32.
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "filtered,kwargs",
    [
        (True, dict(up=2, padding=[2, 1, 2, 1], gain=4)),  # upsample2d
        (True, dict(down=2, padding=1)),  # downsample2d
        (True, dict(padding=[2, 1, 2, 1])),  # filter only
        (False, dict(padding=1)),  # pad only
    ],
    ids=str,
)
def test_half_precision_matches_float32(dtype, filtered, kwargs):
    x = torch.randn(4, 16, 40, 72, device="cuda").to(dtype).requires_grad_()
    f = torch.tensor([1.0, 3.0, 3.0, 1.0], device="cuda") / 8 if filtered else None
    y = jitops.upfirdn2d(x, None if f is None else f.to(dtype), **kwargs)
    grad = torch.randn_like(y)
    (grad_x,) = torch.autograd.grad(y, x, grad)
    x32 = x.detach().float().requires_grad_()
    y32 = jitops.upfirdn2d(x32, f, **kwargs)
    (grad_x32,) = torch.autograd.grad(y32, x32, grad.float())
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    assert y.dtype == grad_x.dtype == dtype
    torch.testing.assert_close(y.float(), y32, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(grad_x.float(), grad_x32, rtol=tolerance, atol=tolerance)


@property_test
def test_upfirdn2d_on_drawn_shapes_dtypes_strides_and_arguments(device, data):
    """The property (tests/properties.py): every drawn case matches upfirdn2d_ref or raises a clean error."""
    dtype = data.draw(st.sampled_from(dtypes_for(device)))
    shape = [
        data.draw(st.integers(0, 2)),
        data.draw(st.integers(1, 3)),
        data.draw(st.integers(1, 7)),
        data.draw(st.integers(1, 7)),
    ]
    x = data.draw(tensor(shape, device, dtype))
    taps = data.draw(st.integers(1, 4))
    f = data.draw(st.one_of(tensor([taps], device, dtype), tensor([taps, data.draw(st.integers(1, 4))], device, dtype)))
    up, down = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    padding = data.draw(st.lists(st.integers(-2, 3), min_size=4, max_size=4))
    flip, gain = data.draw(st.booleans()), data.draw(st.floats(0.5, 4))
    kwargs = dict(up=up, down=down, padding=padding, flip_filter=flip, gain=gain)
    fh, fw = (f.shape[0], f.shape[0]) if f.dim() == 1 else tuple(f.shape)
    fits = shape[3] * up + padding[0] + padding[1] >= fw and shape[2] * up + padding[2] + padding[3] >= fh
    valid = dtype.is_floating_point and fits
    # The reference runs in float64 (in float16 its two passes round the intermediate: 1% errors
    # where large taps cancel), on the filter the op documents: a 1-D f's outer product in x's dtype
    # (rounded taps: found on the H100, 0.0107 on an output near 1.07 with taps up to 4.4).
    reference = lambda: upfirdn2d_ref(x.double(), _filter_2d(f, x).double(), **kwargs).to(dtype)  # noqa: E731
    check(lambda: jitops.upfirdn2d(x, f, **kwargs), reference, valid, dtype)
