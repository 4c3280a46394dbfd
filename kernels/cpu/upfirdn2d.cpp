// SPDX-License-Identifier: MIT
#include "../upfirdn2d.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../common.h"

namespace jitops {

void upfirdn2d_cpu(const at::Tensor& x, const at::Tensor& f, const Upfirdn2dParams& params, at::Tensor& out) {
  CHECK_INPUT_CPU(x);
  CHECK_INPUT_CPU(f);
  CHECK_INPUT_CPU(out);
  const int64_t planes = x.size(0) * x.size(1), in_h = x.size(2), in_w = x.size(3);
  const int64_t out_h = out.size(2), out_w = out.size(3), fh = f.size(0), fw = f.size(1);
  if (out.numel() == 0) return;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "upfirdn2d_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* x_p = x.const_data_ptr<scalar_t>();
    const scalar_t* f_p = f.const_data_ptr<scalar_t>();
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    const acc_t gain(params.gain);
    const int64_t plane_grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(out_h * out_w, 1));
    at::parallel_for(0, planes, plane_grain, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const scalar_t* in = x_p + plane * in_h * in_w;
        scalar_t* o = out_p + plane * out_h * out_w;
        for (int64_t oy = 0; oy < out_h; ++oy) {
          for (int64_t ox = 0; ox < out_w; ++ox) {
            o[oy * out_w + ox] =
                static_cast<scalar_t>(gain * upfirdn2d_pixel<acc_t>(in, in_h, in_w, f_p, fh, fw, params, oy, ox));
          }
        }
      }
    });
  });
}

}  // namespace jitops
