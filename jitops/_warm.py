# SPDX-License-Identifier: MIT
"""The warm start: a new process loads an op it has used before with stat calls and one dlopen.

Every process that uses an op comes through here first, so this module is kept small and imports
only the standard library (and torch, already imported by then): importing the rest of the loader
(_loader, _cache: their bytecode alone) costs more than everything here takes to run.

Once _loader has verified an op's library (loaded it from the cache, or built it), it writes a
warm record (<cache root>/warm-<op>-<hash of the settings>.json): the settings of the process
(jitops, torch, Python, its C++ runtime, the environment variables the toolchain lookup reads,
the GPUs' archs when no arch list is set), the library and its manifest with the identities they
were verified with, and the identity of every file and folder its key was computed from or found
through (sources, headers, compilers, the folders on PATH...: _loader.PlannedEntry.dependencies),
each read before the key was computed. A later process with the same settings that finds every one of those identities unchanged loads that
library without computing the key: nothing the key depends on has changed since, so the key is
the same, and the library is the very file that was verified. Anything else (an edited or added
header, another compiler on PATH, a replaced library, another torch, a record that is missing or
unreadable) is a miss: _loader then computes the key in full, verifies the entry, and writes a
new record. So a record only saves work; it is never a reason to load something else.

A file's identity is its (size, mtime_ns, ctime_ns, inode, device), as git's index keeps it: the
status-change time cannot be set back (touch, rsync -t and tar restore only the mtime) and moves
on every write, so an edit that keeps size, mtime and even the inode is still a change. A folder's
identity changes when an entry is added to or removed from it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import json
import os
import re
import stat
import time
from pathlib import Path

from . import __version__

RECORD_FORMAT = 2  # bump when a record's meaning changes: older records then simply miss
MANIFEST_NAME = "manifest.json"  # in each cache entry (_cache.py)
# An entry's last-used time (its folder's mtime) is set at most once a minute: precise enough for
# least-recently-used pruning, and 64 ranks that start together do not all write it.
LAST_USED_RESOLUTION_S = 60.0
# The Python ABI tag (e.g. cpython-311-x86_64-linux-gnu), read from the import system's extension
# suffix rather than sysconfig: sysconfig costs a millisecond to import and fills its variables
# lazily and not thread-safely (load_all() computes keys in several threads; one once got None).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]
KEY_LENGTH = 16  # hex digits of sha256 kept in entry names (<op>-<key>); 64 bits is plenty per op
# Environment variables that change what a build produces without changing which tools the
# toolchain lookup finds, so the key names their values (_loader.key_components): the ones torch's
# build-file writer reads for CUDA units (CC becomes nvcc's -ccbin, PYTORCH_NVCC replaces nvcc) and
# nvcc reads itself, then the search paths the C++ compiler and linker read.
CUDA_BUILD_ENVIRONMENT = ("CC", "PYTORCH_NVCC", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
COMPILER_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")
# Every environment variable the key depends on: those above, and the ones the toolchain lookup
# (_loader.find_cxx, plan_cuda) reads.
TOOLCHAIN_ENVIRONMENT = ("CXX", "PATH", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST") + CUDA_BUILD_ENVIRONMENT + COMPILER_ENVIRONMENT


def _find_source_root() -> str:
    """kernels/ and bindings/ sit inside the installed package, or beside it in a checkout."""
    package_dir = os.path.dirname(os.path.realpath(__file__))
    for candidate in (package_dir, os.path.dirname(package_dir)):
        if os.path.isdir(os.path.join(candidate, "kernels")) and os.path.isdir(os.path.join(candidate, "bindings")):
            return candidate
    raise ImportError(f"jitops: no kernels/ and bindings/ sources found in or beside {package_dir}")


SOURCE_ROOT = _find_source_root()


# ---------------------------------------------------------------------------------------------
# What the warm start shares with the cache (_cache re-exports these)
# ---------------------------------------------------------------------------------------------


def torch_extensions_root() -> str:
    """torch's extension root: TORCH_EXTENSIONS_DIR, else <user cache dir>/torch_extensions.

    Mirrors torch.utils.cpp_extension.get_default_build_root without importing cpp_extension
    (which imports setuptools: too slow for a warm load).
    """
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
    """Why `path` may not hold libraries we load (another user could write into it), or None.
    info: its os.lstat(), where the caller has it."""
    return unsafe_path_problem(path, "cache directory", (os.getuid(),), directory=True, info=info)


def unsafe_path_problem(path: str, what: str, owners: tuple[int, ...], directory: bool,
                        info: os.stat_result | None = None) -> str | None:
    """Why `path` (a directory, or a regular file) may not hold or be a library we load, or None:
    it is a symbolic link or of the other kind, owned by none of `owners`, or writable by group or
    others (who could then put their code in it). what: how messages name it. info: its
    os.lstat(), where the caller has it."""
    info = info or os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{what} {path} is a symbolic link; refusing to follow it"
    if not (stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)):
        return f"{what} {path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid not in owners:
        return f"{what} {path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{what} {path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"run `chmod go-w {path}`"
        )
    return None


def file_identity(path: str) -> list[int]:
    """(size, mtime_ns, ctime_ns, inode, device): changes whenever the file is written, truncated
    or replaced, whatever the writer does to its mtime afterwards (see the module's docstring)."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


IDENTITY_FIELDS = 5  # file_identity's length: a recorded identity of another length is no identity


def identity_or_none(path: str) -> list[int] | None:
    """The identity of what a path leads to (links followed), None where there is nothing."""
    try:
        return file_identity(path)
    except OSError:
        return None


def mark_used(entry: str, last_used: float) -> None:
    """Note that a cache entry is in use, for least-recently-used pruning: its folder's mtime is its
    last-used time (_cache.Entry.last_used), bumped when older than LAST_USED_RESOLUTION_S. (One
    system call, where rewriting the manifest would change the identity warm records check.)"""
    if time.time() - last_used >= LAST_USED_RESOLUTION_S:
        try:
            os.utime(entry)
        except OSError:
            pass  # a read-only cache still loads; pruning order is all that is lost


def cuda_arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST, else the visible GPUs' compute capabilities ("8.0;9.0"), else ""."""
    import torch

    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if not arch_list and torch.cuda.is_available():
        capabilities = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        arch_list = ";".join(f"{major}.{minor}" for major, minor in sorted(capabilities))
    return arch_list


# ---------------------------------------------------------------------------------------------
# Warm records
# ---------------------------------------------------------------------------------------------


class LoadedOp:
    """An op's library, loaded into this process (its TORCH_LIBRARY registrations have run)."""

    def __init__(self, library: Path, with_cuda: bool, cuda_reason: str, how: str):
        self.library = library
        self.with_cuda = with_cuda
        self.cuda_reason = cuda_reason  # why the CUDA kernels are absent; empty when present
        self.how = how  # "cache", "built" or "prebuilt"


loaded: dict[str, LoadedOp] = {}  # this process's ops, by name


def process_abi() -> dict:
    """What a built .so must share with this process, apart from its sources (key components)."""
    import torch

    return {
        "jitops": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python_soabi": PYTHON_SOABI,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def settings(op: str, source_root: str) -> str:
    """What, besides the files and folders in _loader.PlannedEntry.dependencies, decides op's key in
    this process (the inputs of _loader.key_components that are not read from files), as text."""
    import torch

    return repr(
        (
            RECORD_FORMAT,
            op,
            source_root,
            sorted(process_abi().items()),
            cxx_runtime(),
            [os.environ.get(name) for name in TOOLCHAIN_ENVIRONMENT],
            cuda_arch_list() if torch.version.cuda else None,
        )
    )


RECORD_PREFIX = "warm-"  # warm-<op>-<hash of the settings>.json, in the cache root


def record_path(root: str, op: str, op_settings: str) -> str:
    return os.path.join(root, f"{RECORD_PREFIX}{op}-{hashlib.sha256(op_settings.encode()).hexdigest()[:16]}.json")


# What a record's names may be: an entry folder directly inside the root (never "." or ".."),
# and a plain library file name in it.
_ENTRY_NAME = re.compile(rf"(?P<op>[A-Za-z0-9_][A-Za-z0-9_.]*)-[0-9a-f]{{{KEY_LENGTH}}}")
_LIBRARY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\.so")


def record_entry(root: str, record: dict, op: str | None = None) -> str | None:
    """The entry folder a record names, by a name of the form <op>-<key> inside root (a record
    never points elsewhere), or None where it names none (or, given op, another op's)."""
    name = record.get("entry")
    match = _ENTRY_NAME.fullmatch(name) if isinstance(name, str) else None
    return os.path.join(root, name) if match and op in (None, match["op"]) else None


def _is_identity(value) -> bool:
    return isinstance(value, list) and len(value) == IDENTITY_FIELDS and all(type(v) is int for v in value)


def _valid_record(record, op_settings: str) -> bool:
    """Whether a record read from disk is one remember() wrote in these settings: every field of
    the right type, before anything in it is used (record_entry checks its entry's name)."""
    return (
        isinstance(record, dict)
        and record.get("settings") == op_settings
        and isinstance(record.get("checked"), list)
        and all(
            isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and (item[1] is None or _is_identity(item[1]))
            for item in record["checked"]
        )
        and isinstance(record.get("library"), str)
        and _LIBRARY_NAME.fullmatch(record["library"]) is not None
        and _is_identity(record.get("library_identity"))
        and _is_identity(record.get("manifest_identity"))
        and isinstance(record.get("with_cuda"), bool)
        and isinstance(record.get("cuda_reason"), str)
    )


def recorded_library(op: str, op_settings: str, seen: dict | None = None) -> tuple[str, dict, float] | None:
    """The library op's warm record for these settings names, the record, and the entry's
    last-used time, while nothing the record lists has changed and the cache root and entry are
    still ours alone; else None. seen: identities already read by this caller, by path (load_all
    checks the headers and the folders on PATH once for all its ops)."""
    seen = {} if seen is None else seen
    root, _ = configured_root()
    try:
        if private_dir_problem(root) or not os.access(root, os.W_OK | os.X_OK):
            return None  # _loader's cache_root() says why, and falls back
        record = json.loads(_read(record_path(root, op, op_settings)))
        entry = record_entry(root, record, op) if isinstance(record, dict) else None
        if entry is None or not _valid_record(record, op_settings):
            return None
        for path, identity in record["checked"]:
            if path not in seen:
                seen[path] = identity_or_none(path)
            if seen[path] != identity:
                return None
        entry_info = os.lstat(entry)
        if private_dir_problem(entry, entry_info):
            return None
        # The manifest as verified too: an entry whose manifest was lost or rewritten is _loader's
        # to check (and discard, if corrupt), even while its library is intact.
        library = os.path.join(entry, record["library"])
        manifest = os.path.join(entry, MANIFEST_NAME)
        if file_identity(library) != record["library_identity"] or file_identity(manifest) != record["manifest_identity"]:
            return None
        return library, record, entry_info.st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record, or an unreadable one: the long way


def _read(path: str) -> bytes:
    """A small regular file's bytes (os.read: open() builds a buffered file object, a tenth of a
    warm start's record check). Opened without blocking and without following a link, so that a
    FIFO or a device planted at a record's path is refused (ValueError) rather than waited on. A
    record is a few kB; one larger than this read is cut, fails to parse, and misses."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def recall(op: str, source_root: str = SOURCE_ROOT, seen: dict | None = None) -> LoadedOp | None:
    """op's library loaded as its warm record says (or as loaded before in this process); None
    where there is no valid record, and _loader must go the long way. seen: see recorded_library."""
    if op in loaded:
        return loaded[op]
    found = recorded_library(op, settings(op, source_root), seen)
    if found is None:
        return None
    library, record, last_used = found
    try:
        open_verified_library(library)
    except OSError:
        # Removed since it was checked (`jitops-cache clear`, prune), or it does not open: the long
        # way finds, verifies (and, if corrupt, rebuilds) the entry again, or says what is wrong.
        return None
    mark_used(os.path.dirname(library), last_used)
    return loaded.setdefault(op, LoadedOp(Path(library), record["with_cuda"], record["cuda_reason"], "cache"))


def open_verified_library(library: str) -> None:
    """torch.ops.load_library(library) with lazy binding: the same dlopen, which runs the library's
    STABLE_TORCH_LIBRARY registrations (it defines no Python module), but each function the library
    calls is bound on its first call rather than all of them now (ctypes always binds now). That
    leaves about a tenth of the symbol lookups: a third of an op library's own dlopen time on the VM.

    Only for a library a warm record names: that very file (by identity) was loaded with every
    symbol bound (by _build's load check, or by _loader) under the same settings, torch's version
    among them. A library that might lack a symbol (a prebuilt one, say) must fail to load, not
    fail on a call: _loader loads those with torch.ops.load_library."""
    import torch

    path = os.path.realpath(library)  # as torch.ops.load_library records it
    dlopen, dlerror, _ = _libc_dl()
    if not dlopen(os.fsencode(path), os.RTLD_LAZY | os.RTLD_LOCAL):
        raise OSError(f"Could not load this library: {path}: {os.fsdecode(dlerror() or b'')}")
    torch.ops.loaded_libraries.add(path)


@functools.cache
def _libc_dl() -> tuple:
    """libc's dlopen, dlerror and dlinfo (None where libc has none), through ctypes.PyDLL (the
    GIL stays held, as in ctypes' own dlopen). All looked up once, before any call: looking one up
    is a dlsym, which would clear the error dlerror reports."""
    import ctypes

    libc = ctypes.PyDLL(None)
    dlopen, dlerror, dlinfo = libc.dlopen, libc.dlerror, getattr(libc, "dlinfo", None)
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    dlerror.restype, dlerror.argtypes = ctypes.c_char_p, []
    if dlinfo is not None:
        dlinfo.restype, dlinfo.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return dlopen, dlerror, dlinfo


@functools.cache
def cxx_runtime() -> str | None:
    """The C++ runtime (libstdc++.so.6) this process has loaded, by the path the dynamic linker
    loaded it from; None where there is none (or no dlinfo). The op libraries link against this
    very file (_loader.link_flags), so it is one of the settings their key depends on. Found once
    per process, in about 50 us: dlopen(RTLD_NOLOAD) finds the loaded library without loading
    anything, and dlinfo(RTLD_DI_LINKMAP) gives its link_map, whose second field is the path."""
    import ctypes

    dlopen, _, dlinfo = _libc_dl()
    handle = dlopen(b"libstdc++.so.6", os.RTLD_LAZY | os.RTLD_NOLOAD)
    link_map = ctypes.c_void_p()  # -> struct link_map { ElfW(Addr) l_addr; char *l_name; ... }
    if not (handle and dlinfo and dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(link_map)) == 0):
        return None
    name = ctypes.c_char_p.from_address(link_map.value + ctypes.sizeof(ctypes.c_void_p)).value
    return os.fsdecode(name) if name else None


_RTLD_DI_LINKMAP = 2  # <dlfcn.h>


def remember(op: str, op_settings: str, checked: list[tuple[str, list[int] | None]], entry: str, library: str,
             verified_identities: tuple, with_cuda: bool, cuda_reason: str) -> None:
    """Write op's warm record (see the module's docstring). op_settings: settings() as read when
    the key was computed; checked: each file and folder the key depends on, with the identity it
    had before the key was computed; verified_identities: the library's and its manifest's
    identities as verified (_cache.Entry.verified_library). A record that cannot be written costs
    only time."""
    root, _ = configured_root()
    if os.path.abspath(os.path.dirname(entry)) != os.path.abspath(root):
        return  # a fallback cache (the configured one was refused): no warm start from there
    record = {
        "settings": op_settings,
        "checked": checked,
        "entry": os.path.basename(entry),
        "library": os.path.basename(library),
        "library_identity": verified_identities[0],
        "manifest_identity": verified_identities[1],
        "with_cuda": with_cuda,
        "cuda_reason": cuda_reason,
    }
    from . import _cache

    try:
        _cache.write_json_atomic(Path(record_path(root, op, op_settings)), record)
    except OSError:
        pass
