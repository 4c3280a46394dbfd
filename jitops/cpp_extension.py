# SPDX-License-Identifier: MIT
"""torch.utils.cpp_extension with jitops' load() and load_inline(): the one-line swap

    from jitops import cpp_extension  # was: from torch.utils import cpp_extension

load and load_inline are jitops'; every other name (BuildExtension, CUDA_HOME, include_paths, ...)
is torch's, read from torch.utils.cpp_extension when first used (importing it costs setuptools'
import: a warm start that only loads never pays it). To run a program you cannot edit through
jitops, see `python -m jitops run`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .compat._torch_load import load

if TYPE_CHECKING:  # at run time, from __getattr__ on first use
    from .compat._torch_load_inline import load_inline

__all__ = ["load", "load_inline"]


def __getattr__(name: str):
    if name == "load_inline":  # its module on first use: a warm load() does not read it
        from .compat._torch_load_inline import load_inline  # on first use (above)

        return load_inline
    if name.startswith("__") and name.endswith("__"):  # pickle, inspect and friends probe these
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("torch.utils.cpp_extension"), name)
