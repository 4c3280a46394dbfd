# SPDX-License-Identifier: MIT
"""What each op's property-based test (hypothesis, in its tests/test_<op>.py) draws and checks:
shapes (empty ones too), dtypes, strides (transposed and sliced views) and argument values. Every
case either matches the op's *_ref or raises a clean Python exception; inputs that the op documents
as valid must not raise."""

import pytest
import torch
from conftest import DEVICES, TOLERANCES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CLEAN_ERRORS = (ValueError, RuntimeError, TypeError, IndexError)
PROFILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def dtypes_for(device: str) -> list[torch.dtype]:
    valid = [torch.float32, torch.float64] + ([torch.float16, torch.bfloat16] if device == "cuda" else [])
    return valid + [torch.int32]  # int: must be refused cleanly


@st.composite
def tensor(draw, shape, device, dtype):
    """A tensor of `shape`: contiguous, or a transposed or sliced view with the same values."""
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    make = lambda s: (
        (torch.randn(s, generator=generator) * 2).to(dtype)
        if dtype.is_floating_point
        else torch.randint(-5, 5, s, generator=generator, dtype=dtype)
    )  # noqa: E731
    if layout == "transposed" and len(shape) >= 2:
        return make(shape[::-1]).permute(*reversed(range(len(shape)))).to(device)
    if layout == "sliced" and len(shape) >= 1:
        return make([*shape[:-1], 2 * shape[-1]])[..., ::2].to(device)
    return make(shape).to(device)


def check(call, ref, valid: bool, dtype: torch.dtype):
    """call() matches ref(), or raises a clean error; a valid case must not raise."""
    try:
        got = call()
    except CLEAN_ERRORS as err:
        assert not valid, f"a valid case raised {type(err).__name__}: {err}"
        return
    want = ref()
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.double(), w.double(), **TOLERANCES.get(dtype, TOLERANCES[torch.float32]))


def property_test(test):
    """A hypothesis test per device, drawing its case from `data`."""
    return pytest.mark.parametrize("device", DEVICES)(PROFILE(given(data=st.data())(test)))


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4)
