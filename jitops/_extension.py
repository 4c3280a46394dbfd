# SPDX-License-Identifier: MIT
"""Extension: the declaration of one library, everything the loader needs to key, build, find and
load it. Declaring one reads no file and imports nothing (not even torch).

A hand-written frozen class rather than a dataclass: creating a frozen dataclass costs about a
millisecond (BENCHMARKS.md, loader), a third of a warm start, and every op module declares one.
"""

from __future__ import annotations

import os

from ._core import is_identifier

CUDA_POLICIES = ("auto", "never")  # auto: CUDA units are built where torch has CUDA and a toolkit is found
CUDA_SUFFIXES = (".cu",)


class Extension:
    """One library: its name and TORCH_LIBRARY namespace (together, its identity in the cache and in
    this process), its source files (relative to root; .cu files are CUDA units, built only with
    CUDA), include directories, flags, CUDA policy and archs, and a version (bump it to rebuild
    when something the key cannot see changes)."""

    __slots__ = ("name", "namespace", "root", "sources", "include_dirs", "cflags", "cuda_cflags", "ldflags",
                 "cuda", "cuda_archs", "version")

    def __init__(self, name: str, sources, *, namespace: str, root: str, include_dirs=(), cflags=(),
                 cuda_cflags=(), ldflags=(), cuda: str = "auto", cuda_archs: str | None = None, version: str = "0"):
        for argument, value in (("name", name), ("namespace", namespace)):
            if not is_identifier(value):
                raise ValueError(f"Extension: {argument} must be a C identifier, got {value!r}")
        if cuda not in CUDA_POLICIES:
            raise ValueError(f"Extension {name!r}: cuda must be one of {CUDA_POLICIES}, got {cuda!r}")
        values = {
            "name": name, "namespace": namespace, "root": os.path.abspath(root), "cuda": cuda, "cuda_archs": cuda_archs,
            "version": str(version),
        }
        for argument, value in (("sources", sources), ("include_dirs", include_dirs), ("cflags", cflags),
                                ("cuda_cflags", cuda_cflags), ("ldflags", ldflags)):
            if isinstance(value, str) or not all(isinstance(item, str) for item in value):
                raise TypeError(f"Extension {name!r}: {argument} must be a list of strings, got {value!r}")
            values[argument] = tuple(value)
        if not values["sources"]:
            raise ValueError(f"Extension {name!r}: sources is empty")
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

    @property
    def qualified_name(self) -> str:
        """<namespace>.<name>: the extension's identity in cache folder names, warm records, locks,
        manifests and the registry of loaded libraries."""
        return f"{self.namespace}.{self.name}"

    @property
    def library_name(self) -> str:
        """The library's file name, without .so."""
        return f"{self.namespace}_{self.name}"

    def paths(self, cuda: bool = True) -> list[str]:
        """The absolute paths of its sources (the CUDA ones only with cuda=True)."""
        return [os.path.join(self.root, s) for s in self.sources if cuda or not s.endswith(CUDA_SUFFIXES)]

    def has_cuda_sources(self) -> bool:
        return any(s.endswith(CUDA_SUFFIXES) for s in self.sources)

    def include_paths(self) -> list[str]:
        return [os.path.join(self.root, d) for d in self.include_dirs]
