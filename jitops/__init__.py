# SPDX-License-Identifier: MIT
"""jitops: PyTorch ops shipped as C++/CUDA sources, compiled on first use and cached.

`import jitops` compiles nothing and does not even import torch. Each op is built (or loaded from
the cache) the first time it is called; `jitops.load_all()` does every op at once.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
import pkgutil


def available_ops() -> list[str]:
    """Names of the ops this installation ships (one module in jitops/ops/ each)."""
    ops = importlib.import_module(f"{__name__}.ops")
    return sorted(m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_"))


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
    (A job of many nodes: jitops.distributed.load_all builds each op once for all of them.)"""
    from concurrent.futures import ThreadPoolExecutor

    from . import _warm
    from .ops import require

    names = _op_names(ops)
    # Ops already in the cache load here, one after another: a warm load is a few milliseconds of
    # Python and a dlopen, which ctypes makes holding the GIL. (Opening the libraries in a worker
    # thread through libc's dlopen, without the GIL, was measured: 6.7 -> 5.7 ms on the 2-core VM,
    # no gain on an H100 machine, and it runs every library's static initializers, which take the
    # dispatcher's lock, beside this thread's registrations: not worth a possible lock-order hang.)
    # The rest build in parallel: each build waits on its own ninja process, so threads are enough
    # to overlap them.
    to_build, seen = [], {}  # seen: each file's identity, read once for all the ops' warm records
    for name in names:
        if _warm.recall(name, seen=seen) is None:  # not a warm start: look in the cache the long way
            from ._loader import load_op

            if load_op(name, cached_only=True) is None:
                to_build.append(name)
                continue
        require(name)  # the Python-side registrations
    with ThreadPoolExecutor(max_workers=max_workers or len(to_build) or 1) as pool:
        futures = {name: pool.submit(require, name) for name in to_build}
    failures = {name: f.exception() for name, f in futures.items() if f.exception() is not None}
    if failures:
        details = "\n".join(f"  {name}: {err}" for name, err in failures.items())
        raise RuntimeError(f"jitops.load_all: {len(failures)} of {len(names)} ops failed:\n{details}")


def _public_names(module) -> list[str]:
    return list(getattr(module, "__all__", ()))


def __getattr__(name: str):
    # PEP 562: op functions are imported on first access, so `import jitops` stays cheap.
    # The import system probes for submodules (`ops`, `distributed`) with getattr before importing them.
    if name.startswith("_") or name in ("ops", "distributed"):
        raise AttributeError(f"module 'jitops' has no attribute {name!r}")
    # The op's own module first (jitops.<op> and jitops.<op>_ref live in jitops/ops/<op>.py), so
    # that an op's first call imports that module alone; then the others.
    ops = available_ops()
    own = name.removesuffix("_ref")
    for op in ([own] if own in ops else []) + [op for op in ops if op != own]:
        module = importlib.import_module(f"{__name__}.ops.{op}")
        if name in _public_names(module):
            # Kept as a module attribute, so later lookups skip this search (which lists the
            # ops folder: about 70 us, more than a small op's whole call).
            value = globals()[name] = getattr(module, name)
            return value
    raise AttributeError(f"module 'jitops' has no attribute {name!r}")


def __dir__() -> list[str]:
    names = set(globals())
    for op in available_ops():
        names.update(_public_names(importlib.import_module(f"{__name__}.ops.{op}")))
    return sorted(names)
