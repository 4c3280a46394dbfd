// SPDX-License-Identifier: MIT
// Helpers shared by the CUDA kernels: vector loads and stores, alignment, grid sizing.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace jitops {

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

// Blocks that fill the device kBlocksPerSm times over.
inline int device_blocks(int device_index) {
  int sm_count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_index));
  return sm_count * kBlocksPerSm;
}

inline int grid_size(int64_t work_items, int threads_per_block, int device_index) {
  const int64_t needed = ceil_div<int64_t>(std::max<int64_t>(work_items, 1), threads_per_block);
  return static_cast<int>(std::min<int64_t>(needed, device_blocks(device_index)));
}

}  // namespace jitops
