# SPDX-License-Identifier: MIT
"""lltm(input, weights, bias, old_h, old_cell) and the jitops.LLTM module.

The recurrent cell of PyTorch's C++-extension tutorial: matrix products on ATen's BLAS, the
elementwise parts fused into one kernel forward and one backward.
"""

from __future__ import annotations

import math

import torch

from ._framework import call_op, check_backend, check_tensor_args, op_extension, register_autograd, register_fake, require

EXTENSION = op_extension("lltm", "kernels/cpu/lltm.cpp", "kernels/cuda/lltm.cu", "bindings/lltm.cpp")

__all__ = ["lltm", "lltm_ref", "LLTM"]


def lltm(
    input: torch.Tensor,  # [B, I]
    weights: torch.Tensor,  # [3 * S, S + I]
    bias: torch.Tensor,  # [3 * S]
    old_h: torch.Tensor,  # [B, S]
    old_cell: torch.Tensor,  # [B, S]
) -> tuple[torch.Tensor, torch.Tensor]:  # new_h [B, S], new_cell [B, S]
    """One step of the LLTM cell. float32/float64 on CPU and CUDA, float16/bfloat16 on CUDA.

    Differentiable in every input.
    """
    check_tensor_args("lltm", input=input, weights=weights, bias=bias, old_h=old_h, old_cell=old_cell)
    require("lltm")
    check_backend("lltm", input, weights, bias, old_h, old_cell)
    new_h, new_cell, _gates = call_op(torch.ops.jitops.lltm.default, _eager_autograd, input, weights, bias, old_h, old_cell)
    return new_h, new_cell


def lltm_ref(input, weights, bias, old_h, old_cell):
    """Pure-torch reference (the tutorial's Python cell), for tests and machines without a compiler."""
    gates = torch.addmm(bias, torch.cat([old_h, input], dim=1), weights.t())
    input_gate, output_gate, candidate_cell = gates.chunk(3, dim=1)
    new_cell = old_cell + torch.nn.functional.elu(candidate_cell) * torch.sigmoid(input_gate)
    new_h = torch.tanh(new_cell) * torch.sigmoid(output_gate)
    return new_h, new_cell


class LLTM(torch.nn.Module):
    """The LLTM cell as a module: forward(input [B, I], (h [B, S], cell [B, S])) -> (new_h, new_cell)."""

    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = torch.nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # The tutorial's initialisation: uniform in +-1/sqrt(state_size).
        bound = 1.0 / math.sqrt(self.state_size)
        for parameter in self.parameters():
            torch.nn.init.uniform_(parameter, -bound, bound)

    def forward(self, input: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        old_h, old_cell = state
        return lltm(input, self.weights, self.bias, old_h, old_cell)

    def extra_repr(self) -> str:
        return f"input_features={self.input_features}, state_size={self.state_size}"


# The fake kernels' copy of the C++ checks in bindings/lltm.cpp, so that tracing under
# torch.compile rejects the same inputs eager mode rejects.
def _check_args(input, weights, bias, old_h, old_cell) -> None:
    torch._check(input.dim() == 2, lambda: f"input must have shape (B, I), got {list(input.shape)}")
    torch._check(old_h.dim() == 2, lambda: f"old_h must have shape (B, S), got {list(old_h.shape)}")
    batch, features, state = input.shape[0], input.shape[1], old_h.shape[1]
    expected = {
        "old_h": (old_h, ("(B, S)", (batch, state))),
        "old_cell": (old_cell, ("(B, S)", (batch, state))),
        "weights": (weights, ("(3 * S, S + I)", (3 * state, state + features))),
        "bias": (bias, ("(3 * S,)", (3 * state,))),
    }
    for name, (tensor, (formula, shape)) in expected.items():
        torch._check(
            tuple(tensor.shape) == shape,
            lambda: f"{name} must have shape {formula} = {list(shape)}, got {list(tensor.shape)}",
        )
        torch._check(
            tensor.device == input.device,
            lambda: f"input and {name} must be on the same device, got {input.device} and {tensor.device}",
        )
        torch._check(
            tensor.dtype == input.dtype,
            lambda: f"input and {name} must have the same dtype, got {input.dtype} and {tensor.dtype}",
        )


def _fake_forward(input, weights, bias, old_h, old_cell):
    _check_args(input, weights, bias, old_h, old_cell)
    batch, state = old_h.shape
    return old_h.new_empty((batch, state)), old_h.new_empty((batch, state)), old_h.new_empty((batch, 3 * state))


def _fake_backward(grad_h, grad_cell, new_cell, gates, input, old_h, weights):
    return (
        torch.empty_like(input, memory_format=torch.contiguous_format),
        torch.empty_like(weights, memory_format=torch.contiguous_format),
        weights.new_empty((weights.shape[0],)),
        torch.empty_like(old_h, memory_format=torch.contiguous_format),
        torch.empty_like(new_cell, memory_format=torch.contiguous_format),
    )


def _setup_context(ctx, inputs, output) -> None:
    input, weights, _bias, old_h, _old_cell = inputs
    _new_h, new_cell, gates = output
    ctx.mark_non_differentiable(gates)
    ctx.save_for_backward(new_cell, gates, input, old_h, weights)


def _backward(ctx, grad_h, grad_cell, _grad_gates):
    new_cell, gates, input, old_h, weights = ctx.saved_tensors
    # An output the loss does not use arrives as None.
    grad_h = torch.zeros_like(new_cell) if grad_h is None else grad_h
    grad_cell = torch.zeros_like(new_cell) if grad_cell is None else grad_cell
    return torch.ops.jitops._lltm_backward(grad_h, grad_cell, new_cell, gates, input, old_h, weights)


_eager_autograd = None  # register_autograd's OpAutograd, made once the op exists


def _register() -> None:
    global _eager_autograd
    register_fake("lltm", _fake_forward)
    register_fake("_lltm_backward", _fake_backward)
    _eager_autograd = register_autograd("lltm", _backward, _setup_context)
