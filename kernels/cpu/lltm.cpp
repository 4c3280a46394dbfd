// SPDX-License-Identifier: MIT
// One batch row per call of the row functions: their __restrict pointers and the fast:: math let
// the compiler vectorize the loop over the state (check with -fopt-info-vec).
#include "../lltm.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "../aten_checks.h"

namespace jitops {
namespace {

// gates: [3S] of one row; old_cell, new_h, new_cell: [S]
template <typename scalar_t>
JITOPS_CPU_MULTIVERSION void cell_row(const scalar_t* __restrict gates, const scalar_t* __restrict old_cell, scalar_t* __restrict new_h,
              scalar_t* __restrict new_cell, int64_t state) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t s = 0; s < state; ++s) {
    const LltmGates<acc_t> g(gates[s], gates[state + s], gates[2 * state + s]);
    const acc_t cell = g.new_cell(old_cell[s]);
    new_cell[s] = static_cast<scalar_t>(cell);
    new_h[s] = static_cast<scalar_t>(fast::tanh(cell) * g.output);
  }
}

// grad_h, grad_cell, new_cell, grad_old_cell: [S]; gates, grad_gates: [3S] of one row
template <typename scalar_t>
JITOPS_CPU_MULTIVERSION void cell_backward_row(const scalar_t* __restrict grad_h, const scalar_t* __restrict grad_cell,
                       const scalar_t* __restrict new_cell, const scalar_t* __restrict gates,
                       scalar_t* __restrict grad_gates, scalar_t* __restrict grad_old_cell, int64_t state) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t s = 0; s < state; ++s) {
    const LltmGates<acc_t> g(gates[s], gates[state + s], gates[2 * state + s]);
    acc_t grad_pre[3];
    grad_old_cell[s] = static_cast<scalar_t>(g.backward(grad_h[s], grad_cell[s], new_cell[s], grad_pre));
    grad_gates[s] = static_cast<scalar_t>(grad_pre[0]);
    grad_gates[state + s] = static_cast<scalar_t>(grad_pre[1]);
    grad_gates[2 * state + s] = static_cast<scalar_t>(grad_pre[2]);
  }
}

// Calls row_fn(b) for every batch row, rows split across threads in chunks of ~kGrainSize elements.
template <typename RowFn>
void for_each_row(int64_t batch, int64_t state, const RowFn& row_fn) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(state, 1));
  at::parallel_for(0, batch, rows_per_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) row_fn(b);
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
    const scalar_t* gates_p = gates.const_data_ptr<scalar_t>();
    const scalar_t* old_cell_p = old_cell.const_data_ptr<scalar_t>();
    scalar_t* new_h_p = new_h.mutable_data_ptr<scalar_t>();
    scalar_t* new_cell_p = new_cell.mutable_data_ptr<scalar_t>();
    for_each_row(batch, state, [&](int64_t b) {
      const int64_t row = b * state;
      cell_row(gates_p + 3 * row, old_cell_p + row, new_h_p + row, new_cell_p + row, state);
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
    const scalar_t* grad_h_p = grad_h.const_data_ptr<scalar_t>();
    const scalar_t* grad_cell_p = grad_cell.const_data_ptr<scalar_t>();
    const scalar_t* new_cell_p = new_cell.const_data_ptr<scalar_t>();
    const scalar_t* gates_p = gates.const_data_ptr<scalar_t>();
    scalar_t* grad_gates_p = grad_gates.mutable_data_ptr<scalar_t>();
    scalar_t* grad_old_cell_p = grad_old_cell.mutable_data_ptr<scalar_t>();
    for_each_row(batch, state, [&](int64_t b) {
      const int64_t row = b * state;
      cell_backward_row(grad_h_p + row, grad_cell_p + row, new_cell_p + row, gates_p + 3 * row,
                        grad_gates_p + 3 * row, grad_old_cell_p + row, state);
    });
  });
}

}  // namespace jitops
