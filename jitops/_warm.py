# SPDX-License-Identifier: MIT
"""Warm records: a new process loads a library it has used before with stat calls and one dlopen.

A record (written after a verified load) holds the process's settings, the library and manifest
with the identities they were verified with, and the identity of every file and folder the key was
computed from, each read before the key. Where all still hold, the key would be the same, so the
library is loaded without computing it; anything else is a miss (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ._core import (
    DROP_IN_NAMESPACE,
    IDENTITY_FIELDS,
    MANIFEST_NAME,
    TOOLCHAIN_ENVIRONMENT,
    LoadedLibrary,
    configured_root,
    cuda_arch_list,
    cxx_runtime,
    file_identity,
    identity_or_none,
    loaded,
    mark_used,
    open_verified_library,
    parse_entry_name,
    private_dir_problem,
    process_abi,
    write_json_atomic,
)

if TYPE_CHECKING:
    from .extension import Extension

RECORD_FORMAT = 3  # bump when a record's meaning changes: older records then simply miss
RECORD_PREFIX = "warm-"


def already_loaded(extension) -> LoadedLibrary | None:
    """The extension's library if this process loaded it, else None. Where the process loaded
    another declaration of its name, or of its namespace from another package (root or version),
    a NamespaceConflict before any dlopen: torch would abort the process from a static initialiser."""
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
        from ._errors import NamespaceConflict  # only here: a warm load imports one module fewer

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
    return os.path.join(root, f"{RECORD_PREFIX}{name}-{digest}.json")


def record_entry(root: str, record: dict, name: str | None = None) -> str | None:
    """The entry folder inside root a record names (never elsewhere), or None where it names none
    (or, given name, another extension's)."""
    entry = record.get("entry")
    parsed = parse_entry_name(entry) if isinstance(entry, str) else None
    return os.path.join(root, entry) if parsed and name in (None, parsed[0]) else None


_LIBRARY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")


def _is_library_name(value) -> bool:
    """A plain file name ending in .so (no folder, not hidden): all a record may name in its entry."""
    return isinstance(value, str) and value.endswith(".so") and value[0] != "." and set(value) <= _LIBRARY_CHARACTERS


def _is_identity(value) -> bool:
    return isinstance(value, list) and len(value) == IDENTITY_FIELDS and all(type(v) is int for v in value)


def _valid_record(record, of_settings: str) -> bool:
    """Whether a record read from disk is one remember() wrote in these settings: every field of
    the right type, before anything in it is used."""
    return (
        isinstance(record, dict)
        and record.get("settings") == of_settings
        and isinstance(record.get("checked"), list)  # its items: checked as recorded_library reads them
        and _is_library_name(record.get("library"))
        and _is_identity(record.get("library_identity"))
        and _is_identity(record.get("manifest_identity"))
        and isinstance(record.get("with_cuda"), bool)
        and isinstance(record.get("cuda_reason"), str)
    )


def recorded_library(extension: Extension, of_settings: str, seen: dict | None = None) -> tuple[str, dict, float] | None:
    """The library the extension's warm record for these settings names, the record, and the
    entry's last-used time, while nothing the record lists has changed and the root and entry are
    ours alone; else None. seen: identities this caller read already, by path (load_all's)."""
    seen = {} if seen is None else seen
    root = extension_root(extension)
    try:
        if private_dir_problem(root) or not os.access(root, os.W_OK | os.X_OK):
            return None  # the long way says why, and falls back
        record = json.loads(_read(record_path(root, extension.qualified_name, of_settings)))
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


def _read(path: str) -> bytes:
    """A small regular file's bytes, with os.read (a buffered file object is slower). A link, FIFO
    or device planted at a record's path is refused, not followed or waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        # Its size, not a large bound: os.read allocates the bound first (a MiB is an mmap and munmap).
        return os.read(fd, min(info.st_size, 1 << 20))
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
    try:
        open_verified_library(library)
    except OSError:  # removed since it was checked, or it does not open: the long way says what is wrong
        return None
    mark_used(os.path.dirname(library), last_used)
    return loaded.setdefault(name, LoadedLibrary(extension, Path(library), record["with_cuda"], record["cuda_reason"], "cache"))


def remember(
    extension: Extension,
    of_settings: str,
    checked: list[tuple[str, list[int] | None]],
    entry: str,
    library: str,
    verified_identities: tuple,
    with_cuda: bool,
    cuda_reason: str,
) -> None:
    """Write a warm record (see the module's docstring): of_settings and checked (each file and
    folder with its identity) as read before the key was computed; verified_identities: the
    library's and its manifest's. A record that cannot be written costs only time."""
    root = extension_root(extension)
    if os.path.abspath(os.path.dirname(entry)) != os.path.abspath(root):
        return  # a fallback cache (the configured one was refused): no warm start from there
    record = {
        "settings": of_settings,
        "checked": checked,
        "entry": os.path.basename(entry),
        "library": os.path.basename(library),
        "library_identity": verified_identities[0],
        "manifest_identity": verified_identities[1],
        "with_cuda": with_cuda,
        "cuda_reason": cuda_reason,
    }
    try:
        write_json_atomic(record_path(root, extension.qualified_name, of_settings), record)
    except OSError:
        pass
