// SPDX-License-Identifier: MIT
// upfirdn2d: StyleGAN2's upsample (zero insertion), pad or crop, 2-D FIR filter, downsample. One
// output pixel is one dot product of the filter with the input samples under it; that gather is
// written once here for the CPU and the CUDA kernels. The entry points take plain pointers, so that
// the kernel files include no torch header.
#pragma once

#include <cstdint>

#include "common.h"

namespace jitops {

struct Upfirdn2dParams {
  int64_t upx, upy, downx, downy;
  int64_t padx0, pady0;  // the leading pads; negative crops
  bool flip_filter;      // false: convolve (flip f, as StyleGAN2 does); true: correlate
  double gain;
};

// x: [N, C, H, W], f: [fh, fw] (same dtype), out: [N, C, out_h, out_w]; all contiguous, on one
// device, as plain pointers (T: float and double, and Half and BFloat16 on CUDA).
struct Upfirdn2dSizes {
  int64_t planes, in_h, in_w, fh, fw, out_h, out_w;  // planes = N * C
};
template <typename T>
void upfirdn2d_cpu(const T* x, const T* f, T* out, const Upfirdn2dSizes& sizes, const Upfirdn2dParams& params);
// Which CUDA kernel computes it (kernels/cuda/upfirdn2d.cu): kAuto, the tiled one where it has one
// for the call, else the general one. Tests and benchmarks name one (torch.ops.jitops._upfirdn2d_kernel);
// kTiled where there is none is an error.
enum class Upfirdn2dKernel { kAuto, kGeneral, kTiled };
template <typename T>
void upfirdn2d_cuda(const T* x, const T* f, T* out, const Upfirdn2dSizes& sizes, const Upfirdn2dParams& params,
                    CudaStream stream, Upfirdn2dKernel kernel = Upfirdn2dKernel::kAuto);

// The first tap k >= 0 for which start + k is a multiple of up: the first real (not inserted
// zero) sample under the filter.
template <typename index_t>
JITOPS_HOST_DEVICE inline index_t first_sample_tap(index_t start, index_t up) {
  return ((-start) % up + up) % up;
}

// Along one axis, the input samples under the filter for one output position: `count` samples
// first_in, first_in + 1, ..., weighted by filter taps first_tap, first_tap + tap_step, ... (the
// taps that land on inserted zeros or on padding are left out). Rows and columns are independent,
// so a kernel computes each once and reuses it along the other axis.
template <typename index_t>
struct AxisTaps {
  index_t first_in, first_tap, tap_step, count;
};

// Output position o reads upsampled, padded positions o * down - pad0 + k for taps k < taps; that
// position holds input sample (o * down - pad0 + k) / up when it is a multiple of up, else zero.
template <typename index_t>
JITOPS_HOST_DEVICE inline AxisTaps<index_t> axis_taps(index_t o, index_t up, index_t down, index_t pad0, index_t taps,
                                                      index_t in_size, bool flip_filter) {
  const index_t start = o * down - pad0;
  const index_t k0 = first_sample_tap(start, up);
  const index_t i0 = (start + k0) / up;  // exact: start + k0 is a multiple of up
  const index_t all = k0 < taps ? (taps - 1 - k0) / up + 1 : 0;
  const index_t skip = i0 < 0 ? -i0 : 0;                        // samples in the leading padding
  const index_t end = all < in_size - i0 ? all : in_size - i0;  // stop at the trailing padding
  const index_t k = k0 + skip * up;
  // flip_filter false convolves (the filter reversed, as StyleGAN2 does); true correlates.
  return {i0 + skip, flip_filter ? k : taps - 1 - k, flip_filter ? up : -up, end > skip ? end - skip : 0};
}

// One output pixel of one plane (row stride in_w), before the gain; f is [fh, fw], row-major.
// to_acc converts a loaded scalar_t to acc_t (CUDA's 16-bit types have no implicit conversion).
template <typename acc_t, typename scalar_t, typename index_t, typename ToAcc>
JITOPS_HOST_DEVICE inline acc_t upfirdn2d_pixel(const scalar_t* plane, index_t in_w, const scalar_t* f, index_t fw,
                                                const AxisTaps<index_t>& row, const AxisTaps<index_t>& col,
                                                ToAcc to_acc) {
  acc_t sum = 0;
  for (index_t j = 0; j < row.count; ++j) {
    const scalar_t* in = plane + (row.first_in + j) * in_w + col.first_in;
    const scalar_t* taps = f + (row.first_tap + j * row.tap_step) * fw + col.first_tap;
    for (index_t i = 0; i < col.count; ++i) {
      sum += to_acc(in[i]) * to_acc(taps[i * col.tap_step]);
    }
  }
  return sum;
}

}  // namespace jitops
