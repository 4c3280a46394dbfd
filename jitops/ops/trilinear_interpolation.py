# SPDX-License-Identifier: MIT
"""trilinear_interpolation(feats, points): each point's 8 corner features blended by its position.

The NeRF-style op of the CUDA-extension tutorials, differentiable in feats and in points.
"""

from __future__ import annotations

import torch

from ._framework import call_op, check_backend, check_tensor_args, op_extension, register_autograd, register_fake, require

EXTENSION = op_extension(
    "trilinear_interpolation",
    "kernels/cpu/trilinear_interpolation.cpp",
    "kernels/cuda/trilinear_interpolation.cu",
    "bindings/trilinear_interpolation.cpp",
)

__all__ = ["trilinear_interpolation", "trilinear_interpolation_ref"]


def trilinear_interpolation(
    feats: torch.Tensor,  # [N, 8, F], corner k = 4 * (x side) + 2 * (y side) + (z side)
    points: torch.Tensor,  # [N, 3], each coordinate in [-1, 1] within its cell
) -> torch.Tensor:  # [N, F]
    """Interpolate each point's 8 corner feature vectors trilinearly.

    float32/float64 on CPU and CUDA, float16/bfloat16 on CUDA (accumulated in float32).
    Differentiable in feats and in points.
    """
    check_tensor_args("trilinear_interpolation", feats=feats, points=points)
    require("trilinear_interpolation")
    check_backend("trilinear_interpolation", feats, points)
    return call_op(torch.ops.jitops.trilinear_interpolation.default, _eager_autograd, feats, points)


def trilinear_interpolation_ref(feats: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Pure-torch reference, for tests and for machines without a compiler: the formula the
    kernels follow (corner k = 4 * (u side) + 2 * (v side) + (w side), a, b, c, d the bilinear weights)."""
    u, v, w = ((points + 1) / 2).unbind(dim=1)
    u, v, w = u[:, None], v[:, None], w[:, None]
    a = (1 - v) * (1 - w)
    b = (1 - v) * w
    c = v * (1 - w)
    d = 1 - a - b - c
    f = feats.unbind(dim=1)
    return (1 - u) * (a * f[0] + b * f[1] + c * f[2] + d * f[3]) + u * (a * f[4] + b * f[5] + c * f[6] + d * f[7])


# The fake kernels' copy of the C++ checks in bindings/trilinear_interpolation.cpp, so that tracing
# under torch.compile rejects the same inputs eager mode rejects.
def _check_args(feats: torch.Tensor, points: torch.Tensor) -> None:
    torch._check(
        feats.dim() == 3 and feats.shape[1] == 8,
        lambda: f"feats must have shape (N, 8, F), 8 corner feature vectors per point, got {list(feats.shape)}",
    )
    n = feats.shape[0]
    torch._check(
        points.dim() == 2 and points.shape[0] == n and points.shape[1] == 3,
        lambda: f"points must have shape (N, 3) with N = {n} (feats.size(0)), got {list(points.shape)}",
    )
    torch._check(
        feats.device == points.device,
        lambda: f"feats and points must be on the same device, got {feats.device} and {points.device}",
    )
    torch._check(
        feats.dtype == points.dtype, lambda: f"feats and points must have the same dtype, got {feats.dtype} and {points.dtype}"
    )


def _fake_forward(feats: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    _check_args(feats, points)
    return feats.new_empty((feats.shape[0], feats.shape[2]))


def _fake_backward(grad_out: torch.Tensor, feats: torch.Tensor, points: torch.Tensor):
    _check_args(feats, points)
    return torch.empty_like(feats, memory_format=torch.contiguous_format), torch.empty_like(
        points, memory_format=torch.contiguous_format
    )


def _fake_backward_feats(grad_out: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    return grad_out.new_empty((grad_out.shape[0], 8, grad_out.shape[1]))


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_out: torch.Tensor):
    feats, points = ctx.saved_tensors
    _, points_needs_grad = ctx.needs_input_grad
    if not points_needs_grad:
        return torch.ops.jitops._trilinear_interpolation_backward_feats(grad_out, points), None
    grad_feats, grad_points = torch.ops.jitops._trilinear_interpolation_backward(grad_out, feats, points)
    return grad_feats, grad_points


_eager_autograd = None  # register_autograd's OpAutograd, made once the op exists


def _register() -> None:
    global _eager_autograd
    register_fake("trilinear_interpolation", _fake_forward)
    register_fake("_trilinear_interpolation_backward", _fake_backward)
    register_fake("_trilinear_interpolation_backward_feats", _fake_backward_feats)
    _eager_autograd = register_autograd("trilinear_interpolation", _backward, _setup_context)
