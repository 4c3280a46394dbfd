// SPDX-License-Identifier: MIT
// torch.ops.jitops.trilinear_interpolation and its two private backward ops: schema, per-backend
// registration, and the Python module entry point.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <tuple>

#include "../kernels/aten_checks.h"
#include "../kernels/trilinear_interpolation.h"
#include "aten_cuda.h"

namespace jitops {
namespace {

struct Kernels {
  void (*forward)(const at::Tensor&, const at::Tensor&, at::Tensor&);
  void (*backward)(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&);
};
constexpr Kernels kCpu{trilinear_interpolation_cpu, trilinear_interpolation_backward_cpu};
#ifdef WITH_CUDA
void forward_cuda(const at::Tensor& feats, const at::Tensor& points, at::Tensor& out) {
  launch_cuda(feats, [&](auto t, CudaStream stream) {
    using T = decltype(t);
    trilinear_interpolation_cuda(const_ptr<T>(feats), const_ptr<T>(points), mutable_ptr<T>(out), feats.size(0),
                                 feats.size(2), stream);
  });
}

// feats and grad_points undefined: the gradient for feats alone.
void backward_cuda(const at::Tensor& grad_out, const at::Tensor& feats, const at::Tensor& points, at::Tensor& grad_feats,
                   at::Tensor& grad_points) {
  launch_cuda(grad_out, [&](auto t, CudaStream stream) {
    using T = decltype(t);
    const bool with_points_grad = grad_points.defined();
    trilinear_interpolation_backward_cuda(const_ptr<T>(grad_out), with_points_grad ? const_ptr<T>(feats) : nullptr,
                                          const_ptr<T>(points), mutable_ptr<T>(grad_feats),
                                          with_points_grad ? mutable_ptr<T>(grad_points) : nullptr, grad_out.size(0),
                                          grad_out.size(1), stream);
  });
}

constexpr Kernels kCuda{forward_cuda, backward_cuda};
#endif

// jitops/ops/trilinear_interpolation.py repeats these checks for tracing; keep the two in step.
void check_points(const at::Tensor& points, int64_t n) {
  TORCH_CHECK(points.dim() == 2 && points.size(0) == n && points.size(1) == 3,
              "points must have shape (N, 3) with N = ", std::to_string(n), " (feats.size(0)), got ", shape_str(points.sizes()));
}

void check_inputs(const at::Tensor& feats, const at::Tensor& points) {
  TORCH_CHECK(feats.dim() == 3 && feats.size(1) == 8,
              "feats must have shape (N, 8, F), 8 corner feature vectors per point, got ", shape_str(feats.sizes()));
  check_points(points, feats.size(0));
  check_same_device_dtype(feats, "feats", points, "points");
  check_floating(feats, "feats");
}

void check_grad_out(const at::Tensor& grad_out, const at::Tensor& points, int64_t f) {
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == points.size(0) && (f < 0 || grad_out.size(1) == f),
              "grad_out must have shape (N, F) = (", std::to_string(points.size(0)), ", ",
              f < 0 ? "F" : std::to_string(f), "), got ", shape_str(grad_out.sizes()));
  check_same_device_dtype(grad_out, "grad_out", points, "points");
}

// The kernels take contiguous tensors; views are compacted here, once, for every backend.
template <const Kernels& kernels>
at::Tensor forward(const at::Tensor& feats, const at::Tensor& points) {
  check_inputs(feats, points);
  at::Tensor out = at::empty({feats.size(0), feats.size(2)}, feats.options());
  kernels.forward(feats.contiguous(), points.contiguous(), out);
  return out;
}

template <const Kernels& kernels>
std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& feats,
                                            const at::Tensor& points) {
  check_inputs(feats, points);
  check_grad_out(grad_out, points, feats.size(2));
  at::Tensor grad_feats = at::empty_like(feats, at::MemoryFormat::Contiguous);
  at::Tensor grad_points = at::empty_like(points, at::MemoryFormat::Contiguous);
  kernels.backward(grad_out.contiguous(), feats.contiguous(), points.contiguous(), grad_feats, grad_points);
  return {grad_feats, grad_points};
}

template <const Kernels& kernels>
at::Tensor backward_feats(const at::Tensor& grad_out, const at::Tensor& points) {
  TORCH_CHECK(points.dim() == 2 && points.size(1) == 3, "points must have shape (N, 3), got ",
              shape_str(points.sizes()));
  check_grad_out(grad_out, points, -1);
  check_floating(points, "points");
  at::Tensor grad_feats = at::empty({grad_out.size(0), 8, grad_out.size(1)}, grad_out.options());
  at::Tensor no_points_grad;
  kernels.backward(grad_out.contiguous(), at::Tensor(), points.contiguous(), grad_feats, no_points_grad);
  return grad_feats;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def("trilinear_interpolation(Tensor feats, Tensor points) -> Tensor");
  m.def("_trilinear_interpolation_backward(Tensor grad_out, Tensor feats, Tensor points) -> (Tensor, Tensor)");
  // When points needs no gradient, feats need not be read at all: half the bytes of the above.
  m.def("_trilinear_interpolation_backward_feats(Tensor grad_out, Tensor points) -> Tensor");
}

TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("trilinear_interpolation", &forward<kCpu>);
  m.impl("_trilinear_interpolation_backward", &backward<kCpu>);
  m.impl("_trilinear_interpolation_backward_feats", &backward_feats<kCpu>);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("trilinear_interpolation", &forward<kCuda>);
  m.impl("_trilinear_interpolation_backward", &backward<kCuda>);
  m.impl("_trilinear_interpolation_backward_feats", &backward_feats<kCuda>);
}
#endif

}  // namespace jitops

