# SPDX-License-Identifier: MIT
"""add2 built by setuptools: `python setup.py build_ext --build-lib DIR --build-temp DIR`.

CppExtension (CUDAExtension when CUDA is wanted) and BuildExtension, on the checkout's sources.
"""

import os
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent.parent.parent
with_cuda = os.environ.get("WITH_CUDA") == "1"
sources = [ROOT / "kernels" / "cpu" / "add2.cpp", ROOT / "bindings" / "add2.cpp"]
if with_cuda:
    sources.append(ROOT / "kernels" / "cuda" / "add2.cu")
flags = ["-O3", "-fno-trapping-math"] + (["-DWITH_CUDA"] if with_cuda else [])
setup(
    name="jitops_add2_setuptools",
    ext_modules=[
        (CUDAExtension if with_cuda else CppExtension)(
            name="jitops_add2_setuptools",
            sources=[str(s) for s in sources],
            extra_compile_args={"cxx": flags, "nvcc": ["-O3"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
