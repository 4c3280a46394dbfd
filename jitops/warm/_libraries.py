# SPDX-License-Identifier: MIT
"""All a warm start runs, with extension.py (one module: a warm start's cost is mostly importing
Python): the private-directory rule, file identity, a library's ABI, opening it, the registry, and
warm records. Standard library only at import."""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.machinery
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _layout
from .._layout import MANIFEST_NAME, configured_root, is_identifier, record_entry

if TYPE_CHECKING:
    from ..extension import Extension

VERSION = "0.1.0"  # jitops.__version__
# How jitops turns an Extension into a library (build file, added flags, manifest): in every key
# instead of jitops' version, so a release that changes none of that keeps entries and prebuilts valid.
RECIPE = 3  # 3: -fvisibility-inlines-hidden (_key.CFLAGS)
# An entry's last-used time (its folder's mtime) is set at most once a minute: enough for pruning,
# and 64 ranks that start together do not all write it.
LAST_USED_RESOLUTION_S = 60.0
# The Python ABI tag, from the import system rather than sysconfig (slow to import, and its lazy
# variables are not thread-safe: load_all() plans in several threads).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]
# Environment variables that change what a build produces (torch's flags, builder/_torch_flags: nvcc's
# -ccbin and the CUDA units' include folders; nvcc's own; the compiler's search paths), then every
# one a key depends on.
CUDA_BUILD_ENVIRONMENT = (
    "CC",
    "PYTORCH_NVCC",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDA_INC_PATH",
    "CUDNN_HOME",
    "CUDNN_PATH",
)
COMPILER_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")
TOOLCHAIN_ENVIRONMENT = (
    ("CXX", "PATH", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST") + CUDA_BUILD_ENVIRONMENT + COMPILER_ENVIRONMENT
)


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # jitops/
INCLUDE_DIR = os.path.join(PACKAGE_DIR, "include")  # <jitops/library.h>, on every extension's include path
# The cache namespace of what jitops.load/load_inline build: their C++ picks its own torch.ops
# namespace, so the namespace guard cannot claim this one for a package.
DROP_IN_NAMESPACE = "jitops_load"
OPS_NAMESPACE = "jitops"  # the TORCH_LIBRARY namespace of jitops' own ops (jitops/ops/)


# Which directories may hold libraries we load
def private_dir_problem(path: str, info: os.stat_result | None = None) -> str | None:
    """Why `path` may not hold libraries we load (another user could write into it), or None."""
    return unsafe_path_problem(path, "cache directory", (os.getuid(),), directory=True, info=info)


def unsafe_path_problem(
    path: str, what: str, owners: tuple[int, ...], directory: bool, info: os.stat_result | None = None
) -> str | None:
    """Why `path` (a directory, or a regular file) may not hold or be a library we load, or None:
    a link, of the other kind, owned by none of `owners`, or writable by group or others."""
    info = info or os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{what} {path} is a symbolic link; refusing to follow it"
    if not (stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)):
        return f"{what} {path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid not in owners:
        return f"{what} {path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} {path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); run `chmod go-w {path}`"
    return None


# File identity: what says a file is unchanged without reading it
def file_identity(path: str | Path) -> list[int]:
    """(size, mtime_ns, ctime_ns, inode, device), as git's index keeps it: the ctime cannot be set
    back, so an edit that keeps size, mtime and inode still changes it."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


IDENTITY_FIELDS = 5  # file_identity's length: a recorded identity of another length is no identity


CUDA_SUFFIXES = (".cu",)  # sources built only with CUDA


def identity_or_none(path: str | Path) -> list[int] | None:
    """The identity of what a path leads to (links followed), None where there is nothing."""
    try:
        return file_identity(path)
    except OSError:
        return None


def write_json_atomic(path: Path | str, data: dict, durable: bool = True) -> None:
    """Readers see the old file or the new one, never a half-written one. durable=False skips the
    fsync, for records whose loss after a power cut reads as a miss (warm records, counters)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(data, file, indent=2, sort_keys=True)
            file.write("\n")
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mark_used(entry: str, last_used: float) -> None:
    """Mark a cache entry used, for pruning: its folder's mtime (not the manifest's: warm records
    check that)."""
    if time.time() - last_used >= LAST_USED_RESOLUTION_S:
        try:
            os.utime(entry)
        except OSError:
            pass  # a read-only cache still loads; pruning order is all that is lost


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
    if not (handle and dlinfo and dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(link_map)) == 0):
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
        self._module = None

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


def read_regular(path: str | Path, cap: int = 1 << 20) -> bytes:
    """A small regular file's bytes, with os.read (a buffered file object is slower). A link, FIFO,
    device or folder planted where a record belongs, or a file over cap bytes, is ValueError: never
    followed, waited on or read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_size > cap:
            raise ValueError(f"{path} is larger than {cap} bytes")
        # Its size, not the cap: os.read allocates what it is asked for first.
        return os.read(fd, info.st_size)
    finally:
        os.close(fd)


def recall(extension: Extension, seen: dict | None = None) -> LoadedLibrary | None:
    """The extension's library loaded as its warm record says (or as loaded before in this
    process); None where the loader must go the long way."""
    name = extension.qualified_name
    if (found := already_loaded(extension)) is not None:
        return found
    found = recorded_library(extension, settings(extension), seen)
    if found is None:
        return None
    library, record, last_used = found
    if record["torch_libraries"]:  # a TORCH_LIBRARY block: the namespace must be free (or it aborts)
        from ._namespaces import claim  # _namespaces imports this module

        claim(record["torch_libraries"], library, name)
    try:
        open_library(library, verified=True)
    except OSError:  # removed since it was checked, or it does not open: the long way says what is wrong
        return None
    mark_used(os.path.dirname(library), last_used)
    found = LoadedLibrary(extension, Path(library), record["with_cuda"], record["cuda_reason"], "cache", record["checked"])
    return loaded.setdefault(name, found)
