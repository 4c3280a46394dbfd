# SPDX-License-Identifier: MIT
import typing

import pytest
import torch
from conftest import DEVICE_DTYPES, DEVICES, assert_close_to_float64, float64_leaves, needs_cuda
from hypothesis import strategies as st
from properties import check, dtypes_for, property_test, tensor

import jitops
import jitops.ops._framework
from jitops.ops.bias_act import ACTIVATIONS, ActivationName, bias_act_ref


@pytest.fixture(autouse=True, scope="module")
def loaded():
    jitops.ops._framework.require("bias_act")


# alpha, gain, clamp: StyleGAN2's defaults, then explicit values, then a clamp that bites.
OPTIONS = [dict(), dict(alpha=0.3, gain=0.5), dict(gain=2.0, clamp=0.7)]


def random(shape, device, dtype, requires_grad=False):
    return (torch.randn(shape, device=device, dtype=dtype) * 2).requires_grad_(requires_grad)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("options", OPTIONS, ids=["defaults", "alpha-gain", "clamp"])
def test_forward_and_gradients_match_reference(device, dtype, act, options):
    x = random((3, 6, 5, 7), device, dtype, requires_grad=True)
    b = random((6,), device, dtype, requires_grad=True)
    y = jitops.bias_act(x, b, act=act, **options)
    grad = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, b), grad)

    x64, b64 = float64_leaves(x, b)
    expected = bias_act_ref(x64, b64, act=act, **options)
    expected_grads = torch.autograd.grad(expected, (x64, b64), grad.double())
    assert y.dtype == dtype
    assert_close_to_float64(y, expected, dtype)
    # Where y is within rounding of +-clamp, float16/bfloat16 may fall on either side of it and
    # the clamp's gradient mask with them; compare the gradient away from that edge.
    away_from_clamp = torch.ones_like(expected, dtype=torch.bool)
    if "clamp" in options and dtype in (torch.float16, torch.bfloat16):
        away_from_clamp = ((expected.abs() - options["clamp"]).abs() > 0.05).detach()
    assert_close_to_float64(grads[0][away_from_clamp], expected_grads[0][away_from_clamp], dtype)
    # b's gradient sums 105 elements per channel: allow for the sum's rounding in half precision.
    if not away_from_clamp.all():
        return  # b's gradient sums over the edge elements too
    torch.testing.assert_close(
        grads[1].double(),
        expected_grads[1],
        rtol=0.05 if dtype in (torch.float16, torch.bfloat16) else 1e-4,
        atol=0.05 if dtype in (torch.float16, torch.bfloat16) else 1e-4,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape,dim",
    [((0, 4), 1), ((5,), 0), ((4, 9), -1), ((2, 3, 4), 2), ((2, 3, 4), 0), ((1, 1), 1), ((3, 17, 1, 5), 1)],
    ids=str,
)
def test_shapes_and_dims(device, shape, dim):
    x = random(shape, device, torch.float64)
    b = random((shape[dim],), device, torch.float64)
    for act in ("lrelu", "swish"):
        torch.testing.assert_close(jitops.bias_act(x, b, dim=dim, act=act), bias_act_ref(x, b, dim=dim, act=act))
    # No bias, and a 0-d tensor.
    torch.testing.assert_close(jitops.bias_act(x, act="tanh"), bias_act_ref(x, act="tanh"))
    scalar = torch.tensor(0.3, device=device, dtype=torch.float64)
    torch.testing.assert_close(jitops.bias_act(scalar, act="elu"), bias_act_ref(scalar, act="elu"))


@pytest.mark.parametrize("device", DEVICES)
def test_memory_formats(device):
    x = random((2, 8, 5, 6), device, torch.float32).to(memory_format=torch.channels_last)
    b = random((8,), device, torch.float32)
    y = jitops.bias_act(x, b, act="lrelu", clamp=1.0)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, bias_act_ref(x, b, act="lrelu", clamp=1.0))
    # Non-dense views are compacted; the gradient of a channels_last input keeps its layout.
    sliced = random((2, 8, 10, 6), device, torch.float32)[:, :, ::2]
    torch.testing.assert_close(jitops.bias_act(sliced, b, act="selu"), bias_act_ref(sliced, b, act="selu"))
    x.requires_grad_()
    (grad_x,) = torch.autograd.grad(jitops.bias_act(x, b, act="swish").sum(), x)
    torch.testing.assert_close(grad_x, torch.autograd.grad(bias_act_ref(x, b, act="swish").sum(), x)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gradcheck_and_gradgradcheck(device, act):
    x = random((2, 3, 4), device, torch.float64, requires_grad=True)
    b = random((3,), device, torch.float64, requires_grad=True)
    for options in (dict(), dict(gain=1.5, clamp=1.0)):
        fn = lambda x, b: jitops.bias_act(x, b, act=act, **options)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x, b))
        assert torch.autograd.gradgradcheck(fn, (x, b))


