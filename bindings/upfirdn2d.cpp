// SPDX-License-Identifier: MIT
// torch.ops.jitops.upfirdn2d: schema, checks and per-backend registration. Its gradient is another
// upfirdn2d, so there is no backward op; the formula is registered in C++, as torchvision does,
// the one op whose Python side departs from jitops/ops' template: a Python formula costs a small
// layer's training step its CPU time twice, in the forward and in the backward, which the
// autograd engine runs on its CUDA device thread under the GIL (BENCHMARKS.md, upfirdn2d autograd).
// On CUDA, torch.ops.jitops._upfirdn2d_kernel is the same op with the kernel named ("auto",
// "general", "tiled"), for the tests that hold the two CUDA kernels to the same bits and for the
// benchmarks.
//
// This unit is on torch's stable API (bindings/stable.h, as the other ops): one build serves every
// torch. The autograd formula needs ATen's autograd (torch's C++ API, built for each torch), so it
// is a library of its own, loaded after this one: bindings/upfirdn2d_autograd.cpp.
#include <string>
#include <vector>

#include "../kernels/upfirdn2d.h"
#include "stable.h"

namespace jitops {
namespace {

std::string pair_str(const char* name, const std::vector<int64_t>& values) {
  return std::string(name) + "=" + shape_str(values);
}

// jitops/ops/upfirdn2d.py repeats these checks for tracing; keep the two in step. Returns the
// (empty, contiguous) output.
Tensor checked_output(const Tensor& x, const Tensor& f, const std::vector<int64_t>& up,
                      const std::vector<int64_t>& down, const std::vector<int64_t>& padding) {
  JITOPS_CHECK(x.dim() == 4, "x must have shape (N, C, H, W), got ", shape_str(x));
  JITOPS_CHECK(f.dim() == 2 && f.size(0) >= 1 && f.size(1) >= 1, "f must be a non-empty 2-D filter here, got ",
               shape_str(f));
  JITOPS_CHECK(up.size() == 2 && up[0] >= 1 && up[1] >= 1, "up must be >= 1 per axis, got ", pair_str("up", up));
  JITOPS_CHECK(down.size() == 2 && down[0] >= 1 && down[1] >= 1, "down must be >= 1 per axis, got ",
               pair_str("down", down));
  JITOPS_CHECK(padding.size() == 4, "padding must be [x0, x1, y0, y1], got ", shape_str(padding));
  check_floating(x, "x");
  check_same_device_dtype(x, "x", f, "f");
  const int64_t fh = f.size(0), fw = f.size(1);
  const std::string arguments = "x " + shape_str(x) + ", " + pair_str("up", up) + ", " + pair_str("down", down) +
                                ", padding=" + shape_str(padding);
  // In 128 bits: up and padding may be anything an int64 holds, and their products must not wrap.
  const __int128 padded_w = __int128(x.size(3)) * up[0] + padding[0] + padding[1];
  const __int128 padded_h = __int128(x.size(2)) * up[1] + padding[2] + padding[3];
  JITOPS_CHECK(padded_w >= fw && padded_h >= fh, "the upsampled, padded input is smaller than the filter ",
               shape_str(f), ": no output pixel; ", arguments);
  const __int128 out_h = (padded_h - fh) / down[1] + 1, out_w = (padded_w - fw) / down[0] + 1;
  // A double cannot overflow here, and is exact enough to compare with the int64 limit.
  const double bytes = double(x.size(0)) * double(x.size(1)) * double(out_h) * double(out_w) * double(x.element_size());
  JITOPS_CHECK(bytes < 9.2e18, "the output would take more than 2^63 bytes, more than a tensor can hold: ", arguments);
  const std::vector<int64_t> sizes{x.size(0), x.size(1), int64_t(out_h), int64_t(out_w)};
  try {
    return empty_contiguous_like(x, sizes);
  } catch (const std::exception& error) {
    fail("cannot allocate the output ", shape_str(sizes), " (", std::to_string(int64_t(bytes)), " bytes) for ",
         arguments, ": ", error.what());
  }
}

// x and f contiguous, out from checked_output; either backend.
void run(const Tensor& x, const Tensor& f, const std::vector<int64_t>& up, const std::vector<int64_t>& down,
         const std::vector<int64_t>& padding, bool flip_filter, double gain, const Tensor& out,
         Upfirdn2dKernel kernel) {
  const Upfirdn2dParams params{up[0], up[1], down[0], down[1], padding[0], padding[2], flip_filter, gain};
  const Upfirdn2dSizes sizes{x.size(0) * x.size(1), x.size(2),  x.size(3), f.size(0), f.size(1),
                             out.size(2),           out.size(3)};
  launch_kernel(
      x,
      [&](auto t) {
        using T = decltype(t);
        upfirdn2d_cpu<T>(const_ptr<T>(x), const_ptr<T>(f), mutable_ptr<T>(out), sizes, params);
      },
      [&](auto t, CudaStream stream) {
        using T = decltype(t);
        upfirdn2d_cuda<T>(const_ptr<T>(x), const_ptr<T>(f), mutable_ptr<T>(out), sizes, params, stream, kernel);
      });
}

Tensor upfirdn2d(Tensor x, Tensor f, std::vector<int64_t> up, std::vector<int64_t> down, std::vector<int64_t> padding,
                 bool flip_filter, double gain) {
  Tensor out = checked_output(x, f, up, down, padding);
  run(as_contiguous(x), as_contiguous(f), up, down, padding, flip_filter, gain, out, Upfirdn2dKernel::kAuto);
  return out;
}

#ifdef WITH_CUDA
Tensor upfirdn2d_kernel_on_cuda(Tensor x, Tensor f, std::vector<int64_t> up, std::vector<int64_t> down,
                                std::vector<int64_t> padding, bool flip_filter, double gain, std::string kernel) {
  JITOPS_CHECK(kernel == "auto" || kernel == "general" || kernel == "tiled",
               "kernel must be 'auto', 'general' or 'tiled', got '", kernel, "'");
  const Upfirdn2dKernel which = kernel == "general" ? Upfirdn2dKernel::kGeneral
                                : kernel == "tiled" ? Upfirdn2dKernel::kTiled
                                                    : Upfirdn2dKernel::kAuto;
  Tensor out = checked_output(x, f, up, down, padding);
  run(as_contiguous(x), as_contiguous(f), up, down, padding, flip_filter, gain, out, which);
  return out;
}
#endif

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(jitops, m) {
  m.def(
      "upfirdn2d(Tensor x, Tensor f, int[2] up, int[2] down, int[4] padding, bool flip_filter, float gain) "
      "-> Tensor");
  m.def(
      "_upfirdn2d_kernel(Tensor x, Tensor f, int[2] up, int[2] down, int[4] padding, bool flip_filter, float gain, "
      "str kernel) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(jitops, CPU, m) { m.impl("upfirdn2d", TORCH_BOX(&upfirdn2d)); }

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(jitops, CUDA, m) {
  m.impl("upfirdn2d", TORCH_BOX(&upfirdn2d));
  m.impl("_upfirdn2d_kernel", TORCH_BOX(&upfirdn2d_kernel_on_cuda));
}
#endif

}  // namespace jitops
