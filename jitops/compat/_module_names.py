# SPDX-License-Identifier: MIT
"""The names of the Python modules jitops.load/load_inline create. pybind11 keeps one module per name
and interpreter, so a name any module of the process holds is never given to a new build (it becomes
<name>_v1, ...), and torch's load() is told which names jitops took."""

from __future__ import annotations

import sys
import threading

from .. import _torch_private

TORCH_MODULE = "torch.utils.cpp_extension"

_taken_by_jitops: dict[str, int] = {}  # base name -> the highest version jitops gave it
_lock = threading.Lock()
_hook = None  # the finder that tells torch's load() once torch.utils.cpp_extension is imported


def taken(name: str) -> bool:
    """Whether a module of this process holds `name`."""
    return name in sys.modules or name in _torch_private.pybind11_module_names()


def publish(module, base: str, version: int) -> None:
    """After jitops created `module` (base, or base_v<version>): import_module(its name) returns it
    where the name was free, and torch's load() of `base` takes a version above it."""
    sys.modules.setdefault(module.__name__, module)
    global _hook
    with _lock:
        _taken_by_jitops[base] = max(version, _taken_by_jitops.get(base, 0))
        torch_module = sys.modules.get(TORCH_MODULE)
        # Its __dict__, not getattr: under `jitops run` a lazy module would run torch's code for it
        # (and tell torch itself once it does).
        if torch_module is not None and "JIT_EXTENSION_VERSIONER" in vars(torch_module):
            _tell_torch(torch_module)
        elif _hook is None and not any(getattr(finder, "jitops_drop_in", False) for finder in sys.meta_path):
            _hook = _TellTorchOnImport()
            sys.meta_path.insert(0, _hook)


def after_torch_import(torch_module) -> None:
    """torch.utils.cpp_extension's code has just run: tell its versioner the names jitops took."""
    with _lock:
        _tell_torch(torch_module)


def _tell_torch(torch_module) -> None:
    """Raise torch's versioner entry of each base name jitops took to jitops' version, with a hash
    no build of torch's has: its next load() of that name then takes the version above."""
    versioner = torch_module.JIT_EXTENSION_VERSIONER
    for base, version in _taken_by_jitops.items():
        entry = versioner.entries.get(base)
        if entry is None or entry.version <= version:
            entry_type = _torch_private.versioner_entry(entry)
            if entry_type is not None:  # else torch's load() is not told (it may take the name too)
                versioner.entries[base] = entry_type(version=version, hash=f"jitops:{base}:{version}")


class _TellTorchOnImport:
    """A sys.meta_path finder, once: when torch.utils.cpp_extension is first imported, tell it
    (after its code ran). (No importlib.abc base: importing that costs a warm load more than this.)"""

    def find_spec(self, fullname, path, target=None):
        if fullname != TORCH_MODULE:
            return None
        import importlib.machinery

        global _hook
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _hook = None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            after_torch_import(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader instance
        return spec
