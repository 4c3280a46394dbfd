# SPDX-License-Identifier: MIT
"""The store's entries, one library each (`<namespace>.<name>-<key>-<variant>`): verified, published
and listed here. A published entry never changes: a tree that differs in a header gets its own, so a
process opens exactly the library it checked."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import _layout
from .._errors import BuildError, CacheError, warn
from .._files import file_identity, identity_or_none, json_digest, mark_used, read_regular, sha256_file, write_json_atomic
from .._layout import MANIFEST_NAME, parse_entry_name
from ._root import (
    check_private_dir,
    known_file_hashes,
    note_other_root,
    remove_dead_staging,
    remove_tree,
)
from ._staging import new_staging, publish_folder

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._records import KeyComponents, Manifest

MANIFEST_MAX = 16 << 20  # a manifest lists an extension's sources and headers


class StaleEntry(CacheError):
    """A sound entry built from a header that has changed since: another variant may match."""


def variant_of(headers: dict) -> str:
    """An entry's variant: the headers its build included, each with its sha256 (names relative to
    the extension's root, so two clones of one tree share it)."""
    return json_digest(headers, _layout.VARIANT_LENGTH)


@dataclass(frozen=True)
class Verified:
    """An entry found sound: its library, the identities its library and manifest were checked at
    (a warm record keeps them), the headers checked with the identity each had, and what its
    manifest says of it (the backends: a library fetched from the remote cache may have CUDA kernels
    where this machine, without nvcc, would build without them; a stable entry's build)."""

    library: Path
    identities: tuple[list[int], list[int] | None]
    headers: list[tuple[str, list[int] | None]]
    backends: list[str] | None
    built_under: dict | None


