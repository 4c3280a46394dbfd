// SPDX-License-Identifier: MIT
// One batch row per call of the row functions: their __restrict pointers and the fast:: math let
// the compiler vectorize the loop over the state (check with -fopt-info-vec).
#include "../lltm.h"

#include <torch/csrc/stable/ops.h>  // parallel_for: torch's own thread pool

#include <algorithm>

namespace jitops {
namespace {

// gates: [3S] of one row; old_cell, new_h, new_cell: [S]
template <typename scalar_t>
JITOPS_CPU_MULTIVERSION void cell_row(const scalar_t* __restrict gates, const scalar_t* __restrict old_cell,
                                      scalar_t* __restrict new_h, scalar_t* __restrict new_cell, int64_t state) {
  for (int64_t s = 0; s < state; ++s) {
    const LltmGates<scalar_t> g(gates[s], gates[state + s], gates[2 * state + s]);
    const scalar_t cell = g.new_cell(old_cell[s]);
    new_cell[s] = cell;
    new_h[s] = fast::tanh(cell) * g.output;
  }
}

// grad_h, grad_cell, new_cell, grad_old_cell: [S]; gates, grad_gates: [3S] of one row
template <typename scalar_t>
JITOPS_CPU_MULTIVERSION void cell_backward_row(const scalar_t* __restrict grad_h, const scalar_t* __restrict grad_cell,
                                               const scalar_t* __restrict new_cell, const scalar_t* __restrict gates,
                                               scalar_t* __restrict grad_gates, scalar_t* __restrict grad_old_cell,
                                               int64_t state) {
  for (int64_t s = 0; s < state; ++s) {
    const LltmGates<scalar_t> g(gates[s], gates[state + s], gates[2 * state + s]);
    scalar_t grad_pre[3];
    grad_old_cell[s] = g.backward(grad_h[s], grad_cell[s], new_cell[s], grad_pre);
    grad_gates[s] = grad_pre[0];
    grad_gates[state + s] = grad_pre[1];
    grad_gates[2 * state + s] = grad_pre[2];
  }
}

// Calls row_fn(b) for every batch row, rows split across threads in chunks of ~kGrainSize elements.
template <typename RowFn>
void for_each_row(int64_t batch, int64_t state, const RowFn& row_fn) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(state, 1));
  torch::stable::parallel_for(0, batch, rows_per_chunk, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) row_fn(b);
  });
}

}  // namespace

template <typename T>
void lltm_cell_cpu(const T* gates, const T* old_cell, T* new_h, T* new_cell, int64_t batch, int64_t state) {
  for_each_row(batch, state, [&](int64_t b) {
    const int64_t row = b * state;
    cell_row(gates + 3 * row, old_cell + row, new_h + row, new_cell + row, state);
  });
}

template <typename T>
void lltm_cell_backward_cpu(const T* grad_h, const T* grad_cell, const T* new_cell, const T* gates, T* grad_gates,
                            T* grad_old_cell, int64_t batch, int64_t state) {
  for_each_row(batch, state, [&](int64_t b) {
    const int64_t row = b * state;
    cell_backward_row(grad_h + row, grad_cell + row, new_cell + row, gates + 3 * row, grad_gates + 3 * row,
                      grad_old_cell + row, state);
  });
}

#define JITOPS_INSTANTIATE(T)                                                   \
  template void lltm_cell_cpu<T>(const T*, const T*, T*, T*, int64_t, int64_t); \
  template void lltm_cell_backward_cpu<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t);
JITOPS_INSTANTIATE(float)
JITOPS_INSTANTIATE(double)
#undef JITOPS_INSTANTIATE

}  // namespace jitops
