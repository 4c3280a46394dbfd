// SPDX-License-Identifier: MIT
// Argument checks on ATen tensors, for the ops whose bindings still use torch/library.h (the others
// use bindings/stable.h): their bindings and CPU kernel files include it (their CUDA files include
// no torch header; bindings/aten_cuda.h launches them).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

#include "common.h"

// Messages name the argument, the way torchvision's ops do ("a must be a CPU tensor").
#define JITOPS_CHECK_CPU(x) TORCH_CHECK((x).is_cpu(), #x " must be a CPU tensor, got device ", (x).device())
#define JITOPS_CHECK_CONTIGUOUS(x) TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT_CPU(x) \
  JITOPS_CHECK_CPU(x);     \
  JITOPS_CHECK_CONTIGUOUS(x)

namespace jitops {

// "[3, 4]". Error messages pass numbers as strings (this, or std::to_string), never as integers:
// on the lent GPU machines (torch 2.11, g++ 13 in /opt/gcc) streaming any integer, or an
// IntArrayRef, into a TORCH_CHECK message segfaulted, while strings, dtypes and devices did not.
// The .so built there has no libstdc++ among its NEEDED libraries (that g++ links it statically),
// so two copies of libstdc++'s stream code meet in one message; strings never reach a locale
// facet. Tests raise every message with numbers in it.
inline std::string shape_str(at::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "]";
}

// The dtypes every op takes (DESIGN.md): float32/float64 everywhere, float16/bfloat16 on CUDA.
inline void check_floating(const at::Tensor& x, const char* x_name) {
  const at::ScalarType t = x.scalar_type();
  const bool cuda_half = x.is_cuda() && (t == at::kHalf || t == at::kBFloat16);
  TORCH_CHECK(t == at::kFloat || t == at::kDouble || cuda_half, x_name,
              " must be float32 or float64 (float16 and bfloat16 on CUDA too), got ", t, " on ", x.device());
}

// Tensors one op combines must share a device and a dtype.
inline void check_same_device_dtype(const at::Tensor& x, const char* x_name, const at::Tensor& y, const char* y_name) {
  TORCH_CHECK(x.device() == y.device(), x_name, " and ", y_name, " must be on the same device, got ", x.device(),
              " and ", y.device());
  TORCH_CHECK(x.scalar_type() == y.scalar_type(), x_name, " and ", y_name, " must have the same dtype, got ",
              x.scalar_type(), " and ", y.scalar_type());
}

// Two tensors an elementwise op combines must agree on everything but their strides.
inline void check_same_layout(const at::Tensor& x, const char* x_name, const at::Tensor& y, const char* y_name) {
  check_same_device_dtype(x, x_name, y, y_name);
  TORCH_CHECK(x.sizes() == y.sizes(), x_name, " and ", y_name, " must have the same shape, got ", shape_str(x.sizes()),
              " and ", shape_str(y.sizes()));
}

}  // namespace jitops
