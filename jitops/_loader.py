# SPDX-License-Identifier: MIT
"""Find or build an Extension's library and load it: from this process's registry, a warm record
(_core.recall), a verified cache entry, a build (_build) or a prebuilt library, in the order
docs/ARCHITECTURE.md ("Resolution order") gives.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import _cache, _core
from ._core import LoadedLibrary, already_loaded, loaded
from ._errors import CacheError
from ._key import PlannedEntry

if TYPE_CHECKING:
    from .extension import Extension

_load_locks: dict[str, threading.Lock] = {}
_load_locks_guard = threading.Lock()


def load(extension: Extension, cached_only: bool = False) -> LoadedLibrary | None:
    """The extension's library, loaded into this process. cached_only=True stops after step 2: None
    where it would have to be built (or taken prebuilt), for a caller to hand those to threads."""
    name = extension.qualified_name
    if (found := already_loaded(extension)) is not None:
        return found
    with _load_locks_guard:
        lock = _load_locks.setdefault(name, threading.Lock())
    with lock:
        if already_loaded(extension) is None and (found := _load_uncached(extension, cached_only)) is not None:
            loaded[name] = found
        return loaded.get(name)


def _load_uncached(extension: Extension, cached_only: bool) -> LoadedLibrary | None:
    recalled = _core.recall(extension)
    if recalled is not None:
        return recalled
    planned = PlannedEntry(extension)
    for attempt in ("first", "again"):
        library = _cache.verified_or_discarded(planned.entry)
        how, backends = "cache", planned.cuda.backends
        if library is None and cached_only:
            return None
        if library is None:
            from . import _build  # imported only on a miss: its imports cost a warm load's budget

            started = time.monotonic()
            try:
                library, backends, how = _build.build_or_prebuilt(planned)
            except Exception:
                _cache.count(planned.entry.root, planned.extension.qualified_name, failed_builds=1)
                raise
            if how == "built":
                _cache.count(
                    planned.entry.root, planned.extension.qualified_name, builds=1, build_seconds=time.monotonic() - started
                )
        import torch  # loaded by the caller already: this module imports without it

        try:
            torch.ops.load_library(str(library))  # runs the library's TORCH_LIBRARY registrations
            break
        except OSError as err:
            if how == "prebuilt" or attempt == "again" or not _worth_another_try(planned.entry, library, err):
                raise
    if how != "built":
        _cache.count(planned.entry.root, planned.extension.qualified_name, **{f"{how}_loads": 1})
    with_cuda = "cuda" in backends
    reason = "" if with_cuda else (planned.cuda.reason or "the prebuilt library has no CUDA kernels")
    if how != "prebuilt":
        _remember(planned, library, with_cuda, reason)
    return LoadedLibrary(planned.extension, library, with_cuda, reason, how)


def _worth_another_try(entry: _cache.Entry, library: Path, err: OSError) -> bool:
    """After a verified library failed to open: True where it was removed meanwhile or no longer
    matches its sha256 (then discarded, with a warning). A sound one that does not open is an error."""
    if not library.exists() or _cache.verified_or_discarded(entry, full_hash=True) is None:
        return True
    raise CacheError(
        f"jitops: the library {library} of the cache entry {entry.path} matches its sha256 but does not open: "
        f"{err.__cause__ or err}. `jitops-cache clear {entry.name}` removes the entry, and the next load builds it again."
    ) from err


def _remember(planned: PlannedEntry, library: Path, with_cuda: bool, reason: str) -> None:
    """Write the warm record of a library just verified or built."""
    entry = planned.entry
    if entry.verified_identities is None:
        try:
            entry.verified_library(touch=False)
        except CacheError:
            return
    _core.remember(
        planned.extension,
        planned.settings,
        planned.dependencies + entry.checked_headers,
        str(entry.path),
        str(library),
        entry.verified_identities,
        with_cuda,
        reason,
    )
