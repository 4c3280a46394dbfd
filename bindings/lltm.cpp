// SPDX-License-Identifier: MIT
// torch.ops.jitops.lltm and its private backward op: the matrix products on ATen's BLAS (called
// through the dispatcher), the elementwise parts in the fused kernels of kernels/<backend>/lltm.
#include <string>
#include <tuple>

#include "../kernels/lltm.h"
#include "stable.h"

namespace jitops {
namespace {

void check_2d(const Tensor& x, const char* name, int64_t rows, int64_t cols, const std::string& expected) {
  JITOPS_CHECK(x.dim() == 2 && x.size(0) == rows && x.size(1) == cols, name, " must have shape ", expected, " = ",
               shape_str({rows, cols}), ", got ", shape_str(x));
}

// jitops/ops/lltm.py repeats these checks for tracing; keep the two in step.
void check_inputs(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                  const Tensor& old_cell) {
  JITOPS_CHECK(input.dim() == 2, "input must have shape (B, I), got ", shape_str(input));
  JITOPS_CHECK(old_h.dim() == 2, "old_h must have shape (B, S), got ", shape_str(old_h));
  const int64_t batch = input.size(0), features = input.size(1), state = old_h.size(1);
  check_2d(old_h, "old_h", batch, state, "(B, S)");
  check_2d(old_cell, "old_cell", batch, state, "(B, S)");
  check_2d(weights, "weights", 3 * state, state + features, "(3 * S, S + I)");
  JITOPS_CHECK(bias.dim() == 1 && bias.size(0) == 3 * state, "bias must have shape (3 * S,) = ", shape_str({3 * state}),
               ", got ", shape_str(bias));
  check_floating(input, "input");
  check_same_device_dtype(input, "input", weights, "weights");
  check_same_device_dtype(input, "input", bias, "bias");
  check_same_device_dtype(input, "input", old_h, "old_h");
  check_same_device_dtype(input, "input", old_cell, "old_cell");
}

// The fused elementwise kernels, on contiguous tensors of one shape per role (the callers make
// them so), for either backend.
void cell(const Tensor& gates, const Tensor& old_cell, const Tensor& new_h, const Tensor& new_cell) {
  const int64_t batch = old_cell.size(0), state = old_cell.size(1);
  launch_kernel(
      gates,
      [&](auto t) {
        using T = decltype(t);
        lltm_cell_cpu<T>(const_ptr<T>(gates), const_ptr<T>(old_cell), mutable_ptr<T>(new_h), mutable_ptr<T>(new_cell),
                         batch, state);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        lltm_cell_cuda<T>(const_ptr<T>(gates), const_ptr<T>(old_cell), mutable_ptr<T>(new_h), mutable_ptr<T>(new_cell),
                          batch, state, stream);
      });
}

void cell_backward(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell, const Tensor& gates,
                   const Tensor& grad_gates, const Tensor& grad_old_cell) {
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  launch_kernel(
      gates,
      [&](auto t) {
        using T = decltype(t);
        lltm_cell_backward_cpu<T>(const_ptr<T>(grad_h), const_ptr<T>(grad_cell), const_ptr<T>(new_cell),
                                  const_ptr<T>(gates), mutable_ptr<T>(grad_gates), mutable_ptr<T>(grad_old_cell), batch,
                                  state);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        lltm_cell_backward_cuda<T>(const_ptr<T>(grad_h), const_ptr<T>(grad_cell), const_ptr<T>(new_cell),
                                   const_ptr<T>(gates), mutable_ptr<T>(grad_gates), mutable_ptr<T>(grad_old_cell),
                                   batch, state, stream);
      });
}

// Returns new_h, new_cell and the gates' pre-activations, which the backward needs.
std::tuple<Tensor, Tensor, Tensor> forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const int64_t batch = input.size(0), features = input.size(1), state = old_h.size(1);
  // gates = bias + [old_h, input] @ weights^T, one GEMM (aten::linear is addmm for 2-D input).
  const Tensor stacked = call_aten("aten::cat", "", std::vector<Tensor>{old_h, input}, int64_t{1});
  const Tensor gates = call_aten("aten::linear", "", stacked, weights, std::optional<Tensor>(bias));  // [B, 3S]
  Tensor new_h = empty_contiguous_like(old_cell, {batch, state});
  Tensor new_cell = empty_contiguous_like(old_cell, {batch, state});
  cell(gates, as_contiguous(old_cell), new_h, new_cell);
  return {new_h, new_cell, gates};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell,
                                                            Tensor gates, Tensor input, Tensor old_h, Tensor weights) {
  const int64_t batch = input.size(0), features = input.size(1), state = old_h.size(1);
  check_2d(grad_h, "grad_h", batch, state, "(B, S)");
  check_2d(grad_cell, "grad_cell", batch, state, "(B, S)");
  check_2d(new_cell, "new_cell", batch, state, "(B, S)");
  check_2d(gates, "gates", batch, 3 * state, "(B, 3 * S)");
  check_2d(weights, "weights", 3 * state, state + features, "(3 * S, S + I)");
  for (const Tensor* t : {&grad_h, &grad_cell, &new_cell, &gates}) {
    check_same_device_dtype(input, "input", *t, "the saved tensors and gradients");
  }

  Tensor grad_gates = empty_contiguous_like(gates, {batch, 3 * state});
  Tensor grad_old_cell = empty_contiguous_like(new_cell, {batch, state});
  cell_backward(as_contiguous(grad_h), as_contiguous(grad_cell), as_contiguous(new_cell), as_contiguous(gates),
                grad_gates, grad_old_cell);
  // gates = bias + [old_h, input] @ weights^T, split by the columns of weights so that neither
  // [old_h, input] nor its gradient is ever concatenated.
  const int64_t row = weights.stride(0), column = weights.stride(1);
  const Tensor weights_h = strided_view(weights, {3 * state, state}, {row, column});
  const Tensor weights_input = strided_view(weights, {3 * state, features}, {row, column}, state * column);
  const Tensor grad_gates_t = strided_view(grad_gates, {3 * state, batch}, {1, 3 * state});
  Tensor grad_weights = empty_contiguous_like(weights, {3 * state, state + features});
  call_aten("aten::mm", "out", grad_gates_t, old_h,
            strided_view(grad_weights, {3 * state, state}, {state + features, 1}));
  call_aten("aten::mm", "out", grad_gates_t, input,
            strided_view(grad_weights, {3 * state, features}, {state + features, 1}, state));
  return {call_aten("aten::mm", "", grad_gates, weights_input), grad_weights, torch::stable::sum(grad_gates, {{0}}),
          call_aten("aten::mm", "", grad_gates, weights_h), grad_old_cell};
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(jitops, m) {
  // gates is the pre-activation [B, 3S] the backward needs; jitops.lltm returns only (new_h, new_cell).
  m.def(
      "lltm(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) "
      "-> (Tensor new_h, Tensor new_cell, Tensor gates)");
  m.def(
      "_lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor input, Tensor old_h, "
      "Tensor weights) -> (Tensor grad_input, Tensor grad_weights, Tensor grad_bias, Tensor grad_old_h, "
      "Tensor grad_old_cell)");
}

STABLE_TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("lltm", TORCH_BOX(&forward));
  m.impl("_lltm_backward", TORCH_BOX(&backward));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("lltm", TORCH_BOX(&forward));
  m.impl("_lltm_backward", TORCH_BOX(&backward));
}
#endif

}  // namespace jitops
