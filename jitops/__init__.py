# SPDX-License-Identifier: MIT
"""jitops: PyTorch ops shipped as C++/CUDA sources, compiled on first use and cached, and the
loader behind them for anyone's C++/CUDA.

`import jitops` compiles nothing and does not even import torch. Each op is built (or loaded from
the cache) the first time it is called; `jitops.load_all()` does every op at once.

Ops: one module each in jitops/ops/, each with a pure-torch `<op>_ref`: `jitops.available_ops()`
names them, `help(jitops.<op>)` describes one.

The loader, for your own C++/CUDA:
    load(...), load_inline(...)              torch.utils.cpp_extension's, through jitops' cache
    Extension(name, sources, namespace=..., root=...)   a package's library: .load() gives a
                                             LoadedLibrary; .register_fake/.register_autograd
    load_all(ops=None, extensions=None)      build or load now, in parallel
    jitops.distributed.load_all(ops=None, extensions=None)   the same, once per torch.distributed job
"""

import sys as _sys

# `python -m jitops` puts the working folder first on sys.path, where a json.py would shadow jitops'
# imports: off before any of them, put back by `run` where python has it (argv[0] is "-m" only then).
_MINUS_M = getattr(_sys, "argv", [])[:1] == ["-m"] and _sys.path and not _sys.flags.safe_path
_WORKING_FOLDER = _sys.path.pop(0) if _MINUS_M else None

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._layout import VERSION
from .extension import Extension as Extension
from .warm import LoadedLibrary as LoadedLibrary

if _TYPE_CHECKING:  # what type checkers and editors see; at run time each is imported when first named
    from typing import Any

    from ._errors import BuildError as BuildError
    from ._errors import CacheError as CacheError
    from ._errors import NamespaceConflict as NamespaceConflict
    from .compat._torch_load import load as load
    from .compat._torch_load_inline import load_inline as load_inline
    from .ops._framework import available_ops as available_ops
    from .ops._framework import load_all as load_all

    def __getattr__(name: str) -> Any: ...  # an op's names: found in jitops/ops/ when asked


__version__ = VERSION
# Imported when first named (PEP 562), from the module that holds each: `import jitops` reads only
# the warm wing and the ground it stands on, and a warm jitops.load reads compat/_torch_load besides
# (the ops and the long way stay unread).
_LAZY = {
    "BuildError": "_errors",
    "CacheError": "_errors",
    "NamespaceConflict": "_errors",
    "load": "compat._torch_load",
    "load_inline": "compat._torch_load_inline",
    "available_ops": "ops._framework",
    "load_all": "ops._framework",
}
# The loader's names. The ops' are each op module's __all__ (jitops/ops/<op>.py), found when asked
# (__all__, dir(), help(), an op's name): adding an op edits no list here.
LOADER_NAMES = sorted(["Extension", "LoadedLibrary", *_LAZY])


def _op_names() -> list[str]:
    """Every op module's public names (imports the op modules, not their libraries)."""
    from .ops._framework import available_ops  # jitops.ops imports torch: `import jitops` does not

    return [name for op in available_ops() for name in _importlib.import_module(f"{__name__}.ops.{op}").__all__]


def __getattr__(name: str):  # type: ignore[no-redef]  # noqa: F811 (the TYPE_CHECKING declaration above is for type checkers)
    # (The import system probes for submodules with getattr before importing them.)
    if name == "__all__":  # `from jitops import *`
        value = globals()["__all__"] = LOADER_NAMES + _op_names()
        return value
    if name in _LAZY:
        value = globals()[name] = getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        return value
    if name.startswith("_") or name in ("ops", "distributed", "warm", "store", "builder", "compat"):
        raise AttributeError(f"module 'jitops' has no attribute {name!r}")
    # An op's function: its own module first (jitops/ops/<op>.py holds <op> and <op>_ref), then the others.
    from .ops._framework import available_ops  # jitops.ops imports torch: `import jitops` does not

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
    return sorted(set(LOADER_NAMES) | set(_op_names()) | {"__version__", "distributed", "ops"})
