// SPDX-License-Identifier: MIT
// The CUDA side of the bindings that use ATen (torch/library.h): their kernel files take plain
// pointers, a size and a stream and include no torch header (kernels/common.h says why), so the
// device guard, the current stream and the dtype dispatch happen here. bindings/stable.h does the
// same for the bindings on torch's stable API.
#pragma once

#ifdef WITH_CUDA
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "../kernels/common.h"

namespace jitops {

// Calls fn(T{}, stream) on x's device and its current stream, T the kernel files' type for x's
// dtype: float, double, Half or BFloat16 (the bindings have checked it is one of them).
template <typename Fn>
void launch_cuda(const at::Tensor& x, Fn&& fn) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const CudaStream stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  switch (x.scalar_type()) {
    case at::kFloat: return fn(float{}, stream);
    case at::kDouble: return fn(double{}, stream);
    case at::kHalf: return fn(Half{}, stream);
    case at::kBFloat16: return fn(BFloat16{}, stream);
    default: TORCH_CHECK(false, "jitops: no CUDA kernel for dtype ", x.scalar_type());
  }
}

// A tensor's data as the kernel files' T (same size and layout as ATen's type for the dtype).
template <typename T>
const T* const_ptr(const at::Tensor& x) {
  return static_cast<const T*>(x.const_data_ptr());
}
template <typename T>
T* mutable_ptr(const at::Tensor& x) {
  return static_cast<T*>(x.mutable_data_ptr());
}

}  // namespace jitops
#endif
