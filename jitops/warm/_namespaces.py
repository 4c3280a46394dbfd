# SPDX-License-Identifier: MIT
"""The TORCH_LIBRARY namespaces a library defines, and the guard run before every dlopen: torch
aborts the process when a library defines a namespace already defined (by jitops, torch's load()
or a torch.library.Library)."""

from __future__ import annotations

import os

from .. import _torch_private

# TORCH_LIBRARY(ns, m) defines `static void TORCH_LIBRARY_init_<ns>(torch::Library&)` (and
# STABLE_TORCH_LIBRARY its STABLE_ twin), whose mangled name, length first, stays in the symbol
# table: _ZL<length>TORCH_LIBRARY_init_<ns>... FRAGMENT and IMPL blocks may repeat; they are not read.
_MARKER = b"TORCH_LIBRARY_init_"
_FRAGMENT_MARKER = b"TORCH_LIBRARY_FRAGMENT_init_"
_PREFIXES = (b"", b"STABLE_")

# namespace -> (identity of the library that defined it, its path), for the libraries jitops loaded
_defined: dict[str, tuple[tuple[int, int], str]] = {}


def _named_after(data: bytes, marker: bytes, prefixes=(b"",)) -> set[str]:
    """What follows marker in the mangled names `<length><prefix><marker>...` of data."""
    found = set()
    at = data.find(marker)
    while at >= 0:
        for prefix in prefixes:
            start = at - len(prefix)
            if data[start:at] != prefix:
                continue
            digits = start
            while digits > 0 and data[digits - 1 : digits].isdigit():
                digits -= 1
            if digits < start:
                end = start + int(data[digits:start])
                found.add(data[at + len(marker) : end].decode("ascii", "replace"))
        at = data.find(marker, at + 1)
    return found


def defined_in(library: str | os.PathLike) -> list[str]:
    """The namespaces the library's TORCH_LIBRARY blocks define (none found in a stripped library)."""
    with open(library, "rb") as file:
        return sorted(name for name in _named_after(file.read(), _MARKER, _PREFIXES) if name.isidentifier())


def registered_in(library: str | os.PathLike) -> list[str]:
    """The namespaces the library's TORCH_LIBRARY and TORCH_LIBRARY_FRAGMENT blocks register ops
    in (a fragment's function is TORCH_LIBRARY_FRAGMENT_init_<ns>_<counter>), for error messages."""
    with open(library, "rb") as file:
        data = file.read()
    found = set(_named_after(data, _MARKER, _PREFIXES))
    for name in _named_after(data, _FRAGMENT_MARKER, _PREFIXES):
        namespace, _, counter = name.rpartition("_")
        if counter.isdigit():
            found.add(namespace)
    return sorted(name for name in found if name.isidentifier())


def _identity(library: str | os.PathLike) -> tuple[int, int]:
    info = os.stat(library)
    return info.st_dev, info.st_ino  # as dlopen tells one library from another: a renamed file is the same


def check(namespaces: list[str], library: str | os.PathLike, name: str) -> None:
    """Raise NamespaceConflict where opening `library` (extension `name`) would define a namespace
    this process holds already; a library opened before (the same file) defines nothing again."""
    identity = _identity(library)
    for namespace in namespaces:
        held = _defined.get(namespace)
        if held is not None and held[0] != identity:
            _conflict(namespace, name, f"jitops loaded {held[1]}, which defines it")
        if held is None and (where := _torch_private.dispatcher_has(namespace)):
            _conflict(namespace, name, where)


def claim(namespaces: list[str], library: str | os.PathLike, name: str) -> None:
    """check(), then record() (call it right before the library's dlopen)."""
    check(namespaces, library, name)
    record(namespaces, library)


def record(namespaces: list[str], library: str | os.PathLike) -> None:
    """Note that `library`, opened in this process, defines these namespaces (under its latest
    path: a build's library is recorded from its staging folder, then as published)."""
    identity = _identity(library)
    for namespace in namespaces:
        if _defined.get(namespace, (identity,))[0] == identity:
            _defined[namespace] = (identity, os.fspath(library))


def _conflict(namespace: str, name: str, where: str) -> None:
    from .._errors import NamespaceConflict  # only for a conflict: a warm start imports no _errors

    raise NamespaceConflict(
        f"jitops: cannot load {name}: its TORCH_LIBRARY block defines the namespace {namespace!r}, "
        f"which this process has defined already ({where}). A second definition would abort the process: "
        "load one library per namespace (TORCH_LIBRARY_FRAGMENT adds to a namespace), or give it another name."
    )
