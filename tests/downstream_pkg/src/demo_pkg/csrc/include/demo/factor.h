// SPDX-License-Identifier: MIT
// Included by both libraries: an edit rebuilds each of them, and nothing else.
#pragma once

#define DEMO_FACTOR 2.0f