@pytest.mark.parametrize("device", DEVICES)
def test_second_order_matches_reference(device):
    x = random((4, 5), device, torch.float64, requires_grad=True)
    b = random((5,), device, torch.float64, requires_grad=True)
    for act in ("tanh", "softplus", "swish", "selu"):
        results = []
        for fn in (jitops.bias_act, bias_act_ref):
            (gx,) = torch.autograd.grad(fn(x, b, act=act).square().sum(), x, create_graph=True)
            results.append(torch.autograd.grad(gx.sin().sum(), (x, b)))
        for got, want in zip(*results):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opcheck(device, dtype):
    x = random((3, 4, 5), device, dtype, requires_grad=True)
    b = random((4,), device, dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.jitops.bias_act.default, (x, b, 1, "swish", 0.0, 1.4, 0.9))
    torch.library.opcheck(torch.ops.jitops.bias_act.default, (x, None, 1, "relu", 0.0, 1.0, None))
    args = (torch.randn_like(x), x, b, 1, "tanh", 0.0, 1.0, None)
    torch.library.opcheck(torch.ops.jitops._bias_act_derivative.default, (*args, 1))
    # Third-order gradients are unsupported (a clear error), so the second derivative is checked
    # without inputs that require grad.
    detached = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(torch.ops.jitops._bias_act_derivative.default, (*detached, 2))
    # The fused first-order backward is only called where no graph is built (it has no gradient).
    torch.library.opcheck(torch.ops.jitops._bias_act_backward.default, detached)


# (shape, dim, channels_last): on CUDA the first two take the fused kernel (runs of >= 32 vectors
# per channel; the second with several blocks per channel), the others the two-pass path.
BACKWARD_LAYOUTS = [
    ((2, 3, 32, 48), 1, False),
    ((3, 2, 128, 130), 1, False),
    ((2, 3, 5, 7), 1, False),
    ((2, 8, 16, 16), 1, True),
    ((37,), 0, False),
    ((4, 6, 33), -1, False),
]


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("shape,dim,channels_last", BACKWARD_LAYOUTS)
@pytest.mark.parametrize("act,options", [("lrelu", dict(gain=2.0, clamp=0.7)), ("swish", dict())])
def test_fused_backward_matches_derivative_and_sum(device, dtype, shape, dim, channels_last, act, options):
    x = random(shape, device, dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    b = random((shape[dim],), device, dtype)
    grad = random(shape, device, dtype)
    alpha, gain = jitops.ops.bias_act._resolve(act, options.get("alpha"), options.get("gain"))
    args = (grad, x, b, dim, act, alpha, gain, options.get("clamp"))
    grad_x, grad_b = torch.ops.jitops._bias_act_backward(*args)
    expected_grad_x = torch.ops.jitops._bias_act_derivative(*args, 1)
    torch.testing.assert_close(grad_x, expected_grad_x, rtol=0, atol=0)
    assert grad_x.stride() == x.stride()
    # The sums differ from torch's only in their order: compare both with the float64 sum.
    other_dims = [d for d in range(x.dim()) if d != dim % x.dim()]
    expected_grad_b = expected_grad_x.double().sum(other_dims) if other_dims else expected_grad_x.double()
    assert_close_to_float64(grad_b, expected_grad_b, dtype)
    assert grad_b.shape == b.shape and grad_b.dtype == dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.slow
def test_torch_compile_fullgraph(device):
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(device)
    bias = torch.randn(8, device=device, requires_grad=True)

    def block(x):
        return jitops.bias_act(conv(x), bias, act="lrelu", clamp=256.0).square().mean()

    x = torch.randn(2, 3, 8, 8, device=device)
    loss = torch.compile(block, fullgraph=True)(x)
    grads = torch.autograd.grad(loss, [bias, conv.weight])
    expected = block(x)
    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, torch.autograd.grad(expected, [bias, conv.weight])):
        torch.testing.assert_close(got, want)


