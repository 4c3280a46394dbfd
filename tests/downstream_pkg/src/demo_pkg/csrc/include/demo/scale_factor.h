// SPDX-License-Identifier: MIT
// Included by the scale library alone: an edit rebuilds it, and not fused.
#pragma once

#define DEMO_SCALE_FACTOR 2.0f
