# SPDX-License-Identifier: MIT
import math

import pytest
import torch
from conftest import DEVICE_DTYPES, DEVICES, TOLERANCES, float64_leaves, needs_cuda
from hypothesis import strategies as st
from properties import check, dtypes_for, property_test, tensor

import jitops
import jitops.ops._framework
from jitops.ops.lltm import lltm_ref


@pytest.fixture(autouse=True, scope="module")
def loaded():
    jitops.ops._framework.require("lltm")


# (batch, input features, state size): empty batch, no input features, tiny, odd, the small size.
SHAPES = [(0, 3, 4), (2, 0, 3), (1, 1, 1), (5, 7, 6), (16, 32, 128)]


def make_inputs(batch, features, state, device, dtype, requires_grad=False):
    scale = 1 / math.sqrt(max(state + features, 1))  # keeps the gates in the activations' interesting range
    shapes = [(batch, features), (3 * state, state + features), (3 * state,), (batch, state), (batch, state)]
    inputs = [torch.randn(s, device=device, dtype=dtype) for s in shapes]
    inputs[1] *= scale
    return [t.requires_grad_(requires_grad) for t in inputs]


def assert_close(actual, expected_float64, dtype, scale=1.0):
    # The half-precision matrix product rounds its inputs' products; allow for it.
    tolerance = {k: v * scale for k, v in TOLERANCES[dtype].items()}
    torch.testing.assert_close(actual, expected_float64.to(actual.dtype), **tolerance)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradients_match_reference(device, dtype, shape):
    inputs = make_inputs(*shape, device, dtype, requires_grad=True)
    new_h, new_cell = jitops.lltm(*inputs)
    grad_h, grad_cell = torch.randn_like(new_h), torch.randn_like(new_cell)
    grads = torch.autograd.grad((new_h, new_cell), inputs, (grad_h, grad_cell))

    inputs64 = float64_leaves(*inputs)
    expected = lltm_ref(*inputs64)
    expected_grads = torch.autograd.grad(expected, inputs64, (grad_h.double(), grad_cell.double()))
    scale = 4.0 if dtype in (torch.float16, torch.bfloat16) else 1.0
    for got, want in zip((new_h, new_cell) + grads, expected + expected_grads):
        assert got.dtype == dtype
        assert_close(got, want, dtype, scale)


