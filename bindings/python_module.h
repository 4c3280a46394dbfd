// SPDX-License-Identifier: MIT
// The Python module every op's extension defines. Importing the built .so as a module is what runs
// its TORCH_LIBRARY registrations; `with_cuda` tells the loader whether CUDA kernels were compiled.
#pragma once

#include <pybind11/pybind11.h>

#ifdef WITH_CUDA
#define JITOPS_WITH_CUDA true
#else
#define JITOPS_WITH_CUDA false
#endif

#define JITOPS_PYTHON_MODULE() \
  PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.attr("with_cuda") = JITOPS_WITH_CUDA; }
