# SPDX-License-Identifier: MIT
"""jitops: PyTorch ops shipped as C++/CUDA sources, compiled on first use and cached, and the
loader behind them for anyone's C++/CUDA.

`import jitops` compiles nothing and does not even import torch. Each op is built (or loaded from
the cache) the first time it is called; `jitops.load_all()` does every op at once.

Ops (each with a pure-torch `<op>_ref`):
    add2(a, b, *, out=None)                  elementwise a + b
    trilinear_interpolation(feats, points)   each point's 8 cell-corner features, blended
    lltm(input, weights, bias, old_h, old_cell), LLTM(input_features, state_size)
                                             the C++-extension tutorial's recurrent cell
    bias_act(x, b=None, dim=1, act="linear", alpha=None, gain=None, clamp=None)
                                             StyleGAN2's fused bias + activation (ACTIVATIONS)
    upfirdn2d(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1)
                                             StyleGAN2's upsample, FIR filter, downsample

The loader, for your own C++/CUDA:
    load(...), load_inline(...)              torch.utils.cpp_extension's, through jitops' cache
    Extension(name, sources, namespace=..., root=...)   a package's library: .load() gives a
                                             LoadedLibrary; .register_fake/.register_autograd
    load_all(ops=None, extensions=None)      build or load now, in parallel
    jitops.distributed.load_all(ops=None, extensions=None)   the same, once per torch.distributed job
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from .extension import Extension
from .warm._libraries import VERSION, LoadedLibrary

if _TYPE_CHECKING:  # what type checkers and editors see; at run time each is imported when first named
    from ._errors import BuildError, CacheError, NamespaceConflict
    from .compat._torch_load import load
    from .compat._torch_load_inline import load_inline
    from .ops._framework import available_ops, load_all
    from .ops.add2 import add2, add2_ref
    from .ops.bias_act import ACTIVATIONS, bias_act, bias_act_ref
    from .ops.lltm import LLTM, lltm, lltm_ref
    from .ops.trilinear_interpolation import trilinear_interpolation, trilinear_interpolation_ref
    from .ops.upfirdn2d import upfirdn2d, upfirdn2d_ref

__version__ = VERSION
# The loader's names, then the ops' (each op module's __all__: a test keeps the two in step).
__all__ = [
    "BuildError",
    "CacheError",
    "Extension",
    "LoadedLibrary",
    "NamespaceConflict",
    "available_ops",
    "load",
    "load_all",
    "load_inline",
    "add2",
    "add2_ref",
    "bias_act",
    "bias_act_ref",
    "ACTIVATIONS",
    "lltm",
    "lltm_ref",
    "LLTM",
    "trilinear_interpolation",
    "trilinear_interpolation_ref",
    "upfirdn2d",
    "upfirdn2d_ref",
]


# Imported when first named (PEP 562), from the module that holds each: `import jitops` reads only
# warm/_libraries, and a warm jitops.load reads compat/_torch_load besides (the ops and the long way stay unread).
_LAZY = {
    "BuildError": "_errors",
    "CacheError": "_errors",
    "NamespaceConflict": "_errors",
    "load": "compat._torch_load",
    "load_inline": "compat._torch_load_inline",
    "available_ops": "ops._framework",
    "load_all": "ops._framework",
}


def __getattr__(name: str):
    # (The import system probes for submodules with getattr before importing them.)
    if name in _LAZY:
        value = globals()[name] = getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        return value
    if name.startswith("_") or name in ("ops", "distributed", "warm", "store", "build", "compat"):
        raise AttributeError(f"module 'jitops' has no attribute {name!r}")
    # An op's function: its own module first (jitops/ops/<op>.py holds <op> and <op>_ref), then the others.
    from .ops._framework import available_ops

    ops = available_ops()
    own = name.removesuffix("_ref")
    for op in ([own] if own in ops else []) + [op for op in ops if op != own]:
        module = _importlib.import_module(f"{__name__}.ops.{op}")
        if name in getattr(module, "__all__", ()):
            value = globals()[name] = getattr(module, name)  # later lookups skip this search
            return value
    import difflib  # only for a misspelt name

    close = difflib.get_close_matches(name, __dir__(), n=1)
    raise AttributeError(f"module 'jitops' has no attribute {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))


def __dir__() -> list[str]:
    """The public names only (not the modules this one imports), the lazy ones included."""
    return sorted(set(__all__) | {"__version__", "distributed", "ops"})
