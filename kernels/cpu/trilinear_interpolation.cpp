// SPDX-License-Identifier: MIT
// One point per call of the row functions: channels innermost, every corner a contiguous stream,
// __restrict pointers and weights in locals, so the loops over F vectorize (check with
// -fopt-info-vec).
#include "../trilinear_interpolation.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../aten_checks.h"

namespace jitops {
namespace {

// corners: [8, F] of one point, out: [F]
template <typename scalar_t, typename acc_t>
JITOPS_CPU_MULTIVERSION void interpolate_row(const TrilinearCell<acc_t>& cell, const scalar_t* __restrict corners,
                                             scalar_t* __restrict out, int64_t f) {
  acc_t weight[8];
  for (int k = 0; k < 8; ++k) weight[k] = cell.weight[k];
  for (int64_t c = 0; c < f; ++c) {
    acc_t sum = 0;
    for (int k = 0; k < 8; ++k) sum += weight[k] * static_cast<acc_t>(corners[k * f + c]);
    out[c] = static_cast<scalar_t>(sum);
  }
}

// grad_out: [F], grad_corners: [8, F] of one point
template <typename scalar_t, typename acc_t>
JITOPS_CPU_MULTIVERSION void scatter_grad_row(const TrilinearCell<acc_t>& cell, const scalar_t* __restrict grad_out,
                                              scalar_t* __restrict grad_corners, int64_t f) {
  for (int k = 0; k < 8; ++k) {
    const acc_t weight = cell.weight[k];
    scalar_t* __restrict row = grad_corners + k * f;
    for (int64_t c = 0; c < f; ++c) row[c] = static_cast<scalar_t>(weight * static_cast<acc_t>(grad_out[c]));
  }
}

// sum_c a[c] * b[c], in kLanes independent partial sums: a reduction the compiler can vectorize
// without -ffast-math, since no sum is reordered within a lane.
template <typename scalar_t, typename acc_t>
JITOPS_CPU_MULTIVERSION acc_t dot(const scalar_t* __restrict a, const scalar_t* __restrict b, int64_t n) {
  constexpr int kLanes = 16;
  acc_t partial[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int j = 0; j < kLanes; ++j) partial[j] += static_cast<acc_t>(a[c + j]) * static_cast<acc_t>(b[c + j]);
  }
  acc_t sum = 0;
  for (; c < n; ++c) sum += static_cast<acc_t>(a[c]) * static_cast<acc_t>(b[c]);
  for (int j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

// d(loss)/d(u, v, w) of one point; corners: [8, F], grad_out: [F]. Every derivative of
// interpolate() is linear in the corner values, so the channels are summed first: 8 dot products
// of grad_out with a corner's row, then one accumulate_uvw_grad on them.
template <typename scalar_t, typename acc_t>
void uvw_grad_row(const TrilinearCell<acc_t>& cell, const scalar_t* corners, const scalar_t* grad_out, int64_t f,
                  acc_t grad_uvw[3]) {
  acc_t dots[8];
  for (int k = 0; k < 8; ++k) dots[k] = dot<scalar_t, acc_t>(grad_out, corners + k * f, f);
  for (int axis = 0; axis < 3; ++axis) grad_uvw[axis] = 0;
  cell.accumulate_uvw_grad(dots, acc_t(1), grad_uvw);
}

// Points per at::parallel_for chunk: about kGrainSize feature values each.
int64_t points_per_chunk(int64_t num_features) {
  return std::max<int64_t>(1, kGrainSize / (8 * std::max<int64_t>(num_features, 1)));
}

}  // namespace

void trilinear_interpolation_cpu(const at::Tensor& feats, const at::Tensor& points, at::Tensor& out) {
  CHECK_INPUT_CPU(feats);
  CHECK_INPUT_CPU(points);
  CHECK_INPUT_CPU(out);
  const int64_t n = feats.size(0), f = feats.size(2);
  if (n == 0 || f == 0) return;
  AT_DISPATCH_FLOATING_TYPES(feats.scalar_type(), "trilinear_interpolation_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* feats_p = feats.const_data_ptr<scalar_t>();
    const scalar_t* points_p = points.const_data_ptr<scalar_t>();
    scalar_t* out_p = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, n, points_per_chunk(f), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const TrilinearCell<acc_t> cell(points_p[3 * i], points_p[3 * i + 1], points_p[3 * i + 2]);
        interpolate_row(cell, feats_p + i * 8 * f, out_p + i * f, f);
      }
    });
  });
}

void trilinear_interpolation_backward_cpu(const at::Tensor& grad_out, const at::Tensor& feats,
                                          const at::Tensor& points, at::Tensor& grad_feats, at::Tensor& grad_points) {
  CHECK_INPUT_CPU(grad_out);
  CHECK_INPUT_CPU(points);
  CHECK_INPUT_CPU(grad_feats);
  const bool with_points_grad = grad_points.defined();
  if (with_points_grad) {
    CHECK_INPUT_CPU(feats);
    CHECK_INPUT_CPU(grad_points);
  }
  const int64_t n = grad_out.size(0), f = grad_out.size(1);
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES(grad_out.scalar_type(), "trilinear_interpolation_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* grad_out_p = grad_out.const_data_ptr<scalar_t>();
    const scalar_t* feats_p = with_points_grad ? feats.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* points_p = points.const_data_ptr<scalar_t>();
    scalar_t* grad_feats_p = grad_feats.mutable_data_ptr<scalar_t>();
    scalar_t* grad_points_p = with_points_grad ? grad_points.mutable_data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, n, points_per_chunk(f), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const TrilinearCell<acc_t> cell(points_p[3 * i], points_p[3 * i + 1], points_p[3 * i + 2]);
        scatter_grad_row(cell, grad_out_p + i * f, grad_feats_p + i * 8 * f, f);
        if (!with_points_grad) continue;
        acc_t grad_uvw[3];
        uvw_grad_row(cell, feats_p + i * 8 * f, grad_out_p + i * f, f, grad_uvw);
        // u = (x + 1) / 2, so d/dx = d/du / 2.
        for (int axis = 0; axis < 3; ++axis) grad_points_p[3 * i + axis] = static_cast<scalar_t>(grad_uvw[axis] / 2);
      }
    });
  });
}

}  // namespace jitops
