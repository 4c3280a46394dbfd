# SPDX-License-Identifier: MIT
"""demo_pkg's libraries: declaring them imports no torch and reads no file."""

from pathlib import Path

from jitops import Extension

ROOT = Path(__file__).parent
VERSION = "1.0.0"

# An op registered through torch.library, under the namespace declared here (<jitops/library.h>).
scale = Extension(
    "scale",
    ["csrc/scale.cpp"],
    namespace="demo_pkg",
    root=ROOT,
    include_dirs=["csrc/include"],
    version=VERSION,
    prebuilt_dir="prebuilt",
)
# A pybind11 module with a CUDA kernel, built where torch has CUDA (a CPU loop elsewhere).
fused = Extension(
    "fused",
    ["csrc/fused.cpp", "csrc/fused_cuda.cu"],
    namespace="demo_pkg",
    root=ROOT,
    include_dirs=["csrc/include"],
    python_module=True,
    version=VERSION,
    prebuilt_dir="prebuilt",
)
EXTENSIONS = [scale, fused]  # what the entry point below names: an Extension, or a list or tuple of them
