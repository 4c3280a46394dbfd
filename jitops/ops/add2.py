# SPDX-License-Identifier: MIT
"""add2(a, b, *, out=None) = a + b, the extension tutorials' first op."""

from __future__ import annotations

import torch

from ._framework import call_op, check_backend, check_tensor_args, op_extension, register_autograd, register_fake, require

EXTENSION = op_extension("add2", "kernels/cpu/add2.cpp", "kernels/cuda/add2.cu", "bindings/add2.cpp")

__all__ = ["add2", "add2_ref"]


def add2(
    a: torch.Tensor,  # [*]
    b: torch.Tensor,  # [*], same shape, dtype and device as a
    *,
    out: torch.Tensor | None = None,  # [*], same shape, dtype and device as a
) -> torch.Tensor:
    """Elementwise a + b. float32/float64 on CPU and CUDA, float16/bfloat16 on CUDA.

    Differentiable in a and b (not with out=, like torch's own out= functions).
    """
    check_tensor_args("add2", a=a, b=b, **({} if out is None else {"out": out}))
    require("add2")
    check_backend("add2", a, b)
    if out is None:
        return call_op(torch.ops.jitops.add2.default, _eager_autograd, a, b)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        raise RuntimeError("add2(): out= does not support automatic differentiation, but a or b requires grad")
    torch.ops.jitops.add2_out(a, b, out=out)
    return out


def add2_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pure-torch reference, for tests and for machines without a compiler."""
    return a + b


def _check_args(a: torch.Tensor, b: torch.Tensor) -> None:
    # The fake kernel's copy of the C++ checks in bindings/add2.cpp, so that tracing under
    # torch.compile rejects the same inputs eager mode rejects.
    torch._check(a.device == b.device, lambda: f"a and b must be on the same device, got {a.device} and {b.device}")
    torch._check(a.dtype == b.dtype, lambda: f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    torch._check(a.shape == b.shape, lambda: f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _fake_add2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_args(a, b)
    return torch.empty_like(a, memory_format=torch.contiguous_format)


def _fake_add2_out(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> None:
    _check_args(a, b)
    torch._check(a.shape == out.shape, lambda: f"a and out must have the same shape, got {tuple(a.shape)} and {tuple(out.shape)}")


def _backward(ctx, grad: torch.Tensor):
    return grad, grad


_eager_autograd = None  # register_autograd's OpAutograd for add2, made once the op exists


def _register() -> None:
    global _eager_autograd
    register_fake("add2", _fake_add2)
    register_fake("add2_out", _fake_add2_out)
    _eager_autograd = register_autograd("add2", _backward)
