// SPDX-License-Identifier: MIT
#include <jitops/library.h>  // JITOPS_LIBRARY: torch.library's registration macros, in the declared namespace
#include <ATen/ATen.h>       // at::Tensor and its operators (x * factor)

#include "demo/scale_factor.h"

at::Tensor scale(const at::Tensor& x, double factor) {
  TORCH_CHECK(x.device().is_cpu(), "scale: x must be a CPU tensor");
  return x * factor * (DEMO_SCALE_FACTOR / 2.0f);  // DEMO_SCALE_FACTOR is 2 here: an edit to it shows in the result
}

JITOPS_LIBRARY(m) { m.def("scale(Tensor x, float factor) -> Tensor"); }
JITOPS_LIBRARY_IMPL(CPU, m) { m.impl("scale", &scale); }
