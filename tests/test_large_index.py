# SPDX-License-Identifier: MIT
"""More than 2^31 (and 2^32) elements, where the ops promise 64-bit index arithmetic. Needs a GPU
with about 40 GB free; runs only with JITOPS_LARGE_TESTS=1 (RELIABILITY.md records the run)."""

import os

import pytest
import torch
from conftest import needs_cuda

import jitops
from jitops.ops.bias_act import bias_act_ref

pytestmark = [
    needs_cuda,
    pytest.mark.skipif(
        os.environ.get("JITOPS_LARGE_TESTS") != "1", reason="set JITOPS_LARGE_TESTS=1 (needs ~40 GB of GPU memory)"
    ),
]


def random_half(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="cuda", dtype=torch.float16).uniform_(-2, 2)


def test_add2_past_2_to_the_31():
    n = 2**31 + 17
    a, b = random_half(n), random_half(n)
    out = jitops.add2(a, b)
    for start in (0, 2**31 - 5, n - 1000):
        torch.testing.assert_close(out[start : start + 1000], a[start : start + 1000] + b[start : start + 1000], rtol=0, atol=0)


def test_bias_act_past_2_to_the_32():
    # 5 channels along dim 0, each a run of 2^30 + 3 elements: 5.4e9 in all, past 2^32.
    inner = 2**30 + 3
    x, b = random_half(5, inner), random_half(5)
    y = jitops.bias_act(x, b, dim=0, act="lrelu", clamp=1.5)
    for channel in range(5):
        for start in (0, inner - 1000):
            piece = x[channel : channel + 1, start : start + 1000]
            want = bias_act_ref(piece, b[channel : channel + 1], dim=0, act="lrelu", clamp=1.5)
            torch.testing.assert_close(y[channel : channel + 1, start : start + 1000], want, rtol=1e-3, atol=1e-3)


def test_upfirdn2d_plane_past_2_to_the_31():
    # One plane of 46341^2 > 2^31 elements takes the 64-bit index path; a 1x1 filter makes the
    # expected output x * f * gain exactly, so any misplaced pixel shows.
    side = 46341
    x = random_half(1, 1, side, side)
    f = torch.tensor([[0.5]], device="cuda", dtype=torch.float16)
    out = jitops.upfirdn2d(x, f, gain=2.0)
    assert out.shape == x.shape
    for rows in (slice(0, 3), slice(side - 3, side)):
        torch.testing.assert_close(out[..., rows, :], x[..., rows, :], rtol=0, atol=0)
