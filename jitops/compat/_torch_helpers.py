# SPDX-License-Identifier: MIT
"""The names of torch.utils.cpp_extension that programs use besides load() (docs/extensions.md),
computed as torch computes them without importing that module (and setuptools); a case not covered
(ROCm, XPU, Windows) returns MISSING, and the caller runs torch's code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .. import _torch_private

MISSING = object()

# Plain values, as torch's module sets them at import on Linux.
_CONSTANTS = {
    "IS_WINDOWS": False,
    "IS_MACOS": False,
    "IS_LINUX": True,
    "LIB_EXT": ".so",
    "EXEC_EXT": "",
    "CLIB_PREFIX": "lib",
    "CLIB_EXT": ".so",
    "SHARED_FLAG": "-shared",
    "SUBPROCESS_DECODE_ARGS": (),
    "IS_HIP_EXTENSION": False,
    "ROCM_HOME": None,
    "HIP_HOME": None,
}


def value(name: str):
    """torch.utils.cpp_extension.<name>, computed here; MISSING where torch's module must answer."""
    import torch  # imported by the program already (it imported torch.utils.cpp_extension)

    if not sys.platform.startswith("linux") or torch.version.hip is not None:
        return MISSING
    if name in _CONSTANTS:
        return _CONSTANTS[name]
    if name in ("_TORCH_PATH", "TORCH_LIB_PATH"):
        torch_path = os.path.dirname(os.path.abspath(torch.__file__))
        return torch_path if name == "_TORCH_PATH" else os.path.join(torch_path, "lib")
    if name == "CUDA_HOME":
        return _find_cuda_home() if torch.version.cuda else None
    if name == "CUDNN_HOME":
        return os.environ.get("CUDNN_HOME") or os.environ.get("CUDNN_PATH")
    return _FUNCTIONS.get(name, MISSING)


def _find_cuda_home() -> str | None:
    """torch's guesses, in its order: $CUDA_HOME or $CUDA_PATH, the nvcc on PATH, /usr/local/cuda
    (without torch's "No CUDA runtime is found" warning, which costs a CUDA initialisation)."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home is None:
        nvcc = shutil.which("nvcc")
        if nvcc is not None:
            cuda_home = os.path.dirname(os.path.dirname(nvcc))
        else:
            cuda_home = "/usr/local/cuda"
            if not os.path.exists(cuda_home):
                cuda_home = None
    return cuda_home


def _module():
    """torch.utils.cpp_extension as the program sees it (a value the program set there wins)."""
    return sys.modules["torch.utils.cpp_extension"]


def _join_cuda_home(*paths) -> str:
    cuda_home = vars(_module()).get("CUDA_HOME", MISSING)  # a value the program set wins
    cuda_home = value("CUDA_HOME") if cuda_home is MISSING else cuda_home
    if cuda_home is None:
        raise OSError("CUDA_HOME environment variable is not set. Please set it to your CUDA install root.")
    return os.path.join(cuda_home, *paths)


def get_default_build_root() -> str:
    return _torch_private.default_build_root()


def _get_build_directory(name: str, verbose: bool) -> str:
    import torch

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        accelerator = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda is not None else "cpu"
        python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
        root = os.path.join(get_default_build_root(), f"{python}_{accelerator}")
    if verbose:
        _logger().info("Using %s as PyTorch extensions root...", root)
    build_directory = os.path.join(root, name)
    if not os.path.exists(build_directory):
        if verbose:
            _logger().debug("Creating extension directory %s...", build_directory)
        os.makedirs(build_directory, exist_ok=True)
    return build_directory


def _logger():
    import logging

    return logging.getLogger("torch.utils.cpp_extension")


def include_paths(device_type: str = "cpu", torch_include_dirs=True) -> list[str]:
    if device_type not in ("cpu", "cuda"):
        return _from_torch("include_paths", device_type, torch_include_dirs)
    torch_include = os.path.join(value("_TORCH_PATH"), "include")
    paths = [torch_include, os.path.join(torch_include, "torch", "csrc", "api", "include")] if torch_include_dirs else []
    if device_type == "cuda":
        cuda_include = _join_cuda_home("include")
        if cuda_include != "/usr/include":  # a Debian toolkit's home is /usr; gcc refuses -I/usr/include
            paths.append(cuda_include)
        cuda_inc_path = os.environ.get("CUDA_INC_PATH", None)
        if cuda_inc_path and cuda_inc_path != "/usr/include":
            paths.append(cuda_inc_path)
        cudnn_home = vars(_module()).get("CUDNN_HOME", value("CUDNN_HOME"))
        if cudnn_home is not None:
            paths.append(os.path.join(cudnn_home, "include"))
    return paths


def library_paths(
    device_type: str = "cpu", torch_include_dirs: bool = True, cross_target_platform: str | None = None
) -> list[str]:
    if device_type not in ("cpu", "cuda") or cross_target_platform is not None:
        return _from_torch("library_paths", device_type, torch_include_dirs, cross_target_platform)
    paths = [value("TORCH_LIB_PATH")] if torch_include_dirs else []
    if device_type == "cuda":
        lib_dir = "lib64"
        if not os.path.exists(_join_cuda_home(lib_dir)) and os.path.exists(_join_cuda_home("lib")):
            lib_dir = "lib"  # a 64-bit toolkit installed in lib/
        paths.append(_join_cuda_home(lib_dir))
        cudnn_home = vars(_module()).get("CUDNN_HOME", value("CUDNN_HOME"))
        if cudnn_home is not None:
            paths.append(os.path.join(cudnn_home, lib_dir))
    return paths


def is_ninja_available() -> bool:
    try:
        subprocess.check_output(["ninja", "--version"])
    except Exception:
        return False
    return True


def verify_ninja_availability() -> None:
    if not is_ninja_available():
        raise RuntimeError("Ninja is required to load C++ extensions (pip install ninja to get it)")


def _from_torch(name: str, *args):
    """A case torch's module answers: its code is run into it (by its loader, jitops' lazy one),
    which replaces this function there by torch's, then asked."""
    module = _module()
    run_torch_code = getattr(getattr(module.__spec__, "loader", None), "run_torch_code", None)
    if run_torch_code is not None:
        run_torch_code(module)
    return getattr(module, name)(*args)


_FUNCTIONS = {
    function.__name__: function
    for function in (
        _get_build_directory,
        get_default_build_root,
        _join_cuda_home,
        include_paths,
        library_paths,
        is_ninja_available,
        verify_ninja_availability,
    )
}
