// SPDX-License-Identifier: MIT
// The activations one unit of a bias_act kernel file instantiates: activation k in unit
// k % JITOPS_SHARD_COUNT (common.h), so every one when the file is compiled as one unit. Included
// by kernels/cpu/bias_act.cpp and kernels/cuda/bias_act.cu, each after defining
// JITOPS_INSTANTIATE(act) for its kernels; deliberately without an include guard.
#if 0 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kLinear)
#endif
#if 1 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kRelu)
#endif
#if 2 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kLrelu)
#endif
#if 3 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kTanh)
#endif
#if 4 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kSigmoid)
#endif
#if 5 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kElu)
#endif
#if 6 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kSelu)
#endif
#if 7 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kSoftplus)
#endif
#if 8 % JITOPS_SHARD_COUNT == JITOPS_SHARD
JITOPS_INSTANTIATE(kSwish)
#endif
