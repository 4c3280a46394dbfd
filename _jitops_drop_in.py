# SPDX-License-Identifier: MIT
"""JITOPS_DROP_IN=1 (or its older name, JITOPS_TORCH_LOAD=1) at every Python start.
jitops-drop-in.pth imports this module where the variable is 1; it imports nothing of jitops, so a start that never imports torch.utils.cpp_extension
pays for this file alone. On that module's first import it hands the import to jitops' drop-in
(jitops/compat/_drop_in.py). Where jitops cannot be imported, that import says so in one line, once, and
the program gets torch's own module."""

import sys

TORCH_MODULE = "torch.utils.cpp_extension"


def switch() -> str:
    """The variable that turned the drop-in on: its name, or its older name."""
    import os

    return "JITOPS_DROP_IN" if os.environ.get("JITOPS_DROP_IN") == "1" else "JITOPS_TORCH_LOAD"


class FirstImport:
    """A sys.meta_path finder that waits for torch.utils.cpp_extension, then leaves."""

    jitops_drop_in = True  # jitops.compat._module_names looks for it: torch's load() will be jitops'

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TORCH_MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            from jitops.compat._drop_in import install

            return install().find_spec(fullname, path, target)
        except Exception as err:  # a broken or half-removed jitops must not stop the program
            print(f"jitops: {switch()}=1 is ignored: jitops does not import ({type(err).__name__}: {err})", file=sys.stderr)
            import importlib.machinery

            return importlib.machinery.PathFinder.find_spec(fullname, path, target)


def install() -> None:
    """Wait for torch.utils.cpp_extension (once: a venv's lib64 link makes site read the .pth twice)."""
    if not any(isinstance(finder, FirstImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, FirstImport())
