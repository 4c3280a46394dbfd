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
    Extension(name, sources, namespace=..., root=...)   a package's library, loaded on first use
    jitops.distributed.load_all()            one build per torch.distributed job
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._core import VERSION
from .extension import Extension

if _TYPE_CHECKING:  # what type checkers and editors see; at run time each is imported when first named
    from ._errors import BuildError, CacheError, NamespaceConflict
    from ._torch_load import load, load_inline
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


def available_ops() -> list[str]:
    """Names of the ops this installation ships (one module in jitops/ops/ each)."""
    from .ops import available_ops  # jitops.ops imports torch; `import jitops` does not

    return available_ops()


def _op_names(ops: list[str] | None) -> list[str]:
    """The op names a load_all call means: all of them for None; unknown names are an error."""
    available = available_ops()  # lists a folder: once
    names = available if ops is None else list(ops)
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise ValueError(f"ops: unknown op(s) {unknown}; available: {available}")
    return names


def load_all(ops: list[str] | None = None, max_workers: int | None = None) -> None:
    """Build or load every op (or those named) now, in parallel: e.g. in a Docker build step.
    (Many nodes: jitops.distributed.load_all builds each op once for all of them.)"""
    from concurrent.futures import ThreadPoolExecutor  # only load_all uses threads

    from . import _warm  # here, not at import: `import jitops` imports neither torch nor the loader
    from .ops import extension, require

    names = _op_names(ops)
    # Cached ops load here one after another (a dlopen holds the GIL); the rest build in threads.
    to_build, seen = [], {}  # seen: each file's identity, read once for all the ops' warm records
    for name in names:
        if _warm.recall(extension(name), seen=seen) is None:  # not a warm start: the long way
            from ._loader import load  # only on a miss, as in jitops.ops.require

            if load(extension(name), cached_only=True) is None:
                to_build.append(name)
                continue
        require(name)  # the Python-side registrations
    with ThreadPoolExecutor(max_workers=max_workers or len(to_build) or 1) as pool:
        futures = {name: pool.submit(require, name) for name in to_build}
    failures = {name: f.exception() for name, f in futures.items() if f.exception() is not None}
    if failures:
        details = "\n".join(f"  {name}: {err}" for name, err in failures.items())
        raise RuntimeError(f"jitops.load_all: {len(failures)} of {len(names)} ops failed:\n{details}")


def __getattr__(name: str):
    # PEP 562: op functions are imported on first access, so `import jitops` stays cheap. (The import
    # system probes for submodules with getattr before importing them.)
    if name in ("BuildError", "CacheError", "NamespaceConflict"):  # imported when first named: a warm start raises neither
        from . import _errors

        value = globals()[name] = getattr(_errors, name)
        return value
    if name in ("load", "load_inline"):  # torch's load()/load_inline() through jitops: imported when first named
        from . import _torch_load

        value = globals()[name] = getattr(_torch_load, name)
        return value
    if name.startswith("_") or name in ("ops", "distributed"):
        raise AttributeError(f"module 'jitops' has no attribute {name!r}")
    # The op's own module first (jitops/ops/<op>.py holds <op> and <op>_ref), then the others.
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
