// SPDX-License-Identifier: MIT
// Elementwise over x's memory (dense, any layout), kVec elements per 16-byte load where the
// pointers allow. Element i has channel (i / inner) % C, inner = x.stride(dim): one division per
// vector, then a cursor steps through the vector's elements (a 64-bit division per element cost
// a quarter of the bandwidth on an H100).
#include "../bias_act.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

struct Layout {
  int64_t n, inner, channels;
  bool fits_32_bits;  // n < 2^32: one 32-bit division per vector instead of a 64-bit one
};

// The channel of element i and i's position within its run of `inner` elements sharing it.
struct ChannelCursor {
  int64_t channel, offset;

  __device__ ChannelCursor(int64_t i, const Layout& layout) {
    if (layout.fits_32_bits) {
      const uint32_t run = static_cast<uint32_t>(i) / static_cast<uint32_t>(layout.inner);
      offset = static_cast<uint32_t>(i) - run * static_cast<uint32_t>(layout.inner);
      channel = run % static_cast<uint32_t>(layout.channels);
    } else {
      const int64_t run = i / layout.inner;
      offset = i - run * layout.inner;
      channel = run % layout.channels;
    }
  }

  // To element i + 1, without dividing.
  __device__ void advance(const Layout& layout) {
    if (++offset == layout.inner) {
      offset = 0;
      if (++channel == layout.channels) channel = 0;
    }
  }
};

template <Activation kAct, int kDerivative, int kVec, typename scalar_t>
__global__ void bias_act_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                const scalar_t* __restrict grad, scalar_t* __restrict out, Layout layout,
                                at::opmath_type<scalar_t> alpha, at::opmath_type<scalar_t> gain,
                                at::opmath_type<scalar_t> clamp, bool clamped) {
  using acc_t = at::opmath_type<scalar_t>;
  using V = Vec<scalar_t, kVec>;
  const int64_t n_vec = layout.n / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < n_vec; v += stride) {
    const V xv = reinterpret_cast<const V*>(x)[v];
    V gv;
    if constexpr (kDerivative > 0) gv = reinterpret_cast<const V*>(grad)[v];
    V result;
    const auto element = [&](int e, acc_t b) {
      const acc_t g = kDerivative > 0 ? static_cast<acc_t>(gv.v[e]) : acc_t(0);
      result.v[e] = static_cast<scalar_t>(
          bias_act_element<kAct, kDerivative, acc_t>(static_cast<acc_t>(xv.v[e]), b, g, alpha, gain, clamp, clamped));
    };
    ChannelCursor cursor(v * kVec, layout);
    if (bias == nullptr || cursor.offset + kVec <= layout.inner) {
      // The whole vector in one channel (NCHW, or no bias): one bias load.
      const acc_t b = bias ? static_cast<acc_t>(bias[cursor.channel]) : acc_t(0);
#pragma unroll
      for (int e = 0; e < kVec; ++e) element(e, b);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        element(e, static_cast<acc_t>(bias[cursor.channel]));
        cursor.advance(layout);
      }
    }
    reinterpret_cast<V*>(out)[v] = result;
  }
}

}  // namespace

void bias_act_cuda(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad, const BiasActParams& params,
                   int derivative, at::Tensor& out) {
  JITOPS_CHECK_CUDA(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  const c10::cuda::CUDAGuard device_guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Without a bias every element is in one channel.
  const Layout layout{n, b.defined() ? x.stride(params.dim) : n, b.defined() ? x.size(params.dim) : 1,
                      n < (int64_t{1} << 32)};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_act_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* b_p = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* g_p = grad.defined() ? grad.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    constexpr int kMaxVec = max_vec_size<scalar_t>();
    const bool vectorized =
        n % kMaxVec == 0 && is_aligned(x_p) && is_aligned(out_p) && (g_p == nullptr || is_aligned(g_p));
    const acc_t alpha(params.alpha), gain(params.gain), clamp(params.clamp.value_or(0.0));
    dispatch_bias_act(params.act, derivative, [&](auto act, auto order) {
      constexpr Activation kAct = decltype(act)::value;
      constexpr int kOrder = decltype(order)::value;
      const auto launch = [&](auto vec) {
        constexpr int kVec = decltype(vec)::value;
        const int blocks = grid_size(n / kVec, kThreads, x.device().index());
        bias_act_kernel<kAct, kOrder, kVec, scalar_t><<<blocks, kThreads, 0, stream>>>(
            x_p, b_p, g_p, out_p, layout, alpha, gain, clamp, params.clamp.has_value());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      if (vectorized) {
        launch(std::integral_constant<int, kMaxVec>{});
      } else {
        launch(std::integral_constant<int, 1>{});
      }
    });
  });
}

}  // namespace jitops
