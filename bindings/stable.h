// SPDX-License-Identifier: MIT
// What every bindings/<op>.cpp shares: PyTorch's stable C++ API (torch/csrc/stable, torch >= 2.10)
// for the schema, the registrations, the tensors and the checks, and a dtype switch onto the
// kernels' plain-pointer entry points (kernels/common.h). The stable headers compile in under a
// second where torch/library.h and pybind11 took ten on a small CPU; the built library is loaded
// with torch.ops.load_library, so it defines no Python module.
#pragma once

#ifdef WITH_CUDA
#define USE_CUDA  // the stable shim declares its CUDA stream getter only under this name
#include <dlfcn.h>
#endif
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels/common.h"

namespace jitops {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

// Messages name the argument, the way torchvision's ops do ("a must be a CUDA tensor"), and are
// built by concatenating strings (numbers through std::to_string or shape_str), never by streaming:
// on the lent GPU machines (g++ 13 linking libstdc++ statically into the .so) formatting an integer
// through a stream segfaulted, and STD_TORCH_CHECK streams its line number.
inline std::string message_part(const char* text) { return text; }
inline std::string message_part(const std::string& text) { return text; }

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::string message;
  ((message += message_part(parts)), ...);
  throw std::runtime_error(message);
}

#define JITOPS_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) ::jitops::fail(__VA_ARGS__); \
  } while (false)

inline std::vector<int64_t> sizes_of(const Tensor& x) {
  std::vector<int64_t> sizes(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) sizes[d] = x.size(d);
  return sizes;
}

// "[3, 4]".
inline std::string shape_str(const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(sizes[d]);
  }
  return text + "]";
}
inline std::string shape_str(const Tensor& x) { return shape_str(sizes_of(x)); }

// torch's Python name of a dtype, as users write it.
inline std::string dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return "float32";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Half:
      return "float16";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Short:
      return "int16";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Bool:
      return "bool";
    case ScalarType::ComplexFloat:
      return "complex64";
    case ScalarType::ComplexDouble:
      return "complex128";
    default:
      return "dtype number " + std::to_string(static_cast<int>(t));
  }
}

inline std::string device_name(const Tensor& x) {
  return x.is_cuda() ? "cuda:" + std::to_string(x.get_device_index()) : (x.is_cpu() ? "cpu" : "another device");
}

inline bool same_device(const Tensor& x, const Tensor& y) {
  return x.is_cuda() == y.is_cuda() && x.is_cpu() == y.is_cpu() && x.get_device_index() == y.get_device_index();
}

// The dtypes every op takes (README, ops table): float32/float64 everywhere, float16/bfloat16 on CUDA.
inline void check_floating(const Tensor& x, const char* x_name) {
  const ScalarType t = x.scalar_type();
  const bool cuda_half = x.is_cuda() && (t == ScalarType::Half || t == ScalarType::BFloat16);
  JITOPS_CHECK(t == ScalarType::Float || t == ScalarType::Double || cuda_half, x_name,
               " must be float32 or float64 (float16 and bfloat16 on CUDA too), got ", dtype_name(t), " on ",
               device_name(x));
}

// Tensors one op combines must share a device and a dtype.
inline void check_same_device_dtype(const Tensor& x, const char* x_name, const Tensor& y, const char* y_name) {
  JITOPS_CHECK(same_device(x, y), x_name, " and ", y_name, " must be on the same device, got ", device_name(x), " and ",
               device_name(y));
  JITOPS_CHECK(x.scalar_type() == y.scalar_type(), x_name, " and ", y_name, " must have the same dtype, got ",
               dtype_name(x.scalar_type()), " and ", dtype_name(y.scalar_type()));
}

// Two tensors an elementwise op combines must agree on everything but their strides.
inline void check_same_layout(const Tensor& x, const char* x_name, const Tensor& y, const char* y_name) {
  check_same_device_dtype(x, x_name, y, y_name);
  bool same_shape = x.dim() == y.dim();
  for (int64_t d = 0; same_shape && d < x.dim(); ++d) same_shape = x.size(d) == y.size(d);
  JITOPS_CHECK(same_shape, x_name, " and ", y_name, " must have the same shape, got ", shape_str(x), " and ",
               shape_str(y));
}

// True when x's elements fill a block of memory with no gaps and no overlaps, in any order of
// dimensions (contiguous and channels_last both are): ATen's is_non_overlapping_and_dense.
inline bool is_dense(const Tensor& x) {
  std::vector<int64_t> dims(x.dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) {
    return x.stride(a) < x.stride(b) || (x.stride(a) == x.stride(b) && x.size(a) < x.size(b));
  });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (x.size(d) == 1) continue;
    if (x.stride(d) != expected) return false;
    expected *= x.size(d);
  }
  return true;
}

// A new tensor of these sizes and strides with like's dtype and device, through the shim's
// empty_strided: a direct call, where torch::stable::empty_like and new_empty go through the boxed
// dispatcher (about a microsecond of a small op's call).
inline Tensor empty_strided_like(const Tensor& like, const std::vector<int64_t>& sizes,
                                 const std::vector<int64_t>& strides) {
  int32_t dtype = 0, device_type = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                                                  dtype, device_type, like.get_device_index(), &handle));
  return Tensor(handle);
}

