// SPDX-License-Identifier: MIT
// One of bias_act's eight CUDA units (compiled in parallel): its share of the kernels; and the run-time-switch kernels.
#include "bias_act_impl.cuh"

namespace jitops {
template <typename T>
void bias_act_any_cuda(const T* x_t, const T* b_t, const T* grad_t, T* out_t, const BiasActShape& shape,
                       const BiasActParams& params, int derivative, Activation act, CudaStream stream) {
  using scalar_t = CudaType<T>;
  const Layout layout{shape.n, shape.inner, shape.channels, shape.n < (int64_t{1} << 32)};
  const int blocks = grid_size(shape.n, kThreads);
  dispatch_derivative(derivative, [&](auto order) {
    bias_act_any_kernel<decltype(order)::value, scalar_t><<<blocks, kThreads, 0, stream>>>(
        cuda_ptr(x_t), cuda_ptr(b_t), cuda_ptr(grad_t), cuda_ptr(out_t), layout, scalars<scalar_t>(params), act);
    JITOPS_CHECK_LAUNCH();
  });
}

#define JITOPS_INSTANTIATE(T)                                                                                          \
  template void bias_act_any_cuda<T>(const T*, const T*, const T*, T*, const BiasActShape&, const BiasActParams&, int, \
                                     Activation, CudaStream);
JITOPS_FOR_EACH_CUDA_TYPE(JITOPS_INSTANTIATE)
#undef JITOPS_INSTANTIATE
JITOPS_BIAS_ACT_CUDA(kTanh, BFloat16)
JITOPS_BIAS_ACT_CUDA(kSelu, BFloat16)
}  // namespace jitops
