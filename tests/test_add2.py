# SPDX-License-Identifier: MIT
import pytest
import torch
from conftest import DEVICE_DTYPES, needs_cuda
from hypothesis import strategies as st
from properties import check, dtypes_for, property_test, shapes, tensor

import jitops
import jitops.ops._framework
from jitops.ops.add2 import add2_ref


@pytest.fixture(autouse=True, scope="module")
def add2_loaded():
    # Tests that call torch.ops.jitops.add2 directly need the extension loaded first.
    jitops.ops._framework.require("add2")


SHAPES = [(0,), (1,), (3,), (1000,), (7, 13), (2, 3, 0), (4, 5, 33)]


def random(shape, device, dtype, requires_grad=False):
    return torch.randn(shape, device=device, dtype=dtype, requires_grad=requires_grad)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(device, dtype, shape):
    a, b = random(shape, device, dtype), random(shape, device, dtype)
    # add2 rounds a + b computed in float32 (or float64), exactly as torch.add does.
    torch.testing.assert_close(jitops.add2(a, b), add2_ref(a, b), rtol=0, atol=0)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_large_vectorized_with_tail(device, dtype):
    # Not a multiple of any vector width, so the vector loop and the scalar tail both run.
    n = (1 << 20) + 7
    a, b = random(n, device, dtype), random(n, device, dtype)
    torch.testing.assert_close(jitops.add2(a, b), a + b, rtol=0, atol=0)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_non_contiguous_and_misaligned_inputs(device, dtype):
    base_a, base_b = random((64, 48), device, dtype), random((48, 64), device, dtype)
    transposed = base_b.t()  # (64, 48), strides swapped
    sliced = base_a[:, 1:41:2]  # strided columns
    torch.testing.assert_close(jitops.add2(base_a, transposed), base_a + transposed, rtol=0, atol=0)
    torch.testing.assert_close(jitops.add2(sliced, sliced), sliced + sliced, rtol=0, atol=0)
    # Contiguous but offset by one element: not 16-byte aligned, so the scalar kernel runs.
    flat_a, flat_b = random(1001, device, dtype)[1:], random(1001, device, dtype)[1:]
    torch.testing.assert_close(jitops.add2(flat_a, flat_b), flat_a + flat_b, rtol=0, atol=0)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_out(device, dtype):
    a, b = random((33, 17), device, dtype), random((33, 17), device, dtype)
    out = torch.full_like(a, float("nan"))
    result = jitops.add2(a, b, out=out)
    assert result is out
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    # A non-contiguous out is written through, not replaced.
    out_t = torch.full((17, 33), float("nan"), device=device, dtype=dtype).t()
    jitops.add2(a, b, out=out_t)
    torch.testing.assert_close(out_t, a + b, rtol=0, atol=0)
    # In place: out aliases a.
    expected = a + b
    jitops.add2(a, b, out=a)
    torch.testing.assert_close(a, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
def test_opcheck(device, dtype):
    a, b = random((5, 7), device, dtype), random((5, 7), device, dtype)
    torch.library.opcheck(torch.ops.jitops.add2.default, (a, b))
    a.requires_grad_(dtype in (torch.float32, torch.float64))
    torch.library.opcheck(torch.ops.jitops.add2.default, (a, b))
    torch.library.opcheck(torch.ops.jitops.add2_out.default, (a.detach(), b), {"out": torch.empty_like(b)})


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=needs_cuda)])
def test_gradcheck(device):
    a = random((4, 6), device, torch.float64, requires_grad=True)
    b = random((4, 6), device, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(jitops.add2, (a, b))
    assert torch.autograd.gradgradcheck(jitops.add2, (a, b))


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.slow
def test_torch_compile_fullgraph(device):
    def f(a, b):
        return jitops.add2(a, b).sin() * 2

    compiled = torch.compile(f, fullgraph=True)
    a, b = random((8, 9), device, torch.float32), random((8, 9), device, torch.float32)
    torch.testing.assert_close(compiled(a, b), f(a, b))


def test_errors_name_the_argument():
    a = random((3, 4), "cpu", torch.float32)
    with pytest.raises(RuntimeError, match=r"a and b must have the same shape, got \[3, 4\] and \[4, 3\]"):
        jitops.add2(a, random((4, 3), "cpu", torch.float32))
    with pytest.raises(RuntimeError, match="a and b must have the same dtype"):
        jitops.add2(a, a.double())
    with pytest.raises(RuntimeError, match="a must be float32 or float64.*got int32"):
        jitops.add2(a.int(), a.int())
    with pytest.raises(RuntimeError, match="a must be float32 or float64.*got float16 on cpu"):
        jitops.add2(a.half(), a.half())
    with pytest.raises(TypeError, match="b must be a Tensor, got float"):
        jitops.add2(a, 1.0)
    with pytest.raises(RuntimeError, match="a and out must have the same shape"):
        jitops.add2(a, a, out=torch.empty(5))
    with pytest.raises(RuntimeError, match="out= does not support automatic differentiation"):
        jitops.add2(a.requires_grad_(), a, out=torch.empty(3, 4))


@needs_cuda
def test_device_mix_is_an_error():
    a = random((3, 4), "cpu", torch.float32)
    with pytest.raises(RuntimeError, match="a and b must be on the same device"):
        jitops.add2(a, a.cuda())


@property_test
def test_add2_on_drawn_shapes_dtypes_strides_and_arguments(device, data):
    """The property (tests/properties.py): every drawn case matches add2_ref or raises a clean error."""
    dtype = data.draw(st.sampled_from(dtypes_for(device)))
    shape_a = data.draw(shapes)
    shape_b = data.draw(st.one_of(st.just(shape_a), shapes))
    a, b = data.draw(tensor(shape_a, device, dtype)), data.draw(tensor(shape_b, device, dtype))
    check(lambda: jitops.add2(a, b), lambda: a + b, shape_a == shape_b and dtype.is_floating_point, dtype)
