// SPDX-License-Identifier: MIT
// The Python module every op's extension defines. Importing the built .so as a module is what runs
// its TORCH_LIBRARY registrations; `with_cuda` tells the loader whether CUDA kernels were compiled.
#pragma once

#ifndef JITOPS_NO_PYTHON_MODULE
#include <pybind11/pybind11.h>
#endif

#ifdef WITH_CUDA
#define JITOPS_WITH_CUDA true
#else
#define JITOPS_WITH_CUDA false
#endif

// A build that is loaded with torch.ops.load_library instead of imported (the CMake way in
// examples/build_three_ways/) defines JITOPS_NO_PYTHON_MODULE: no pybind11, no Python headers.
#ifdef JITOPS_NO_PYTHON_MODULE
#define JITOPS_PYTHON_MODULE()
#else
#define JITOPS_PYTHON_MODULE() \
  PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.attr("with_cuda") = JITOPS_WITH_CUDA; }
#endif
