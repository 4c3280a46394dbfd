// SPDX-License-Identifier: MIT
// The second of tiny's two C++ units.
#include "../tiny.h"

int tiny_units() { return 2; }
