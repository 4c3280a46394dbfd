// SPDX-License-Identifier: MIT
// x is dense, so its memory is [outer][C][inner] (BiasActShape): the innermost loop runs over
// contiguous memory with the bias fixed (inner > 1) or over the C channels (inner == 1).
//
// Nine activations x three derivative orders x two dtypes x two CPU targets: the templates here are
// instantiated by three units that compile in parallel (bias_act_0.cpp, _1, _2), three activations
// each; JITOPS_BIAS_ACT_CPU(act) instantiates one.
#pragma once
#include <torch/csrc/stable/ops.h>  // parallel_for: torch's own thread pool

#include <algorithm>

#include "../bias_act.h"

namespace jitops {
namespace {

// out[k] for k < count: element k of x/grad/out, each with bias[k * bias_step] (bias_step 0 or 1).
template <Activation kAct, int kDerivative, typename scalar_t>
JITOPS_CPU_MULTIVERSION void bias_act_run(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                          int64_t bias_step, const scalar_t* __restrict grad, scalar_t* __restrict out,
                                          int64_t count, BiasActParams p) {
  const scalar_t alpha(p.alpha), gain(p.gain), clamp(p.clamp);
  for (int64_t k = 0; k < count; ++k) {
    const scalar_t b = bias ? bias[k * bias_step] : scalar_t(0);
    const scalar_t g = kDerivative > 0 ? grad[k] : scalar_t(0);
    out[k] = bias_act_element<kAct, kDerivative, scalar_t>(x[k], b, g, alpha, gain, clamp, p.clamped);
  }
}

}  // namespace

template <Activation kAct, typename T>
void bias_act_cpu(const T* x, const T* b, const T* grad, T* out, const BiasActShape& shape, const BiasActParams& params,
                  int derivative) {
  const int64_t n = shape.n, channels = shape.channels, inner = shape.inner;
  if (n == 0) return;
  dispatch_derivative(derivative, [&](auto order) {
    constexpr int kOrder = decltype(order)::value;
    const auto run = [&](int64_t first, int64_t count, const T* bias, int64_t bias_step) {
      bias_act_run<kAct, kOrder>(x + first, bias, bias_step, grad ? grad + first : nullptr, out + first, count, params);
    };
    if (inner == 1) {
      // Rows of C channels, the bias varying along the row.
      torch::stable::parallel_for(0, n / channels, std::max<int64_t>(1, kGrainSize / channels),
                                  [&](int64_t begin, int64_t end) {
                                    for (int64_t row = begin; row < end; ++row) run(row * channels, channels, b, 1);
                                  });
    } else {
      // Chunks of elements, each cut into runs of one channel, hence one bias value.
      torch::stable::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end;) {
          const int64_t run_index = k / inner;
          const int64_t run_end = std::min(end, (run_index + 1) * inner);
          run(k, run_end - k, b ? b + run_index % channels : nullptr, 0);
          k = run_end;
        }
      });
    }
  });
}

#define JITOPS_BIAS_ACT_CPU(act)                                                                            \
  template void bias_act_cpu<Activation::act, float>(const float*, const float*, const float*, float*,      \
                                                     const BiasActShape&, const BiasActParams&, int);       \
  template void bias_act_cpu<Activation::act, double>(const double*, const double*, const double*, double*, \
                                                      const BiasActShape&, const BiasActParams&, int);

}  // namespace jitops
