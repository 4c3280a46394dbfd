// SPDX-License-Identifier: MIT
// add2: out = a + b, elementwise. The C++ entry points take contiguous tensors of one shape, dtype
// and device and write into a preallocated, contiguous out; bindings/add2.cpp makes them so.
#pragma once

#include <ATen/core/Tensor.h>

namespace jitops {

// a: [*], b: [*], out: [*]  (same shape, dtype, device; all contiguous)
void add2_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);
void add2_cuda(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);

}  // namespace jitops
