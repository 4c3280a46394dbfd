# SPDX-License-Identifier: MIT
"""Every private torch and pybind11 name jitops uses, behind this one door, each probed where it is
used, with a fallback or an error naming the torch versions tested (docs/ARCHITECTURE.md, "torch's
internals", lists them). No other module spells one (tests/test_extension.py). Standard library only."""

from __future__ import annotations

import functools
import os

TESTED = "torch 2.11 to 2.15"  # the versions whose suites run: each in CI (make test-torch-matrix), 2.11 on the GPU host


def dispatcher_has(namespace: str) -> str:
    """Where torch's dispatcher has the namespace defined already (its own words), or ""."""
    import torch  # loaded by the caller already: this module imports without it

    try:
        # A DEF registration of the namespace, dropped at once: torch refuses it if one exists.
        torch._C._dispatch_library("DEF", namespace, "", "jitops namespace check", 0).reset()
    except (AttributeError, TypeError):  # a torch whose private binding changed: jitops' own record only
        return ""
    except RuntimeError as err:
        previous = str(err).partition("Previous registration of TORCH_LIBRARY was registered at ")[2].partition(";")[0]
        return f"torch's dispatcher has it from {previous}" if previous else "torch's dispatcher has it"
    return ""


def autograd_internals():
    """(the guard that dispatches below autograd, the keyset after it, any_requires_grad(*args)),
    read once where the ops' per-call path is imported (each a module-level name there)."""
    import torch  # loaded by the caller already: this module imports without it

    try:
        below, after = torch._C._AutoDispatchBelowAutograd, torch._C._after_autograd_keyset
    except AttributeError as err:
        raise ImportError(
            f"jitops' ops need torch's dispatch guard below autograd ({err}), which torch {torch.__version__} "
            f"lacks; this jitops is tested with {TESTED}"
        ) from None
    any_requires_grad = getattr(torch._C, "_any_requires_grad", None)
    if any_requires_grad is None:

        def any_requires_grad(*args) -> bool:
            return any(isinstance(arg, torch.Tensor) and arg.requires_grad for arg in args)

    return below, after, any_requires_grad


def ops_in(namespace: str) -> list[str]:
    """The names of the ops torch's dispatcher has in the namespace (empty where it cannot say)."""
    import torch  # loaded by the caller already: this module imports without it

    try:
        names = torch._C._dispatch_get_all_op_names()
    except AttributeError:
        return []
    return sorted({name.partition("::")[2].partition(".")[0] for name in names if name.startswith(f"{namespace}::")})


def versioner_entry(existing):
    """The type of torch's load() versioner entries: that of one already there, else the private class."""
    if existing is not None:
        return type(existing)
    try:
        from torch.utils._cpp_extension_versioner import Entry
    except ImportError:
        return None
    return Entry


def pybind11_module_names():
    """The names in pybind11's per-interpreter module cache ("__pybind11_module_cache" in the
    interpreter state dict, reachable only through the C API); () where there is none."""
    state = _interpreter_state_dict()
    cache = state.get("__pybind11_module_cache") if isinstance(state, dict) else None
    return cache if isinstance(cache, dict) else ()


@functools.cache
def _interpreter_state_dict():
    """This interpreter's state dict (one per interpreter, for its whole life)."""
    import ctypes

    try:
        api = ctypes.pythonapi
        interpreter = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyInterpreterState_Get", api))()
        state_dict = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(("PyInterpreterState_GetDict", api))(interpreter)
    except (AttributeError, OSError):  # no such C API: sys.modules alone is asked
        return None
    return ctypes.cast(state_dict, ctypes.py_object).value if state_dict else None  # a borrowed reference


def default_build_root() -> str:
    """torch's default extensions root (before its py<ver>_<accelerator> folder)."""
    try:
        import torch._appdirs

        cache = torch._appdirs.user_cache_dir(appname="torch_extensions")
    except (ImportError, AttributeError):  # appdirs' own rule on Linux
        cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch_extensions")
    return os.path.realpath(cache)
