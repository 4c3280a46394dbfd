// SPDX-License-Identifier: MIT
#include "../tiny.h"

int tiny_value() { return TINY_VALUE; }
