// SPDX-License-Identifier: MIT
// trilinear_interpolation: blend each point's 8 corner feature vectors by its position in the cell.
// The entry points take contiguous memory of one dtype and device as plain pointers (bindings/
// makes it so; T: float and double, and Half and BFloat16 on CUDA), so that the kernel files
// include no torch header. The per-point math lives here, once, for both backends.
#pragma once

#include "common.h"

namespace jitops {

// feats: [N, 8, F], points: [N, 3] in [-1, 1], out: [N, F]
template <typename T>
void trilinear_interpolation_cpu(const T* feats, const T* points, T* out, int64_t n, int64_t f);
template <typename T>
void trilinear_interpolation_cuda(const T* feats, const T* points, T* out, int64_t n, int64_t f, CudaStream stream);

// grad_out: [N, F] -> grad_feats: [N, 8, F] and, when grad_points is not null, grad_points: [N, 3].
// feats is read only for grad_points: without it (both null) the backward moves half the bytes.
template <typename T>
void trilinear_interpolation_backward_cpu(const T* grad_out, const T* feats, const T* points, T* grad_feats,
                                          T* grad_points, int64_t n, int64_t f);
template <typename T>
void trilinear_interpolation_backward_cuda(const T* grad_out, const T* feats, const T* points, T* grad_feats,
                                           T* grad_points, int64_t n, int64_t f, CudaStream stream);

// One point's position in its cell, u, v, w in [0, 1], and the weights of its 8 corners. Corner k
// = 4 * (u side) + 2 * (v side) + (w side), the order of feats[:, k] (jitops/ops/trilinear_interpolation.py).
template <typename acc_t>
struct TrilinearCell {
  acc_t u, v, w;
  acc_t bilinear[4];  // weights of the 4 corners on one u side: a, b, c, d of trilinear_interpolation_ref
  acc_t weight[8];

  JITOPS_HOST_DEVICE TrilinearCell(acc_t x, acc_t y, acc_t z)
      : u((x + acc_t(1)) / acc_t(2)), v((y + acc_t(1)) / acc_t(2)), w((z + acc_t(1)) / acc_t(2)) {
    bilinear[0] = (acc_t(1) - v) * (acc_t(1) - w);
    bilinear[1] = (acc_t(1) - v) * w;
    bilinear[2] = v * (acc_t(1) - w);
    bilinear[3] = acc_t(1) - bilinear[0] - bilinear[1] - bilinear[2];
    for (int k = 0; k < 4; ++k) {
      weight[k] = (acc_t(1) - u) * bilinear[k];
      weight[k + 4] = u * bilinear[k];
    }
  }

  // sum_k weight[k] * f[k]: the interpolated value of one feature channel.
  JITOPS_HOST_DEVICE acc_t interpolate(const acc_t f[8]) const {
    acc_t sum = 0;
    for (int k = 0; k < 8; ++k) sum += weight[k] * f[k];
    return sum;
  }

  // Adds g * d(interpolate(f)) / d(u, v, w) for one feature channel with output gradient g. The
  // caller applies the 1/2 of u = (x + 1) / 2 once, after summing over channels.
  JITOPS_HOST_DEVICE void accumulate_uvw_grad(const acc_t f[8], acc_t g, acc_t grad[3]) const {
    acc_t du = 0;
    for (int k = 0; k < 4; ++k) du += bilinear[k] * (f[k + 4] - f[k]);
    // Slopes of the bilinear blend along v and along w, on the low-u side (base 0) and high-u side.
    const acc_t dv_low = (acc_t(1) - w) * (f[2] - f[0]) + w * (f[3] - f[1]);
    const acc_t dv_high = (acc_t(1) - w) * (f[6] - f[4]) + w * (f[7] - f[5]);
    const acc_t dw_low = (acc_t(1) - v) * (f[1] - f[0]) + v * (f[3] - f[2]);
    const acc_t dw_high = (acc_t(1) - v) * (f[5] - f[4]) + v * (f[7] - f[6]);
    grad[0] += g * du;
    grad[1] += g * ((acc_t(1) - u) * dv_low + u * dv_high);
    grad[2] += g * ((acc_t(1) - u) * dw_low + u * dw_high);
  }
};

}  // namespace jitops
