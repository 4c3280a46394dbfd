# SPDX-License-Identifier: MIT
"""Unmodified programs through jitops: `python -m jitops run script.py|-m module [args]`, or Python
started with JITOPS_DROP_IN=1 (jitops' .pth). torch.utils.cpp_extension is then served lazily: its
load and load_inline are jitops', and any name _torch_helpers cannot answer makes it torch's module."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading

from . import _module_names, _torch_helpers
from ._module_names import TORCH_MODULE

SWITCH = "JITOPS_DROP_IN"  # "1": every torch.utils.cpp_extension.load in the process is jitops'
# Its name before it said what it does, JITOPS_TORCH_LOAD, is still read (jitops-drop-in.pth).


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
        served: dict[str, object] = {}  # the helpers answered without torch's code (_torch_helpers), by name

        def __getattr__(name: str):
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            if name == "load_inline":  # jitops' own, imported on first use
                _install_jitops_loaders(module, inline=True)
                return module.load_inline
            found = _torch_helpers.value(name)
            if found is not _torch_helpers.MISSING:
                with lock:
                    return served.setdefault(name, vars(module).setdefault(name, found))
            run_torch_code(module)
            return getattr(module, name)

        def run_torch_code(module) -> None:
            """torch's code, run into this module once; a value the program set here stays."""
            with lock:
                if module.__dict__.get("__getattr__") is not __getattr__:
                    return
                set_here = {
                    name: value
                    for name, value in vars(module).items()
                    if not name.startswith("__") and name not in ("load", "load_inline") and served.get(name, self) is not value
                }
                del module.__getattr__
                try:
                    self._torch_loader.exec_module(module)  # torch's code, in this module
                except BaseException:  # (setuptools missing, say) the next use tries again
                    module.__getattr__ = __getattr__
                    raise
                vars(module).update(set_here)
                _install_jitops_loaders(module, inline=True)
                _module_names.after_torch_import(module)

        self.run_torch_code = run_torch_code
        _install_jitops_loaders(module)
        module.__getattr__ = __getattr__


def _install_jitops_loaders(module, inline: bool = False) -> None:
    from ._torch_load import load  # when the program first imports torch.utils.cpp_extension

    module.load = load
    if inline:
        from ._torch_load_inline import load_inline  # only where torch's module is served whole

        module.load_inline = load_inline


def install() -> LazyTorchCppExtension:
    """Serve torch.utils.cpp_extension lazily, with jitops' loaders, in this process and (through
    the environment) in the Python processes it starts. Returns the finder that serves it."""
    os.environ[SWITCH] = "1"
    for finder in sys.meta_path:
        if isinstance(finder, LazyTorchCppExtension):
            return finder
    imported = sys.modules.get(TORCH_MODULE)
    if imported is not None:  # imported already (a .pth or sitecustomize of its own): patch it
        _install_jitops_loaders(imported, inline=True)
    finder = LazyTorchCppExtension()
    sys.meta_path.insert(0, finder)
    return finder


def run(argv: list[str], working_folder: str | None = None) -> int:
    """`python -m jitops run script.py|-m module [args]`: the program runs as python would run it
    (sys.argv, sys.path[0], an absolute __file__, tracebacks from the program, one-line errors).
    working_folder: python -m's first sys.path entry, which jitops/__init__.py took off."""
    usage = "usage: python -m jitops run script.py [args ...] | -m module [args ...]"
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{usage}\n\nRuns the program with every torch.utils.cpp_extension.load/load_inline going through jitops.")
        return 0 if argv else 2
    if argv[0] == "-m" and len(argv) < 2:
        print(f"{usage}\nerror: -m needs a module name", file=sys.stderr)
        return 2
    import runpy

    script = argv[0] != "-m"
    if script and not os.path.exists(argv[0]):  # in python's words
        print(
            f"{sys.executable}: can't open file {os.path.abspath(argv[0])!r}: [Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2
    install()
    sys.excepthook = _from_the_program(sys.excepthook, runpy)
    if script:
        sys.argv = list(argv)
        _run_script(argv[0], runpy)
    else:
        if working_folder is not None:
            sys.path.insert(0, working_folder)
        sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0] to the module's file
        _new_main()
        # What `python -m` itself calls (CPython's main names it): the same module lookup, the same
        # one-line error where there is none, the code run in __main__.
        runpy._run_module_as_main(argv[1])  # type: ignore[attr-defined]  # private: not in typeshed
    return 0


def _new_main():
    """A __main__ module as python's start makes it (this one is jitops' own __main__.py)."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main  # kept when it ends, as python keeps its __main__ (atexit, pickling)
    return main


def _run_script(path: str, runpy) -> None:
    """Run a script as python does, in a new __main__ with an absolute __file__ and sys.argv[0] as
    given, its folder first on sys.path (symlinks resolved); a folder or zip file with a __main__.py
    first on sys.path itself, its __main__ run by runpy."""
    import zipfile

    absolute = os.path.join(os.getcwd(), path)  # python's __file__: joined, not normalised
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        sys.path.insert(0, os.path.abspath(path))
        _new_main()
        runpy._run_module_as_main("__main__", False)  # what python calls: sys.argv[0] kept as typed
        return
    if not sys.flags.safe_path:
        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    import importlib.machinery

    loader = importlib.machinery.SourceFileLoader("__main__", absolute)
    code = compile(loader.get_data(absolute), absolute, "exec", dont_inherit=True)
    main = _new_main()
    main.__file__, main.__cached__, main.__loader__ = absolute, None, loader
    exec(code, vars(main))


def _from_the_program(excepthook, runpy):
    """An excepthook that leaves out the frames above the program (python's runpy, jitops' own)."""
    above = {"<frozen runpy>", runpy.__file__, __file__, os.path.join(os.path.dirname(os.path.dirname(__file__)), "__main__.py")}

    def hook(kind, value, traceback):
        while traceback is not None and traceback.tb_frame.f_code.co_filename in above:
            traceback = traceback.tb_next
        excepthook(kind, value.with_traceback(traceback), traceback)  # python prints the exception's own

    return hook
