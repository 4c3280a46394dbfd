# SPDX-License-Identifier: MIT
"""The warm wing: all a process that uses a library runs, with no subprocess and no key computed:
a library's ABI, opening it, the registry of loaded libraries, and warm records (with extension.py;
the namespace guard is _namespaces). One module, on the ground modules alone: a warm start's cost is
mostly importing Python. Standard library only at import."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _layout
from .._files import IDENTITY_FIELDS, file_identity, identity_or_none, mark_used, private_dir_problem, read_regular
from .._layout import (
    DROP_IN_NAMESPACE,
    MANIFEST_NAME,
    PYTHON_SOABI,
    RECIPE,
    TOOLCHAIN_ENVIRONMENT,
    configured_root,
    is_identifier,
    record_entry,
)

if TYPE_CHECKING:
    from types import ModuleType

    from ..extension import Extension


# What a library must share with this process
def process_abi() -> dict:
    """What a built .so must share with this process, apart from its sources (key components)."""
    import torch  # loaded by the caller already: this module imports without it

    return {
        "recipe": RECIPE,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python_soabi": PYTHON_SOABI,
        "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
    }


def cuda_arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST, else the visible GPUs' compute capabilities ("8.0;9.0"), else ""."""
    import torch  # loaded by the caller already: this module imports without it

    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if not arch_list and torch.cuda.is_available():
        capabilities = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        arch_list = ";".join(f"{major}.{minor}" for major, minor in sorted(capabilities))
    return arch_list


@functools.cache
def _libc_dl() -> tuple:
    """libc's dlopen, dlerror and dlinfo (or None), looked up once (a lookup clears dlerror's error),
    each a function object of our own from ctypes.pythonapi, called with the GIL held."""
    import ctypes  # only where a library is opened

    def function(name: str, restype, *argtypes):
        try:
            found = ctypes.pythonapi[name]
        except AttributeError:  # a libc without it (dlinfo)
            return None
        found.restype, found.argtypes = restype, list(argtypes)
        return found

    return (
        function("dlopen", ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int),
        function("dlerror", ctypes.c_char_p),
        function("dlinfo", ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p),
    )


@functools.cache
def cxx_runtime() -> str | None:
    """The path of the C++ runtime (libstdc++.so.6) this process has loaded, or None: libraries
    link against it (_key.link_flags). dlopen(RTLD_NOLOAD) finds it; dlinfo gives its link_map."""
    import ctypes  # only where a library is opened

    dlopen, _, dlinfo = _libc_dl()
    handle = dlopen(b"libstdc++.so.6", os.RTLD_LAZY | os.RTLD_NOLOAD)
    link_map = ctypes.c_void_p()  # -> struct link_map { ElfW(Addr) l_addr; char *l_name; ... }
    if not (handle and dlinfo and dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(link_map)) == 0 and link_map.value):
        return None
    name = ctypes.c_char_p.from_address(link_map.value + ctypes.sizeof(ctypes.c_void_p)).value
    return os.fsdecode(name) if name else None


_RTLD_DI_LINKMAP = 2  # <dlfcn.h>


def open_library(library: str | os.PathLike, verified: bool = False) -> None:
    """The one place jitops opens a library: torch.ops.load_library, every symbol bound (so it fails here);
    verified (a warm record's, loaded before): lazy binding, a third of a small library's dlopen."""
    import torch  # loaded by the caller already: this module imports without it

    if not verified:
        torch.ops.load_library(os.fspath(library))
        return
    path = os.path.realpath(library)  # as torch.ops.load_library records it
    dlopen, dlerror, _ = _libc_dl()
    if not dlopen(os.fsencode(path), os.RTLD_LAZY | os.RTLD_LOCAL):
        raise OSError(f"Could not load this library: {path}: {os.fsdecode(dlerror() or b'')}")
    torch.ops.loaded_libraries.add(path)


