// SPDX-License-Identifier: MIT
// One thread per output pixel, consecutive threads on consecutive output columns: the reads of
// neighbouring threads overlap, and L1 serves them.
#include "../upfirdn2d.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;

struct Shape {
  int64_t planes, in_h, in_w, out_h, out_w, fh, fw;
};

template <typename scalar_t>
__global__ void upfirdn2d_kernel(const scalar_t* __restrict x, const scalar_t* __restrict f,
                                 scalar_t* __restrict out, Shape s, Upfirdn2dParams params) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t n = s.planes * s.out_h * s.out_w;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const acc_t gain(params.gain);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t ox = i % s.out_w;
    const int64_t oy = (i / s.out_w) % s.out_h;
    const int64_t plane = i / (s.out_w * s.out_h);
    const scalar_t* in = x + plane * s.in_h * s.in_w;
    out[i] = static_cast<scalar_t>(gain * upfirdn2d_pixel<acc_t>(in, s.in_h, s.in_w, f, s.fh, s.fw, params, oy, ox));
  }
}

}  // namespace

void upfirdn2d_cuda(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& params, at::Tensor& out) {
  CHECK_INPUT_CUDA(x);
  CHECK_INPUT_CUDA(f);
  CHECK_INPUT_CUDA(out);
  const Shape s{x.size(0) * x.size(1), x.size(2), x.size(3), out.size(2), out.size(3), f.size(0), f.size(1)};
  const int64_t n = out.numel();
  if (n == 0) return;
  const c10::cuda::CUDAGuard device_guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int blocks = grid_size(n, kThreads, x.device().index());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "upfirdn2d_cuda", [&] {
    upfirdn2d_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        x.const_data_ptr<scalar_t>(), f.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), s, params);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace jitops
