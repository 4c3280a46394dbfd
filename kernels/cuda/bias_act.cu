// SPDX-License-Identifier: MIT
// Elementwise over x's memory (dense, any layout), kVec elements per 16-byte load where the
// pointers allow. Element i has channel (i / inner) % C, inner = x.stride(dim): one division per
// vector, then a cursor steps through the vector's elements (a 64-bit division per element cost
// a quarter of the bandwidth on an H100). The first-order backward with a bias has a second
// kernel that also sums grad_x per channel, so that the bias gradient costs no second pass.
#include "../bias_act.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // vectors per thread per step

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

template <typename acc_t>
struct Scalars {
  acc_t alpha, gain, clamp;
  bool clamped;
};

// One output element from x, its bias b and (for a derivative) grad, as loaded.
template <Activation kAct, int kDerivative, typename scalar_t, typename acc_t>
__device__ scalar_t bias_act_one(scalar_t x, acc_t b, scalar_t grad, const Scalars<acc_t>& s) {
  const acc_t g = kDerivative > 0 ? static_cast<acc_t>(grad) : acc_t(0);
  return static_cast<scalar_t>(
      bias_act_element<kAct, kDerivative, acc_t>(static_cast<acc_t>(x), b, g, s.alpha, s.gain, s.clamp, s.clamped));
}

// The kVec results of one vector: x (and, for a derivative, grad) as loaded, starting at element i.
template <Activation kAct, int kDerivative, typename scalar_t, int kVec, typename acc_t>
__device__ Vec<scalar_t, kVec> bias_act_vector(const Vec<scalar_t, kVec>& xv, const Vec<scalar_t, kVec>& gv,
                                               const scalar_t* __restrict bias, int64_t i, const Layout& layout,
                                               const Scalars<acc_t>& s) {
  Vec<scalar_t, kVec> result;
  if (bias == nullptr) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) result.v[e] = bias_act_one<kAct, kDerivative>(xv.v[e], acc_t(0), gv.v[e], s);
    return result;
  }
  ChannelCursor cursor(i, layout);
  if (cursor.offset + kVec <= layout.inner) {
    // The whole vector in one channel (NCHW): one bias load.
    const acc_t b = static_cast<acc_t>(bias[cursor.channel]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) result.v[e] = bias_act_one<kAct, kDerivative>(xv.v[e], b, gv.v[e], s);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      result.v[e] = bias_act_one<kAct, kDerivative>(xv.v[e], static_cast<acc_t>(bias[cursor.channel]), gv.v[e], s);
      cursor.advance(layout);
    }
  }
  return result;
}

// Each block step covers kUnroll * blockDim.x vectors: a thread issues all its loads before it
// computes, so that enough bytes are in flight to reach the copy bandwidth (one load at a time
// left the forward at 77-87% of it).
template <Activation kAct, int kDerivative, int kVec, typename scalar_t>
__global__ void bias_act_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                const scalar_t* __restrict grad, scalar_t* __restrict out, Layout layout,
                                Scalars<at::opmath_type<scalar_t>> s) {
  using V = Vec<scalar_t, kVec>;
  const int64_t n_vec = layout.n / kVec;
  const int64_t step = static_cast<int64_t>(blockDim.x) * kUnroll;
  for (int64_t first = blockIdx.x * step + threadIdx.x; first < n_vec; first += gridDim.x * step) {
    V xv[kUnroll], gv[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = first + u * static_cast<int64_t>(blockDim.x);
      if (v < n_vec) {
        xv[u] = reinterpret_cast<const V*>(x)[v];
        if constexpr (kDerivative > 0) gv[u] = reinterpret_cast<const V*>(grad)[v];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = first + u * static_cast<int64_t>(blockDim.x);
      if (v < n_vec) reinterpret_cast<V*>(out)[v] = bias_act_vector<kAct, kDerivative>(xv[u], gv[u], bias, v * kVec, layout, s);
    }
  }
}

// The first-order backward fused with the bias gradient, for layouts where a channel's elements
// come in runs of whole vectors ([outer][C][inner] with inner a multiple of kVec). Block
// (bx, c) walks channel c's outer * inner / kVec vectors with stride gridDim.x, writes grad_x and
// leaves its share of sum(grad_x) in partial_sums[c][bx]; summing those is deterministic, unlike
// atomics.
struct ChannelRuns {
  int64_t outer, channels, inner_vec;  // inner_vec: vectors per run
  bool fits_32_bits;                   // outer * inner_vec < 2^32
};

template <Activation kAct, int kVec, typename scalar_t>
__global__ void bias_act_backward_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                         const scalar_t* __restrict grad, scalar_t* __restrict grad_x,
                                         at::opmath_type<scalar_t>* __restrict partial_sums, ChannelRuns runs,
                                         Scalars<at::opmath_type<scalar_t>> s) {
  using acc_t = at::opmath_type<scalar_t>;
  using V = Vec<scalar_t, kVec>;
  const int64_t channel = blockIdx.y;
  const acc_t b = static_cast<acc_t>(bias[channel]);
  const int64_t per_channel = runs.outer * runs.inner_vec;
  // Vector j of this channel, as a vector index into x.
  const auto vector_index = [&](int64_t j) {
    const int64_t run = runs.fits_32_bits ? static_cast<uint32_t>(j) / static_cast<uint32_t>(runs.inner_vec)
                                          : j / runs.inner_vec;
    return (run * runs.channels + channel) * runs.inner_vec + (j - run * runs.inner_vec);
  };
  acc_t sum = 0;
  const int64_t step = static_cast<int64_t>(blockDim.x) * kUnroll;
  for (int64_t first = blockIdx.x * step + threadIdx.x; first < per_channel; first += gridDim.x * step) {
    V xv[kUnroll], gv[kUnroll];
    int64_t index[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = first + u * static_cast<int64_t>(blockDim.x);
      index[u] = j < per_channel ? vector_index(j) : -1;
      if (index[u] >= 0) {
        xv[u] = reinterpret_cast<const V*>(x)[index[u]];
        gv[u] = reinterpret_cast<const V*>(grad)[index[u]];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (index[u] < 0) continue;
      V result;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        result.v[e] = bias_act_one<kAct, 1>(xv[u].v[e], b, gv[u].v[e], s);
        sum += static_cast<acc_t>(result.v[e]);  // the stored values, as grad_x.sum() would see them
      }
      reinterpret_cast<V*>(grad_x)[index[u]] = result;
    }
  }
  using BlockReduce = cub::BlockReduce<acc_t, kThreads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  const acc_t block_sum = BlockReduce(scratch).Sum(sum);
  if (threadIdx.x == 0) partial_sums[channel * gridDim.x + blockIdx.x] = block_sum;
}

