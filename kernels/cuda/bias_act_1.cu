// SPDX-License-Identifier: MIT
// One of bias_act's eight CUDA units (compiled in parallel): its share of the kernels.
#include "bias_act_impl.cuh"

namespace jitops {
JITOPS_BIAS_ACT_CUDA(kSoftplus, BFloat16)
JITOPS_BIAS_ACT_CUDA(kLinear, BFloat16)
JITOPS_BIAS_ACT_CUDA(kRelu, BFloat16)
}  // namespace jitops