# The libraries this process has loaded
class LoadedLibrary:
    """An extension's library, loaded into this process (its TORCH_LIBRARY registrations have run)."""

    def __init__(self, extension, library: Path, with_cuda: bool, cuda_reason: str, how: str, inputs=()):
        self.extension = extension  # the declaration it was loaded for
        self.library = library
        self.with_cuda = with_cuda
        self.cuda_reason = cuda_reason  # why the CUDA kernels are absent; empty when present
        self.how = how  # "cache", "built" or "prebuilt"
        self.inputs = inputs  # [(path, identity)] of what its key and headers were read from
        self._module: ModuleType | None = None

    @property
    def ops(self):
        """torch.ops.<namespace>: the ops its TORCH_LIBRARY block registered."""
        import torch  # loaded by the caller already: this module imports without it

        return getattr(torch.ops, self.extension.namespace)

    @property
    def module(self):
        """Its pybind11 module (None unless the extension is a python_module), imported by its
        path, never through sys.path: each key has its own file, so two builds never clash."""
        if self._module is None and self.extension.python_module:
            import importlib.util  # only for pybind11 modules

            spec = importlib.util.spec_from_file_location(self.extension.name, self.library)
            if spec is None or spec.loader is None:  # a name no import loader takes (a .so always has one)
                raise ImportError(f"jitops: {self.library} cannot be imported as a module")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            # A binding compiled as <name> and linked as <name>_v1 (a reload): pybind11 before 3.0
            # names the module after the first.
            module.__name__ = spec.name
            self._module = module
        return self._module


loaded: dict[str, LoadedLibrary] = {}  # by Extension.qualified_name ("<namespace>.<name>")


# Warm records: a new process loads a library it has used before with stat calls and one dlopen.
# A record (written after a verified load) holds the process's settings, the library and manifest
# with the identities they were verified with, and the identity of every file and folder the key
# was computed from, each read before the key. Where all still hold, the key would be the same, so
# the library is loaded without computing it; anything else is a miss (docs/ARCHITECTURE.md).
RECORD_FORMAT = 4  # bump when a record's meaning changes: older records then simply miss


def already_loaded(extension) -> LoadedLibrary | None:
    """The extension's library if this process loaded it, else None; a NamespaceConflict where the
    process loaded another declaration of its name or namespace (torch would abort at the dlopen)."""
    found = loaded.get(extension.qualified_name)
    if found is not None and (found.extension is extension or found.extension == extension):
        return found
    if found is not None:
        others = [found]
    elif extension.namespace == DROP_IN_NAMESPACE:
        others = []
    else:
        others = [
            other
            for other in loaded.values()
            if other.extension.namespace == extension.namespace
            and (other.extension.root, other.extension.version) != (extension.root, extension.version)
        ]
    if others:
        from .._errors import NamespaceConflict  # only here: a warm load imports one module fewer

        other = others[0]
        raise NamespaceConflict(
            f"jitops: cannot load {extension.qualified_name} (version {extension.version}, from {extension.root}): "
            f"this process loaded {other.extension.qualified_name} (version {other.extension.version}, from "
            f"{other.extension.root}, library {other.library}) into the same torch.ops namespace "
            f"{extension.namespace!r}. One process holds one version of a namespace: import one copy of the package."
        )
    return None


def settings(extension: Extension) -> str:
    """The inputs of the extension's key in this process not read from files, as text."""
    import torch  # loaded by the caller already: this module imports without it

    archs = (extension.cuda_archs or cuda_arch_list()) if torch.version.cuda else None
    environment = [os.environ.get(name) for name in TOOLCHAIN_ENVIRONMENT]
    return repr((RECORD_FORMAT, repr(extension), sorted(process_abi().items()), cxx_runtime(), environment, archs))


def extension_root(extension: Extension) -> str:
    """The cache root holding the extension's entries: its own cache_dir, else the configured one."""
    return extension.cache_dir or configured_root()[0]


