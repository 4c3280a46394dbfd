// SPDX-License-Identifier: MIT
// One of bias_act's three CPU units (compiled in parallel): the activations it instantiates.
#include "bias_act_impl.h"

namespace jitops {
JITOPS_BIAS_ACT_CPU(kLrelu) JITOPS_BIAS_ACT_CPU(kElu) JITOPS_BIAS_ACT_CPU(kSwish)
}  // namespace jitops
