// SPDX-License-Identifier: MIT
// One of bias_act's eight CUDA units (compiled in parallel): its share of the kernels.
#include "bias_act_impl.cuh"

namespace jitops {
JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(kLinear)
JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(kRelu)
JITOPS_BIAS_ACT_CUDA_ALL_BUT_BF16(kLrelu)
}  // namespace jitops
