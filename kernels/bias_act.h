// SPDX-License-Identifier: MIT
// bias_act: StyleGAN2's fused bias + activation + gain + clamp, and its first and second
// derivatives. The C++ entry points take x in any dense layout (the output gets the same strides)
// and a contiguous bias along `dim`. The activations' math lives here, once, for both backends.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

#include "fast_math.h"

namespace jitops {

// The activation names of the schema (a string there, never a number), as a template parameter.
enum class Activation { kLinear, kRelu, kLrelu, kTanh, kSigmoid, kElu, kSelu, kSoftplus, kSwish };

struct BiasActParams {
  Activation act;
  int64_t dim;                  // b runs along x's dimension dim
  double alpha;                 // lrelu's negative slope (unused by the others)
  double gain;                  // y = act(x + b) * gain
  std::optional<double> clamp;  // then y is clamped to [-clamp, clamp]
};

// derivative = 0: out = y; 1: out = grad * dy/dx; 2: out = grad * d2y/dx2 (the clamp's mask is
// taken from y, as the clamp's own gradient does). x and out: same shape and strides (dense);
// b: [x.size(dim)] or undefined; grad: like x, or undefined when derivative == 0.
void bias_act_cpu(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad, const BiasActParams& params,
                  int derivative, at::Tensor& out);
void bias_act_cuda(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad, const BiasActParams& params,
                   int derivative, at::Tensor& out);
// The first-order backward with a bias in one pass: grad_x as bias_act_cuda(derivative 1) writes it,
// and the returned bias gradient, grad_x summed over all but dim. Where x's layout has no fused
// kernel it writes nothing and returns an undefined tensor; the caller then does both in two passes.
at::Tensor bias_act_backward_cuda(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad,
                                  const BiasActParams& params, at::Tensor& grad_x);

// act(x) and its first two derivatives, in acc_t.
template <Activation kAct, typename acc_t>
struct ActivationFn {
  acc_t value, first, second;

  C10_HOST_DEVICE ActivationFn(acc_t x, acc_t alpha) {
    const acc_t zero(0), one(1);
    if constexpr (kAct == Activation::kLinear) {
      value = x, first = one, second = zero;
    } else if constexpr (kAct == Activation::kRelu) {
      value = x > zero ? x : zero, first = x > zero ? one : zero, second = zero;
    } else if constexpr (kAct == Activation::kLrelu) {
      value = x > zero ? x : x * alpha, first = x > zero ? one : alpha, second = zero;
    } else if constexpr (kAct == Activation::kTanh) {
      const acc_t t = fast::tanh(x);
      value = t, first = one - t * t, second = acc_t(-2) * t * (one - t * t);
    } else if constexpr (kAct == Activation::kSigmoid) {
      const acc_t s = sigmoid(x);
      value = s, first = s * (one - s), second = s * (one - s) * (one - acc_t(2) * s);
    } else if constexpr (kAct == Activation::kElu) {
      const acc_t e = fast::exp(x > zero ? zero : x);  // no overflow on the side that is not used
      value = x > zero ? x : e - one, first = x > zero ? one : e, second = x > zero ? zero : e;
    } else if constexpr (kAct == Activation::kSelu) {
      constexpr double kScale = 1.0507009873554804934193349852946, kAlpha = 1.6732632423543772848170429916717;
      const acc_t e = fast::exp(x > zero ? zero : x);
      value = acc_t(kScale) * (x > zero ? x : acc_t(kAlpha) * (e - one));
      first = x > zero ? acc_t(kScale) : acc_t(kScale * kAlpha) * e;
      second = x > zero ? zero : acc_t(kScale * kAlpha) * e;
    } else if constexpr (kAct == Activation::kSoftplus) {
      // torch's softplus: x itself above the threshold 20.
      const acc_t s = sigmoid(x);
      const bool linear = x > acc_t(20);
      value = linear ? x : std::log1p(fast::exp(linear ? zero : x));
      first = linear ? one : s, second = linear ? zero : s * (one - s);
    } else {
      static_assert(kAct == Activation::kSwish, "every Activation has a branch");
      const acc_t s = sigmoid(x);
      value = x * s, first = s + x * s * (one - s), second = s * (one - s) * (acc_t(2) + x * (one - acc_t(2) * s));
    }
  }

  C10_HOST_DEVICE static acc_t sigmoid(acc_t x) { return acc_t(1) / (acc_t(1) + fast::exp(-x)); }
};

// One element: y = clamp(act(x + b) * gain), or grad times its first or second derivative.
template <Activation kAct, int kDerivative, typename acc_t>
C10_HOST_DEVICE inline acc_t bias_act_element(acc_t x, acc_t b, acc_t grad, acc_t alpha, acc_t gain, acc_t clamp,
                                              bool clamped) {
  const ActivationFn<kAct, acc_t> f(x + b, alpha);
  const acc_t y = f.value * gain;
  if constexpr (kDerivative == 0) {
    if (!clamped) return y;
    return y > clamp ? clamp : (y < -clamp ? -clamp : y);
  } else {
    // The clamp passes the gradient where -clamp <= y <= clamp, as torch.clamp's backward does.
    const bool passes = !clamped || (y >= -clamp && y <= clamp);
    const acc_t derivative = (kDerivative == 1 ? f.first : f.second) * gain;
    return passes ? grad * derivative : acc_t(0);
  }
}

// Calls fn(activation, derivative) with both as std::integral_constant, so that each kernel is
// compiled per activation and derivative order (flash-attention's BOOL_SWITCH, for an enum).
template <typename Fn>
void dispatch_bias_act(Activation act, int derivative, Fn&& fn) {
  const auto with_derivative = [&](auto act_constant) {
    switch (derivative) {
      case 0: return fn(act_constant, std::integral_constant<int, 0>{});
      case 1: return fn(act_constant, std::integral_constant<int, 1>{});
      case 2: return fn(act_constant, std::integral_constant<int, 2>{});
      default: TORCH_CHECK(false, "bias_act: derivative must be 0, 1 or 2, got ", std::to_string(derivative));
    }
  };
#define JITOPS_ACTIVATION_CASE(name) \
  case Activation::name:              \
    return with_derivative(std::integral_constant<Activation, Activation::name>{});
  switch (act) {
    JITOPS_ACTIVATION_CASE(kLinear)
    JITOPS_ACTIVATION_CASE(kRelu)
    JITOPS_ACTIVATION_CASE(kLrelu)
    JITOPS_ACTIVATION_CASE(kTanh)
    JITOPS_ACTIVATION_CASE(kSigmoid)
    JITOPS_ACTIVATION_CASE(kElu)
    JITOPS_ACTIVATION_CASE(kSelu)
    JITOPS_ACTIVATION_CASE(kSoftplus)
    JITOPS_ACTIVATION_CASE(kSwish)
  }
#undef JITOPS_ACTIVATION_CASE
}

}  // namespace jitops
