// SPDX-License-Identifier: MIT
// Compiled as two units (the line below), each defining one function: both must be built and
// linked for the library to load.
// jitops: shards 2
#include "../tiny.h"

#if JITOPS_SHARD == 0
int tiny_value() { return TINY_VALUE; }
#endif

#if 1 % JITOPS_SHARD_COUNT == JITOPS_SHARD
int tiny_shard_count() { return JITOPS_SHARD_COUNT; }
#endif
