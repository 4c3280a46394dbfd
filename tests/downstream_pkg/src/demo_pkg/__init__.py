# SPDX-License-Identifier: MIT
"""A downstream package of jitops: scale_by (a custom op, with autograd and torch.compile support)
and add_scaled (a pybind11 function)."""

import torch

from ._ext import fused, scale

__all__ = ["add_scaled", "scale_by"]


def scale_by(x: torch.Tensor, factor: float) -> torch.Tensor:
    """x * factor, by demo_pkg's C++ op (built on first use)."""
    return scale.load().ops.scale(x, factor)


@scale.register_fake("scale")
def _(x, factor):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.factor = inputs[1]


def _backward(ctx, grad):
    return scale_by(grad, ctx.factor), None


scale.register_autograd("scale", _backward, setup_context=_setup_context)


def add_scaled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + DEMO_FACTOR * b, by demo_pkg's pybind11 module (on the GPU for CUDA tensors)."""
    return fused.load().module.add_scaled(a, b)
