// SPDX-License-Identifier: MIT
// The loader's test extension: plain C functions (no torch, no Python headers), so that a build
// takes well under a second of compiling and the tests time the loader, not the compiler.
#include "../kernels/tiny.h"

extern "C" int jitops_tiny_value() { return tiny_value(); }
extern "C" int jitops_tiny_shard_count() { return tiny_shard_count(); }

// The thread that ran this library's static initializers, i.e. the one that dlopened it (the
// test of load_all's warm path checks that a worker thread did, not the caller's).
#include <sys/syscall.h>
#include <unistd.h>
static const long loaded_by_thread = syscall(SYS_gettid);
extern "C" long jitops_tiny_loaded_by_thread() { return loaded_by_thread; }
