// SPDX-License-Identifier: MIT
// x is dense, so its memory is [outer][C][inner] for C = x.size(dim) and inner = x.stride(dim):
// NCHW with dim 1 has inner = H * W, channels_last has inner = 1. Either way the innermost loop
// runs over contiguous memory with the bias fixed (inner > 1) or over the C channels (inner == 1).
#include "../bias_act.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../aten_checks.h"

namespace jitops {
namespace {

struct Scalars {
  double alpha, gain, clamp;
  bool clamped;
};

// out[k] for k < count: element k of x/grad/out, each with bias[k * bias_step] (bias_step 0 or 1).
template <Activation kAct, int kDerivative, typename scalar_t>
JITOPS_CPU_MULTIVERSION void bias_act_run(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                          int64_t bias_step, const scalar_t* __restrict grad,
                                          scalar_t* __restrict out, int64_t count, Scalars s) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t alpha(s.alpha), gain(s.gain), clamp(s.clamp);
  for (int64_t k = 0; k < count; ++k) {
    const acc_t b = bias ? static_cast<acc_t>(bias[k * bias_step]) : acc_t(0);
    const acc_t g = kDerivative > 0 ? static_cast<acc_t>(grad[k]) : acc_t(0);
    out[k] = static_cast<scalar_t>(
        bias_act_element<kAct, kDerivative, acc_t>(static_cast<acc_t>(x[k]), b, g, alpha, gain, clamp, s.clamped));
  }
}

}  // namespace

void bias_act_cpu(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad, const BiasActParams& params,
                  int derivative, at::Tensor& out) {
  JITOPS_CHECK_CPU(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  // Without a bias the whole tensor is one run.
  const int64_t channels = b.defined() ? x.size(params.dim) : 1;
  const int64_t inner = b.defined() ? x.stride(params.dim) : n;
  const Scalars s{params.alpha, params.gain, params.clamp.value_or(0.0), params.clamp.has_value()};
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "bias_act_cpu", [&] {
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* b_p = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* g_p = grad.defined() ? grad.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    dispatch_bias_act(params.act, derivative, [&](auto act, auto order) {
      constexpr Activation kAct = decltype(act)::value;
      constexpr int kOrder = decltype(order)::value;
      const auto run = [&](int64_t first, int64_t count, const scalar_t* bias, int64_t bias_step) {
        bias_act_run<kAct, kOrder>(x_p + first, bias, bias_step, g_p ? g_p + first : nullptr, out_p + first, count, s);
      };
      if (inner == 1) {
        // Rows of C channels, the bias varying along the row.
        at::parallel_for(0, n / channels, std::max<int64_t>(1, kGrainSize / channels), [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) run(row * channels, channels, b_p, 1);
        });
      } else {
        // Chunks of elements, each cut into runs of one channel, hence one bias value.
        at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end;) {
            const int64_t run_index = k / inner;
            const int64_t run_end = std::min(end, (run_index + 1) * inner);
            run(k, run_end - k, b_p ? b_p + run_index % channels : nullptr, 0);
            k = run_end;
          }
        });
      }
    });
  });
}

}  // namespace jitops
