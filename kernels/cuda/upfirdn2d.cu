// SPDX-License-Identifier: MIT
// One thread per output column of a run of rows: the column taps are computed once and reused
// down the rows, and a warp covers consecutive columns of one row, so its stores are coalesced
// and its overlapping reads are served by L1. Index arithmetic within a plane is 32-bit where
// the sizes allow (a 64-bit division per pixel costs more than the pixel's loads).
#include "../upfirdn2d.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdlib>

#include <c10/cuda/CUDAException.h>

#include "../aten_checks.h"
#include "../cuda_helpers.cuh"

namespace jitops {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerThread = 4;  // enough work per thread to amortise its column taps
constexpr int64_t kMaxGridYZ = 65535;

template <typename index_t>
struct Shape {
  int64_t planes;
  index_t in_h, in_w, out_h, out_w, fh, fw;
};

template <typename scalar_t, typename index_t>
__global__ void upfirdn2d_kernel(const scalar_t* __restrict x, const scalar_t* __restrict f,
                                 scalar_t* __restrict out, Shape<index_t> s, Upfirdn2dParams p) {
  using acc_t = at::opmath_type<scalar_t>;
  const index_t ox = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ox >= s.out_w) return;
  const AxisTaps<index_t> col = axis_taps<index_t>(ox, p.upx, p.downx, p.padx0, s.fw, s.in_w, p.flip_filter);
  const acc_t gain(p.gain);
  const index_t row_stride = static_cast<index_t>(gridDim.y) * blockDim.y;
  for (int64_t plane = blockIdx.z; plane < s.planes; plane += gridDim.z) {
    const scalar_t* in = x + plane * s.in_h * s.in_w;
    scalar_t* o = out + plane * s.out_h * s.out_w + ox;
    for (index_t oy = static_cast<index_t>(blockIdx.y) * blockDim.y + threadIdx.y; oy < s.out_h; oy += row_stride) {
      const AxisTaps<index_t> row = axis_taps<index_t>(oy, p.upy, p.downy, p.pady0, s.fh, s.in_h, p.flip_filter);
      o[oy * s.out_w] = static_cast<scalar_t>(gain * upfirdn2d_pixel<acc_t>(in, s.in_w, f, s.fw, row, col));
    }
  }
}

template <typename scalar_t, typename index_t>
void launch(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& p, at::Tensor& out) {
  const Shape<index_t> s{x.size(0) * x.size(1),
                         static_cast<index_t>(x.size(2)),
                         static_cast<index_t>(x.size(3)),
                         static_cast<index_t>(out.size(2)),
                         static_cast<index_t>(out.size(3)),
                         static_cast<index_t>(f.size(0)),
                         static_cast<index_t>(f.size(1))};
  // Narrow images get narrower, taller blocks, so that few threads idle past the last column.
  int threads_x = 1;
  while (threads_x < 32 && threads_x < out.size(3)) threads_x *= 2;
  const dim3 block(threads_x, kThreads / threads_x);
  const dim3 grid(ceil_div<int64_t>(out.size(3), threads_x),
                  std::min(ceil_div<int64_t>(out.size(2), block.y * kRowsPerThread), kMaxGridYZ),
                  std::min(s.planes, kMaxGridYZ));
  upfirdn2d_kernel<scalar_t, index_t><<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.const_data_ptr<scalar_t>(), f.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), s, p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether every position a plane's index arithmetic reaches fits in 32 bits.
bool fits_32_bits(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& p, const at::Tensor& out) {
  const int64_t largest = std::max({x.size(2) * x.size(3), out.size(2) * out.size(3),
                                    x.size(2) * p.upy + std::abs(p.pady0) + f.size(0),
                                    x.size(3) * p.upx + std::abs(p.padx0) + f.size(1),
                                    out.size(2) * p.downy + std::abs(p.pady0), out.size(3) * p.downx + std::abs(p.padx0)});
  return largest < (int64_t{1} << 31);
}

}  // namespace

void upfirdn2d_cuda(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& params, at::Tensor& out) {
  CHECK_INPUT_CUDA(x);
  CHECK_INPUT_CUDA(f);
  CHECK_INPUT_CUDA(out);
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard device_guard(x.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "upfirdn2d_cuda", [&] {
    if (fits_32_bits(x, f, params, out)) {
      launch<scalar_t, int32_t>(x, f, params, out);
    } else {
      launch<scalar_t, int64_t>(x, f, params, out);
    }
  });
}

}  // namespace jitops
