// SPDX-License-Identifier: MIT
// One point per call of the row functions: channels innermost, every corner a contiguous stream,
// __restrict pointers and weights in locals, so the loops over F vectorize (check with
// -fopt-info-vec).
#include "../trilinear_interpolation.h"

#include <torch/csrc/stable/ops.h>  // parallel_for: torch's own thread pool

#include <algorithm>

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

// Points per parallel_for chunk: about kGrainSize feature values each.
int64_t points_per_chunk(int64_t num_features) {
  return std::max<int64_t>(1, kGrainSize / (8 * std::max<int64_t>(num_features, 1)));
}

}  // namespace

// acc_t is T: the CPU kernels take float and double only.
template <typename T>
void trilinear_interpolation_cpu(const T* feats, const T* points, T* out, int64_t n, int64_t f) {
  if (n == 0 || f == 0) return;
  torch::stable::parallel_for(0, n, points_per_chunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const TrilinearCell<T> cell(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
      interpolate_row(cell, feats + i * 8 * f, out + i * f, f);
    }
  });
}

template <typename T>
void trilinear_interpolation_backward_cpu(const T* grad_out, const T* feats, const T* points, T* grad_feats,
                                          T* grad_points, int64_t n, int64_t f) {
  if (n == 0) return;
  torch::stable::parallel_for(0, n, points_per_chunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const TrilinearCell<T> cell(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
      scatter_grad_row(cell, grad_out + i * f, grad_feats + i * 8 * f, f);
      if (grad_points == nullptr) continue;
      T grad_uvw[3];
      uvw_grad_row(cell, feats + i * 8 * f, grad_out + i * f, f, grad_uvw);
      // u = (x + 1) / 2, so d/dx = d/du / 2.
      for (int axis = 0; axis < 3; ++axis) grad_points[3 * i + axis] = grad_uvw[axis] / 2;
    }
  });
}

#define JITOPS_INSTANTIATE(T)                                                             \
  template void trilinear_interpolation_cpu<T>(const T*, const T*, T*, int64_t, int64_t); \
  template void trilinear_interpolation_backward_cpu<T>(const T*, const T*, const T*, T*, T*, int64_t, int64_t);
JITOPS_INSTANTIATE(float)
JITOPS_INSTANTIATE(double)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
