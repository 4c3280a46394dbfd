// SPDX-License-Identifier: MIT
// The loader tests' extension: as small as a real jitops op can be, so each build takes seconds.
#pragma once

#define TINY_VALUE 42

int tiny_value();
