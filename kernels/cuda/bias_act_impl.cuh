// SPDX-License-Identifier: MIT
// Elementwise over x's memory (dense, any layout), kVec elements per 16-byte load where the
// pointers allow. Element i has channel (i / inner) % C, inner = x.stride(dim): one division per
// vector, then a cursor steps through the vector's elements (a 64-bit division per element cost
// a quarter of the bandwidth on an H100). The first-order backward with a bias has a second
// kernel that also sums grad_x per channel, so that the bias gradient costs no second pass.
//
// The vector kernels are compiled per activation, derivative order and dtype (float, half,
// bfloat16): 81 of them, plus 27 fused backwards (one per activation and dtype). Everything else
// (float64, and sizes or pointers not aligned to a whole vector) takes one kernel per order and
// dtype that picks the activation at run time, compiled once instead of nine times: on a 16-core
// H100 machine the previous layout (a vector and a scalar kernel per activation for all four
// dtypes) built far slower. The kernels are instantiated by 8 units that compile in parallel
// (bias_act_0.cu to bias_act_7.cu), (activation, dtype) pairs dealt to them by compile time
// (docs/history/BENCHMARKS-history.md, issue 11's seventh pass); unit 0 also holds the fused
// backward's block count, unit 7 the run-time-switch kernels. JITOPS_BIAS_ACT_CUDA(act, T) instantiates one pair.
#pragma once
#include <algorithm>

#include "../bias_act.h"
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
  const acc_t g = kDerivative > 0 ? to_acc(grad) : acc_t(0);
  return from_acc<scalar_t>(
      bias_act_element<kAct, kDerivative, acc_t>(to_acc(x), b, g, s.alpha, s.gain, s.clamp, s.clamped));
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
    const acc_t b = to_acc(bias[cursor.channel]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) result.v[e] = bias_act_one<kAct, kDerivative>(xv.v[e], b, gv.v[e], s);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      result.v[e] = bias_act_one<kAct, kDerivative>(xv.v[e], to_acc(bias[cursor.channel]), gv.v[e], s);
      cursor.advance(layout);
    }
  }
  return result;
}

// Each block step covers kUnroll * blockDim.x vectors: a thread issues all its loads before it
// computes, so that enough bytes are in flight to reach the copy bandwidth (one load at a time
// did not: docs/history/BENCHMARKS-history.md).
template <Activation kAct, int kDerivative, int kVec, typename scalar_t>
__global__ void bias_act_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                const scalar_t* __restrict grad, scalar_t* __restrict out, Layout layout,
                                Scalars<acc_type<scalar_t>> s) {
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
      if (v < n_vec)
        reinterpret_cast<V*>(out)[v] = bias_act_vector<kAct, kDerivative>(xv[u], gv[u], bias, v * kVec, layout, s);
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

// The sum of v over the block, valid in thread 0: warp shuffles, then the first warp over the
// warps' sums. (cub::BlockReduce does the same, but its headers cost each unit of this file two
// seconds of compile time.)
template <typename acc_t>
__device__ acc_t block_sum(acc_t v) {
  static_assert(kThreads % 32 == 0 && kThreads / 32 <= 32, "one warp sums the warps' sums");
  __shared__ acc_t warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : acc_t(0);
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

template <Activation kAct, int kVec, typename scalar_t>
__global__ void bias_act_backward_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                         const scalar_t* __restrict grad, scalar_t* __restrict grad_x,
                                         acc_type<scalar_t>* __restrict partial_sums, ChannelRuns runs,
                                         Scalars<acc_type<scalar_t>> s) {
  using acc_t = acc_type<scalar_t>;
  using V = Vec<scalar_t, kVec>;
  const int64_t channel = blockIdx.y;
  const acc_t b = to_acc(bias[channel]);
  const int64_t per_channel = runs.outer * runs.inner_vec;
  // Vector j of this channel, as a vector index into x.
  const auto vector_index = [&](int64_t j) {
    const int64_t run =
        runs.fits_32_bits ? static_cast<uint32_t>(j) / static_cast<uint32_t>(runs.inner_vec) : j / runs.inner_vec;
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
        sum += to_acc(result.v[e]);  // the stored values, as grad_x.sum() would see them
      }
      reinterpret_cast<V*>(grad_x)[index[u]] = result;
    }
  }
  const acc_t total = block_sum(sum);
  if (threadIdx.x == 0) partial_sums[channel * gridDim.x + blockIdx.x] = total;
}

// The fallback: one element per thread per step, the activation a kernel argument.
template <int kDerivative, typename scalar_t>
__global__ void bias_act_any_kernel(const scalar_t* __restrict x, const scalar_t* __restrict bias,
                                    const scalar_t* __restrict grad, scalar_t* __restrict out, Layout layout,
                                    Scalars<acc_type<scalar_t>> s, Activation act) {
  using acc_t = acc_type<scalar_t>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < layout.n; i += step) {
    const acc_t b = bias == nullptr ? acc_t(0) : to_acc(bias[ChannelCursor(i, layout).channel]);
    const scalar_t g = kDerivative > 0 ? grad[i] : scalar_t();
    out[i] = dispatch_activation(
        act, [&](auto kAct) { return bias_act_one<decltype(kAct)::value, kDerivative>(x[i], b, g, s); });
  }
}

