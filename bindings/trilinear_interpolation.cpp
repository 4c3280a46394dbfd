// SPDX-License-Identifier: MIT
// torch.ops.jitops.trilinear_interpolation and its two private backward ops: schema, checks and
// per-backend registration.
#include <string>
#include <tuple>

#include "../kernels/trilinear_interpolation.h"
#include "stable.h"

namespace jitops {
namespace {

// jitops/ops/trilinear_interpolation.py repeats these checks for tracing; keep the two in step.
void check_points(const Tensor& points, int64_t n) {
  JITOPS_CHECK(points.dim() == 2 && points.size(0) == n && points.size(1) == 3,
               "points must have shape (N, 3) with N = ", std::to_string(n), " (feats.size(0)), got ",
               shape_str(points));
}

void check_inputs(const Tensor& feats, const Tensor& points) {
  JITOPS_CHECK(feats.dim() == 3 && feats.size(1) == 8,
               "feats must have shape (N, 8, F), 8 corner feature vectors per point, got ", shape_str(feats));
  check_points(points, feats.size(0));
  check_same_device_dtype(feats, "feats", points, "points");
  check_floating(feats, "feats");
}

// f < 0: any number of channels.
void check_grad_out(const Tensor& grad_out, const Tensor& points, int64_t f) {
  JITOPS_CHECK(grad_out.dim() == 2 && grad_out.size(0) == points.size(0) && (f < 0 || grad_out.size(1) == f),
               "grad_out must have shape (N, F) = (", std::to_string(points.size(0)), ", ",
               f < 0 ? std::string("F") : std::to_string(f), "), got ", shape_str(grad_out));
  check_same_device_dtype(grad_out, "grad_out", points, "points");
}

// The kernels take contiguous tensors (views are compacted by the callers, once, for every
// backend) as plain pointers; one function serves both backends, as in add2.
void interpolate(const Tensor& feats, const Tensor& points, const Tensor& out) {
  const int64_t n = feats.size(0), f = feats.size(2);
  launch_kernel(
      feats,
      [&](auto t) {
        using T = decltype(t);
        trilinear_interpolation_cpu<T>(const_ptr<T>(feats), const_ptr<T>(points), mutable_ptr<T>(out), n, f);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        trilinear_interpolation_cuda<T>(const_ptr<T>(feats), const_ptr<T>(points), mutable_ptr<T>(out), n, f, stream);
      });
}

// feats and grad_points null: the gradient for feats alone.
void scatter_gradient(const Tensor& grad_out, const Tensor* feats, const Tensor& points, const Tensor& grad_feats,
                      const Tensor* grad_points) {
  const int64_t n = grad_out.size(0), f = grad_out.size(1);
  launch_kernel(
      grad_out,
      [&](auto t) {
        using T = decltype(t);
        trilinear_interpolation_backward_cpu<T>(const_ptr<T>(grad_out), feats ? const_ptr<T>(*feats) : nullptr,
                                                const_ptr<T>(points), mutable_ptr<T>(grad_feats),
                                                grad_points ? mutable_ptr<T>(*grad_points) : nullptr, n, f);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        trilinear_interpolation_backward_cuda<T>(const_ptr<T>(grad_out), feats ? const_ptr<T>(*feats) : nullptr,
                                                 const_ptr<T>(points), mutable_ptr<T>(grad_feats),
                                                 grad_points ? mutable_ptr<T>(*grad_points) : nullptr, n, f, stream);
      });
}

Tensor forward(Tensor feats, Tensor points) {
  check_inputs(feats, points);
  const Tensor feats_c = as_contiguous(feats);
  Tensor out = empty_contiguous_like(feats, {feats.size(0), feats.size(2)});
  interpolate(feats_c, as_contiguous(points), out);
  return out;
}

std::tuple<Tensor, Tensor> backward(Tensor grad_out, Tensor feats, Tensor points) {
  check_inputs(feats, points);
  check_grad_out(grad_out, points, feats.size(2));
  const Tensor feats_c = as_contiguous(feats);
  Tensor grad_feats = empty_like_dense(feats_c);
  Tensor grad_points = empty_contiguous_like(points, {points.size(0), 3});
  scatter_gradient(as_contiguous(grad_out), &feats_c, as_contiguous(points), grad_feats, &grad_points);
  return {grad_feats, grad_points};
}

Tensor backward_feats(Tensor grad_out, Tensor points) {
  JITOPS_CHECK(points.dim() == 2 && points.size(1) == 3, "points must have shape (N, 3), got ", shape_str(points));
  check_grad_out(grad_out, points, -1);
  check_floating(points, "points");
  Tensor grad_feats = empty_contiguous_like(grad_out, {grad_out.size(0), 8, grad_out.size(1)});
  scatter_gradient(as_contiguous(grad_out), nullptr, as_contiguous(points), grad_feats, nullptr);
  return grad_feats;
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def("trilinear_interpolation(Tensor feats, Tensor points) -> Tensor");
  m.def("_trilinear_interpolation_backward(Tensor grad_out, Tensor feats, Tensor points) -> (Tensor, Tensor)");
  // When points needs no gradient, feats need not be read at all: half the bytes of the above.
  m.def("_trilinear_interpolation_backward_feats(Tensor grad_out, Tensor points) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("trilinear_interpolation", TORCH_BOX(&forward));
  m.impl("_trilinear_interpolation_backward", TORCH_BOX(&backward));
  m.impl("_trilinear_interpolation_backward_feats", TORCH_BOX(&backward_feats));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("trilinear_interpolation", TORCH_BOX(&forward));
  m.impl("_trilinear_interpolation_backward", TORCH_BOX(&backward));
  m.impl("_trilinear_interpolation_backward_feats", TORCH_BOX(&backward_feats));
}
#endif

}  // namespace jitops
