// SPDX-License-Identifier: MIT
// One thread per state element [b, s]: consecutive threads take consecutive s, so every read of a
// gate block and every write is coalesced.
#include "../lltm.h"

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

template <typename scalar_t>
__global__ void lltm_cell_kernel(const scalar_t* __restrict__ gates, const scalar_t* __restrict__ old_cell,
                                 scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell, int64_t batch,
                                 int64_t state) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = batch * state;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / state, s = i - b * state;
    const scalar_t* row = gates + b * 3 * state;
    const LltmGates<acc_t> g(to_acc(row[s]), to_acc(row[state + s]), to_acc(row[2 * state + s]));
    const acc_t cell = g.new_cell(to_acc(old_cell[i]));
    new_cell[i] = from_acc<scalar_t>(cell);
    new_h[i] = from_acc<scalar_t>(fast::tanh(cell) * g.output);
  }
}

template <typename scalar_t>
__global__ void lltm_cell_backward_kernel(const scalar_t* __restrict__ grad_h, const scalar_t* __restrict__ grad_cell,
                                          const scalar_t* __restrict__ new_cell, const scalar_t* __restrict__ gates,
                                          scalar_t* __restrict__ grad_gates, scalar_t* __restrict__ grad_old_cell,
                                          int64_t batch, int64_t state) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = batch * state;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / state, s = i - b * state;
    const scalar_t* row = gates + b * 3 * state;
    scalar_t* grad_row = grad_gates + b * 3 * state;
    const LltmGates<acc_t> g(to_acc(row[s]), to_acc(row[state + s]), to_acc(row[2 * state + s]));
    acc_t grad_pre[3];
    grad_old_cell[i] =
        from_acc<scalar_t>(g.backward(to_acc(grad_h[i]), to_acc(grad_cell[i]), to_acc(new_cell[i]), grad_pre));
#pragma unroll
    for (int k = 0; k < 3; ++k) grad_row[k * state + s] = from_acc<scalar_t>(grad_pre[k]);
  }
}

}  // namespace

template <typename T>
void lltm_cell_cuda(const T* gates, const T* old_cell, T* new_h, T* new_cell, int64_t batch, int64_t state,
                    CudaStream stream) {
  if (batch * state == 0) return;
  lltm_cell_kernel<<<grid_size(batch * state, kThreads), kThreads, 0, stream>>>(
      cuda_ptr(gates), cuda_ptr(old_cell), cuda_ptr(new_h), cuda_ptr(new_cell), batch, state);
  JITOPS_CHECK_LAUNCH();
}

template <typename T>
void lltm_cell_backward_cuda(const T* grad_h, const T* grad_cell, const T* new_cell, const T* gates, T* grad_gates,
                             T* grad_old_cell, int64_t batch, int64_t state, CudaStream stream) {
  if (batch * state == 0) return;
  lltm_cell_backward_kernel<<<grid_size(batch * state, kThreads), kThreads, 0, stream>>>(
      cuda_ptr(grad_h), cuda_ptr(grad_cell), cuda_ptr(new_cell), cuda_ptr(gates), cuda_ptr(grad_gates),
      cuda_ptr(grad_old_cell), batch, state);
  JITOPS_CHECK_LAUNCH();
}

#define JITOPS_INSTANTIATE(T)                                                                                \
  template void lltm_cell_cuda<T>(const T*, const T*, T*, T*, int64_t, int64_t, CudaStream);                 \
  template void lltm_cell_backward_cuda<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t, \
                                           CudaStream);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