template <typename scalar_t>
Scalars<at::opmath_type<scalar_t>> scalars(const BiasActParams& params) {
  using acc_t = at::opmath_type<scalar_t>;
  return {acc_t(params.alpha), acc_t(params.gain), acc_t(params.clamp.value_or(0.0)), params.clamp.has_value()};
}

constexpr int64_t kMaxGridX = 2147483647, kMaxGridY = 65535;

// One block per kThreads * kUnroll vectors, not a grid capped at a few blocks per SM: the loops
// then run once, and the hardware spreads the blocks evenly. With the cap, fp16 at 64 Mi elements
// ran 5-8 loop steps per block and the uneven last step left the kernels at 84-88% of the copy
// bandwidth. (The loops still stride, for grids past the limit.)
inline int64_t blocks_for(int64_t vectors) {
  return std::min(std::max<int64_t>(1, ceil_div<int64_t>(vectors, int64_t{kThreads} * kUnroll)), kMaxGridX);
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
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* b_p = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* g_p = grad.defined() ? grad.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    constexpr int kMaxVec = max_vec_size<scalar_t>();
    const bool vectorized =
        n % kMaxVec == 0 && is_aligned(x_p) && is_aligned(out_p) && (g_p == nullptr || is_aligned(g_p));
    dispatch_bias_act(params.act, derivative, [&](auto act, auto order) {
      constexpr Activation kAct = decltype(act)::value;
      constexpr int kOrder = decltype(order)::value;
      const auto launch = [&](auto vec) {
        constexpr int kVec = decltype(vec)::value;
        const int64_t blocks = blocks_for(n / kVec);
        bias_act_kernel<kAct, kOrder, kVec, scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            x_p, b_p, g_p, out_p, layout, scalars<scalar_t>(params));
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

at::Tensor bias_act_backward_cuda(const at::Tensor& x, const at::Tensor& b, const at::Tensor& grad,
                                  const BiasActParams& params, at::Tensor& grad_x) {
  JITOPS_CHECK_CUDA(x);
  const int64_t n = x.numel(), channels = x.size(params.dim), inner = x.stride(params.dim);
  at::Tensor grad_b;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_act_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr int kVec = max_vec_size<scalar_t>();
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* g_p = grad.const_data_ptr<scalar_t>();
    scalar_t* out_p = grad_x.mutable_data_ptr<scalar_t>();
    // Runs of at least a warp's worth of vectors keep the loads coalesced; anything else (such as
    // channels_last, inner == 1) takes the unfused path.
    const bool fusable = n > 0 && inner % kVec == 0 && inner / kVec >= 32 && channels <= kMaxGridY &&
                         is_aligned(x_p) && is_aligned(g_p) && is_aligned(out_p);
    if (!fusable) return;
    const ChannelRuns runs{n / (channels * inner), channels, inner / kVec,
                           n / (channels * kVec) < (int64_t{1} << 32)};
    const c10::cuda::CUDAGuard device_guard(x.device());
    const int64_t blocks_per_channel = blocks_for(runs.outer * runs.inner_vec);
    const dim3 grid(static_cast<unsigned>(blocks_per_channel), static_cast<unsigned>(channels));
    at::Tensor partial_sums = at::empty({channels, blocks_per_channel}, x.options().dtype(at::toOpMathType(x.scalar_type())));
    dispatch_bias_act(params.act, 1, [&](auto act, auto) {
      bias_act_backward_kernel<decltype(act)::value, kVec, scalar_t>
          <<<grid, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
              x_p, b.const_data_ptr<scalar_t>(), g_p, out_p, partial_sums.mutable_data_ptr<acc_t>(), runs,
              scalars<scalar_t>(params));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    grad_b = partial_sums.sum(1).to(x.scalar_type());
  });
  return grad_b;
}

}  // namespace jitops
