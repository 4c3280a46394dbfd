# SPDX-License-Identifier: MIT
"""`Extension`: the declaration of one library, jitops' own ops' and any other package's. Declaring
one imports no torch and reads no file; `.load()` builds or loads it on first use."""

from __future__ import annotations

import os

from ._core import CUDA_SUFFIXES, INCLUDE_DIR, LoadedLibrary, is_identifier, recall

# auto: CUDA units are built where torch has CUDA and a toolkit is found; always: the library is
# built with CUDA (include paths, libraries) even from C++ sources alone, else an error (torch's
# with_cuda=True)
CUDA_POLICIES = ("auto", "never", "always")
# <namespace>.<name>: its longest derived file name (a build's staging folder, the name and key
# and pid and a random part) must stay within the file system's 255 bytes.
MAX_QUALIFIED_NAME = 200


def check_name(name, namespace: str, caller: str) -> None:
    """ValueError, naming the argument, for a name or namespace that no file name could carry."""
    for argument, value in (("name", name), ("namespace", namespace)):
        if not is_identifier(value):
            raise ValueError(f"{caller}{argument} must be a C identifier, got {value!r}")
    if len(namespace) + 1 + len(name) > MAX_QUALIFIED_NAME:
        raise ValueError(
            f"{caller}name {name[:24]}... is {len(name)} characters long; with the namespace {namespace!r} "
            f"at most {MAX_QUALIFIED_NAME - len(namespace) - 1} fit the file names the cache derives from it"
        )


# Hand-written, since creating a frozen dataclass is a large share of a warm start.
class Extension:
    """One library: its name and TORCH_LIBRARY namespace (its identity), sources (relative to root;
    .cu files are built only with CUDA), include directories (relative to root, or absolute), flags,
    CUDA policy and archs, and a version (the package's: bump it to rebuild when something the key
    cannot see changes). python_module: the library is also a pybind11 module
    (PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)), named `name`. cache_dir: its entries live there
    instead of the cache root. prebuilt_dir: prebuilt libraries shipped with the package (relative
    to root), loaded before building when one matches."""

    __slots__ = (
        "name",
        "namespace",
        "root",
        "sources",
        "include_dirs",
        "cflags",
        "cuda_cflags",
        "ldflags",
        "cuda",
        "cuda_archs",
        "version",
        "python_module",
        "cache_dir",
        "prebuilt_dir",
    )

    def __init__(
        self,
        name: str,
        sources,
        *,
        namespace: str,
        root: str,
        include_dirs=(),
        cflags=(),
        cuda_cflags=(),
        ldflags=(),
        cuda: str = "auto",
        cuda_archs: str | None = None,
        version: str = "0",
        python_module: bool = False,
        cache_dir: str | None = None,
        prebuilt_dir: str | None = None,
    ):
        check_name(name, namespace, "Extension: ")
        if cuda not in CUDA_POLICIES:
            raise ValueError(f"Extension {name!r}: cuda must be one of {CUDA_POLICIES}, got {cuda!r}")
        for argument, value in (("root", root), ("cache_dir", cache_dir), ("prebuilt_dir", prebuilt_dir)):
            if not isinstance(value, (str, os.PathLike)) and (value is not None or argument == "root"):
                raise TypeError(f"Extension {name!r}: {argument} must be a path, got {value!r}")
        root = os.path.abspath(root)
        values = {
            "name": name,
            "namespace": namespace,
            "root": root,
            "cuda": cuda,
            "cuda_archs": cuda_archs,
            "version": str(version),
            "python_module": bool(python_module),
            "cache_dir": os.path.abspath(cache_dir) if cache_dir is not None else None,
            "prebuilt_dir": os.path.join(root, prebuilt_dir) if prebuilt_dir is not None else None,
        }
        for argument, value in (
            ("sources", sources),
            ("include_dirs", include_dirs),
            ("cflags", cflags),
            ("cuda_cflags", cuda_cflags),
            ("ldflags", ldflags),
        ):
            if isinstance(value, str) or not all(isinstance(item, str) for item in value):
                raise TypeError(f"Extension {name!r}: {argument} must be a list of strings, got {value!r}")
            values[argument] = tuple(value)
        if not values["sources"]:
            raise ValueError(f"Extension {name!r}: sources is empty")
        # Every build and warm record written into a folder the key reads would change it.
        watched = (
            [os.path.dirname(os.path.join(root, s)) for s in values["sources"]]
            + [os.path.join(root, d) for d in values["include_dirs"]]
            if cache_dir is not None
            else []
        )
        if values["cache_dir"] in {os.path.normpath(folder) for folder in watched}:
            raise ValueError(
                f"Extension {name!r}: cache_dir {values['cache_dir']} holds its sources or headers; "
                "give it a folder of its own (a subfolder will do)"
            )
        for argument, value in values.items():
            object.__setattr__(self, argument, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"Extension is frozen: cannot set {name}")

    def __repr__(self) -> str:
        return "Extension(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__) + ")"

    def __eq__(self, other) -> bool:
        return isinstance(other, Extension) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))

    def load(self) -> LoadedLibrary:
        """The library, built or loaded on first use (then from this process's registry): its
        TORCH_LIBRARY ops are in `.ops` (torch.ops.<namespace>), its pybind11 module in `.module`."""
        found = recall(self)  # a warm start goes no further
        if found is None:
            from ._loader import load  # only on a miss: the rest of the loader costs a warm start's budget

            found = load(self)
        return found

    @property
    def qualified_name(self) -> str:
        """<namespace>.<name>: its identity in the cache, warm records, locks and the registry."""
        return f"{self.namespace}.{self.name}"

    @property
    def library_name(self) -> str:
        """The library's file name, without .so (a Python module's is its name: Python imports it by that)."""
        return self.name if self.python_module else f"{self.namespace}_{self.name}"

    def paths(self, cuda: bool = True) -> list[str]:
        """The absolute paths of its sources (the CUDA ones only with cuda=True)."""
        return [os.path.join(self.root, s) for s in self.sources if cuda or not s.endswith(CUDA_SUFFIXES)]

    def has_cuda_sources(self) -> bool:
        return any(s.endswith(CUDA_SUFFIXES) for s in self.sources)

    def include_paths(self) -> list[str]:
        """Its include directories, absolute, then jitops' own (<jitops/library.h>)."""
        return [os.path.join(self.root, d) for d in self.include_dirs] + [INCLUDE_DIR]
