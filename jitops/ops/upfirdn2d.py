# SPDX-License-Identifier: MIT
"""upfirdn2d(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1): StyleGAN2's resampler.

Upsample x by inserting zeros, pad (or crop, for negative padding), filter with the FIR filter f,
and downsample by keeping every down-th pixel. Its gradient is again an upfirdn2d (the flipped
filter, up and down swapped), so gradients of every order come from the same op.
"""

from __future__ import annotations

import torch

from ._framework import check_backend, check_tensor_args, op_extension, register_fake, require

EXTENSION = op_extension("upfirdn2d", "kernels/cpu/upfirdn2d.cpp", "kernels/cuda/upfirdn2d.cu", "bindings/upfirdn2d.cpp")
# Its autograd formula, in C++ (bindings/upfirdn2d_autograd.cpp says why), uses torch's C++ API: a
# library of its own, one unit built for each torch, loaded after the op's schema exists.
PARTS = (op_extension("upfirdn2d_autograd", "bindings/upfirdn2d_autograd.cpp", stable_abi=False),)

__all__ = ["upfirdn2d", "upfirdn2d_ref"]


def _pair(value, name: str) -> list[int]:
    values = [value, value] if isinstance(value, int) else list(value)
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"upfirdn2d(): {name} must be an int or [x, y], got {value!r}")
    return values


def _padding(value) -> list[int]:
    values = [value] * 4 if isinstance(value, int) else list(value)
    if len(values) == 2:
        values = [values[0], values[0], values[1], values[1]]
    if len(values) != 4 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"upfirdn2d(): padding must be an int, [x, y] or [x0, x1, y0, y1], got {value!r}")
    return values


