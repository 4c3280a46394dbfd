# SPDX-License-Identifier: MIT
"""The store's door: `Store` (one per cache root) and what it answers (`Found`), the lookup through
the tiers (this root, a package's shipped prebuilt, the remote cache), a build's staging and
publishing, and the root's listing for the CLI. Named from `jitops.store` (store/__init__.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .. import _files, _layout, _settings
from .._errors import BuildError, CacheError
from . import _budget, _entries, _failures, _listing, _object_store, _prebuilt, _root, _stable, _usage
from ._entries import StagedEntry, Verified
from ._key import CudaPlan as CudaPlan  # a name of the door (store/__init__.py)
from ._key import PlannedEntry
from ._lock import entry_lock

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._records import KeyComponents, Manifest
    from ._remote import Remote

Source = Literal["cache", "built", "remote", "prebuilt"]


@dataclass(frozen=True)
class Found:
    """A library to load, its backends, and where it came from: this root ("cache"), a build here
    ("built"), the remote cache ("remote") or a prebuilt folder ("prebuilt"). verified: the entry as
    checked (what its warm record keeps); None for a prebuilt."""

    library: Path
    backends: list[str]
    source: Source
    verified: Verified | None = None


def remote_tier() -> Remote | None:
    """The remote cache the settings name, or None: imported only where one is set (an edit's
    build takes a fraction of a second)."""
    if not _settings.get("JITOPS_REMOTE_CACHE"):
        return None
    from . import _remote  # only where a remote is set

    return _remote.active()


class Store:
    """One cache root and its tiers: a lookup (this root, a package's shipped prebuilt, the remote),
    a build's staging and publishing, once per key across processes (and machines, with a remote)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def remote(self) -> Remote | None:
        return remote_tier()

    # Lookup, tier by tier
    def local(self, planned: PlannedEntry) -> Found | None:
        """The key's entry in this root whose headers hold (a corrupt one is discarded), or None."""
        verified = _entries.verified_variant(planned.entry)
        return None if verified is None else self._found(planned, verified, "cache")

    def unfit(self, planned: PlannedEntry, found: Found) -> str:
        """Why the stable entry found cannot serve this process (built where it has what this one
        lacks), or ""."""
        built_under = found.verified.built_under if found.verified else None
        return _stable.unfit_here(built_under or {}) if planned.stable else ""

    def shipped(self, planned: PlannedEntry) -> Found | None:
        """The prebuilt library the extension's package ships for this key: whoever installed a
        binary wheel expects no compile. Why each candidate was refused is said once."""
        library, manifest, refused = _prebuilt.find_prebuilt(planned.extension, planned.components, shipped_only=True)
        if library is None or manifest is None:
            _prebuilt.warn_refused_once(planned.extension, refused)
            return None
        return Found(library, _prebuilt.backends(manifest["components"]), "prebuilt")

    def fetch(self, planned: PlannedEntry) -> Found | None:
        """The remote's entry, published here under the key's lock (a download is not a build:
        JITOPS_DISABLE_BUILD takes it); or the entry another process published meanwhile; else None."""
        remote = self.remote
        if remote is None:
            return None
        with entry_lock(planned.entry, "downloading"):
            found = self.local(planned)
            if found is None:
                _entries.remove_orphans(planned.entry)
                library = remote.fetch(planned)
                found = None if library is None else self._published(planned, library, "remote")
        if found is not None:
            _budget.enforce_budget(self.root)
        return found

    def lookup(self, planned: PlannedEntry) -> Found | None:
        """This root's entry, else the shipped prebuilt, else the remote's; None: a miss in every tier."""
        return self.local(planned) or self.shipped(planned) or self.fetch(planned)

    def prebuilt(self, planned: PlannedEntry, why: str, required: bool, advice: str = "") -> Found | None:
        """A prebuilt library (shipped or in JITOPS_PREBUILT_DIR) standing in for a build that cannot
        be had (why). None where none matches, or (required) an error naming why and each refusal."""
        found = _prebuilt.prebuilt_or_error(planned.extension, planned.components, why, required, advice)
        return None if found is None else Found(*found, "prebuilt")

    def refuse(self, planned: PlannedEntry, err: OSError) -> None:
        """A library fetched from the remote that does not open here (a C++ runtime older than its
        writer's, say): removed, with one warning, and its key not fetched again by this process."""
        if (remote := self.remote) is not None:
            remote.refuse(planned, f"{err.__cause__ or err}")
        planned.entry.discard()

    # Building and publishing
    def build_once(self, planned: PlannedEntry, build: Callable[[], Path]) -> Found:
        """build()'s library (it publishes through staged()), made under the key's lock; where a remote
        is set, once per key across machines (pushed before its lease goes). Or the entry another
        process or machine published first. Then the budget, the key's lock released."""
        with entry_lock(planned.entry, "building"):
            if (found := self.local(planned)) is not None:
                return found
            _entries.remove_orphans(planned.entry)
            if (remote := self.remote) is None:
                found = self._published(planned, build(), "built")
            else:  # "remote" where another machine pushed it meanwhile
                found = self._published(planned, *remote.build_once(planned, build))
        _budget.enforce_budget(self.root)  # its older variants may go too
        return found

    def staged(self, planned: PlannedEntry) -> contextlib.AbstractContextManager[StagedEntry]:
        """A build's folder for the entry: published as it where the block sets a manifest and ends
        cleanly, removed on any error (under the key's lock: build_once)."""
        return _entries.staged(planned.entry)

    def receive(self, entry: _entries.Entry, manifest: Manifest, library_bytes: bytes) -> Path:
        """Publish an entry built elsewhere (jitops.distributed's other rank) as a local build
        would, its name, key and sha256 checked, under the entry's lock. Returns the library."""
        if manifest.get("name") != entry.name or manifest.get("key") != entry.key:
            raise BuildError(
                f"jitops: the entry received for {entry.name} is for {manifest.get('name')!r} key {manifest.get('key')!r}, "
                f"not key {entry.key!r}"
            )
        if _files.sha256_bytes(library_bytes) != manifest.get("library_sha256"):
            raise BuildError(f"jitops: the library received for {entry.name} does not match its manifest's sha256")

        def write(path: Path) -> bool:
            path.write_bytes(library_bytes)
            return True

        with entry_lock(entry, "receiving"):
            if (library := _entries.verified_or_discarded(entry)) is not None:
                return library
            _entries.remove_orphans(entry)
            library = _entries.publish_library(entry, manifest, write)
            assert library is not None  # write() never refuses
            return library

    def sound_in_full(self, planned: PlannedEntry) -> bool:
        """Whether the key's entry is here and its library matches its sha256, hashed in full (a
        corrupt one is discarded, with a warning)."""
        return _entries.verified_or_discarded(planned.entry, full_hash=True) is not None

    def previous_manifest(self, planned: PlannedEntry, renamed_from: str | None = None) -> Manifest | None:
        """The manifest of the extension's other entry loaded or built last (for a module a reload
        renamed, the name it had): what a new build says changed since. One manifest read."""
        return _entries.newest_other_manifest(planned.entry, renamed_from)  # type: ignore[return-value]

    def entry_bytes(self, planned: PlannedEntry) -> tuple[Manifest, bytes] | None:
        """The key's entry as another node publishes it (receive): its manifest and its library's
        bytes, read without changing anything here; None where it is not here."""
        library = _entries.verified_or_discarded(planned.entry, read_only=True)
        if library is None or (manifest := planned.entry.read_manifest()) is None:
            return None
        return manifest, library.read_bytes()

    def refuse_stable(self, planned: PlannedEntry, reason: str) -> None:
        """The stable key's audit failed: from now on this root plans the extension under its exact key."""
        refused = _root.stable_refused(self.root)
        refused.put(planned.entry.key, reason)
        refused.save()

    # What a build asks of the store: the failure it remembers, its units' objects, its manifest
    def prebuilt_can_stand_in(self, planned: PlannedEntry) -> bool:
        """Whether a prebuilt folder is there for the extension: a failed build then falls back to it."""
        return any(folder.is_dir() for folder in _prebuilt.prebuilt_dirs(planned.extension))

    def remembered_failure(self, planned: PlannedEntry) -> str | None:
        """Why a build of these very inputs is not tried again yet (it failed lately), or None."""
        if (remembered := _failures.recall(planned)) is None:
            return None
        failure, age = remembered
        return (
            f"building {planned.entry.name} failed {age / 60:.0f} min ago with these same sources, headers and toolchain, "
            f"and is not tried again for {_failures.REMEMBERED_S // 60} min unless one of them changes: {failure}"
        )

    def remember_failure(self, planned: PlannedEntry, failure: str, log: str) -> None:
        """A failed build's error kept for its inputs, unless its log says a retry may pass."""
        if not _failures.may_pass_next_time(log):
            _failures.remember(planned, failure)

    def forget_failure(self, planned: PlannedEntry) -> None:
        _failures.forget(planned)

    def pch_root(self, planned: PlannedEntry) -> Path:
        """Where the extension's PCHs live: the cache root, shared by every extension (one with a
        root of its own uses that only where the configured one is unusable)."""
        return _root.shared_root(planned.extension.cache_dir)

    def object_keys(self, planned: PlannedEntry, unit) -> _object_store.ObjectKeys:
        """A unit's keys in the object store (and the remote's), from its source's hash."""
        return _object_store.keys_of(unit, planned.toolchain_components, planned.source_hashes[unit.relative])

    def remove_dead_object_staging(self) -> None:
        """Killed stores' staging folders in objects/ (once per build, before its units are planned)."""
        _root.remove_dead_staging(Path(_layout.objects_dir(self.root)))

    def reuse_object(self, unit, build_dir: Path) -> tuple[str, dict[str, str]] | None:
        """The unit's stored object, copied into build_dir where its headers all hold: its key and
        headers; or None."""
        return _object_store.reuse(self.root, unit, build_dir)

    def fetch_object(self, planned: PlannedEntry, unit, build_dir: Path) -> dict[str, str] | None:
        """The unit's object from the remote cache into build_dir, where it has one whose headers
        all hold here: its headers (keep_object stores it as a local one), or None."""
        if (remote := self.remote) is None:
            return None
        return remote.fetch_object(self.root, unit.portable_key, build_dir / unit.object, planned.entry.name)

    def keep_object(self, unit, build_dir: Path) -> str:
        """Store a unit's object (compiled or fetched) with its headers; the key it is kept under."""
        return _object_store.keep(self.root, unit, build_dir)

    def file_hashes(self) -> _root.KnownFileHashes:
        """The root's record of file hashes (each with the identity it was read at); .save() writes it."""
        return _root.known_file_hashes(self.root)

    # The object store's rules, for the build file and its checks
    NAME_MACRO = _object_store.NAME_MACRO
    names_extension = staticmethod(_object_store.names_extension)
    settled_before = staticmethod(_object_store.settled_before)
    object_variant = staticmethod(_object_store.variant_of)

    @staticmethod
    def manifest(entry: _entries.Entry, components: KeyComponents, library: Path, headers: dict, **extra) -> Manifest:
        """The manifest of an entry whose library is `library`, in its staging folder (builds and
        ahead-of-time wheels): the one writer."""
        return _entries.make_manifest(entry, components, library, headers, **extra)

    # What the root records of use (store/_usage): `jitops-cache stats` and `list`
    def count(self, planned: PlannedEntry, **amounts: float) -> None:
        """Add to the extension's counters (builds, build_seconds, failed_builds, <source>_loads)."""
        _usage.count(self.root, planned.extension.qualified_name, **amounts)

    def note_location(self, planned: PlannedEntry) -> None:
        """Record the source tree the entry was loaded for (prune keeps an entry some tree still has)."""
        _usage.note_location(planned.entry, planned.extension.root)

    # What the root holds beside its entries, for the CLI (store/_listing)
    @staticmethod
    def other_roots() -> list[str]:
        """The roots of entries built into a build_directory, as the configured root lists them."""
        return _root.other_roots()

    def staging_folders(self) -> list[Path]:
        """Builds' staging folders (running, or left by killed builds)."""
        return _listing.staging_folders(self.root)

    def lock_of_staging(self, folder: Path) -> Path | None:
        """The entry lock a staging folder was made under (held while its build runs)."""
        return _listing.lock_of_staging(self.root, folder)

    def parts_staging(self) -> list[tuple[Path, str]]:
        """Stores in progress (or killed) in objects/ and pch/, with their kind."""
        return _listing.parts_staging(self.root)

    def older_layout_entries(self) -> list[Path]:
        return _listing.older_layout_entries(self.root)

    def dangling_warm_records(self) -> list[Path]:
        return _listing.dangling_warm_records(self.root)

    def dangling_locks(self) -> list[Path]:
        return _listing.dangling_locks(self.root)

    # The CLI's reads and removals of the root
    def entry(self, name: str, key: str, source_root: str | None = None, variant: str | None = None) -> _entries.Entry:
        """The root's entry of one key (and variant; source_root: where its headers are named from):
        its paths, manifest, lock and verification."""
        return _entries.Entry(self.root, name, key, source_root, variant=variant)

    def entries(self) -> list[tuple[_entries.Entry, Manifest | None]]:
        """Every entry in the root, each with its manifest (None where unreadable)."""
        return _entries.list_entries(self.root)

    def sound(self, entry: _entries.Entry) -> bool:
        """Whether an entry is here and verifies, changing nothing (a corrupt one stays, for the CLI to name)."""
        return _entries.verified_or_discarded(entry, read_only=True) is not None

    def stored_items(self) -> list[_budget.Item]:
        """What the budget counts: entries, stored objects and PCHs, with their sizes and last use."""
        return _budget.items(self.root)

    def live_paths(self) -> set[str] | None:
        """The root's files that live processes have mapped (None where /proc cannot say)."""
        return _budget.live_paths(self.root)

    is_live = staticmethod(_budget.is_live)

    def locations(self) -> dict[str, list[str]]:
        """Where each entry's sources were seen (prune keeps an entry some tree still has)."""
        return _usage.read_locations(self.root)

    def stats(self) -> tuple[dict[str, dict[str, float]], float | None]:
        """The counters by extension, and when they were last zeroed."""
        return _usage.read_stats(self.root)

    def zero_stats(self) -> None:
        _usage.zero_stats(self.root)

    STATS_FIELDS = _usage.STATS_FIELDS

    def part_problem(self, part: str) -> str | None:
        """Why a part of the root (objects/, pch/) cannot be used, or None; creates nothing."""
        return _root.part_problem(self.root, part, create=False)

    def ensure_private(self) -> Path:
        """The root, made where missing; CacheError where another user could write into it."""
        return _root.ensure_private_dir(self.root)

    remove_locked = staticmethod(_root.remove_locked)
    remove_tree = staticmethod(_root.remove_tree)
    staging_is_dead = staticmethod(_root.staging_is_dead)
    describe_object = staticmethod(_object_store.describe)
    fallback_root = staticmethod(_root.fallback_root)
    shared_root = staticmethod(_root.shared_root)

    def _found(self, planned: PlannedEntry, verified: Verified, source: Source) -> Found:
        return Found(verified.library, verified.backends or planned.cuda.backends, source, verified)

    def _published(self, planned: PlannedEntry, library: Path, source: Source) -> Found:
        """The entry just published here (its variant set by the publish), as checked now: its
        library's identity was recorded when published, so nothing is hashed. Where it no longer
        checks (a header edited since), the library as published, with nothing for a warm record."""
        try:
            verified = planned.entry.verify(touch=False)
        except CacheError:
            verified = None
        if verified is None:
            return Found(library, planned.cuda.backends, source)
        return self._found(planned, verified, source)
