# SPDX-License-Identifier: MIT
"""Find or build an Extension's library and load it, in the order docs/ARCHITECTURE.md ("Resolution
order") gives: this process's registry, a warm record, a verified entry, a build or a prebuilt."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CacheError, warn
from ..store import _entries, _root, _stable, _usage
from ..store._key import PlannedEntry
from ..warm import _libraries, _namespaces
from ..warm._libraries import LoadedLibrary, already_loaded, loaded

if TYPE_CHECKING:
    from ..extension import Extension

_load_locks: dict[str, threading.Lock] = {}
_load_locks_guard = threading.Lock()


def resolve(extension: Extension, cached_only: bool = False) -> LoadedLibrary | None:
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
    recalled = _libraries.recall(extension)
    if recalled is not None:
        return recalled
    planned = PlannedEntry(extension)
    for attempt in ("first", "again", "last"):
        library = _entries.verified_or_discarded(planned.entry)
        how, backends = "cache", planned.entry.backends or planned.cuda.backends
        if library is not None and planned.stable and (unfit := _stable.unfit_here(planned.entry.built_under or {})):
            planned = _exact_instead(planned, unfit)  # built elsewhere for what this process lacks
            continue
        if library is None and cached_only:
            return None
        if library is None and planned.read_only is not None:
            raise planned.read_only  # nothing to load, and no building there
        if library is None:
            started = time.monotonic()
            try:
                planned, (library, backends, how) = _build_settled(planned)
            except Exception:
                _usage.count(planned.entry.root, planned.extension.qualified_name, failed_builds=1)
                raise
            if how == "built":
                _usage.count(
                    planned.entry.root, planned.extension.qualified_name, builds=1, build_seconds=time.monotonic() - started
                )

        try:
            # Entries never change once published, but one can be removed (clear, prune, the
            # budget) between its check and here: found or built again, never a raw OS error.
            namespaces = _namespaces.defined_in(library)
            _namespaces.claim(namespaces, library, planned.extension.qualified_name)
            _libraries.open_library(library)
            break
        except OSError as err:
            if how == "remote" and attempt == "first":  # built elsewhere, it does not open here: build it here
                from ._builder import refuse_remote

                refuse_remote(planned, err)
                continue
            if planned.stable and how != "built" and attempt != "last":  # bound here, a symbol this torch lacks
                planned = _exact_instead(planned, f"it does not open under this torch: {err.__cause__ or err}")
                continue
            if how == "prebuilt" or attempt == "again" or not _worth_another_try(planned.entry, library, err):
                raise
    if how != "built":
        _usage.count(planned.entry.root, planned.extension.qualified_name, **{f"{how}_loads": 1})
    with_cuda = "cuda" in backends
    reason = "" if with_cuda else (planned.cuda.reason or "the prebuilt library has no CUDA kernels")
    inputs = []
    if how != "prebuilt":
        inputs = _remember(planned, library, with_cuda, reason, namespaces)
        _usage.note_location(planned.entry, planned.extension.root)
    return LoadedLibrary(planned.extension, library, with_cuda, reason, how, inputs)


def _exact_instead(planned: PlannedEntry, why: str) -> PlannedEntry:
    """A stable entry this process cannot use: the extension planned under its exact key, with a note."""
    from ._progress import BuildStatus

    BuildStatus.say(f"jitops: not loading {planned.entry.path.name}, built under another torch: {why}; using one for this torch")
    return PlannedEntry(planned.extension, exact_because=why)


BUILD_ATTEMPTS = 3  # builds of one load whose inputs kept changing while they ran, before an error


def _build_settled(planned: PlannedEntry) -> tuple[PlannedEntry, tuple[Path, list[str], str]]:
    """_builder.build_or_prebuilt, planned again (a new key) where a source or header changed while
    it built: what is published is always what its key says."""
    from .._errors import BuildError
    from ..store._object_store import InputsChanged
    from . import _builder  # imported only on a miss: its imports cost a warm load's budget
    from ._progress import BuildStatus

    for attempt in range(1, BUILD_ATTEMPTS + 1):
        try:
            return planned, _builder.build_or_prebuilt(planned)
        except _builder.NotStable as err:  # under its exact key, now and from now on in this root
            reason = f"its library needs {', '.join(err.offending[:3])}, outside torch's stable ABI"
            refused = _root.stable_refused(planned.entry.root)
            refused.put(planned.entry.key, reason)
            refused.save()
            warn(
                f"{planned.extension.qualified_name} was to be built on torch's stable ABI (stable_abi), but {reason}: "
                "it is built and kept for this torch and Python alone. Remove what uses torch's C++ API, or declare it "
                "with stable_abi=False."
            )
        except InputsChanged as err:
            changed, name = ", ".join(err.paths), planned.extension.qualified_name
            if attempt == BUILD_ATTEMPTS:
                raise BuildError(
                    f"jitops: building {name}: {changed} kept changing while it was compiled ({attempt} attempts); "
                    "nothing was published. Build again once they stay put."
                ) from None
            BuildStatus.say(f"jitops: {changed} changed while {name} was built; building it again")
        planned = PlannedEntry(planned.extension)
        library = _entries.verified_or_discarded(planned.entry)
        if library is not None:
            return planned, (library, planned.entry.backends or planned.cuda.backends, "cache")
    raise AssertionError("unreachable")


def _worth_another_try(entry: _entries.Entry, library: Path, err: OSError) -> bool:
    """After a verified library failed to open: True where it was removed meanwhile or no longer
    matches its sha256 (then discarded, with a warning). A sound one that does not open is an error."""
    if not library.exists() or _entries.verified_or_discarded(entry, full_hash=True) is None:
        return True
    raise CacheError(
        f"jitops: the library {library} of the cache entry {entry.path} matches its sha256 but does not open: "
        f"{err.__cause__ or err}. `jitops-cache clear {entry.name}` removes the entry, and the next load builds it again."
    ) from err


def _remember(planned: PlannedEntry, library: Path, with_cuda: bool, reason: str, namespaces: list[str]) -> list:
    """Write the warm record of a library just verified or built (settings, what the key read with its
    identities, the library's and manifest's, its namespaces). Returns what it lists."""
    entry = planned.entry
    if entry.verified_identities is None:
        try:
            entry.verified_library(touch=False)
        except CacheError:
            return planned.dependencies
    checked = planned.dependencies + entry.checked_headers
    root = _libraries.extension_root(planned.extension)
    if os.path.abspath(entry.root) != os.path.abspath(root):
        return checked  # a fallback cache (the configured one was refused): no warm start from there
    record = {
        "settings": planned.settings,
        "checked": checked,
        "entry": entry.path.name,
        "library": library.name,
        "library_identity": entry.verified_identities[0],
        "manifest_identity": entry.verified_identities[1],
        "with_cuda": with_cuda,
        "cuda_reason": reason,
        "torch_libraries": namespaces,
    }
    try:
        _libraries.write_json_atomic(
            _libraries.record_path(root, planned.extension.qualified_name, planned.settings), record, durable=False
        )
    except OSError:
        pass
    return checked
