# SPDX-License-Identifier: MIT
"""Find or build an Extension's library and load it, in the order docs/ARCHITECTURE.md ("Resolution
order") gives: this process's registry, a warm record, the store (this root, a package's shipped
prebuilt, the remote), and on a miss in every tier a build (the builder wing, imported only then)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import _files, _settings, warm
from ._errors import BuildError, CacheError, warn
from .store import Found, PlannedEntry, Store
from .warm import LoadedLibrary, _namespaces, already_loaded, loaded

if TYPE_CHECKING:
    from ._records import WarmRecord
    from .extension import Extension

_load_locks: dict[str, threading.Lock] = {}
_load_locks_guard = threading.Lock()


def resolve(extension: Extension, cached_only: bool = False) -> LoadedLibrary | None:
    """The extension's library, loaded into this process. cached_only=True looks in this root alone:
    None where it would have to be built (or taken prebuilt), for a caller to hand those to threads."""
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
    recalled = warm.recall(extension)
    if recalled is not None:
        return recalled
    planned = PlannedEntry(extension)
    for attempt in ("first", "again", "last"):
        store = Store(planned.entry.root)
        found = store.local(planned)
        if found is not None and (unfit := store.unfit(planned, found)):
            planned = _exact_instead(planned, unfit)  # built elsewhere for what this process lacks
            continue
        if found is None and cached_only:
            return None
        if found is None and planned.read_only is not None:
            raise planned.read_only  # nothing to load, and no building there
        if found is None:
            started = time.monotonic()
            try:
                planned, found = _found_or_built(planned, store)
            except Exception:
                store.count(planned, failed_builds=1)
                raise
            if found.source == "built":
                seconds = time.monotonic() - started
                store.count(planned, builds=1, build_seconds=seconds)
        try:
            # Entries never change once published, but one can be removed (clear, prune, the
            # budget) between its check and here: found or built again, never a raw OS error.
            namespaces = _namespaces.defined_in(found.library)
            _namespaces.claim(namespaces, found.library, planned.extension.qualified_name)
            warm.open_library(found.library)
            break
        except OSError as err:
            if found.source == "remote" and attempt == "first":  # built elsewhere, it does not open here: build it here
                store.refuse(planned, err)
                continue
            if planned.stable and found.source != "built" and attempt != "last":  # bound here, a symbol this torch lacks
                planned = _exact_instead(planned, f"it does not open under this torch: {err.__cause__ or err}")
                continue
            if found.source == "prebuilt" or attempt == "again" or not _worth_another_try(planned, store, found.library, err):
                raise
    assert found is not None  # an attempt ends with a library (break) or raises
    if found.source != "built":
        store.count(planned, **{f"{found.source}_loads": 1})
    with_cuda = "cuda" in found.backends
    reason = "" if with_cuda else (planned.cuda.reason or "the prebuilt library has no CUDA kernels")
    inputs = []
    if found.source != "prebuilt":
        inputs = _remember(planned, found, with_cuda, reason, namespaces)
        store.note_location(planned)
    return LoadedLibrary(planned.extension, found.library, with_cuda, reason, found.source, inputs)


def _exact_instead(planned: PlannedEntry, why: str) -> PlannedEntry:
    """A stable entry this process cannot use: the extension planned under its exact key, with a note."""
    from .builder._progress import BuildStatus  # its status line; a remote hit of an entry that fits never gets here

    BuildStatus.say(f"jitops: not loading {planned.entry.path.name}, built under another torch: {why}; using one for this torch")
    return PlannedEntry(planned.extension, exact_because=why)


BUILD_ATTEMPTS = 3  # builds of one load whose inputs kept changing while they ran, before an error
# What a build reads: a bad value is an error of its own before any build, not a reason to fall back.
BUILD_SETTINGS = ("JITOPS_LOCK_TIMEOUT", "JITOPS_BUILD_TIMEOUT", "JITOPS_PCH", "JITOPS_CACHE_MAX_SIZE", "JITOPS_VERBOSE")


def _found_or_built(planned: PlannedEntry, store: Store) -> tuple[PlannedEntry, Found]:
    """A miss in this root: the shipped prebuilt, the remote's, or a build; planned again (a new key)
    where a source or header changed while it built: what is published is always what its key says."""
    _settings.check(*BUILD_SETTINGS)
    found = store.shipped(planned) or store.fetch(planned)  # this root's entry: missed already
    for attempt in range(1, BUILD_ATTEMPTS + 1):
        if found is not None:
            return planned, found
        from .builder import _builder  # only on a miss in every tier: its imports cost a warm load's budget

        try:
            return planned, _builder.build(planned, store)
        except _builder.NotStable as err:  # under its exact key, now and from now on in this root
            _refuse_stable(planned, store, err.offending)
        except _builder.InputsChanged as err:
            _say_changed(planned, err.paths, attempt)  # an error after the last attempt
        planned = PlannedEntry(planned.extension)
        store = Store(planned.entry.root)
        found = store.lookup(planned)  # the new key in every tier
    if found is None:
        raise AssertionError("unreachable")
    return planned, found


def _refuse_stable(planned: PlannedEntry, store: Store, offending: list[str]) -> None:
    reason = f"its library needs {', '.join(offending[:3])}, outside torch's stable ABI"
    store.refuse_stable(planned, reason)
    warn(
        f"{planned.extension.qualified_name} was to be built on torch's stable ABI (stable_abi), but {reason}: "
        "it is built and kept for this torch and Python alone. Remove what uses torch's C++ API, or declare it "
        "with stable_abi=False."
    )


def _say_changed(planned: PlannedEntry, paths: list[str], attempt: int) -> None:
    from .builder._progress import BuildStatus  # loaded already: a build ran

    changed, name = ", ".join(paths), planned.extension.qualified_name
    if attempt == BUILD_ATTEMPTS:
        raise BuildError(
            f"jitops: building {name}: {changed} kept changing while it was compiled ({attempt} attempts); "
            "nothing was published. Build again once they stay put."
        ) from None
    BuildStatus.say(f"jitops: {changed} changed while {name} was built; building it again")


def _worth_another_try(planned: PlannedEntry, store: Store, library: Path, err: OSError) -> bool:
    """After a verified library failed to open: True where it was removed meanwhile or no longer
    matches its sha256 (then discarded, with a warning). A sound one that does not open is an error."""
    entry = planned.entry
    if not library.exists() or not store.sound_in_full(planned):
        return True
    raise CacheError(
        f"jitops: the library {library} of the cache entry {entry.path} matches its sha256 but does not open: "
        f"{err.__cause__ or err}. `jitops-cache clear {entry.name}` removes the entry, and the next load builds it again."
    ) from err


def _remember(planned: PlannedEntry, found: Found, with_cuda: bool, reason: str, namespaces: list[str]) -> list:
    """Write the warm record of a library just verified or built (settings, what the key read with its
    identities, the library's and manifest's, its namespaces). Returns what it lists."""
    entry, verified = planned.entry, found.verified
    if verified is None:
        return planned.dependencies
    checked = planned.dependencies + verified.headers
    root = warm.extension_root(planned.extension)
    if os.path.abspath(entry.root) != os.path.abspath(root):
        return checked  # a fallback cache (the configured one was refused): no warm start from there
    record: WarmRecord = {
        "settings": planned.settings,
        "checked": checked,
        "entry": entry.path.name,
        "library": verified.library.name,
        "library_identity": verified.identities[0],
        "manifest_identity": verified.identities[1],
        "with_cuda": with_cuda,
        "cuda_reason": reason,
        "torch_libraries": namespaces,
    }
    try:
        _files.write_json_atomic(
            warm.record_path(root, planned.extension.qualified_name, planned.settings), record, durable=False
        )
    except OSError:
        pass
    return checked