class Entry:
    """One key's entry in a root: the folder `<namespace>.<name>-<key>-<variant>` (a prebuilt
    folder's has no variant). Without a variant it stands for whichever of the key's variants
    (variants()) verifies; variant is set once one is verified or published. source_root: for the
    manifest's header names."""

    def __init__(self, root: Path, name: str, key: str, source_root: str | None = None, variant: str | None = None):
        self.root = Path(root)
        self.name = name  # Extension.qualified_name
        self.key = key
        self.source_root = source_root
        self.variant = variant
        self.stale_because = ""  # the header that changed, where verified() found one: why a build runs

    @property
    def path(self) -> Path:
        return self.root / _layout.entry_name(self.name, self.key, self.variant)

    @property
    def lock_path(self) -> Path:
        return Path(_layout.lock_path(self.root, self.name, self.key))

    @property
    def failed_log_path(self) -> Path:
        return Path(_layout.failed_log_path(self.root, self.name, self.key))

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST_NAME

    def variants(self) -> list[str | None]:
        """The variants published for this key, the most recently used first (None: a folder
        without one, as prebuilt folders and older caches name it)."""
        prefix = _layout.key_name(self.name, self.key)
        found = []
        try:
            with os.scandir(self.root) as children:
                for child in children:
                    if child.name.startswith(prefix) and child.is_dir(follow_symlinks=False):
                        parsed = parse_entry_name(child.name)
                        if parsed and parsed[:2] == (self.name, self.key):
                            found.append((child.stat(follow_symlinks=False).st_mtime, parsed[2]))
        except OSError:
            return []
        return [variant for _, variant in sorted(found, key=lambda f: f[0], reverse=True)]

    def read_manifest(self) -> Manifest | None:
        """The manifest, or None if the entry is absent. Malformed manifests raise CacheError."""
        try:
            text = read_regular(self.manifest_path, MANIFEST_MAX)
        except FileNotFoundError:
            return None
        except ValueError as err:  # a link, FIFO, device or folder: never followed or waited on
            raise CacheError(str(err)) from None
        try:
            manifest = json.loads(text)
        except ValueError as err:
            raise CacheError(f"{self.manifest_path} is not valid JSON: {err}") from None
        if not isinstance(manifest, dict):
            raise CacheError(f"{self.manifest_path} is not a JSON object")
        return cast("Manifest", manifest)  # its fields are checked where they are read (verify)

    def verified_library(self, touch: bool = True, private: bool = True, full_hash: bool = False) -> Path | None:
        """This variant's .so where it is sound (verify()); None where absent."""
        verified = self.verify(touch, private, full_hash)
        return None if verified is None else verified.library

    def verify(self, touch: bool = True, private: bool = True, full_hash: bool = False) -> Verified | None:
        """This variant where its manifest, sha256 (in full unless its identity is recorded, or
        full_hash) and headers hold; None where absent; CacheError if corrupt or not ours, StaleEntry if a header changed."""
        if not self.path.is_dir():
            return None
        if self.path.is_symlink():
            raise CacheError(f"{self.path} is a symbolic link; refusing to load from it")
        if private:
            check_private_dir(self.path)
        manifest_identity = identity_or_none(str(self.manifest_path))  # read before its content
        manifest = self.read_manifest()
        if manifest is None:
            raise CacheError(f"{self.path} has no {MANIFEST_NAME}")
        if manifest.get("key") != self.key or manifest.get("name") != self.name:
            raise CacheError(
                f"{self.manifest_path} describes another build ({manifest.get('name')!r} key {manifest.get('key')!r})"
            )
        headers = manifest.get("headers", {})
        if not isinstance(headers, dict):
            raise CacheError(f"{self.manifest_path} has no valid header list")
        if self.variant is not None and variant_of(headers) != self.variant:
            raise CacheError(f"{self.manifest_path} lists the headers of another variant")
        library_name = manifest.get("library")
        if not isinstance(library_name, str) or os.path.basename(library_name) != library_name:
            raise CacheError(f"{self.manifest_path} names no valid library file")
        library = self.path / library_name
        try:
            if not stat.S_ISREG(os.lstat(library).st_mode):  # a FIFO, device, link or folder is never read
                raise CacheError(f"{library} is not a regular file")
            identity = file_identity(library)
        except FileNotFoundError:
            raise CacheError(f"{library} is missing") from None
        checked = self.check_headers(headers, save=touch)
        moved = identity != manifest.get("library_identity")
        if (full_hash or moved) and sha256_file(library) != manifest.get("library_sha256"):
            raise CacheError(f"{library} does not match the sha256 in its manifest (truncated or modified)")
        if touch and moved:  # the hash holds for the new identity too: record it
            try:
                write_json_atomic(self.manifest_path, {**manifest, "library_identity": identity})
                manifest_identity = identity_or_none(str(self.manifest_path))  # the one just written
            except OSError:
                pass  # a read-only cache still loads (the manifest as read); it hashes the library again next time
        if touch:
            mark_used(str(self.path), self.last_used())
        built_under = manifest.get("built_under")
        backends = manifest.get("components", {}).get("backends")
        return Verified(
            library, (identity, manifest_identity), checked, backends, built_under if isinstance(built_under, dict) else None
        )

    def check_headers(self, headers: dict, save: bool) -> list[tuple[str, list[int] | None]]:
        """Each header the build included (manifest "headers": name -> sha256), with the identity it had
        when found unchanged. save=False records no hash (the CLI writes nothing)."""
        if self.source_root is None or not headers:
            return []
        known, checked = known_file_hashes(self.root), []
        for name, digest in sorted(headers.items()):
            path = os.path.join(self.source_root, name)
            identity = identity_or_none(path)
            try:
                unchanged = identity is not None and known.sha256(path) == digest
            except OSError:
                unchanged = False
            if not unchanged:
                if save:
                    known.save()
                raise StaleEntry(f"{os.path.basename(path)} changed")
            checked.append((path, identity))
        if save:
            known.save()
        return checked

    def last_used(self) -> float:
        """When the entry was last loaded (its folder's mtime: _files.mark_used), or else built."""
        return os.stat(self.path).st_mtime

    def discard(self) -> None:
        """Remove a corrupt entry (renamed away first: no loader sees it half deleted)."""
        if self.path.exists() or self.path.is_symlink():
            remove_tree(self.path)


def verified_or_discarded(entry: Entry, full_hash: bool = False, read_only: bool = False) -> Path | None:
    """The library of verified_variant()."""
    verified = verified_variant(entry, full_hash, read_only)
    return None if verified is None else verified.library


def verified_variant(entry: Entry, full_hash: bool = False, read_only: bool = False) -> Verified | None:
    """The key's variant whose headers hold (most recently used first), entry.variant set; else None
    (entry.stale_because names a changed header). A corrupt variant is removed; read_only=True changes nothing."""
    stale = ""
    for variant in entry.variants():
        entry.variant = variant
        try:
            verified = entry.verify(touch=not read_only, full_hash=full_hash)
        except StaleEntry as err:
            stale = stale or str(err)
            continue
        except CacheError as err:
            if not read_only:
                warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
                entry.discard()
            continue
        except OSError:
            if not read_only:
                raise
            continue
        if verified is not None:
            entry.stale_because = ""
            return verified
    entry.variant = None
    entry.stale_because = stale
    return None


def make_manifest(entry: Entry, components: KeyComponents, library: Path, headers: dict, **extra) -> Manifest:
    """The manifest of an entry whose library is `library` (in its staging folder): the one writer,
    for builds and ahead-of-time wheels. headers: see Entry.check_headers."""
    manifest: Manifest = {
        "name": entry.name,
        "key": entry.key,
        "components": components,
        "library": library.name,
        "library_sha256": sha256_file(library),
        # Renaming the staging folder into place keeps the file's identity: loads can trust this hash.
        "library_identity": file_identity(library),
        "headers": headers,
    }
    return cast("Manifest", {**manifest, **extra})  # extra: the build's timings and units


