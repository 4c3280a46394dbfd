// SPDX-License-Identifier: MIT
// Planes in parallel. The column taps are the same for every row and plane, so they are computed
// once per call; the row taps once per row.
#include "../upfirdn2d.h"

#include <torch/csrc/stable/ops.h>  // parallel_for: torch's own thread pool

#include <algorithm>
#include <vector>

namespace jitops {

// acc_t is T: the CPU kernels take float and double only.
template <typename T>
void upfirdn2d_cpu(const T* x, const T* f, T* out, const Upfirdn2dSizes& sizes, const Upfirdn2dParams& p) {
  const int64_t in_h = sizes.in_h, in_w = sizes.in_w, out_h = sizes.out_h, out_w = sizes.out_w;
  if (sizes.planes * out_h * out_w == 0) return;
  std::vector<AxisTaps<int64_t>> columns(out_w);
  for (int64_t ox = 0; ox < out_w; ++ox) {
    columns[ox] = axis_taps(ox, p.upx, p.downx, p.padx0, sizes.fw, in_w, p.flip_filter);
  }
  const T gain(p.gain);
  const int64_t plane_grain = std::max<int64_t>(1, kGrainSize / (out_h * out_w));
  torch::stable::parallel_for(0, sizes.planes, plane_grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* in = x + plane * in_h * in_w;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        const AxisTaps<int64_t> row = axis_taps(oy, p.upy, p.downy, p.pady0, sizes.fh, in_h, p.flip_filter);
        T* o = out + (plane * out_h + oy) * out_w;
        for (int64_t ox = 0; ox < out_w; ++ox) {
          o[ox] = gain * upfirdn2d_pixel<T>(in, in_w, f, sizes.fw, row, columns[ox], [](T v) { return v; });
        }
      }
    }
  });
}

template void upfirdn2d_cpu<float>(const float*, const float*, float*, const Upfirdn2dSizes&, const Upfirdn2dParams&);
template void upfirdn2d_cpu<double>(const double*, const double*, double*, const Upfirdn2dSizes&,
                                    const Upfirdn2dParams&);

}  // namespace jitops