def test_bad_inputs():
    x, b = random((2, 4, 3), "cpu", torch.float32), random((4,), "cpu", torch.float32)
    with pytest.raises(
        ValueError, match="act must be one of linear, relu, lrelu, tanh, sigmoid, elu, selu, softplus, swish; got 'gelu'"
    ):
        jitops.bias_act(x, b, act="gelu")
    with pytest.raises(
        RuntimeError, match="act must be one of linear, relu, lrelu, tanh, sigmoid, elu, selu, softplus, swish; got 'gelu'"
    ):
        torch.ops.jitops.bias_act(x, b, 1, "gelu", 0.0, 1.0, None)
    with pytest.raises(
        RuntimeError, match=r"b must be 1-D with x.shape\[dim\] = 4 elements \(x: \[2, 4, 3\], dim 1\), got b of shape \[5\]"
    ):
        jitops.bias_act(x, random((5,), "cpu", torch.float32))
    with pytest.raises(RuntimeError, match=r"b must be 1-D.*got b of shape \[1, 4\]"):
        jitops.bias_act(x, b[None])
    with pytest.raises(RuntimeError, match=r"dim must be in \[-3, 3\) for x of shape \[2, 4, 3\], got 3"):
        jitops.bias_act(x, b, dim=3)
    with pytest.raises(RuntimeError, match="clamp must be None or >= 0, got -1"):
        jitops.bias_act(x, b, clamp=-1)
    with pytest.raises(RuntimeError, match="x and b must have the same dtype"):
        jitops.bias_act(x, b.double())
    with pytest.raises(RuntimeError, match="x must be float32 or float64.*got int32"):
        jitops.bias_act(x.int(), b.int())
    with pytest.raises(TypeError, match="b must be a Tensor, got list"):
        jitops.bias_act(x, [0.0] * 4)
    with pytest.raises(RuntimeError, match="x and grad must have the same shape"):
        torch.ops.jitops._bias_act_derivative(x[0], x, b, 1, "tanh", 0.0, 1.0, None, 1)
    with pytest.raises(RuntimeError, match="derivative must be 1 or 2, got 3"):
        torch.ops.jitops._bias_act_derivative(x, x, b, 1, "tanh", 0.0, 1.0, None, 3)


def test_third_order_is_a_clear_error():
    x = random((3, 4), "cpu", torch.float64, requires_grad=True)
    (g1,) = torch.autograd.grad(jitops.bias_act(x, act="tanh").sum(), x, create_graph=True)
    (g2,) = torch.autograd.grad(g1.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="up to the second order"):
        torch.autograd.grad(g2.sum(), x)


@needs_cuda
def test_device_mix_is_an_error():
    x, b = random((2, 4), "cpu", torch.float32), random((4,), "cpu", torch.float32)
    with pytest.raises(RuntimeError, match="x and b must be on the same device"):
        jitops.bias_act(x.cuda(), b)


def test_the_type_of_act_names_every_activation():
    # What type checkers offer for act is the table the op takes.
    assert typing.get_args(ActivationName) == tuple(ACTIVATIONS)


@property_test
def test_bias_act_on_drawn_shapes_dtypes_strides_and_arguments(device, data):
    """The property (tests/properties.py): every drawn case matches bias_act_ref or raises a clean error."""
    dtype = data.draw(st.sampled_from(dtypes_for(device)))
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(tensor(shape, device, dtype))
    channels = data.draw(st.sampled_from([shape[dim], shape[dim], shape[dim] + 1]))
    b = data.draw(st.one_of(st.none(), tensor([channels], device, dtype)))
    act = data.draw(st.sampled_from([*ACTIVATIONS, "gelu"]))
    alpha = data.draw(st.one_of(st.none(), st.floats(0, 1)))
    gain = data.draw(st.one_of(st.none(), st.floats(0.1, 4)))
    clamp = data.draw(st.one_of(st.none(), st.floats(0, 10), st.just(-1.0)))
    kwargs = dict(dim=dim, act=act, alpha=alpha, gain=gain, clamp=clamp)
    valid = (
        dtype.is_floating_point and act in ACTIVATIONS and (clamp is None or clamp >= 0) and (b is None or channels == shape[dim])
    )
    check(lambda: jitops.bias_act(x, b, **kwargs), lambda: bias_act_ref(x, b, **kwargs), valid, dtype)