@pytest.mark.parametrize("device", DEVICES)
def test_unused_output(device):
    # Only new_h reaches the loss: new_cell's gradient arrives as None and counts as zero.
    inputs = make_inputs(4, 5, 6, device, torch.float64, requires_grad=True)
    grads = torch.autograd.grad(jitops.lltm(*inputs)[0].sum(), inputs)
    expected = torch.autograd.grad(lltm_ref(*inputs)[0].sum(), inputs)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device):
    batch, features, state = 6, 5, 4
    inputs = make_inputs(batch, features, state, device, torch.float64)
    strided = [
        torch.randn(features, batch, device=device, dtype=torch.float64).t(),  # input, transposed
        inputs[1].t().contiguous().t(),  # weights, column-major
        torch.randn(2 * 3 * state, device=device, dtype=torch.float64)[::2],  # bias, every other element
        torch.randn(batch, 2 * state, device=device, dtype=torch.float64)[:, state:],  # old_h, a column slice
        torch.randn(state, batch, device=device, dtype=torch.float64).t(),  # old_cell, transposed
    ]
    strided = [t.requires_grad_() for t in strided]
    assert not any(t.is_contiguous() for t in strided if t.dim() == 2)
    got = jitops.lltm(*strided)
    expected = lltm_ref(*strided)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    grads = torch.autograd.grad(sum(t.sum() for t in got), strided)
    expected_grads = torch.autograd.grad(sum(t.sum() for t in expected), strided)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_weights_that_start_inside_their_storage(device):
    # The bindings take weights' two column blocks as views at an offset from weights' own start
    # (bindings/lltm.cpp: strided_view); weights here starts one row and one column into its storage.
    batch, features, state = 3, 5, 4
    input, _, bias, old_h, old_cell = make_inputs(batch, features, state, device, torch.float64)
    weights = torch.randn(3 * state + 1, state + features + 1, device=device, dtype=torch.float64)[1:, 1:]
    assert weights.storage_offset() > 0
    weights.requires_grad_()
    got = jitops.lltm(input, weights, bias, old_h, old_cell)
    expected = lltm_ref(input, weights, bias, old_h, old_cell)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    (grad,) = torch.autograd.grad(sum(t.sum() for t in got), weights)
    (expected_grad,) = torch.autograd.grad(sum(t.sum() for t in expected), weights)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    inputs = make_inputs(3, 4, 5, device, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(jitops.lltm, inputs)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opcheck(device, dtype):
    inputs = make_inputs(3, 4, 5, device, dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.jitops.lltm.default, inputs)
    detached = [t.detach() for t in inputs]
    new_h, new_cell, gates = torch.ops.jitops.lltm(*detached)
    input, weights, _bias, old_h, _old_cell = detached
    backward_args = (torch.randn_like(new_h), torch.randn_like(new_cell), new_cell, gates, input, old_h, weights)
    torch.library.opcheck(torch.ops.jitops._lltm_backward.default, backward_args)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    torch.manual_seed(0)
    cell = jitops.LLTM(7, 10).to(device)
    bound = 1 / math.sqrt(10)
    assert cell.weights.shape == (30, 17) and cell.bias.shape == (30,)
    assert all(p.abs().max() <= bound for p in cell.parameters())
    x = torch.randn(3, 7, device=device)
    state = (torch.randn(3, 10, device=device), torch.randn(3, 10, device=device))
    for got, want in zip(cell(x, state), lltm_ref(x, cell.weights, cell.bias, *state)):
        torch.testing.assert_close(got, want)
    # One optimiser step moves every parameter.
    before = [p.detach().clone() for p in cell.parameters()]
    optimizer = torch.optim.SGD(cell.parameters(), lr=0.1)
    cell(x, state)[0].square().sum().backward()
    optimizer.step()
    assert all(not torch.equal(a, b.detach()) for a, b in zip(before, cell.parameters()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.slow
def test_torch_compile_fullgraph(device):
    cell = jitops.LLTM(8, 12).to(device)

    def step(x, h, c):
        # Two steps of the cell, as an unrolled recurrence would run them.
        h, c = cell(x, (h, c))
        h, c = cell(x, (h, c))
        return h.sum() + c.square().mean()

    compiled = torch.compile(step, fullgraph=True)
    x, h, c = (torch.randn(4, n, device=device) for n in (8, 12, 12))
    loss = compiled(x, h, c)
    grads = torch.autograd.grad(loss, list(cell.parameters()))
    expected = step(x, h, c)
    expected_grads = torch.autograd.grad(expected, list(cell.parameters()))
    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_bad_inputs_name_the_argument():
    input, weights, bias, old_h, old_cell = make_inputs(4, 5, 6, "cpu", torch.float32)
    cases = [
        ((input[0], weights, bias, old_h, old_cell), r"input must have shape \(B, I\), got \[5\]"),
        ((input, weights, bias, old_h[0], old_cell), r"old_h must have shape \(B, S\), got \[6\]"),
        ((input[:3], weights, bias, old_h, old_cell), r"old_h must have shape \(B, S\) = \[3, 6\], got \[4, 6\]"),
        ((input, weights, bias, old_h, old_cell[:, :5]), r"old_cell must have shape \(B, S\) = \[4, 6\], got \[4, 5\]"),
        (
            (input, weights[:, :10], bias, old_h, old_cell),
            r"weights must have shape \(3 \* S, S \+ I\) = \[18, 11\], got \[18, 10\]",
        ),
        ((input, weights, bias[:5], old_h, old_cell), r"bias must have shape \(3 \* S,\) = \[18\], got \[5\]"),
        ((input, weights.double(), bias, old_h, old_cell), "input and weights must have the same dtype"),
        ([t.int() for t in (input, weights, bias, old_h, old_cell)], "input must be float32 or float64.*got int32"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=message):
            jitops.lltm(*args)
    new_h, new_cell, gates = torch.ops.jitops.lltm(input, weights, bias, old_h, old_cell)
    with pytest.raises(RuntimeError, match=r"grad_h must have shape \(B, S\) = \[4, 6\], got \[4, 5\]"):
        torch.ops.jitops._lltm_backward(new_h[:, :5], new_cell, new_cell, gates, input, old_h, weights)
    with pytest.raises(TypeError, match="old_cell must be a Tensor, got NoneType"):
        jitops.lltm(input, weights, bias, old_h, None)


@needs_cuda
def test_device_mix_is_an_error():
    input, weights, bias, old_h, old_cell = make_inputs(4, 5, 6, "cpu", torch.float32)
    with pytest.raises(RuntimeError, match="input and bias must be on the same device"):
        jitops.lltm(input.cuda(), weights.cuda(), bias, old_h.cuda(), old_cell.cuda())


@property_test
def test_lltm_on_drawn_shapes_dtypes_strides_and_arguments(device, data):
    """The property (tests/properties.py): every drawn case matches lltm_ref or raises a clean error."""
    dtype = data.draw(st.sampled_from(dtypes_for(device)))
    batch, features, state = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 5)), data.draw(st.integers(1, 6))
    bias_len = data.draw(st.sampled_from([3 * state, 3 * state, state]))
    inputs = [
        data.draw(tensor([batch, features], device, dtype)),
        data.draw(tensor([3 * state, state + features], device, dtype)),
        data.draw(tensor([bias_len], device, dtype)),
        data.draw(tensor([batch, state], device, dtype)),
        data.draw(tensor([batch, state], device, dtype)),
    ]
    valid = dtype.is_floating_point and bias_len == 3 * state
    check(lambda: jitops.lltm(*inputs), lambda: lltm_ref(*inputs), valid, dtype)
