// SPDX-License-Identifier: MIT
// torch.ops.jitops.add2: schema, checks and per-backend registration.
#include "../kernels/add2.h"
#include "stable.h"

namespace jitops {
namespace {

void check_add2_inputs(const Tensor& a, const Tensor& b) {
  check_same_layout(a, "a", b, "b");
  check_floating(a, "a");
}

// a + b into out; all three contiguous, of one shape, dtype and device.
void add2_contiguous(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = a.numel();
  if (n == 0) return;
  launch_kernel(
      a,
      [&](auto t) {
        using T = decltype(t);
        add2_cpu<T>(const_ptr<T>(a), const_ptr<T>(b), mutable_ptr<T>(out), n);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        add2_cuda<T>(const_ptr<T>(a), const_ptr<T>(b), mutable_ptr<T>(out), n, stream);
      });
}

// The kernels take contiguous tensors; views are compacted here, once, for every backend.
Tensor add2(Tensor a, Tensor b) {
  check_add2_inputs(a, b);
  const Tensor a_c = as_contiguous(a);
  Tensor out = empty_like_dense(a_c);
  add2_contiguous(a_c, as_contiguous(b), out);
  return out;
}

void add2_out(Tensor a, Tensor b, Tensor out) {
  check_add2_inputs(a, b);
  check_same_layout(a, "a", out, "out");
  const Tensor a_c = as_contiguous(a);
  const Tensor b_c = as_contiguous(b);
  if (out.is_contiguous()) {
    add2_contiguous(a_c, b_c, out);
  } else {
    Tensor result = empty_like_dense(a_c);
    add2_contiguous(a_c, b_c, result);
    torch::stable::copy_(out, result);
  }
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def("add2(Tensor a, Tensor b) -> Tensor");
  // A separate mutating op that returns nothing, rather than an aliasing add2.out overload:
  // torch.compile can only functionalize custom ops whose outputs do not alias their inputs.
  m.def("add2_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(jitops, CPU, m) {
  m.impl("add2", TORCH_BOX(&add2));
  m.impl("add2_out", TORCH_BOX(&add2_out));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("add2", TORCH_BOX(&add2));
  m.impl("add2_out", TORCH_BOX(&add2_out));
}
#endif

}  // namespace jitops
