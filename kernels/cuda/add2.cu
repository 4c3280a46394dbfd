// SPDX-License-Identifier: MIT
#include "../add2.h"
#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

template <typename scalar_t>
__device__ __forceinline__ scalar_t add(scalar_t x, scalar_t y) {
  // Half and bfloat16 add in float, as torch.add does.
  return from_acc<scalar_t>(to_acc(x) + to_acc(y));
}

// Every pointer is 16-byte aligned: the first n_vec * Vec::size elements move as 16-byte vectors,
// the remainder (< Vec::size elements) one by one.
template <typename scalar_t>
__global__ void add2_vectorized_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                       scalar_t* __restrict__ out, int64_t n) {
  using V = Vec<scalar_t, max_vec_size<scalar_t>()>;
  const int64_t n_vec = n / V::size;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V* va = reinterpret_cast<const V*>(a);
  const V* vb = reinterpret_cast<const V*>(b);
  V* vo = reinterpret_cast<V*>(out);
  for (int64_t i = first; i < n_vec; i += stride) {
    const V x = va[i];
    const V y = vb[i];
    V r;
#pragma unroll
    for (int k = 0; k < V::size; ++k) r.v[k] = add(x.v[k], y.v[k]);
    vo[i] = r;
  }
  for (int64_t i = n_vec * V::size + first; i < n; i += stride) out[i] = add(a[i], b[i]);
}

// Fallback for views whose storage offset breaks 16-byte alignment.
template <typename scalar_t>
__global__ void add2_scalar_kernel(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                                   scalar_t* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = add(a[i], b[i]);
  }
}

}  // namespace

template <typename T>
void add2_cuda(const T* a_t, const T* b_t, T* out_t, int64_t n, CudaStream stream) {
  if (n == 0) return;
  using scalar_t = CudaType<T>;
  const scalar_t* a = cuda_ptr(a_t);
  const scalar_t* b = cuda_ptr(b_t);
  scalar_t* out = cuda_ptr(out_t);
  const bool vectorized = is_aligned(a) && is_aligned(b) && is_aligned(out);
  const int64_t work_items = vectorized ? ceil_div<int64_t>(n, max_vec_size<scalar_t>()) : n;
  const int blocks = grid_size(work_items, kThreads);
  if (vectorized) {
    add2_vectorized_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(a, b, out, n);
  } else {
    add2_scalar_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(a, b, out, n);
  }
  JITOPS_CHECK_LAUNCH();
}

#define JITOPS_INSTANTIATE(T) template void add2_cuda<T>(const T*, const T*, T*, int64_t, CudaStream);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
