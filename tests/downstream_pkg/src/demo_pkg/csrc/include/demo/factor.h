// SPDX-License-Identifier: MIT
// Included by fused's C++ and CUDA units (scale has a header of its own).
#pragma once

#define DEMO_FACTOR 2.0f
