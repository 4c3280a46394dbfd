// SPDX-License-Identifier: MIT
// The loader's test extension: plain C functions (no torch, no Python headers), so that a build
// takes well under a second of compiling and the tests time the loader, not the compiler.
#include "../kernels/tiny.h"

extern "C" int jitops_tiny_value() { return tiny_value(); }
extern "C" int jitops_tiny_units() { return tiny_units(); }