def record_path(root: str, name: str, of_settings: str) -> str:
    digest = hashlib.blake2b(of_settings.encode(), digest_size=8).hexdigest()  # not sha256: a third of its first call
    return _layout.record_path(root, name, digest)


_LIBRARY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")


def _is_library_name(value) -> bool:
    """A plain file name ending in .so (no folder, not hidden): all a record may name in its entry."""
    return isinstance(value, str) and value.endswith(".so") and value[0] != "." and set(value) <= _LIBRARY_CHARACTERS


def _is_identity(value) -> bool:
    return isinstance(value, list) and len(value) == IDENTITY_FIELDS and all(type(v) is int for v in value)


def _valid_record(record, of_settings: str) -> bool:
    """Whether a record read from disk is one the loader wrote (_resolution._remember) in these
    settings: every field of the right type, before anything in it is used."""
    return (
        isinstance(record, dict)
        and record.get("settings") == of_settings
        and isinstance(record.get("checked"), list)  # its items: checked as recorded_library reads them
        and _is_library_name(record.get("library"))
        and _is_identity(record.get("library_identity"))
        and _is_identity(record.get("manifest_identity"))
        and isinstance(record.get("with_cuda"), bool)
        and isinstance(record.get("cuda_reason"), str)
        and isinstance(record.get("torch_libraries"), list)
        and all(is_identifier(namespace) for namespace in record["torch_libraries"])
    )


def recorded_library(extension: Extension, of_settings: str, seen: dict | None = None) -> tuple[str, dict, float] | None:
    """The library, record and entry's last-used time that the extension's warm record names, while
    nothing it lists changed and root and entry are ours alone; else None. seen: identities read already."""
    seen = {} if seen is None else seen
    root = extension_root(extension)
    try:
        if private_dir_problem(root) or not os.access(root, os.W_OK | os.X_OK):
            return None  # the long way says why, and falls back
        record = json.loads(read_regular(record_path(root, extension.qualified_name, of_settings)))
        entry = record_entry(root, record, extension.qualified_name) if isinstance(record, dict) else None
        if entry is None or not _valid_record(record, of_settings):
            return None
        for path, identity in record["checked"]:  # a malformed item raises, or its identity differs
            if type(path) is not str:  # os.stat would take a number as a file descriptor
                return None
            if path not in seen:
                seen[path] = identity_or_none(path)
            if seen[path] != identity:
                return None
        entry_info = os.lstat(entry)
        if private_dir_problem(entry, entry_info):
            return None
        # The manifest as verified too: a lost or rewritten manifest is the long way's to check.
        library = os.path.join(entry, record["library"])
        manifest = os.path.join(entry, MANIFEST_NAME)
        if file_identity(library) != record["library_identity"] or file_identity(manifest) != record["manifest_identity"]:
            return None
        return library, record, entry_info.st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record, or an unreadable one: the long way


def recall(extension: Extension, seen: dict | None = None) -> LoadedLibrary | None:
    """The extension's library loaded as its warm record says (or as loaded before in this
    process); None where the loader must go the long way."""
    name = extension.qualified_name
    if (found := already_loaded(extension)) is not None:
        return found
    recorded = recorded_library(extension, settings(extension), seen)
    if recorded is None:
        return None
    library, record, last_used = recorded
    if record["torch_libraries"]:  # a TORCH_LIBRARY block: the namespace must be free (or it aborts)
        from ._namespaces import claim  # only for a TORCH_LIBRARY block: JITOPS_LIBRARY, a fragment, never needs it

        claim(record["torch_libraries"], library, name)
    try:
        open_library(library, verified=True)
    except OSError:  # removed since it was checked, or it does not open: the long way says what is wrong
        return None
    mark_used(os.path.dirname(library), last_used)
    found = LoadedLibrary(extension, Path(library), record["with_cuda"], record["cuda_reason"], "cache", record["checked"])
    return loaded.setdefault(name, found)
