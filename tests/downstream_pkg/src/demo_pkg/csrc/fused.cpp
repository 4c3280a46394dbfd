// SPDX-License-Identifier: MIT
#include <torch/extension.h>

#include "demo/factor.h"

#ifdef WITH_CUDA
void add_scaled_cuda(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);
#endif

at::Tensor add_scaled(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.device() == b.device(), "add_scaled: a and b must match");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "add_scaled: float32 only");
  auto out = at::empty_like(a);
  if (a.is_cuda()) {
#ifdef WITH_CUDA
    add_scaled_cuda(a.contiguous(), b.contiguous(), out);
    return out;
#else
    TORCH_CHECK(false, "add_scaled: built without CUDA");
#endif
  }
  auto ac = a.contiguous(), bc = b.contiguous();
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + DEMO_FACTOR * pb[i];
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_scaled", &add_scaled, "a + DEMO_FACTOR * b"); }
