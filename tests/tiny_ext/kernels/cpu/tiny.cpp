// SPDX-License-Identifier: MIT
// The first of tiny's two C++ units: both must be built and linked for the library to load.
#include "../tiny.h"

int tiny_value() { return TINY_VALUE; }
