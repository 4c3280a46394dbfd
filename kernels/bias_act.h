// SPDX-License-Identifier: MIT
// bias_act: StyleGAN2's fused bias + activation + gain + clamp, and its first and second
// derivatives. The C++ entry points take x in any dense layout (the output gets the same strides)
// and a contiguous bias along `dim`. The activations' math lives here, once, for both backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common.h"
#include "fast_math.h"

namespace jitops {

// The activation names of the schema (a string there, never a number), as a template parameter.
enum class Activation { kLinear, kRelu, kLrelu, kTanh, kSigmoid, kElu, kSelu, kSoftplus, kSwish };

struct BiasActParams {
  double alpha;  // lrelu's negative slope (unused by the others)
  double gain;   // y = act(x + b) * gain
  double clamp;  // then, if clamped, y is clamped to [-clamp, clamp]
  bool clamped;
};

// x's memory, in order, as [outer][channels][inner]: the bias runs along `channels`. NCHW with dim
// 1 has inner = H * W; channels_last has inner = 1. Without a bias: channels = 1, inner = n.
struct BiasActShape {
  int64_t n, channels, inner;
};

// derivative = 0: out = y; 1: out = grad * dy/dx; 2: out = grad * d2y/dx2 (the clamp's mask is
// taken from y, as the clamp's own gradient does). x, grad and out: n elements of x's memory
// (dense); b: [channels] or nullptr; grad: nullptr when derivative == 0. T: float, double (CPU);
// also Half, BFloat16 (CUDA).
template <Activation kAct, typename T>
void bias_act_cpu(const T* x, const T* b, const T* grad, T* out, const BiasActShape& shape, const BiasActParams& params,
                  int derivative);
template <Activation kAct, typename T>
void bias_act_cuda(const T* x, const T* b, const T* grad, T* out, const BiasActShape& shape,
                   const BiasActParams& params, int derivative, CudaStream stream);

// The first-order backward with a bias in one pass over memory (CUDA): grad_x as bias_act_cuda
// (derivative 1) writes it, and, per channel c, partial_sums[c][0 .. blocks) whose sum is
// grad_x summed over channel c. fused_backward_blocks says how many blocks per channel the
// layout takes, or 0 where it has no such kernel (the caller then takes two passes).
// partial_sums: float for float, Half and BFloat16; double for double.
template <typename T>
using BiasSum = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
int64_t bias_act_fused_backward_blocks(const T* x, const T* grad, const T* grad_x, const BiasActShape& shape);
template <Activation kAct, typename T>
void bias_act_fused_backward_cuda(const T* x, const T* b, const T* grad, T* grad_x, BiasSum<T>* partial_sums,
                                  int64_t blocks, const BiasActShape& shape, const BiasActParams& params,
                                  CudaStream stream);

// act(x) and its first two derivatives, in acc_t.
template <Activation kAct, typename acc_t>
struct ActivationFn {
  acc_t value, first, second;

  JITOPS_HOST_DEVICE ActivationFn(acc_t x, acc_t alpha) {
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

  JITOPS_HOST_DEVICE static acc_t sigmoid(acc_t x) { return acc_t(1) / (acc_t(1) + fast::exp(-x)); }
};

// One element: y = clamp(act(x + b) * gain), or grad times its first or second derivative.
template <Activation kAct, int kDerivative, typename acc_t>
JITOPS_HOST_DEVICE inline acc_t bias_act_element(acc_t x, acc_t b, acc_t grad, acc_t alpha, acc_t gain, acc_t clamp,
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

// Calls fn(activation) with the activation as a std::integral_constant, so that each kernel is
// compiled per activation (flash-attention's BOOL_SWITCH, for an enum); in device code, too, for
// the CUDA kernels that take the activation at run time.
template <typename Fn>
JITOPS_HOST_DEVICE decltype(auto) dispatch_activation(Activation act, Fn&& fn) {
#define JITOPS_ACTIVATION_CASE(name) \
  case Activation::name:             \
    return fn(std::integral_constant<Activation, Activation::name>{});
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
  return fn(std::integral_constant<Activation, Activation::kLinear>{});  // unreachable: every enumerator has a case
}

// Calls fn(order) with the derivative order (0, 1 or 2) as a std::integral_constant.
template <typename Fn>
void dispatch_derivative(int derivative, Fn&& fn) {
  switch (derivative) {
    case 0:
      return fn(std::integral_constant<int, 0>{});
    case 1:
      return fn(std::integral_constant<int, 1>{});
    default:
      return fn(std::integral_constant<int, 2>{});  // the bindings allow 0, 1 and 2 only
  }
}

}  // namespace jitops