// A new contiguous tensor of these sizes with like's dtype and device.
inline Tensor empty_contiguous_like(const Tensor& like, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return empty_strided_like(like, sizes, strides);
}

// A new tensor with x's shape, strides, dtype and device, for a dense x (is_dense): what
// torch::stable::empty_like gives it.
inline Tensor empty_like_dense(const Tensor& x) {
  std::vector<int64_t> strides(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) strides[d] = x.stride(d);
  return empty_strided_like(x, sizes_of(x), strides);
}

// A view of x's memory with these sizes and strides, starting offset elements after x's start:
// as_strided through the shim's _reinterpret_tensor, a direct call where torch::stable::narrow
// and transpose go through the boxed dispatcher. For an op's own operands, below autograd.
inline Tensor strided_view(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                           int64_t offset = 0) {
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(x.get(), static_cast<int64_t>(sizes.size()), sizes.data(),
                                                        strides.data(), offset, &handle));
  return Tensor(handle);
}

// aten::<name>.<overload> through the dispatcher, for the ATen ops torch::stable does not wrap:
// every argument of the schema, in order (an optional one as std::optional); returns the first
// output.
template <typename... Args>
Tensor call_aten(const char* name, const char* overload, const Args&... args) {
  std::array<StableIValue, sizeof...(Args)> stack{torch::stable::detail::from(args)...};
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

// x itself when it is contiguous: torch::stable::contiguous always goes through the dispatcher,
// which costs a small op's call a good part of its time.
inline Tensor as_contiguous(const Tensor& x) { return x.is_contiguous() ? x : torch::stable::contiguous(x); }

// fn(T{}) with T the storage type of x's dtype (common.h): the kernels are templates on it. CPU
// kernels exist for float and double, CUDA kernels for the 16-bit types too; check_floating has
// already refused anything else.
template <typename Fn>
decltype(auto) dispatch_float_double(const Tensor& x, Fn&& fn) {
  switch (x.scalar_type()) {
    case ScalarType::Float:
      return fn(float{});
    case ScalarType::Double:
      return fn(double{});
    default:
      JITOPS_CHECK(false, "unsupported dtype ", dtype_name(x.scalar_type()), " on ", device_name(x));
  }
}

template <typename Fn>
decltype(auto) dispatch_floating(const Tensor& x, Fn&& fn) {
  switch (x.scalar_type()) {
    case ScalarType::Half:
      return fn(Half{});
    case ScalarType::BFloat16:
      return fn(BFloat16{});
    default:
      return dispatch_float_double(x, fn);
  }
}

template <typename T>
const T* const_ptr(const Tensor& x) {
  return static_cast<const T*>(x.const_data_ptr());
}
template <typename T>
T* mutable_ptr(const Tensor& x) {
  return static_cast<T*>(x.mutable_data_ptr());
}

#ifdef WITH_CUDA
// PyTorch's current CUDA stream on a device: the shim's aoti_torch_get_current_cuda_stream, looked
// up once in torch's libtorch_cuda.so, already loaded, rather than linked. It is the one symbol an
// op needs from that library, and a library that lists libtorch_cuda.so among its dependencies
// makes every dlopen of it walk that library's two dozen dependencies (cuBLAS, cuDNN, NCCL...):
// about half of a warm load's dlopen (callgrind, add2 on CUDA torch).
inline CudaStream current_cuda_stream(int32_t device_index) {
  using Getter = decltype(&aoti_torch_get_current_cuda_stream);
  static const Getter getter = [] {
    void* torch_cuda = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    return torch_cuda == nullptr ? nullptr
                                 : reinterpret_cast<Getter>(dlsym(torch_cuda, "aoti_torch_get_current_cuda_stream"));
  }();
  JITOPS_CHECK(getter != nullptr,
               "jitops: cannot find aoti_torch_get_current_cuda_stream in torch's libtorch_cuda.so, which a CUDA "
               "build of torch loads on import");
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(getter(device_index, &stream));
  return static_cast<CudaStream>(stream);
}

// A CUDA kernel launches on x's device (made current for the call) and PyTorch's current stream.
// Hidden, like the stable API types it holds (this header is compiled into each op alone).
class __attribute__((visibility("hidden"))) CudaLaunchScope {
 public:
  explicit CudaLaunchScope(const Tensor& x)
      : guard_(x.get_device_index()), stream_(current_cuda_stream(x.get_device_index())) {}
  CudaStream stream() const { return stream_; }

 private:
  torch::stable::accelerator::DeviceGuard guard_;  // before stream_: the device is current first
  CudaStream stream_ = nullptr;
};
#endif

// The one place an op picks its backend and dtype: on_cuda(T{}, stream) for a CUDA x, on x's
// device and PyTorch's current stream (T float, double, Half or BFloat16), else on_cpu(T{}) (T
// float or double). on_cuda is a generic lambda, never instantiated in a CPU-only build, so it may
// name the CUDA entry points there too.
template <typename OnCpu, typename OnCuda>
void launch_kernel(const Tensor& x, OnCpu&& on_cpu, [[maybe_unused]] OnCuda&& on_cuda) {
#ifdef WITH_CUDA
  if (x.is_cuda()) {
    const CudaLaunchScope scope(x);
    dispatch_floating(x, [&](auto t) { on_cuda(t, scope.stream()); });
    return;
  }
#endif
  dispatch_float_double(x, on_cpu);
}

}  // namespace jitops
