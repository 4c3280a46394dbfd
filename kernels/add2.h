// SPDX-License-Identifier: MIT
// add2: out = a + b, elementwise, over n contiguous elements of one dtype T. bindings/add2.cpp
// makes the tensors so and picks T (float, double; Half, BFloat16 on CUDA: common.h).
#pragma once

#include <cstdint>

#include "common.h"

namespace jitops {

template <typename T>
void add2_cpu(const T* a, const T* b, T* out, int64_t n);  // a, b, out: [n]
template <typename T>
void add2_cuda(const T* a, const T* b, T* out, int64_t n, CudaStream stream);

}  // namespace jitops
