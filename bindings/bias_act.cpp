// SPDX-License-Identifier: MIT
// torch.ops.jitops.bias_act and its private backward ops: schema, checks, per-backend registration.
#include <ATen/ops/empty_like.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernels/bias_act.h"
#include "../kernels/aten_checks.h"

namespace jitops {
namespace {

using Kernel = void (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const BiasActParams&, int,
                        at::Tensor&);
using FusedBackward = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const BiasActParams&,
                                     at::Tensor&);

// jitops/ops/bias_act.py holds the same names (with StyleGAN2's defaults); keep the two in step.
constexpr std::array<std::pair<const char*, Activation>, 9> kActivations{{
    {"linear", Activation::kLinear},
    {"relu", Activation::kRelu},
    {"lrelu", Activation::kLrelu},
    {"tanh", Activation::kTanh},
    {"sigmoid", Activation::kSigmoid},
    {"elu", Activation::kElu},
    {"selu", Activation::kSelu},
    {"softplus", Activation::kSoftplus},
    {"swish", Activation::kSwish},
}};

Activation parse_activation(c10::string_view name) {
  std::string valid;
  for (const auto& [known, act] : kActivations) {
    if (name == known) return act;
    valid += valid.empty() ? known : std::string(", ") + known;
  }
  TORCH_CHECK(false, "act must be one of ", valid, "; got '", std::string(name), "'");
}

// jitops/ops/bias_act.py repeats these checks for tracing; keep the two in step.
BiasActParams check_inputs(const at::Tensor& x, const std::optional<at::Tensor>& b, int64_t dim,
                           c10::string_view act, double alpha, double gain, std::optional<double> clamp) {
  check_floating(x, "x");
  BiasActParams params{parse_activation(act), 0, alpha, gain, clamp};
  TORCH_CHECK(!clamp || *clamp >= 0, "clamp must be None or >= 0, got ", std::to_string(*clamp));
  if (b) {
    TORCH_CHECK(x.dim() > 0, "x must have at least one dimension when b is given");
    TORCH_CHECK(dim >= -x.dim() && dim < x.dim(), "dim must be in [", std::to_string(-x.dim()), ", ",
                std::to_string(x.dim()), ") for x of shape ", shape_str(x.sizes()), ", got ", std::to_string(dim));
    params.dim = c10::maybe_wrap_dim(dim, x.dim());
    TORCH_CHECK(b->dim() == 1 && b->size(0) == x.size(params.dim), "b must be 1-D with x.shape[dim] = ",
                std::to_string(x.size(params.dim)), " elements (x: ", shape_str(x.sizes()), ", dim ",
                std::to_string(params.dim), "), got b of shape ", shape_str(b->sizes()));
    check_same_device_dtype(x, "x", *b, "b");
  }
  return params;
}

// The kernels walk x's memory in order: a dense x (any layout, channels_last included) as it is,
// anything else copied into a dense tensor with the same order of strides (empty_like's
// preserve_format). The output is allocated like that, too.
at::Tensor dense(const at::Tensor& x) { return x.is_non_overlapping_and_dense() ? x : at::empty_like(x).copy_(x); }

at::Tensor undefined_or_contiguous(const std::optional<at::Tensor>& b) { return b ? b->contiguous() : at::Tensor(); }

template <Kernel kernel>
at::Tensor forward(const at::Tensor& x, const std::optional<at::Tensor>& b, int64_t dim, c10::string_view act,
                   double alpha, double gain, std::optional<double> clamp) {
  const BiasActParams params = check_inputs(x, b, dim, act, alpha, gain, clamp);
  const at::Tensor x_dense = dense(x);
  at::Tensor out = at::empty_like(x_dense);
  kernel(x_dense, undefined_or_contiguous(b), at::Tensor(), params, 0, out);
  return out;
}

// x made dense, and grad with x's strides (the kernels read grad in x's memory order).
std::pair<at::Tensor, at::Tensor> dense_pair(const at::Tensor& x, const at::Tensor& grad) {
  check_same_layout(x, "x", grad, "grad");
  at::Tensor x_dense = dense(x);
  at::Tensor grad_like_x = grad.strides() == x_dense.strides() ? grad : at::empty_like(x_dense).copy_(grad);
  return {std::move(x_dense), std::move(grad_like_x)};
}

// grad times the derivative-th derivative of forward() with respect to x.
template <Kernel kernel>
at::Tensor derivative_op(const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& b, int64_t dim,
                         c10::string_view act, double alpha, double gain, std::optional<double> clamp,
                         int64_t derivative) {
  const BiasActParams params = check_inputs(x, b, dim, act, alpha, gain, clamp);
  TORCH_CHECK(derivative == 1 || derivative == 2, "derivative must be 1 or 2, got ", std::to_string(derivative));
  const auto [x_dense, grad_like_x] = dense_pair(x, grad);
  at::Tensor out = at::empty_like(x_dense);
  kernel(x_dense, undefined_or_contiguous(b), grad_like_x, params, static_cast<int>(derivative), out);
  return out;
}

// Where a backend has no fused first-order backward.
at::Tensor no_fused_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const BiasActParams&,
                             at::Tensor&) {
  return at::Tensor();
}

// The first-order gradients for x and b: the fused kernel where the backend and layout have one,
// else the derivative kernel and a sum over every dimension but dim.
template <Kernel kernel, FusedBackward fused>
std::tuple<at::Tensor, at::Tensor> backward_op(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& b,
                                               int64_t dim, c10::string_view act, double alpha, double gain,
                                               std::optional<double> clamp) {
  const BiasActParams params = check_inputs(x, b, dim, act, alpha, gain, clamp);
  const auto [x_dense, grad_like_x] = dense_pair(x, grad);
  const at::Tensor bias = b.contiguous();
  at::Tensor grad_x = at::empty_like(x_dense);
  at::Tensor grad_b = fused(x_dense, bias, grad_like_x, params, grad_x);
  if (!grad_b.defined()) {
    kernel(x_dense, bias, grad_like_x, params, 1, grad_x);
    std::vector<int64_t> other_dims;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (d != params.dim) other_dims.push_back(d);
    }
    // Outputs must not alias each other: a 1-D x gets a copy.
    grad_b = other_dims.empty() ? grad_x.clone() : grad_x.sum(other_dims);
  }
  return {grad_x, grad_b};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def(
      "bias_act(Tensor x, Tensor? b, int dim, str act, float alpha, float gain, float? clamp) -> Tensor");
  // grad * d^k(bias_act)/dx^k for k = derivative (1 or 2): the first and second order backward.
  m.def(
      "_bias_act_derivative(Tensor grad, Tensor x, Tensor? b, int dim, str act, float alpha, float gain, "
      "float? clamp, int derivative) -> Tensor");
  // The first-order gradients for x and b together (one pass over memory where a kernel allows).
  m.def(
      "_bias_act_backward(Tensor grad, Tensor x, Tensor b, int dim, str act, float alpha, float gain, "
      "float? clamp) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("bias_act", &forward<bias_act_cpu>);
  m.impl("_bias_act_derivative", &derivative_op<bias_act_cpu>);
  m.impl("_bias_act_backward", &backward_op<bias_act_cpu, no_fused_backward>);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("bias_act", &forward<bias_act_cuda>);
  m.impl("_bias_act_derivative", &derivative_op<bias_act_cuda>);
  m.impl("_bias_act_backward", &backward_op<bias_act_cuda, bias_act_backward_cuda>);
}
#endif

}  // namespace jitops

