// SPDX-License-Identifier: MIT
// One of bias_act's eight CUDA units (compiled in parallel): its share of the kernels; and the fused backward's block
// count.
#include "bias_act_impl.cuh"

namespace jitops {
template <typename T>
int64_t bias_act_fused_backward_blocks(const T* x, const T* grad, const T* grad_x, const BiasActShape& shape) {
  constexpr int kVec = max_vec_size<CudaType<T>>();
  const int64_t n = shape.n, channels = shape.channels, inner = shape.inner;
  // Runs of at least a warp's worth of vectors keep the loads coalesced; anything else (such as
  // channels_last, inner == 1) takes the unfused path, and so does float64 (no kernel compiled).
  const bool fusable = !std::is_same_v<T, double> && n > 0 && inner % kVec == 0 && inner / kVec >= 32 &&
                       channels <= kMaxGridY && is_aligned(x) && is_aligned(grad) && is_aligned(grad_x);
  return fusable ? blocks_for(n / channels / kVec) : 0;
}

template int64_t bias_act_fused_backward_blocks<float>(const float*, const float*, const float*, const BiasActShape&);
template int64_t bias_act_fused_backward_blocks<double>(const double*, const double*, const double*,
                                                        const BiasActShape&);
template int64_t bias_act_fused_backward_blocks<Half>(const Half*, const Half*, const Half*, const BiasActShape&);
template int64_t bias_act_fused_backward_blocks<BFloat16>(const BFloat16*, const BFloat16*, const BFloat16*,
                                                          const BiasActShape&);
JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(kSoftplus)
}  // namespace jitops
