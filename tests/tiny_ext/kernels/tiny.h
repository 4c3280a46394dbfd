// SPDX-License-Identifier: MIT
// The loader tests' extension: as small as a real extension can be, so each build takes seconds.
#pragma once

#define TINY_VALUE 42

int tiny_value();
int tiny_units();