def publish_library(entry: Entry, manifest: Manifest, write: Callable[[Path], bool]) -> Path | None:
    """Publish a library made elsewhere (another rank, the remote) as a local build would, under the
    key's lock: write(path) puts its bytes at a staged path and says whether they are whole; then
    its manifest, last, and one rename. Returns the library, or None where write said no."""
    name = manifest.get("library")
    if not isinstance(name, str) or os.path.basename(name) != name or not name.endswith(".so"):
        raise BuildError(f"jitops: the entry received for {entry.name} names no valid library ({name!r})")
    with staged(entry) as staging:
        library = staging.path / name
        if not write(library):
            return None  # nothing published: the folder goes
        with open(library, "rb+") as file:
            os.fsync(file.fileno())
        staging.manifest = {**manifest, "library_sha256": sha256_file(library), "library_identity": file_identity(library)}
    return entry.path / name


@dataclass
class StagedEntry:
    """A private folder a build or download fills: published as its entry with `manifest` where the
    block ends without an error and sets a manifest; removed otherwise."""

    path: Path
    manifest: Manifest | None = None


@contextlib.contextmanager
def staged(entry: Entry) -> Iterator[StagedEntry]:
    """A fresh private folder for one build of the entry (named with this process's id: a later build
    can tell an orphan), published by publish() (manifest last, one rename) where the block sets a
    manifest and ends cleanly, removed on any error. Under the key's lock."""
    staging = StagedEntry(new_build_dir(entry))
    try:
        yield staging
    except BaseException:
        with contextlib.suppress(OSError):  # the error says what happened; a leftover is an orphan
            remove_tree(staging.path)
        raise
    if staging.manifest is None:
        remove_tree(staging.path)
    else:
        publish(entry, staging.path, staging.manifest)


def new_build_dir(entry: Entry) -> Path:
    """A fresh private directory for one build attempt, named with this process's id so that a
    later build can tell an orphan (remove_orphans)."""
    return new_staging(entry.root, _layout.staging_prefix(entry.name, entry.key))


def remove_orphans(entry: Entry) -> None:
    """Remove the staging folders killed builds of this key left. Called under the key's lock,
    which a build holds while its staging folder exists: a folder whose process is gone is no one's."""
    remove_dead_staging(entry.root, _layout.staging_prefix(entry.name, entry.key))


def publish(entry: Entry, staging: Path, manifest: Manifest) -> None:
    """Make `staging` the entry of its key and headers (manifest last, one rename), under the key's lock: a
    folder of this very variant there is corrupt or of the same inputs, and renamed away first."""
    entry.variant = variant_of(manifest.get("headers", {}))
    write_json_atomic(staging / MANIFEST_NAME, manifest)
    os.chmod(staging, 0o700)
    entry.discard()
    publish_folder(staging, entry.path)
    note_other_root(entry.root)


def entries(root: Path, name: str | None = None, source_root: str | None = None) -> list[Entry]:
    """Every published entry under root (of the extension `name` alone, if given), one per variant,
    by its folder's name alone."""
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    found = []
    for child in children:
        parsed = parse_entry_name(child.name)
        if parsed and name in (None, parsed[0]) and child.is_dir():
            found.append(Entry(root, parsed[0], parsed[1], source_root=source_root, variant=parsed[2]))
    return found


def list_entries(root: Path, name: str | None = None, source_root: str | None = None) -> list[tuple[Entry, Manifest | None]]:
    """entries(), each with its manifest (None when unreadable)."""
    found: list[tuple[Entry, Manifest | None]] = []
    for entry in entries(root, name, source_root):
        try:
            manifest = entry.read_manifest()
        except CacheError:
            manifest = None
        found.append((entry, manifest))
    return found


def newest_other_manifest(entry: Entry, renamed_from: str | None = None) -> Manifest | None:
    """The manifest of the extension's entry loaded or built last (a new build says what changed
    since; for a module a reload renamed, the entries of the name it had), or None: one manifest
    read, however many entries an edit loop left."""
    others = [other for other in entries(entry.root, entry.name) if other.key != entry.key]
    if not others and renamed_from is not None:  # <name>, <name>_v1, ...: the one loaded last
        family = re.compile(rf"{re.escape(renamed_from)}(_v[0-9]+)?")
        others = [other for other in entries(entry.root) if other.key != entry.key and family.fullmatch(other.name)]
    for other in sorted(others, key=_last_used, reverse=True):
        try:
            manifest = other.read_manifest()
        except CacheError:
            continue
        if isinstance(manifest, dict):
            return manifest
    return None


def _last_used(entry: Entry) -> float:
    try:
        return entry.last_used()
    except OSError:  # removed meanwhile
        return -1.0
