// SPDX-License-Identifier: MIT
// torch.ops.jitops.upfirdn2d's autograd formula, registered in C++ (why: bindings/upfirdn2d.cpp),
// in a library of its own (jitops/ops/upfirdn2d.py's PARTS): it uses torch's C++ API, so it is
// built for each torch, while the op's kernels and schema, on the stable ABI, serve every torch.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace jitops {
namespace {

using Upfirdn2dSignature = at::Tensor(const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                      at::IntArrayRef, bool, double);

// jitops::upfirdn2d through the dispatcher (so that, inside a backward with create_graph=True,
// the gradient's own call records its gradient: gradients of every order).
at::Tensor call_upfirdn2d(const at::Tensor& x, const at::Tensor& f, at::IntArrayRef up, at::IntArrayRef down,
                          at::IntArrayRef padding, bool flip_filter, double gain) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("jitops::upfirdn2d", "").typed<Upfirdn2dSignature>();
  return op.call(x, f, up, down, padding, flip_filter, gain);
}

// Differentiable in x, to any order; not in f (as in StyleGAN2). The gradient of x is upfirdn2d of
// the output's gradient with the filter flipped, up and down swapped, and the padding that maps
// the output grid back onto the input grid (StyleGAN2's identity; jitops/ops/upfirdn2d.py's
// gradient_args spells out the same arguments for the benchmarks, and
// tests/test_upfirdn2d.py::test_gradient_is_the_upfirdn2d_gradient_args_give holds the two together).
class Upfirdn2dFunction : public torch::autograd::Function<Upfirdn2dFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& f,
                            at::IntArrayRef up, at::IntArrayRef down, at::IntArrayRef padding, bool flip_filter,
                            double gain) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = call_upfirdn2d(x, f, up, down, padding, flip_filter, gain);
    }
    ctx->save_for_backward({f});
    const int64_t in_h = x.size(2), in_w = x.size(3), out_h = out.size(2), out_w = out.size(3);
    const int64_t fh = f.size(0), fw = f.size(1);
    ctx->saved_data["up"] = std::vector<int64_t>{down[0], down[1]};  // the gradient's up is the forward's down
    ctx->saved_data["down"] = std::vector<int64_t>{up[0], up[1]};
    ctx->saved_data["padding"] =
        std::vector<int64_t>{fw - padding[0] - 1, in_w * up[0] - out_w * down[0] + padding[0] - up[0] + 1,
                             fh - padding[2] - 1, in_h * up[1] - out_h * down[1] + padding[2] - up[1] + 1};
    ctx->saved_data["flip_filter"] = !flip_filter;
    ctx->saved_data["gain"] = gain;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor f = ctx->get_saved_variables()[0];
    const at::Tensor grad_x =
        call_upfirdn2d(grads[0], f, ctx->saved_data["up"].toIntVector(), ctx->saved_data["down"].toIntVector(),
                       ctx->saved_data["padding"].toIntVector(), ctx->saved_data["flip_filter"].toBool(),
                       ctx->saved_data["gain"].toDouble());
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor upfirdn2d_autograd(const at::Tensor& x, const at::Tensor& f, at::IntArrayRef up, at::IntArrayRef down,
                              at::IntArrayRef padding, bool flip_filter, double gain) {
  return Upfirdn2dFunction::apply(x, f, up, down, padding, flip_filter, gain);
}

}  // namespace

TORCH_LIBRARY_IMPL(jitops, Autograd, m) { m.impl("upfirdn2d", &upfirdn2d_autograd); }

}  // namespace jitops
