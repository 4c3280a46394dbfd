// SPDX-License-Identifier: MIT
// Helpers shared by the CUDA kernels: the dtypes as CUDA types, vector loads and stores,
// alignment, grid sizing, and error checks. CUDA's own headers only (see common.h for why).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common.h"

namespace jitops {

// The CUDA type of a dtype as the bindings pass it (common.h).
template <typename T>
struct CudaTypeOf {
  using type = T;
};
template <>
struct CudaTypeOf<Half> {
  using type = __half;
};
template <>
struct CudaTypeOf<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using CudaType = typename CudaTypeOf<T>::type;

template <typename T>
inline CudaType<T>* cuda_ptr(T* p) {
  return reinterpret_cast<CudaType<T>*>(p);
}
template <typename T>
inline const CudaType<T>* cuda_ptr(const T* p) {
  return reinterpret_cast<const CudaType<T>*>(p);
}

// The type arithmetic runs in: float for the 16-bit types (as ATen's opmath_type), else T.
template <typename T>
struct AccTypeOf {
  using type = T;
};
template <>
struct AccTypeOf<__half> {
  using type = float;
};
template <>
struct AccTypeOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using acc_type = typename AccTypeOf<T>::type;

// Conversions to and from acc_type, by name: torch's load() compiles with
// __CUDA_NO_HALF_CONVERSIONS__ (and the bfloat16 one), which removes __half's conversion
// operators. Rounding is to nearest even, as torch's own casts.
template <typename T>
__device__ __forceinline__ acc_type<T> to_acc(T x) {
  return x;
}
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_acc(acc_type<T> x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_acc<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// MACRO(T) for each dtype the CUDA kernels take, as the types the bindings pass: for the explicit
// instantiations at the end of a kernel file.
#define JITOPS_FOR_EACH_CUDA_TYPE(MACRO) MACRO(float) MACRO(double) MACRO(Half) MACRO(BFloat16)

// A failed CUDA call becomes an exception; the bindings' boxed kernels turn it into a Python
// RuntimeError that names the call.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("jitops: ") + what + " failed: " + cudaGetErrorString(status));
  }
}

// After every launch: a bad configuration is reported at once, not by some later call.
#define JITOPS_CHECK_LAUNCH() ::jitops::check_cuda(cudaGetLastError(), "kernel launch in " __FILE__)

constexpr int kVecBytes = 16;  // one 128-bit load or store per thread and step

// kSize elements moved as one aligned load or store.
template <typename scalar_t, int kSize>
struct alignas(sizeof(scalar_t) * kSize) Vec {
  static constexpr int size = kSize;
  scalar_t v[kSize];
};

// Elements of scalar_t in one 16-byte vector.
template <typename scalar_t>
constexpr int max_vec_size() {
  return kVecBytes / sizeof(scalar_t);
}

inline bool is_aligned(const void* p, int bytes = kVecBytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Blocks for a grid-stride loop over work_items: enough to fill the device a few times over (so
// loads stay in flight), never more than the work needs.
constexpr int kBlocksPerSm = 8;

// Blocks that fill the current device kBlocksPerSm times over.
inline int device_blocks() {
  int device = 0, sm_count = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sm_count * kBlocksPerSm;
}

inline int grid_size(int64_t work_items, int threads_per_block) {
  const int64_t needed = ceil_div<int64_t>(std::max<int64_t>(work_items, 1), threads_per_block);
  return static_cast<int>(std::min<int64_t>(needed, device_blocks()));
}

}  // namespace jitops
