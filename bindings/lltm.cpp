// SPDX-License-Identifier: MIT
// torch.ops.jitops.lltm and its private backward op: the matrix products on ATen's BLAS, the
// elementwise parts in the fused kernels of kernels/<backend>/lltm.
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "../kernels/aten_checks.h"
#include "../kernels/lltm.h"
#include "aten_cuda.h"

namespace jitops {
namespace {

struct Kernels {
  void (*cell)(const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&);
  void (*cell_backward)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor&,
                        at::Tensor&);
};
constexpr Kernels kCpu{lltm_cell_cpu, lltm_cell_backward_cpu};
#ifdef WITH_CUDA
void cell_cuda(const at::Tensor& gates, const at::Tensor& old_cell, at::Tensor& new_h, at::Tensor& new_cell) {
  launch_cuda(gates, [&](auto t, CudaStream stream) {
    using T = decltype(t);
    lltm_cell_cuda(const_ptr<T>(gates), const_ptr<T>(old_cell), mutable_ptr<T>(new_h), mutable_ptr<T>(new_cell),
                   old_cell.size(0), old_cell.size(1), stream);
  });
}

void cell_backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                        const at::Tensor& gates, at::Tensor& grad_gates, at::Tensor& grad_old_cell) {
  launch_cuda(gates, [&](auto t, CudaStream stream) {
    using T = decltype(t);
    lltm_cell_backward_cuda(const_ptr<T>(grad_h), const_ptr<T>(grad_cell), const_ptr<T>(new_cell), const_ptr<T>(gates),
                            mutable_ptr<T>(grad_gates), mutable_ptr<T>(grad_old_cell), new_cell.size(0),
                            new_cell.size(1), stream);
  });
}

constexpr Kernels kCuda{cell_cuda, cell_backward_cuda};
#endif

void check_2d(const at::Tensor& x, const char* name, int64_t rows, int64_t cols, const std::string& expected) {
  TORCH_CHECK(x.dim() == 2 && x.size(0) == rows && x.size(1) == cols, name, " must have shape ", expected, " = ",
              shape_str({rows, cols}), ", got ", shape_str(x.sizes()));
}

// jitops/ops/lltm.py repeats these checks for tracing; keep the two in step.
void check_inputs(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias, const at::Tensor& old_h,
                  const at::Tensor& old_cell) {
  TORCH_CHECK(input.dim() == 2, "input must have shape (B, I), got ", shape_str(input.sizes()));
  TORCH_CHECK(old_h.dim() == 2, "old_h must have shape (B, S), got ", shape_str(old_h.sizes()));
  const int64_t batch = input.size(0), features = input.size(1), state = old_h.size(1);
  check_2d(old_h, "old_h", batch, state, "(B, S)");
  check_2d(old_cell, "old_cell", batch, state, "(B, S)");
  check_2d(weights, "weights", 3 * state, state + features, "(3 * S, S + I)");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == 3 * state, "bias must have shape (3 * S,) = ",
              shape_str({3 * state}), ", got ", shape_str(bias.sizes()));
  check_floating(input, "input");
  check_same_device_dtype(input, "input", weights, "weights");
  check_same_device_dtype(input, "input", bias, "bias");
  check_same_device_dtype(input, "input", old_h, "old_h");
  check_same_device_dtype(input, "input", old_cell, "old_cell");
}

// Returns new_h, new_cell and the gates' pre-activations, which the backward needs.
template <const Kernels& kernels>
std::tuple<at::Tensor, at::Tensor, at::Tensor> forward(const at::Tensor& input, const at::Tensor& weights,
                                                       const at::Tensor& bias, const at::Tensor& old_h,
                                                       const at::Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const at::Tensor gates = at::addmm(bias, at::cat({old_h, input}, 1), weights.t());  // [B, 3S]
  at::Tensor new_h = at::empty_like(old_cell, at::MemoryFormat::Contiguous);
  at::Tensor new_cell = at::empty_like(old_cell, at::MemoryFormat::Contiguous);
  kernels.cell(gates, old_cell.contiguous(), new_h, new_cell);
  return {new_h, new_cell, gates};
}

template <const Kernels& kernels>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(
    const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell, const at::Tensor& gates,
    const at::Tensor& input, const at::Tensor& old_h, const at::Tensor& weights) {
  const int64_t batch = input.size(0), features = input.size(1), state = old_h.size(1);
  check_2d(grad_h, "grad_h", batch, state, "(B, S)");
  check_2d(grad_cell, "grad_cell", batch, state, "(B, S)");
  check_2d(new_cell, "new_cell", batch, state, "(B, S)");
  check_2d(gates, "gates", batch, 3 * state, "(B, 3 * S)");
  check_2d(weights, "weights", 3 * state, state + features, "(3 * S, S + I)");
  for (const at::Tensor* t : {&grad_h, &grad_cell, &new_cell, &gates}) {
    check_same_device_dtype(input, "input", *t, "the saved tensors and gradients");
  }

  at::Tensor grad_gates = at::empty_like(gates, at::MemoryFormat::Contiguous);
  at::Tensor grad_old_cell = at::empty_like(new_cell, at::MemoryFormat::Contiguous);
  kernels.cell_backward(grad_h.contiguous(), grad_cell.contiguous(), new_cell.contiguous(), gates.contiguous(),
                        grad_gates, grad_old_cell);
  // gates = bias + [old_h, input] @ weights^T, split by the columns of weights so that neither
  // [old_h, input] nor its gradient is ever concatenated.
  const at::Tensor weights_h = weights.narrow(1, 0, state), weights_input = weights.narrow(1, state, features);
  at::Tensor grad_weights = at::empty_like(weights, at::MemoryFormat::Contiguous);
  at::Tensor grad_weights_h = grad_weights.narrow(1, 0, state);
  at::Tensor grad_weights_input = grad_weights.narrow(1, state, features);
  at::mm_out(grad_weights_h, grad_gates.t(), old_h);
  at::mm_out(grad_weights_input, grad_gates.t(), input);
  return {grad_gates.mm(weights_input), grad_weights, grad_gates.sum(0), grad_gates.mm(weights_h), grad_old_cell};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(jitops, m) {
  // gates is the pre-activation [B, 3S] the backward needs; jitops.lltm returns only (new_h, new_cell).
  m.def(
      "lltm(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) "
      "-> (Tensor new_h, Tensor new_cell, Tensor gates)");
  m.def(
      "_lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor input, Tensor old_h, "
      "Tensor weights) -> (Tensor grad_input, Tensor grad_weights, Tensor grad_bias, Tensor grad_old_h, "
      "Tensor grad_old_cell)");
}

TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("lltm", &forward<kCpu>);
  m.impl("_lltm_backward", &backward<kCpu>);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("lltm", &forward<kCuda>);
  m.impl("_lltm_backward", &backward<kCuda>);
}
#endif

}  // namespace jitops

