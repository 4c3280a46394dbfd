// SPDX-License-Identifier: MIT
// One thread per output column of a run of rows: the column taps are computed once and reused
// down the rows, and a warp covers consecutive columns of one row, so its stores are coalesced
// and its overlapping reads are served by L1. Index arithmetic within a plane is 32-bit where
// the sizes allow (a 64-bit division per pixel costs more than the pixel's loads).
#include "../upfirdn2d.h"

#include <algorithm>
#include <cstdlib>

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
  using acc_t = acc_type<scalar_t>;
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
      o[oy * s.out_w] = from_acc<scalar_t>(
          gain * upfirdn2d_pixel<acc_t>(in, s.in_w, f, s.fw, row, col, [](scalar_t v) { return to_acc(v); }));
    }
  }
}

template <typename scalar_t, typename index_t>
void launch(const scalar_t* x, const scalar_t* f, scalar_t* out, const Upfirdn2dSizes& z, const Upfirdn2dParams& p,
            CudaStream stream) {
  const Shape<index_t> s{z.planes,
                         static_cast<index_t>(z.in_h),
                         static_cast<index_t>(z.in_w),
                         static_cast<index_t>(z.out_h),
                         static_cast<index_t>(z.out_w),
                         static_cast<index_t>(z.fh),
                         static_cast<index_t>(z.fw)};
  // Narrow images get narrower, taller blocks, so that few threads idle past the last column.
  int threads_x = 1;
  while (threads_x < 32 && threads_x < z.out_w) threads_x *= 2;
  const dim3 block(threads_x, kThreads / threads_x);
  const dim3 grid(ceil_div<int64_t>(z.out_w, threads_x),
                  std::min(ceil_div<int64_t>(z.out_h, block.y * kRowsPerThread), kMaxGridYZ),
                  std::min(z.planes, kMaxGridYZ));
  upfirdn2d_kernel<scalar_t, index_t><<<grid, block, 0, stream>>>(x, f, out, s, p);
  JITOPS_CHECK_LAUNCH();
}

// Whether every position a plane's index arithmetic reaches fits in 32 bits.
bool fits_32_bits(const Upfirdn2dSizes& z, const Upfirdn2dParams& p) {
  const int64_t largest = std::max({z.in_h * z.in_w, z.out_h * z.out_w, z.in_h * p.upy + std::abs(p.pady0) + z.fh,
                                    z.in_w * p.upx + std::abs(p.padx0) + z.fw, z.out_h * p.downy + std::abs(p.pady0),
                                    z.out_w * p.downx + std::abs(p.padx0)});
  return largest < (int64_t{1} << 31);
}

}  // namespace

template <typename T>
void upfirdn2d_cuda(const T* x, const T* f, T* out, const Upfirdn2dSizes& sizes, const Upfirdn2dParams& params,
                    CudaStream stream) {
  if (sizes.planes * sizes.out_h * sizes.out_w == 0) return;
  if (fits_32_bits(sizes, params)) {
    launch<CudaType<T>, int32_t>(cuda_ptr(x), cuda_ptr(f), cuda_ptr(out), sizes, params, stream);
  } else {
    launch<CudaType<T>, int64_t>(cuda_ptr(x), cuda_ptr(f), cuda_ptr(out), sizes, params, stream);
  }
}

#define JITOPS_INSTANTIATE(T)                                                                             \
  template void upfirdn2d_cuda<T>(const T*, const T*, T*, const Upfirdn2dSizes&, const Upfirdn2dParams&, \
                                  CudaStream);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
