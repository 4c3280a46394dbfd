// SPDX-License-Identifier: MIT
#include <jitops/library.h>
#include <ATen/ATen.h>

#include "demo/scale_factor.h"

at::Tensor scale(const at::Tensor& x, double factor) {
  TORCH_CHECK(x.device().is_cpu(), "scale: x must be a CPU tensor");
  return x * factor * (DEMO_SCALE_FACTOR / 2.0f);  // DEMO_SCALE_FACTOR is 2 here: an edit to it shows in the result
}

JITOPS_LIBRARY(m) { m.def("scale(Tensor x, float factor) -> Tensor"); }
JITOPS_LIBRARY_IMPL(CPU, m) { m.impl("scale", &scale); }
