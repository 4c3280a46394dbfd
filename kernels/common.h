// SPDX-License-Identifier: MIT
// What every kernel file shares. No torch header at all: kernel files take plain pointers, sizes
// and a stream, so that they compile in about a second (a file that includes ATen's Tensor costs
// several seconds under g++ and more under nvcc, on every cold build). The tensors, the checks and
// the dtype dispatch live in bindings/<op>.cpp.
#pragma once

#include <cstdint>

// On a CPU kernel's hot loop: GCC compiles it twice, for AVX2+FMA and for the baseline, and picks
// one at load time, so the .so stays portable while a modern CPU gets 8-wide float math. (ATen's
// own CPU kernels do the same with their CPU_CAPABILITY builds.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define JITOPS_CPU_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define JITOPS_CPU_MULTIVERSION
#endif

#ifdef __CUDACC__
#define JITOPS_HOST_DEVICE __host__ __device__
#else
#define JITOPS_HOST_DEVICE
#endif

// CUDA's own spelling of a stream, so that host-only files can pass one without CUDA's headers.
struct CUstream_st;

namespace jitops {

using CudaStream = CUstream_st*;

// Elements per parallel_for chunk: ATen's own value (at::internal::GRAIN_SIZE).
constexpr int64_t kGrainSize = 32768;

template <typename T>
constexpr JITOPS_HOST_DEVICE T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// float16 and bfloat16 as the bindings see them: 16 bits of storage. The CUDA files use them as
// CUDA's __half and __nv_bfloat16 (cuda_helpers.cuh: CudaType), which have the same layout.
struct alignas(2) Half {
  uint16_t bits;
};
struct alignas(2) BFloat16 {
  uint16_t bits;
};

}  // namespace jitops
