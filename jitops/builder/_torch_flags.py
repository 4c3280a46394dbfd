# SPDX-License-Identifier: MIT
"""torch's compile and link flags, as torch's load() writes them (torch 2.11 to 2.15), made from
torch's include and library folders and the table below, with no code of torch's cpp_extension run.
tests/test_edit_loop.py compares them with torch's own under each supported torch."""

from __future__ import annotations

import os
import shlex
import sysconfig
from pathlib import Path

# The C++ standard torch compiles extensions with, from the release that brought it.
CXX_STANDARDS = (((2, 12), "c++20"), ((0, 0), "c++17"))
# What torch's nvcc command adds for every extension (cpp_extension.COMMON_NVCC_FLAGS).
NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
# torch's libraries an extension links, in torch's order (CUDA's where it has CUDA code).
LIBRARIES = {
    False: ("c10", "torch_cpu", "torch", "torch_python"),
    True: ("c10", "c10_cuda", "torch_cpu", "torch_cuda", "torch", "torch_python"),
}


def cxx_standard(version: str) -> str:
    """torch's -std= value for its version ("2.14.1+cu130")."""
    release = tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    return next(standard for first, standard in CXX_STANDARDS if release >= first)


def torch_folder() -> str:
    import torch  # loaded by the caller already: this module imports without it

    return os.path.dirname(os.path.abspath(torch.__file__))


def include_paths(cuda_home: Path | None) -> list[str]:
    """cpp_extension.include_paths("cuda" where cuda_home, else "cpu"), with this toolkit, and
    Python's headers, as torch's build file lists them (after the extension's own)."""
    include = os.path.join(torch_folder(), "include")
    paths = [include, os.path.join(include, "torch", "csrc", "api", "include")]
    if cuda_home is not None:
        # A Debian toolkit's home is /usr: gcc refuses -isystem /usr/include, and torch leaves it out.
        extra = [os.path.join(cuda_home, "include"), os.environ.get("CUDA_INC_PATH")]
        paths += [path for path in extra if path and path != "/usr/include"]
        cudnn = os.environ.get("CUDNN_HOME") or os.environ.get("CUDNN_PATH")
        paths += [os.path.join(cudnn, "include")] if cudnn else []
    return paths + [sysconfig.get_path("include", scheme="posix_prefix")]


def cuda_library_dir(cuda_home: Path) -> str:
    """The toolkit's lib64, or lib where only that exists (cpp_extension.library_paths("cuda"))."""
    lib64, lib = os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib")
    return lib if not os.path.exists(lib64) and os.path.exists(lib) else lib64


def compile_flags(library: str, cflags: list[str], cuda_cflags: list[str], include_dirs: list[str], cuda_home: Path | None):
    """(cflags, cuda_cflags) as shell text: torch's defines, the extension's -I and torch's -isystem,
    -fPIC and the standard, then the extension's own words, quoted; nvcc's add NVCC_FLAGS and -ccbin $CC."""
    import torch  # loaded by the caller already

    standard = f"-std={cxx_standard(torch.__version__)}"
    common = [f"-DTORCH_EXTENSION_NAME={library}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    common += [f"-I{shlex.quote(os.path.abspath(path))}" for path in include_dirs]
    common += [f"-isystem {shlex.quote(path)}" for path in include_paths(cuda_home)]
    quoted = [shlex.quote(flag) for flag in cflags]
    cxx = common + ["-fPIC", standard] + quoted
    if cuda_home is None:
        return " ".join(cxx), ""
    own = [shlex.quote(flag) for flag in cuda_cflags]
    nvcc = common + list(NVCC_FLAGS) + ["--compiler-options", "'-fPIC'"] + own
    if not any(flag.startswith("-std=") for flag in cuda_cflags):
        nvcc.append(standard)
    if "CC" in os.environ:
        nvcc = ["-ccbin", os.environ["CC"]] + nvcc
    return " ".join(cxx), " ".join(nvcc)


def link_flags(ldflags: list[str], cuda_home: Path | None) -> str:
    """torch's link flags as shell text: -shared, the extension's own, torch's libraries (and
    CUDA's runtime)."""
    words = ["-shared"] + [shlex.quote(flag) for flag in ldflags] + [f"-L{os.path.join(torch_folder(), 'lib')}"]
    words += [f"-l{name}" for name in LIBRARIES[cuda_home is not None]]
    if cuda_home is not None:
        words += [f"-L{cuda_library_dir(cuda_home)}", "-lcudart"]
    return " ".join(words)
