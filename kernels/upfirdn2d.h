// SPDX-License-Identifier: MIT
// upfirdn2d: StyleGAN2's upsample (zero insertion), pad or crop, 2-D FIR filter, downsample. One
// output pixel is one dot product of the filter with the input samples under it; that gather is
// written once here for the CPU and the CUDA kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>

#include <cstdint>

namespace jitops {

struct Upfirdn2dParams {
  int64_t upx, upy, downx, downy;
  int64_t padx0, pady0;  // the leading pads; negative crops
  bool flip_filter;      // false: convolve (flip f, as StyleGAN2 does); true: correlate
  double gain;
};

// x: [N, C, H, W], f: [fh, fw] (same dtype), out: [N, C, out_h, out_w]; all contiguous.
void upfirdn2d_cpu(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& params, at::Tensor& out);
void upfirdn2d_cuda(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& params, at::Tensor& out);

// The first tap k >= 0 for which start + k is a multiple of up: the first real (not inserted
// zero) sample under the filter.
C10_HOST_DEVICE inline int64_t first_sample_tap(int64_t start, int64_t up) { return ((-start) % up + up) % up; }

// out[oy, ox] of one [in_h, in_w] plane, before the gain. Row u of the upsampled, padded image is
// oy * downy - pady0 + ky; it holds input row u / upy when u is a multiple of upy, else zero.
template <typename acc_t, typename scalar_t>
C10_HOST_DEVICE inline acc_t upfirdn2d_pixel(const scalar_t* plane, int64_t in_h, int64_t in_w, const scalar_t* f,
                                             int64_t fh, int64_t fw, const Upfirdn2dParams& p, int64_t oy,
                                             int64_t ox) {
  const int64_t u0 = oy * p.downy - p.pady0, v0 = ox * p.downx - p.padx0;
  const int64_t kx0 = first_sample_tap(v0, p.upx);
  acc_t sum = 0;
  for (int64_t ky = first_sample_tap(u0, p.upy); ky < fh; ky += p.upy) {
    const int64_t iy = (u0 + ky) / p.upy;  // exact: u0 + ky is a multiple of upy
    if (u0 + ky < 0) continue;
    if (iy >= in_h) break;
    const scalar_t* f_row = f + (p.flip_filter ? ky : fh - 1 - ky) * fw;
    for (int64_t kx = kx0; kx < fw; kx += p.upx) {
      const int64_t ix = (v0 + kx) / p.upx;
      if (v0 + kx < 0) continue;
      if (ix >= in_w) break;
      sum += static_cast<acc_t>(plane[iy * in_w + ix]) * static_cast<acc_t>(f_row[p.flip_filter ? kx : fw - 1 - kx]);
    }
  }
  return sum;
}

}  // namespace jitops
