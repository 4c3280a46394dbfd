# SPDX-License-Identifier: MIT
"""bias_act(x, b=None, dim=1, act='linear', alpha=None, gain=None, clamp=None).

StyleGAN2's fused bias + activation: y = clamp(act(x + b) * gain, -clamp, clamp), with
StyleGAN2's defaults for alpha and gain, and first and second order gradients.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from ._framework import call_op, check_backend, check_tensor_args, op_extension, register_autograd, register_fake, require

EXTENSION = op_extension(
    "bias_act",
    *(f"kernels/cpu/bias_act_{unit}.cpp" for unit in range(3)),  # units compiled in parallel
    *(f"kernels/cuda/bias_act_{unit}.cu" for unit in range(8)),
    "bindings/bias_act.cpp",
)

__all__ = ["bias_act", "bias_act_ref", "ACTIVATIONS"]


class Activation:
    """One row of the table below. (A plain class: a NamedTuple is built with exec() at import,
    on every warm start.)"""

    __slots__ = ("func", "default_alpha", "default_gain", "has_second_derivative")

    def __init__(self, func, default_alpha: float, default_gain: float, has_second_derivative: bool):
        self.func = func  # (x, alpha) -> y, in pure torch
        self.default_alpha = default_alpha
        self.default_gain = default_gain
        self.has_second_derivative = has_second_derivative  # False: piecewise linear, the second derivative is zero

    def __repr__(self) -> str:  # jitops.ACTIVATIONS at a prompt shows each activation's defaults
        return f"Activation(default_alpha={self.default_alpha:g}, default_gain={self.default_gain:.6g})"


# StyleGAN2's table (torch_utils/ops/bias_act.py); bindings/bias_act.cpp knows the same names.
ACTIVATIONS = {
    "linear": Activation(lambda x, alpha: x, 0.0, 1.0, False),
    "relu": Activation(lambda x, alpha: torch.nn.functional.relu(x), 0.0, math.sqrt(2), False),
    "lrelu": Activation(lambda x, alpha: torch.nn.functional.leaky_relu(x, alpha), 0.2, math.sqrt(2), False),
    "tanh": Activation(lambda x, alpha: torch.tanh(x), 0.0, 1.0, True),
    "sigmoid": Activation(lambda x, alpha: torch.sigmoid(x), 0.0, 1.0, True),
    "elu": Activation(lambda x, alpha: torch.nn.functional.elu(x), 0.0, 1.0, True),
    "selu": Activation(lambda x, alpha: torch.nn.functional.selu(x), 0.0, 1.0, True),
    "softplus": Activation(lambda x, alpha: torch.nn.functional.softplus(x), 0.0, 1.0, True),
    "swish": Activation(lambda x, alpha: torch.sigmoid(x) * x, 0.0, math.sqrt(2), True),
}


# ACTIVATIONS' names, for type checkers and editors (a test keeps the two in step).
ActivationName = Literal["linear", "relu", "lrelu", "tanh", "sigmoid", "elu", "selu", "softplus", "swish"]


def _resolve(act: str, alpha: float | None, gain: float | None) -> tuple[float, float]:
    if act not in ACTIVATIONS:
        raise ValueError(f"bias_act(): act must be one of {', '.join(ACTIVATIONS)}; got {act!r}")
    spec = ACTIVATIONS[act]
    return float(spec.default_alpha if alpha is None else alpha), float(spec.default_gain if gain is None else gain)


def bias_act(
    x: torch.Tensor,  # [*], any memory format (channels_last stays channels_last)
    b: torch.Tensor | None = None,  # [x.shape[dim]]
    dim: int = 1,
    act: ActivationName = "linear",
    alpha: float | None = None,  # lrelu's negative slope; default 0.2
    gain: float | None = None,  # default sqrt(2) for relu, lrelu and swish, 1 otherwise
    clamp: float | None = None,  # clamp the output to [-clamp, clamp]
) -> torch.Tensor:
    """StyleGAN2's fused bias and activation: act(x + b, alpha) * gain, clamped to [-clamp, clamp].

    Args:
        x: any shape and memory format (channels_last stays channels_last); float32/float64 on
            CPU and CUDA, float16/bfloat16 on CUDA.
        b: bias of shape [x.shape[dim]], added along dim; None: no bias.
        dim: the dimension of x that b runs along (default 1, the channels of NCHW).
        act: one of jitops.ACTIVATIONS. Default alpha and gain of each:
            linear (alpha 0, gain 1), relu (0, sqrt 2), lrelu (0.2, sqrt 2), tanh (0, 1),
            sigmoid (0, 1), elu (0, 1), selu (0, 1), softplus (0, 1), swish (0, sqrt 2).
        alpha: lrelu's negative slope (the only activation that reads it); None: its default.
        gain: the output's scale; None: the activation's default above.
        clamp: clamp the output to [-clamp, clamp]; None: no clamp.

    Returns a tensor of x's shape, dtype and memory format. Differentiable twice in x and b.
    """
    check_tensor_args("bias_act", x=x, **({} if b is None else {"b": b}))
    alpha, gain = _resolve(act, alpha, gain)
    clamp = None if clamp is None else float(clamp)
    require("bias_act")
    check_backend("bias_act", x, b)
    return call_op(torch.ops.jitops.bias_act.default, _eager_autograd, x, b, dim, act, alpha, gain, clamp)


def bias_act_ref(x, b=None, dim=1, act="linear", alpha=None, gain=None, clamp=None):
    """Pure-torch reference (StyleGAN2's _bias_act_ref), for tests and machines without a compiler."""
    alpha, gain = _resolve(act, alpha, gain)
    if b is not None:
        x = x + b.reshape([-1 if i == dim % x.ndim else 1 for i in range(x.ndim)])
    x = ACTIVATIONS[act].func(x, alpha)
    if gain != 1:
        x = x * gain
    if clamp is not None:
        x = x.clamp(-clamp, clamp)
    return x


# The fake kernels' copy of the C++ checks in bindings/bias_act.cpp.
def _check_args(x, b, dim, act, clamp) -> None:
    torch._check(act in ACTIVATIONS, lambda: f"act must be one of {', '.join(ACTIVATIONS)}; got '{act}'")
    torch._check(clamp is None or clamp >= 0, lambda: f"clamp must be None or >= 0, got {clamp}")
    if b is not None:
        torch._check(
            -x.dim() <= dim < x.dim(), lambda: f"dim must be in [{-x.dim()}, {x.dim()}) for x of shape {list(x.shape)}, got {dim}"
        )
        channels = x.shape[dim]
        torch._check(
            b.dim() == 1 and b.shape[0] == channels,
            lambda: (
                f"b must be 1-D with x.shape[dim] = {channels} elements (x: {list(x.shape)}, dim {dim % x.dim()}), got b of shape {list(b.shape)}"
            ),
        )
        torch._check(x.device == b.device, lambda: f"x and b must be on the same device, got {x.device} and {b.device}")
        torch._check(x.dtype == b.dtype, lambda: f"x and b must have the same dtype, got {x.dtype} and {b.dtype}")


def _fake_forward(x, b, dim, act, alpha, gain, clamp):
    _check_args(x, b, dim, act, clamp)
    # preserve_format: x's strides when x is dense, the same order of strides otherwise (as in C++).
    return torch.empty_like(x)


def _fake_derivative(grad, x, b, dim, act, alpha, gain, clamp, derivative):
    _check_args(x, b, dim, act, clamp)
    return torch.empty_like(x)


def _fake_backward(grad, x, b, dim, act, alpha, gain, clamp):
    _check_args(x, b, dim, act, clamp)
    return torch.empty_like(x), torch.empty_like(b)


def _reduce_to_bias(grad_x: torch.Tensor, b: torch.Tensor | None, dim: int) -> torch.Tensor | None:
    if b is None:
        return None
    dims = [i for i in range(grad_x.ndim) if i != dim % grad_x.ndim]
    return grad_x.sum(dims) if dims else grad_x


def _setup_forward(ctx, inputs, output) -> None:
    x, b, dim, act, alpha, gain, clamp = inputs
    ctx.save_for_backward(x, b)
    ctx.args = (dim, act, alpha, gain, clamp)


def _backward_forward(ctx, grad):
    x, b = ctx.saved_tensors
    dim = ctx.args[0]
    if b is not None and ctx.needs_input_grad[1] and not torch.is_grad_enabled():
        # A plain backward (no create_graph, so this need not be differentiable): grad_x and
        # grad_b from one op, which on CUDA sums grad_x per channel as it writes it.
        grad_x, grad_b = torch.ops.jitops._bias_act_backward(grad, x, b, *ctx.args)
        return grad_x, grad_b, None, None, None, None, None
    grad_x = torch.ops.jitops._bias_act_derivative(grad, x, b, *ctx.args, 1)
    return grad_x, _reduce_to_bias(grad_x, b, dim), None, None, None, None, None


def _setup_derivative(ctx, inputs, output) -> None:
    grad, x, b, dim, act, alpha, gain, clamp, derivative = inputs
    ctx.save_for_backward(grad, x, b)
    ctx.args = (dim, act, alpha, gain, clamp)
    ctx.derivative = derivative


def _backward_derivative(ctx, grad_out):
    # out = grad * f^(k)(x + b): linear in grad; its x-derivative is grad * f^(k+1)(x + b).
    grad, x, b = ctx.saved_tensors
    dim, k = ctx.args[0], ctx.derivative
    grad_grad = torch.ops.jitops._bias_act_derivative(grad_out, x, b, *ctx.args, k)
    grad_x = None
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        if k >= 2:
            raise RuntimeError("bias_act supports gradients up to the second order")
        grad_x = torch.ops.jitops._bias_act_derivative(grad_out * grad, x, b, *ctx.args, k + 1)
    grad_b = _reduce_to_bias(grad_x, b, dim) if grad_x is not None else None
    return grad_grad, grad_x, grad_b, None, None, None, None, None, None


_eager_autograd = None  # register_autograd's OpAutograd for bias_act, made once the op exists


def _register() -> None:
    global _eager_autograd
    register_fake("bias_act", _fake_forward)
    register_fake("_bias_act_derivative", _fake_derivative)
    register_fake("_bias_act_backward", _fake_backward)
    _eager_autograd = register_autograd("bias_act", _backward_forward, _setup_forward)
    register_autograd("_bias_act_derivative", _backward_derivative, _setup_derivative)
