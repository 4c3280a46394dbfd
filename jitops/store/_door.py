# SPDX-License-Identifier: MIT
"""The store's door: `Store` (one per cache root) and what it answers (`Found`), the lookup through
the tiers (this root, a package's shipped prebuilt, the remote cache), a build's staging and
publishing, and the root's listing for the CLI. Named from `jitops.store` (store/__init__.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .. import _files, _settings
from .._errors import BuildError, CacheError
from . import _budget, _entries, _listing, _prebuilt, _root, _stable, _usage
from ._entries import StagedEntry, Verified
from ._key import CudaPlan as CudaPlan  # a name of the door (store/__init__.py)
from ._key import PlannedEntry
from ._lock import entry_lock

if TYPE_CHECKING:
    from collections.abc import Callable

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
        if library is None:
            _prebuilt.warn_refused_once(planned.extension, refused)
            return None
        return Found(library, list(manifest["components"].get("backends", [])), "prebuilt")

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

    def receive(self, entry: _entries.Entry, manifest: dict, library_bytes: bytes) -> Path:
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
            return _entries.publish_library(entry, manifest, write)

    def sound_in_full(self, planned: PlannedEntry) -> bool:
        """Whether the key's entry is here and its library matches its sha256, hashed in full (a
        corrupt one is discarded, with a warning)."""
        return _entries.verified_or_discarded(planned.entry, full_hash=True) is not None

    def previous_manifest(self, planned: PlannedEntry, renamed_from: str | None = None) -> dict | None:
        """The manifest of the extension's other entry loaded or built last (for a module a reload
        renamed, the name it had): what a new build says changed since. One manifest read."""
        return _entries.newest_other_manifest(planned.entry, renamed_from)  # type: ignore[return-value]

    def entry_bytes(self, planned: PlannedEntry) -> tuple[dict, bytes] | None:
        """The key's entry as another node publishes it (receive): its manifest and its library's
        bytes, read without changing anything here; None where it is not here."""
        library = _entries.verified_or_discarded(planned.entry, read_only=True)
        return None if library is None else (dict(planned.entry.read_manifest() or {}), library.read_bytes())

    def refuse_stable(self, planned: PlannedEntry, reason: str) -> None:
        """The stable key's audit failed: from now on this root plans the extension under its exact key."""
        refused = _root.stable_refused(self.root)
        refused.put(planned.entry.key, reason)
        refused.save()

    # What the root records of use (store/_usage): `jitops-cache stats` and `list`
    def count(self, planned: PlannedEntry, **amounts: float) -> None:
        """Add to the extension's counters (builds, build_seconds, failed_builds, <source>_loads)."""
        _usage.count(self.root, planned.extension.qualified_name, **amounts)

    def note_location(self, planned: PlannedEntry) -> None:
        """Record the source tree the entry was loaded for (prune keeps an entry some tree still has)."""
        _usage.note_location(planned.entry, planned.extension.root)

    # What the root holds beside its entries, for the CLI (store/_listing)
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
