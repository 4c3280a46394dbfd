// SPDX-License-Identifier: MIT
// One thread per state element [b, s]: consecutive threads take consecutive s, so every read of a
// gate block and every write is coalesced.
#include "../lltm.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <c10/cuda/CUDAException.h>

#include "../aten_checks.h"
#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

template <typename scalar_t>
__global__ void lltm_cell_kernel(const scalar_t* __restrict__ gates, const scalar_t* __restrict__ old_cell,
                                 scalar_t* __restrict__ new_h, scalar_t* __restrict__ new_cell, int64_t batch,
                                 int64_t state) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t n = batch * state;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / state, s = i - b * state;
    const scalar_t* row = gates + b * 3 * state;
    const LltmGates<acc_t> g(row[s], row[state + s], row[2 * state + s]);
    const acc_t cell = g.new_cell(old_cell[i]);
    new_cell[i] = static_cast<scalar_t>(cell);
    new_h[i] = static_cast<scalar_t>(fast::tanh(cell) * g.output);
  }
}

template <typename scalar_t>
__global__ void lltm_cell_backward_kernel(const scalar_t* __restrict__ grad_h, const scalar_t* __restrict__ grad_cell,
                                          const scalar_t* __restrict__ new_cell, const scalar_t* __restrict__ gates,
                                          scalar_t* __restrict__ grad_gates, scalar_t* __restrict__ grad_old_cell,
                                          int64_t batch, int64_t state) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t n = batch * state;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t b = i / state, s = i - b * state;
    const scalar_t* row = gates + b * 3 * state;
    scalar_t* grad_row = grad_gates + b * 3 * state;
    const LltmGates<acc_t> g(row[s], row[state + s], row[2 * state + s]);
    acc_t grad_pre[3];
    grad_old_cell[i] = static_cast<scalar_t>(g.backward(grad_h[i], grad_cell[i], new_cell[i], grad_pre));
#pragma unroll
    for (int k = 0; k < 3; ++k) grad_row[k * state + s] = static_cast<scalar_t>(grad_pre[k]);
  }
}

}  // namespace

void lltm_cell_cuda(const at::Tensor& gates, const at::Tensor& old_cell, at::Tensor& new_h, at::Tensor& new_cell) {
  CHECK_INPUT_CUDA(gates);
  CHECK_INPUT_CUDA(old_cell);
  CHECK_INPUT_CUDA(new_h);
  CHECK_INPUT_CUDA(new_cell);
  const int64_t batch = old_cell.size(0), state = old_cell.size(1);
  if (batch * state == 0) return;
  const c10::cuda::CUDAGuard device_guard(gates.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int blocks = grid_size(batch * state, kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_cell_cuda", [&] {
    lltm_cell_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        gates.const_data_ptr<scalar_t>(), old_cell.const_data_ptr<scalar_t>(), new_h.mutable_data_ptr<scalar_t>(),
        new_cell.mutable_data_ptr<scalar_t>(), batch, state);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void lltm_cell_backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                             const at::Tensor& gates, at::Tensor& grad_gates, at::Tensor& grad_old_cell) {
  CHECK_INPUT_CUDA(grad_h);
  CHECK_INPUT_CUDA(grad_cell);
  CHECK_INPUT_CUDA(new_cell);
  CHECK_INPUT_CUDA(gates);
  CHECK_INPUT_CUDA(grad_gates);
  CHECK_INPUT_CUDA(grad_old_cell);
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  if (batch * state == 0) return;
  const c10::cuda::CUDAGuard device_guard(gates.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int blocks = grid_size(batch * state, kThreads);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "lltm_cell_backward_cuda", [&] {
    lltm_cell_backward_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        grad_h.const_data_ptr<scalar_t>(), grad_cell.const_data_ptr<scalar_t>(), new_cell.const_data_ptr<scalar_t>(),
        gates.const_data_ptr<scalar_t>(), grad_gates.mutable_data_ptr<scalar_t>(),
        grad_old_cell.mutable_data_ptr<scalar_t>(), batch, state);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace jitops