def _filter_2d(f: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """f as a 2-D filter in x's dtype: a 1-D f is separable (its outer product with itself)."""
    if f is None:
        return torch.ones(1, 1, device=x.device, dtype=x.dtype)
    if f.dim() == 1:
        f = torch.outer(f, f)
    if f.dim() != 2:
        raise ValueError(f"upfirdn2d(): f must be 1-D (separable) or 2-D, got shape {list(f.shape)}")
    return f.to(x.dtype)


def upfirdn2d(
    x: torch.Tensor,  # [N, C, H, W]
    f: torch.Tensor | None,  # [fh, fw], or [k] for the separable filter f ⊗ f; None: no filtering
    up=1,  # int or [x, y]
    down=1,  # int or [x, y]
    padding=0,  # int, [x, y] or [x0, x1, y0, y1]; negative values crop
    flip_filter: bool = False,
    gain: float = 1,
) -> torch.Tensor:  # [N, C, (H * up_y + y0 + y1 - fh) // down_y + 1, likewise for W]
    """StyleGAN2's resampler: upsample by zero insertion, pad (or crop), FIR filter, downsample.

    Args:
        x: [N, C, H, W]; float32/float64 on CPU and CUDA, float16/bfloat16 on CUDA.
        f: the filter, [fh, fw], or [k] for the separable filter f ⊗ f; None: no filtering.
            Not flipped unless flip_filter (so it is a correlation, as in StyleGAN2).
        up: upsampling factor, an int or [x, y]: up - 1 zeros after every sample.
        down: downsampling factor, an int or [x, y]: every down-th sample is kept.
        padding: added after upsampling, before filtering: an int (all sides), [x, y]
            (both sides of each axis) or [x0, x1, y0, y1]; negative values crop.
        flip_filter: flip f in both axes (a convolution instead of a correlation).
        gain: the output's scale (StyleGAN2 passes up**2 when upsampling 2-D).

    Returns [N, C, H_out, W_out] with H_out = (H * up_y + y0 + y1 - fh) // down_y + 1 and
    W_out = (W * up_x + x0 + x1 - fw) // down_x + 1. For StyleGAN2's upsample2d by 2 with a
    4-tap filter, padding [2, 1, 2, 1] and gain 4 give 2H x 2W (no padding gives 2H - 3).
    Differentiable in x, to any order; not in f (as in StyleGAN2).
    """
    check_tensor_args("upfirdn2d", x=x, **({} if f is None else {"f": f}))
    up, down, padding = _pair(up, "up"), _pair(down, "down"), _padding(padding)
    require("upfirdn2d")
    check_backend("upfirdn2d", x, *([] if f is None else [f]))
    # The op's autograd is its C++ Autograd kernel (bindings/upfirdn2d_autograd.cpp): called directly.
    return torch.ops.jitops.upfirdn2d.default(x, _filter_2d(f, x), up, down, padding, bool(flip_filter), float(gain))


def upfirdn2d_ref(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1):
    """Pure-torch reference (StyleGAN2's _upfirdn2d_ref: zero insertion, pad, conv2d, stride)."""
    (upx, upy), (downx, downy), (padx0, padx1, pady0, pady1) = _pair(up, "up"), _pair(down, "down"), _padding(padding)
    f = torch.ones(1, 1, device=x.device, dtype=x.dtype) if f is None else f
    batch, channels, in_h, in_w = x.shape
    x = x.reshape(batch, channels, in_h, 1, in_w, 1)
    x = torch.nn.functional.pad(x, [0, upx - 1, 0, 0, 0, upy - 1])
    x = x.reshape(batch, channels, in_h * upy, in_w * upx)
    x = torch.nn.functional.pad(x, [max(padx0, 0), max(padx1, 0), max(pady0, 0), max(pady1, 0)])
    x = x[:, :, max(-pady0, 0) : x.shape[2] - max(-pady1, 0), max(-padx0, 0) : x.shape[3] - max(-padx1, 0)]
    f = (f * (gain ** (f.ndim / 2))).to(x.dtype)
    if not flip_filter:
        f = f.flip(list(range(f.ndim)))
    f = f[None, None].repeat([channels, 1] + [1] * f.ndim)
    if f.ndim == 4:
        x = torch.nn.functional.conv2d(x, f, groups=channels)
    else:
        x = torch.nn.functional.conv2d(x, f.unsqueeze(2), groups=channels)
        x = torch.nn.functional.conv2d(x, f.unsqueeze(3), groups=channels)
    return x[:, :, ::downy, ::downx]


# The fake kernel's copy of the C++ checks in bindings/upfirdn2d.cpp.
def _fake(x, f, up, down, padding, flip_filter, gain):
    torch._check(x.dim() == 4, lambda: f"x must have shape (N, C, H, W), got {list(x.shape)}")
    torch._check(f.dim() == 2, lambda: f"f must be a non-empty 2-D filter here, got {list(f.shape)}")
    padded_w = x.shape[3] * up[0] + padding[0] + padding[1]
    padded_h = x.shape[2] * up[1] + padding[2] + padding[3]
    torch._check(
        padded_w >= f.shape[1] and padded_h >= f.shape[0], lambda: "the upsampled, padded input is smaller than the filter"
    )
    sizes = (x.shape[0], x.shape[1], (padded_h - f.shape[0]) // down[1] + 1, (padded_w - f.shape[1]) // down[0] + 1)
    torch._check(
        sizes[0] * sizes[1] * sizes[2] * sizes[3] * x.element_size() < 2**63,
        lambda: (
            f"the output would take more than 2^63 bytes, more than a tensor can hold: up={up}, down={down}, padding={padding}"
        ),
    )
    return x.new_empty(sizes)


def gradient_args(x_shape, out_hw, f_shape, up, down, padding, flip_filter, gain):
    """The upfirdn2d arguments (after grad and f) whose result is the gradient of x: what the op's
    C++ autograd (bindings/upfirdn2d_autograd.cpp) computes, spelled out for the benchmarks, which time the
    gradient's kernel alone.

    StyleGAN2's identity: the gradient is upfirdn2d of grad with the same filter flipped, up and
    down swapped, and the padding that maps the output grid back onto the input grid.
    """
    (_, _, in_h, in_w), (out_h, out_w), (fh, fw) = x_shape, out_hw, f_shape
    (upx, upy), (downx, downy), (padx0, _, pady0, _) = up, down, padding
    padding = [
        fw - padx0 - 1,
        in_w * upx - out_w * downx + padx0 - upx + 1,
        fh - pady0 - 1,
        in_h * upy - out_h * downy + pady0 - upy + 1,
    ]
    return [downx, downy], [upx, upy], padding, not flip_filter, gain


def _register() -> None:
    register_fake("upfirdn2d", _fake)
