// SPDX-License-Identifier: MIT
// Planes in parallel. The column taps are the same for every row and plane, so they are computed
// once per call; the row taps once per row.
#include "../upfirdn2d.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "../aten_checks.h"

namespace jitops {

void upfirdn2d_cpu(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& p, at::Tensor& out) {
  CHECK_INPUT_CPU(x);
  CHECK_INPUT_CPU(f);
  CHECK_INPUT_CPU(out);
  const int64_t planes = x.size(0) * x.size(1), in_h = x.size(2), in_w = x.size(3);
  const int64_t out_h = out.size(2), out_w = out.size(3), fh = f.size(0), fw = f.size(1);
  if (out.numel() == 0) return;
  std::vector<AxisTaps<int64_t>> columns(out_w);
  for (int64_t ox = 0; ox < out_w; ++ox) columns[ox] = axis_taps(ox, p.upx, p.downx, p.padx0, fw, in_w, p.flip_filter);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "upfirdn2d_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* f_p = f.const_data_ptr<scalar_t>();
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    const acc_t gain(p.gain);
    const int64_t plane_grain = std::max<int64_t>(1, kGrainSize / (out_h * out_w));
    at::parallel_for(0, planes, plane_grain, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const scalar_t* in = x_p + plane * in_h * in_w;
        for (int64_t oy = 0; oy < out_h; ++oy) {
          const AxisTaps<int64_t> row = axis_taps(oy, p.upy, p.downy, p.pady0, fh, in_h, p.flip_filter);
          scalar_t* o = out_p + (plane * out_h + oy) * out_w;
          for (int64_t ox = 0; ox < out_w; ++ox) {
            o[ox] = static_cast<scalar_t>(
                gain * upfirdn2d_pixel<acc_t>(in, in_w, f_p, fw, row, columns[ox], [](scalar_t v) { return acc_t(v); }));
          }
        }
      }
    });
  });
}

}  // namespace jitops
