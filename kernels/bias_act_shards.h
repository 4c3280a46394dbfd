// SPDX-License-Identifier: MIT
// The activations one unit of a bias_act kernel file instantiates: activation k where
// k % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT, so every one when the file is compiled as
// one unit (both 1 and 0). Included by kernels/cpu/bias_act.cpp after defining
// JITOPS_INSTANTIATE(act) for its kernels and the two numbers from its unit's JITOPS_SHARD and
// JITOPS_SHARD_COUNT (common.h); deliberately without an include guard. (kernels/cuda/bias_act.cu
// deals (activation, dtype) pairs by a table of its own: its kernels' compile times differ by 4x.)
#if 0 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kLinear)
#endif
#if 1 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kRelu)
#endif
#if 2 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kLrelu)
#endif
#if 3 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kTanh)
#endif
#if 4 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kSigmoid)
#endif
#if 5 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kElu)
#endif
#if 6 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kSelu)
#endif
#if 7 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kSoftplus)
#endif
#if 8 % JITOPS_ACTIVATION_UNITS == JITOPS_ACTIVATION_UNIT
JITOPS_INSTANTIATE(kSwish)
#endif
