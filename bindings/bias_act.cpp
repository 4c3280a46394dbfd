// SPDX-License-Identifier: MIT
// torch.ops.jitops.bias_act and its private backward ops: schema, checks, per-backend registration.
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernels/bias_act.h"
#include "stable.h"

namespace jitops {
namespace {

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

Activation parse_activation(const std::string& name) {
  std::string valid;
  for (const auto& [known, act] : kActivations) {
    if (name == known) return act;
    valid += valid.empty() ? known : std::string(", ") + known;
  }
  JITOPS_CHECK(false, "act must be one of ", valid, "; got '", name, "'");
  return Activation::kLinear;
}

// Everything a kernel needs besides the pointers.
struct Call {
  Activation act;
  int64_t dim;  // wrapped into [0, x.dim())
  BiasActParams params;
};

// jitops/ops/bias_act.py repeats these checks for tracing; keep the two in step.
Call check_inputs(const Tensor& x, const std::optional<Tensor>& b, int64_t dim, const std::string& act, double alpha,
                  double gain, std::optional<double> clamp) {
  check_floating(x, "x");
  Call call{parse_activation(act), 0, {alpha, gain, clamp.value_or(0.0), clamp.has_value()}};
  JITOPS_CHECK(!clamp || *clamp >= 0, "clamp must be None or >= 0, got ", std::to_string(clamp.value_or(0.0)));
  if (b) {
    JITOPS_CHECK(x.dim() > 0, "x must have at least one dimension when b is given");
    JITOPS_CHECK(dim >= -x.dim() && dim < x.dim(), "dim must be in [", std::to_string(-x.dim()), ", ",
                 std::to_string(x.dim()), ") for x of shape ", shape_str(x), ", got ", std::to_string(dim));
    call.dim = dim < 0 ? dim + x.dim() : dim;
    JITOPS_CHECK(b->dim() == 1 && b->size(0) == x.size(call.dim),
                 "b must be 1-D with x.shape[dim] = ", std::to_string(x.size(call.dim)), " elements (x: ", shape_str(x),
                 ", dim ", std::to_string(call.dim), "), got b of shape ", shape_str(*b));
    check_same_device_dtype(x, "x", *b, "b");
  }
  return call;
}

// The kernels walk x's memory in order: a dense x (any layout, channels_last included) as it is,
// anything else copied into a dense tensor with the same order of strides (empty_like's
// preserve_format). The output is allocated like that, too.
Tensor dense(const Tensor& x) {
  if (is_dense(x)) return x;
  Tensor copy = torch::stable::empty_like(x);
  torch::stable::copy_(copy, x);
  return copy;
}

std::optional<Tensor> contiguous_bias(const std::optional<Tensor>& b) {
  return b ? std::optional<Tensor>(as_contiguous(*b)) : std::nullopt;
}

// x's memory as [outer][channels][inner] for the bias along dim (x dense).
BiasActShape shape_of(const Tensor& x, bool has_bias, int64_t dim) {
  const int64_t n = x.numel();
  return has_bias ? BiasActShape{n, x.size(dim), x.stride(dim)} : BiasActShape{n, 1, n};
}

// out = the derivative-th derivative (0: the function itself) of bias_act, times grad.
void run_kernel(const Tensor& x, const std::optional<Tensor>& b, const std::optional<Tensor>& grad, const Call& call,
                int derivative, const Tensor& out) {
  const BiasActShape shape = shape_of(x, b.has_value(), call.dim);
  if (shape.n == 0) return;
  dispatch_activation(call.act, [&](auto act) {
    constexpr Activation kAct = decltype(act)::value;
    launch_kernel(
        x,
        [&](auto t) {
          using T = decltype(t);
          bias_act_cpu<kAct, T>(const_ptr<T>(x), b ? const_ptr<T>(*b) : nullptr, grad ? const_ptr<T>(*grad) : nullptr,
                                mutable_ptr<T>(out), shape, call.params, derivative);
        },
        [&](auto t, CudaStream stream) {
          using T = decltype(t);
          bias_act_cuda<kAct, T>(const_ptr<T>(x), b ? const_ptr<T>(*b) : nullptr, grad ? const_ptr<T>(*grad) : nullptr,
                                 mutable_ptr<T>(out), shape, call.params, derivative, stream);
        });
  });
}

Tensor forward(Tensor x, std::optional<Tensor> b, int64_t dim, std::string act, double alpha, double gain,
               std::optional<double> clamp) {
  const Call call = check_inputs(x, b, dim, act, alpha, gain, clamp);
  const Tensor x_dense = dense(x);
  Tensor out = empty_like_dense(x_dense);
  run_kernel(x_dense, contiguous_bias(b), std::nullopt, call, 0, out);
  return out;
}

// x made dense, and grad with x's strides (the kernels read grad in x's memory order).
std::pair<Tensor, Tensor> dense_pair(const Tensor& x, const Tensor& grad) {
  check_same_layout(x, "x", grad, "grad");
  Tensor x_dense = dense(x);
  bool same_strides = true;
  for (int64_t d = 0; d < x.dim(); ++d) same_strides = same_strides && grad.stride(d) == x_dense.stride(d);
  if (same_strides) return {x_dense, grad};
  Tensor grad_like_x = torch::stable::empty_like(x_dense);
  torch::stable::copy_(grad_like_x, grad);
  return {x_dense, grad_like_x};
}

// grad times the derivative-th derivative of forward() with respect to x.
Tensor derivative_op(Tensor grad, Tensor x, std::optional<Tensor> b, int64_t dim, std::string act, double alpha,
                     double gain, std::optional<double> clamp, int64_t derivative) {
  const Call call = check_inputs(x, b, dim, act, alpha, gain, clamp);
  JITOPS_CHECK(derivative == 1 || derivative == 2, "derivative must be 1 or 2, got ", std::to_string(derivative));
  const auto [x_dense, grad_like_x] = dense_pair(x, grad);
  Tensor out = empty_like_dense(x_dense);
  run_kernel(x_dense, contiguous_bias(b), grad_like_x, call, static_cast<int>(derivative), out);
  return out;
}

// The bias gradient from CUDA's fused kernel (which also writes grad_x), or nothing where x's
// layout has no fused kernel.
std::optional<Tensor> fused_backward(const Tensor& x, const Tensor& b, const Tensor& grad, const Call& call,
                                     const Tensor& grad_x) {
#ifdef WITH_CUDA
  if (!x.is_cuda()) return std::nullopt;
  const CudaLaunchScope scope(x);
  const BiasActShape shape = shape_of(x, true, call.dim);
  return dispatch_floating(x, [&](auto t) -> std::optional<Tensor> {
    using T = decltype(t);
    const int64_t blocks =
        bias_act_fused_backward_blocks<T>(const_ptr<T>(x), const_ptr<T>(grad), const_ptr<T>(grad_x), shape);
    if (blocks == 0) return std::nullopt;
    const ScalarType sum_type = std::is_same_v<BiasSum<T>, double> ? ScalarType::Double : ScalarType::Float;
    const std::vector<int64_t> partial_shape{shape.channels, blocks};
    Tensor partial_sums = torch::stable::new_empty(x, partial_shape, sum_type);
    dispatch_activation(call.act, [&](auto act) {
      bias_act_fused_backward_cuda<decltype(act)::value, T>(
          const_ptr<T>(x), const_ptr<T>(b), const_ptr<T>(grad), mutable_ptr<T>(grad_x),
          mutable_ptr<BiasSum<T>>(partial_sums), blocks, shape, call.params, scope.stream());
    });
    const std::vector<int64_t> blocks_dim{1};
    return torch::stable::to(torch::stable::sum(partial_sums, blocks_dim), x.scalar_type());
  });
#else
  return std::nullopt;
#endif
}

// The first-order gradients for x and b: the fused kernel where the backend and layout have one,
// else the derivative kernel and a sum over every dimension but dim.
std::tuple<Tensor, Tensor> backward_op(Tensor grad, Tensor x, Tensor b, int64_t dim, std::string act, double alpha,
                                       double gain, std::optional<double> clamp) {
  const Call call = check_inputs(x, b, dim, act, alpha, gain, clamp);
  const auto [x_dense, grad_like_x] = dense_pair(x, grad);
  const Tensor bias = as_contiguous(b);
  Tensor grad_x = empty_like_dense(x_dense);
  if (std::optional<Tensor> grad_b = fused_backward(x_dense, bias, grad_like_x, call, grad_x)) {
    return {grad_x, *grad_b};
  }
  run_kernel(x_dense, bias, grad_like_x, call, 1, grad_x);
  std::vector<int64_t> other_dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != call.dim) other_dims.push_back(d);
  }
  // Outputs must not alias each other: a 1-D x gets a copy.
  Tensor grad_b = other_dims.empty() ? torch::stable::clone(grad_x) : torch::stable::sum(grad_x, other_dims);
  return {grad_x, grad_b};
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def("bias_act(Tensor x, Tensor? b, int dim, str act, float alpha, float gain, float? clamp) -> Tensor");
  // grad * d^k(bias_act)/dx^k for k = derivative (1 or 2): the first and second order backward.
  m.def(
      "_bias_act_derivative(Tensor grad, Tensor x, Tensor? b, int dim, str act, float alpha, float gain, "
      "float? clamp, int derivative) -> Tensor");
  // The first-order gradients for x and b together (one pass over memory where a kernel allows).
  m.def(
      "_bias_act_backward(Tensor grad, Tensor x, Tensor b, int dim, str act, float alpha, float gain, "
      "float? clamp) -> (Tensor, Tensor)");
}

STABLE_TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("bias_act", TORCH_BOX(&forward));
  m.impl("_bias_act_derivative", TORCH_BOX(&derivative_op));
  m.impl("_bias_act_backward", TORCH_BOX(&backward_op));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("bias_act", TORCH_BOX(&forward));
  m.impl("_bias_act_derivative", TORCH_BOX(&derivative_op));
  m.impl("_bias_act_backward", TORCH_BOX(&backward_op));
}
#endif

}  // namespace jitops
