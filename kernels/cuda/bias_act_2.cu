// SPDX-License-Identifier: MIT
// One of bias_act's eight CUDA units (compiled in parallel): its share of the kernels.
#include "bias_act_impl.cuh"

namespace jitops {
JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(kSwish)
JITOPS_BIAS_ACT_CUDA(kLrelu, BFloat16)
JITOPS_BIAS_ACT_CUDA(kElu, BFloat16)
}  // namespace jitops
