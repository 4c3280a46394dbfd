// SPDX-License-Identifier: MIT
// lltm: the cell of PyTorch's C++-extension tutorial. The matrix products run on ATen's BLAS
// (bindings/lltm.cpp); these kernels fuse the elementwise parts, forward and backward. The entry
// points take contiguous memory of one dtype and device as plain pointers (T: float and double, and
// Half and BFloat16 on CUDA), so that the kernel files include no torch header. The per-element
// math lives here, once, for the CPU and the CUDA kernels.
#pragma once

#include "common.h"
#include "fast_math.h"

namespace jitops {

// gates: [B, 3S], the pre-activations of the input gate, the output gate and the candidate cell
// side by side; old_cell: [B, S] -> new_h: [B, S], new_cell: [B, S]
template <typename T>
void lltm_cell_cpu(const T* gates, const T* old_cell, T* new_h, T* new_cell, int64_t batch, int64_t state);
template <typename T>
void lltm_cell_cuda(const T* gates, const T* old_cell, T* new_h, T* new_cell, int64_t batch, int64_t state,
                    CudaStream stream);

// grad_h, grad_cell, new_cell: [B, S], gates: [B, 3S] -> grad_gates: [B, 3S], grad_old_cell: [B, S].
// The gates' activations are recomputed from the pre-activations rather than saved: arithmetic is
// cheaper than the bytes.
template <typename T>
void lltm_cell_backward_cpu(const T* grad_h, const T* grad_cell, const T* new_cell, const T* gates, T* grad_gates,
                            T* grad_old_cell, int64_t batch, int64_t state);
template <typename T>
void lltm_cell_backward_cuda(const T* grad_h, const T* grad_cell, const T* new_cell, const T* gates, T* grad_gates,
                             T* grad_old_cell, int64_t batch, int64_t state, CudaStream stream);

// One state element's gate activations: i = sigmoid, o = sigmoid, c = elu (alpha 1).
template <typename acc_t>
struct LltmGates {
  acc_t input, output, candidate;

  JITOPS_HOST_DEVICE LltmGates(acc_t input_pre, acc_t output_pre, acc_t candidate_pre)
      : input(sigmoid(input_pre)), output(sigmoid(output_pre)), candidate(elu(candidate_pre)) {}

  // Both sides computed, then selected: a branch-free loop body the CPU kernels can vectorize.
  JITOPS_HOST_DEVICE static acc_t elu(acc_t x) {
    const acc_t negative_side = fast::expm1(x);
    return x > acc_t(0) ? x : negative_side;
  }

  JITOPS_HOST_DEVICE static acc_t sigmoid(acc_t x) { return acc_t(1) / (acc_t(1) + fast::exp(-x)); }

  // new_cell = old_cell + c * i
  JITOPS_HOST_DEVICE acc_t new_cell(acc_t old_cell) const { return old_cell + candidate * input; }

  // Given d(loss)/d(new_h) and d(loss)/d(new_cell) from the outputs, writes the pre-activations'
  // gradients and returns d(loss)/d(old_cell).
  JITOPS_HOST_DEVICE acc_t backward(acc_t grad_h, acc_t grad_cell, acc_t new_cell, acc_t grad_pre[3]) const {
    const acc_t tanh_cell = fast::tanh(new_cell);
    // new_h = tanh(new_cell) * o, so new_cell also gets new_h's gradient through the tanh.
    const acc_t grad_new_cell = grad_cell + grad_h * output * (acc_t(1) - tanh_cell * tanh_cell);
    grad_pre[0] = grad_new_cell * candidate * input * (acc_t(1) - input);
    grad_pre[1] = grad_h * tanh_cell * output * (acc_t(1) - output);
    // elu'(x) is 1 for x > 0 and exp(x) = elu(x) + 1 otherwise.
    grad_pre[2] = grad_new_cell * input * (candidate > acc_t(0) ? acc_t(1) : candidate + acc_t(1));
    return grad_new_cell;
  }
};

}  // namespace jitops
