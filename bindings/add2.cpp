// SPDX-License-Identifier: MIT
// torch.ops.jitops.add2: schema, per-backend registration, and the Python module entry point.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "../kernels/add2.h"
#include "../kernels/common.h"
#include "python_module.h"

namespace jitops {
namespace {

using Add2Kernel = void (*)(const at::Tensor&, const at::Tensor&, at::Tensor&);

void check_add2_inputs(const at::Tensor& a, const at::Tensor& b) {
  check_same_layout(a, "a", b, "b");
  check_floating(a, "a");
}

// The kernels take contiguous tensors; views are compacted here, once, for every backend.
template <Add2Kernel kernel>
void add2_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  check_add2_inputs(a, b);
  check_same_layout(a, "a", out, "out");
  const at::Tensor a_c = a.contiguous();
  const at::Tensor b_c = b.contiguous();
  if (out.is_contiguous()) {
    kernel(a_c, b_c, out);
  } else {
    at::Tensor result = at::empty_like(a_c);
    kernel(a_c, b_c, result);
    out.copy_(result);
  }
}

template <Add2Kernel kernel>
at::Tensor add2(const at::Tensor& a, const at::Tensor& b) {
  check_add2_inputs(a, b);
  const at::Tensor a_c = a.contiguous();
  at::Tensor out = at::empty_like(a_c);
  kernel(a_c, b.contiguous(), out);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def("add2(Tensor a, Tensor b) -> Tensor");
  // A separate mutating op that returns nothing, rather than an aliasing add2.out overload:
  // torch.compile can only functionalize custom ops whose outputs do not alias their inputs.
  m.def("add2_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("add2", &add2<add2_cpu>);
  m.impl("add2_out", &add2_out<add2_cpu>);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("add2", &add2<add2_cuda>);
  m.impl("add2_out", &add2_out<add2_cuda>);
}
#endif

}  // namespace jitops

JITOPS_PYTHON_MODULE()
