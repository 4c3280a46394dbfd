// SPDX-License-Identifier: MIT
#include <pybind11/pybind11.h>

#include "../kernels/tiny.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &tiny_value); }
