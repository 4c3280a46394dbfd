// SPDX-License-Identifier: MIT
// The loader tests' extension: as small as a real jitops op can be, so each build takes seconds.
#pragma once

#define TINY_VALUE 42

// Set by the loader for a kernel file with a `// jitops: shards N` line (as kernels/common.h).
#ifndef JITOPS_SHARD
#define JITOPS_SHARD 0
#define JITOPS_SHARD_COUNT 1
#endif

int tiny_value();
int tiny_shard_count();
