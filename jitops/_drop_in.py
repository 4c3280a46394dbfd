# SPDX-License-Identifier: MIT
"""Unmodified programs through jitops: `python -m jitops run script.py|-m module [args]`, or any
Python started with JITOPS_TORCH_LOAD=1 (jitops' .pth file reads it at start-up).

Either way, torch.utils.cpp_extension is served lazily: importing it gives a module whose load and
load_inline are jitops', and whose every other name (BuildExtension, CUDA_HOME, ...) makes it
torch's module on first use, torch's code run into it, load and load_inline then put back. A
program that only loads never imports setuptools; one that uses the rest gets torch's module,
the very object (so attributes it sets are the ones torch's code reads).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading

from . import _module_names
from ._module_names import TORCH_MODULE

SWITCH = "JITOPS_TORCH_LOAD"  # "1": every torch.utils.cpp_extension.load in the process is jitops'


class LazyTorchCppExtension(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The finder and loader of torch.utils.cpp_extension while the switch is on."""

    jitops_drop_in = True  # _module_names looks for it: torch's load() is jitops' here

    def find_spec(self, fullname, path, target=None):
        if fullname != TORCH_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        self._torch_loader = spec.loader
        spec.loader = self  # origin and file stay torch's: tracebacks and inspect see its source
        return spec

    def create_module(self, spec):
        return None  # a plain module

    def exec_module(self, module):
        lock = threading.Lock()

        def __getattr__(name: str):
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            if name == "load_inline":  # jitops' own, imported on first use
                _install_jitops_loaders(module, inline=True)
                return module.load_inline
            with lock:
                if module.__dict__.get("__getattr__") is __getattr__:
                    del module.__getattr__
                    try:
                        self._torch_loader.exec_module(module)  # torch's code, in this module
                    except BaseException:  # (setuptools missing, say) the next use tries again
                        module.__getattr__ = __getattr__
                        raise
                    _install_jitops_loaders(module, inline=True)
                    _module_names.after_torch_import(module)
            return getattr(module, name)

        _install_jitops_loaders(module)
        module.__getattr__ = __getattr__


def _install_jitops_loaders(module, inline: bool = False) -> None:
    from ._torch_load import load

    module.load = load
    if inline:
        from ._torch_load_inline import load_inline

        module.load_inline = load_inline


def install() -> None:
    """Serve torch.utils.cpp_extension lazily, with jitops' loaders, in this process and (through
    the environment) in the Python processes it starts."""
    os.environ[SWITCH] = "1"
    if any(getattr(finder, "jitops_drop_in", False) for finder in sys.meta_path):
        return
    imported = sys.modules.get(TORCH_MODULE)
    if imported is not None:  # imported already (a .pth or sitecustomize of its own): patch it
        _install_jitops_loaders(imported, inline=True)
    sys.meta_path.insert(0, LazyTorchCppExtension())


def run(argv: list[str]) -> int:
    """`python -m jitops run script.py [args]` or `python -m jitops run -m module [args]`."""
    usage = "usage: python -m jitops run script.py [args ...] | -m module [args ...]"
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{usage}\n\nRuns the program with every torch.utils.cpp_extension.load/load_inline going through jitops.")
        return 0 if argv else 2
    if argv[0] == "-m" and len(argv) < 2:
        print(f"{usage}\nerror: -m needs a module name", file=sys.stderr)
        return 2
    import runpy

    install()
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0] to the module's file
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        if not os.path.exists(argv[0]):
            print(f"python -m jitops run: can't open file {argv[0]!r}: no such file", file=sys.stderr)
            return 2
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python script.py` does
        runpy.run_path(argv[0], run_name="__main__")
    return 0
