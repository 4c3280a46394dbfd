// SPDX-License-Identifier: MIT
// demo_pkg_stable::negate(x) = -x (float32, CPU), on torch's stable C++ API alone: declared with
// stable_abi=True (stable.py), so one build, or one prebuilt library in the wheel, serves every
// torch from jitops' floor up and any Python.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <stdexcept>

namespace {

using torch::stable::Tensor;

Tensor negate(Tensor x) {
  if (x.scalar_type() != torch::headeronly::ScalarType::Float || !x.is_cpu()) {
    throw std::runtime_error("negate: x must be a float32 CPU tensor");
  }
  const Tensor input = torch::stable::contiguous(x);
  Tensor out = torch::stable::empty_like(input);
  const float* in = static_cast<const float*>(input.const_data_ptr());
  float* result = static_cast<float*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < input.numel(); ++i) result[i] = -in[i];
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY(demo_pkg_stable, m) { m.def("negate(Tensor x) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(demo_pkg_stable, CPU, m) { m.impl("negate", TORCH_BOX(&negate)); }
