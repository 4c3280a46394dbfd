// SPDX-License-Identifier: MIT
#include "../lltm.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../common.h"

namespace jitops {
namespace {

// Calls body(b, s) for every state element [b, s] of a [B, S] state, rows split across threads.
template <typename Body>
void for_each_state_element(int64_t batch, int64_t state, const Body& body) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(state, 1));
  at::parallel_for(0, batch, rows_per_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t s = 0; s < state; ++s) body(b, s);
    }
  });
}

}  // namespace

void lltm_cell_cpu(const at::Tensor& gates, const at::Tensor& old_cell, at::Tensor& new_h, at::Tensor& new_cell) {
  CHECK_INPUT_CPU(gates);
  CHECK_INPUT_CPU(old_cell);
  CHECK_INPUT_CPU(new_h);
  CHECK_INPUT_CPU(new_cell);
  const int64_t batch = old_cell.size(0), state = old_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_cell_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gates_p = gates.const_data_ptr<scalar_t>();
    const scalar_t* old_cell_p = old_cell.const_data_ptr<scalar_t>();
    scalar_t* new_h_p = new_h.mutable_data_ptr<scalar_t>();
    scalar_t* new_cell_p = new_cell.mutable_data_ptr<scalar_t>();
    for_each_state_element(batch, state, [&](int64_t b, int64_t s) {
      const scalar_t* row = gates_p + b * 3 * state;
      const LltmGates<acc_t> g(row[s], row[state + s], row[2 * state + s]);
      const int64_t i = b * state + s;
      const acc_t cell = g.new_cell(old_cell_p[i]);
      new_cell_p[i] = static_cast<scalar_t>(cell);
      new_h_p[i] = static_cast<scalar_t>(std::tanh(cell) * g.output);
    });
  });
}

void lltm_cell_backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                            const at::Tensor& gates, at::Tensor& grad_gates, at::Tensor& grad_old_cell) {
  CHECK_INPUT_CPU(grad_h);
  CHECK_INPUT_CPU(grad_cell);
  CHECK_INPUT_CPU(new_cell);
  CHECK_INPUT_CPU(gates);
  CHECK_INPUT_CPU(grad_gates);
  CHECK_INPUT_CPU(grad_old_cell);
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_cell_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* grad_h_p = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* grad_cell_p = grad_cell.const_data_ptr<scalar_t>();
    const scalar_t* new_cell_p = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* gates_p = gates.const_data_ptr<scalar_t>();
    scalar_t* grad_gates_p = grad_gates.mutable_data_ptr<scalar_t>();
    scalar_t* grad_old_cell_p = grad_old_cell.mutable_data_ptr<scalar_t>();
    for_each_state_element(batch, state, [&](int64_t b, int64_t s) {
      const scalar_t* row = gates_p + b * 3 * state;
      scalar_t* grad_row = grad_gates_p + b * 3 * state;
      const LltmGates<acc_t> g(row[s], row[state + s], row[2 * state + s]);
      const int64_t i = b * state + s;
      acc_t grad_pre[3];
      grad_old_cell_p[i] = static_cast<scalar_t>(g.backward(grad_h_p[i], grad_cell_p[i], new_cell_p[i], grad_pre));
      for (int k = 0; k < 3; ++k) grad_row[k * state + s] = static_cast<scalar_t>(grad_pre[k]);
    });
  });
}

}  // namespace jitops