template <typename scalar_t>
Scalars<acc_type<scalar_t>> scalars(const BiasActParams& params) {
  using acc_t = acc_type<scalar_t>;
  return {acc_t(params.alpha), acc_t(params.gain), acc_t(params.clamp), params.clamped};
}

constexpr int64_t kMaxGridX = 2147483647, kMaxGridY = 65535;

// One block per kThreads * kUnroll vectors, not a grid capped at a few blocks per SM: the loops
// then run once, and the hardware spreads the blocks evenly. With the cap, large tensors ran
// several loop steps per block and the uneven last step cost bandwidth. (The loops still stride,
// for grids past the limit.)
inline int64_t blocks_for(int64_t vectors) {
  return std::min(std::max<int64_t>(1, ceil_div<int64_t>(vectors, int64_t{kThreads} * kUnroll)), kMaxGridX);
}

}  // namespace

// bias_act_cuda for what has no vector kernel, any activation: defined in one unit, used by all.
template <typename T>
void bias_act_any_cuda(const T* x_t, const T* b_t, const T* grad_t, T* out_t, const BiasActShape& shape,
                       const BiasActParams& params, int derivative, Activation act, CudaStream stream);

template <Activation kAct, typename T>
void bias_act_cuda(const T* x_t, const T* b_t, const T* grad_t, T* out_t, const BiasActShape& shape,
                   const BiasActParams& params, int derivative, CudaStream stream) {
  using scalar_t = CudaType<T>;
  const int64_t n = shape.n;
  if (n == 0) return;
  const scalar_t* x = cuda_ptr(x_t);
  const scalar_t* b = cuda_ptr(b_t);
  const scalar_t* grad = cuda_ptr(grad_t);
  scalar_t* out = cuda_ptr(out_t);
  constexpr int kMaxVec = max_vec_size<scalar_t>();
  const bool vectorized = !std::is_same_v<T, double> && n % kMaxVec == 0 && is_aligned(x) && is_aligned(out) &&
                          (grad == nullptr || is_aligned(grad));
  if (!vectorized) return bias_act_any_cuda(x_t, b_t, grad_t, out_t, shape, params, derivative, kAct, stream);
  if constexpr (!std::is_same_v<T, double>) {
    const Layout layout{n, shape.inner, shape.channels, n < (int64_t{1} << 32)};
    const int64_t blocks = blocks_for(n / kMaxVec);
    dispatch_derivative(derivative, [&](auto order) {
      bias_act_kernel<kAct, decltype(order)::value, kMaxVec, scalar_t>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, b, grad, out, layout, scalars<scalar_t>(params));
      JITOPS_CHECK_LAUNCH();
    });
  }
}

template <Activation kAct, typename T>
void bias_act_fused_backward_cuda(const T* x_t, const T* b_t, const T* grad_t, T* grad_x_t, BiasSum<T>* partial_sums,
                                  int64_t blocks, const BiasActShape& shape, const BiasActParams& params,
                                  CudaStream stream) {
  using scalar_t = CudaType<T>;
  static_assert(std::is_same_v<acc_type<scalar_t>, BiasSum<T>>, "partial sums are in the kernels' acc type");
  if constexpr (!std::is_same_v<T, double>) {  // float64 has no fused kernel (0 blocks above)
    constexpr int kVec = max_vec_size<scalar_t>();
    const int64_t n = shape.n, channels = shape.channels, inner = shape.inner;
    const ChannelRuns runs{n / (channels * inner), channels, inner / kVec, n / (channels * kVec) < (int64_t{1} << 32)};
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(channels));
    bias_act_backward_kernel<kAct, kVec, scalar_t>
        <<<grid, kThreads, 0, stream>>>(cuda_ptr(x_t), cuda_ptr(b_t), cuda_ptr(grad_t), cuda_ptr(grad_x_t),
                                        partial_sums, runs, scalars<scalar_t>(params));
    JITOPS_CHECK_LAUNCH();
  }
}

#define JITOPS_BIAS_ACT_CUDA(act, T)                                                                     \
  template void bias_act_cuda<Activation::act, T>(const T*, const T*, const T*, T*, const BiasActShape&, \
                                                  const BiasActParams&, int, CudaStream);                \
  template void bias_act_fused_backward_cuda<Activation::act, T>(                                        \
      const T*, const T*, const T*, T*, BiasSum<T>*, int64_t, const BiasActShape&, const BiasActParams&, CudaStream);
// float64 has no vector kernel of its own (bias_act_cuda sends it to the run-time switch), so it
// rides with float32 and float16.
#define JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(act) \
  JITOPS_BIAS_ACT_CUDA(act, float) JITOPS_BIAS_ACT_CUDA(act, double) JITOPS_BIAS_ACT_CUDA(act, Half)

}  // namespace jitops
