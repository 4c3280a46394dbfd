# SPDX-License-Identifier: MIT
"""What every other module of the loader stands on: source and cache roots, the private-directory
rule, file identity, what a library must share with this process, and the registry of loaded
libraries. Standard library only at import (torch is imported inside the functions that need it).
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import stat
import sys
import tempfile
import time
import warnings
from pathlib import Path

VERSION = "0.1.0"  # jitops.__version__
# How jitops turns an Extension into a library (build file, added flags, manifest): in every key
# instead of jitops' version, so a release that changes none of that keeps entries and prebuilts valid.
RECIPE = 2
MANIFEST_NAME = "manifest.json"  # in each cache entry
KEY_LENGTH = 16  # hex digits of sha256 in entry names (<namespace>.<name>-<key>)
# An entry's last-used time (its folder's mtime) is set at most once a minute: enough for pruning,
# and 64 ranks that start together do not all write it.
LAST_USED_RESOLUTION_S = 60.0
# The Python ABI tag, from the import system rather than sysconfig (slow to import, and its lazy
# variables are not thread-safe: load_all() plans in several threads).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]
# Environment variables that change what a build produces (torch's build-file writer and nvcc for
# CUDA units; the compiler's search paths), then every one a key depends on.
CUDA_BUILD_ENVIRONMENT = ("CC", "PYTORCH_NVCC", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
COMPILER_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")
TOOLCHAIN_ENVIRONMENT = (
    ("CXX", "PATH", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST") + CUDA_BUILD_ENVIRONMENT + COMPILER_ENVIRONMENT
)


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.join(PACKAGE_DIR, "include")  # <jitops/library.h>, on every extension's include path
# The cache namespace of what jitops.load/load_inline build: their C++ picks its own torch.ops
# namespace, so the namespace guard cannot claim this one for a package.
DROP_IN_NAMESPACE = "jitops_load"
# A warning skips jitops' own frames (the package, and cache_tools/ beside it in a checkout).
_OWN_CODE = (os.path.join(PACKAGE_DIR, ""), os.path.join(os.path.dirname(PACKAGE_DIR), "cache_tools", ""))


def warn(message: str) -> None:
    """A RuntimeWarning "jitops: message", attributed to the first caller outside jitops."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_CODE):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"jitops: {message}", RuntimeWarning, stacklevel=level)


# The cache root, and which directories may hold libraries we load
def torch_extensions_root() -> str:
    """torch's extension root: TORCH_EXTENSIONS_DIR, else <user cache dir>/torch_extensions (as
    torch's get_default_build_root says, without importing cpp_extension and setuptools)."""
    configured = os.environ.get("TORCH_EXTENSIONS_DIR")
    if configured:
        return configured
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.realpath(os.path.join(user_cache, "torch_extensions"))


def configured_root() -> tuple[str, str]:
    """The cache root asked for, and why (for `jitops-cache dir`)."""
    configured = os.environ.get("JITOPS_CACHE_DIR")
    if configured:
        return configured, "JITOPS_CACHE_DIR"
    return os.path.join(torch_extensions_root(), "jitops"), "default: jitops/ under torch's extension root"


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
    """(size, mtime_ns, ctime_ns, inode, device), as git's index keeps it. The ctime cannot be set
    back (touch, rsync -t, tar restore only the mtime), so an edit that keeps size, mtime and inode
    is still a change. A folder's identity changes when an entry is added or removed."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


IDENTITY_FIELDS = 5  # file_identity's length: a recorded identity of another length is no identity


def is_identifier(text) -> bool:
    """A C identifier (ASCII letters, digits, _; not starting with a digit)."""
    return isinstance(text, str) and text.isidentifier() and text.isascii()


def parse_entry_name(folder: str) -> tuple[str, str] | None:
    """(qualified name, key) of a cache entry's folder name, <namespace>.<name>-<key>; None for
    any other. (No regular expression: compiling one on import slows a warm start.)"""
    name, _, key = folder.rpartition("-")
    namespace, _, short = name.partition(".")
    if is_identifier(namespace) and is_identifier(short) and len(key) == KEY_LENGTH and set(key) <= _HEX_DIGITS:
        return name, key
    return None


_HEX_DIGITS = frozenset("0123456789abcdef")


CUDA_SUFFIXES = (".cu",)  # sources built only with CUDA


def identity_or_none(path: str | Path) -> list[int] | None:
    """The identity of what a path leads to (links followed), None where there is nothing."""
    try:
        return file_identity(path)
    except OSError:
        return None


def write_json_atomic(path: Path | str, data: dict) -> None:
    """Readers see the old file or the new one, never a half-written one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(data, file, indent=2, sort_keys=True)
            file.write("\n")
            file.flush()
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
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
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
    """libc's dlopen, dlerror and dlinfo (or None), called with the GIL held (as ctypes' own
    dlopen), all looked up first: a lookup would clear the error dlerror reports. Indexing
    ctypes.pythonapi gives function objects of our own (its attributes are shared) without the
    class a new PyDLL creates."""
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


def open_verified_library(library: str) -> None:
    """torch.ops.load_library(library) with lazy binding (a third of a small library's dlopen).
    Only for a library a warm record names: that very file loaded with every symbol bound under the
    same settings. Anything else must fail to load, not on a call: torch.ops.load_library opens it.
    (A pybind11 module is imported after this, and Python's own dlopen then finds it open: opening
    it by that import alone, with Python's RTLD_NOW, made a warm CUDA module slower.)"""
    import torch  # loaded by the caller already: this module imports without it

    path = os.path.realpath(library)  # as torch.ops.load_library records it
    dlopen, dlerror, _ = _libc_dl()
    if not dlopen(os.fsencode(path), os.RTLD_LAZY | os.RTLD_LOCAL):
        raise OSError(f"Could not load this library: {path}: {os.fsdecode(dlerror() or b'')}")
    torch.ops.loaded_libraries.add(path)


# The libraries this process has loaded
class LoadedLibrary:
    """An extension's library, loaded into this process (its TORCH_LIBRARY registrations have run)."""

    def __init__(self, extension, library: Path, with_cuda: bool, cuda_reason: str, how: str):
        self.extension = extension  # the declaration it was loaded for
        self.library = library
        self.with_cuda = with_cuda
        self.cuda_reason = cuda_reason  # why the CUDA kernels are absent; empty when present
        self.how = how  # "cache", "built" or "prebuilt"
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
            self._module = module
        return self._module


loaded: dict[str, LoadedLibrary] = {}  # by Extension.qualified_name ("<namespace>.<name>")
