# SPDX-License-Identifier: MIT
"""A downstream package of jitops: scale (a torch.library op) and add_scaled (a pybind11 function)."""

from ._ext import fused, scale

__all__ = ["add_scaled", "scale_by"]


def scale_by(x, factor: float):
    """x * factor, by demo_pkg's C++ op (built on first use)."""
    return scale.load().ops.scale(x, factor)


def add_scaled(a, b):
    """a + DEMO_FACTOR * b, by demo_pkg's pybind11 module (on the GPU for CUDA tensors)."""
    return fused.load().module.add_scaled(a, b)
