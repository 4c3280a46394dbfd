# SPDX-License-Identifier: MIT
"""The build cache: where it lives, how entries are keyed, named, published, verified and read.

Standard library only, and nothing here compiles: the CLI (`jitops-cache`) imports this module on
machines whose toolchain is broken. A hash recorded with a file's identity (_core.file_identity) is
trusted while the file keeps it: a load reads no file in full unless it has changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ._core import (
    KEY_LENGTH,
    MANIFEST_NAME,
    configured_root,
    file_identity,
    identity_or_none,
    mark_used,
    parse_entry_name,
    private_dir_problem,
    write_json_atomic,
)
from ._errors import CacheError, warn
from ._folders import TMP_PREFIX, publish_folder, remove_dead_staging, remove_tree

BUILD_LOG_NAME = "build.log"
TOOLCHAIN_PROBES_NAME = "toolchain.json"
TORCH_FLAGS_NAME = "torch-flags.json"
FILE_HASHES_NAME = "file-hashes.json"
INLINE_SOURCES = "inline"  # jitops.load_inline's sources, one folder per content


# The root
def _check_private_dir(path: Path) -> None:
    """Refuse a directory another user could write into: loading a .so from it runs their code."""
    problem = private_dir_problem(str(path))
    if problem:
        raise CacheError(problem)


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (0700, as each missing parent, whatever the umask) or check an existing one."""
    if not os.path.lexists(path):  # one system call when it exists, as it does on every warm load
        missing = []
        parent = Path(os.path.abspath(path))
        while not os.path.lexists(parent):
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            try:
                folder.mkdir(mode=0o700)
                os.chmod(folder, 0o700)  # mkdir's mode is cut by the umask; this one is not
            except FileExistsError:
                pass  # made by another process meanwhile
    _check_private_dir(path)
    return path


_fallback_root: Path | None = None


def fallback_root() -> Path:
    """Where builds go when the configured root is refused: one per-user folder in the temp dir,
    reused by every process, checked like any root."""
    return Path(tempfile.gettempdir()) / f"jitops-cache-{os.getuid()}"


def cache_root(cache_dir: str | None = None) -> Path:
    """The usable cache root. An unusable one is reported once and replaced by fallback_root(), or
    if that is refused too (planted by another user), by a private temporary one removed at exit.
    cache_dir: an extension's own root (jitops.load's build_directory), used as given or refused."""
    global _fallback_root
    if cache_dir is not None:
        try:
            return usable_root(Path(cache_dir))
        except (OSError, CacheError) as err:
            raise CacheError(f"jitops: cannot use the cache directory {cache_dir} (build_directory): {err}") from err
    if _fallback_root is not None:
        return _fallback_root
    root = Path(configured_root()[0])
    try:
        return usable_root(root)
    except (OSError, CacheError) as err:
        problem = f"cannot use the cache at {root} ({err})"
    try:
        _fallback_root = usable_root(fallback_root())
        warn(f"{problem}; using the per-user fallback cache {_fallback_root}. Set JITOPS_CACHE_DIR to a directory you own.")
    except (OSError, CacheError) as err:
        import atexit  # only for the last-resort temporary root

        _fallback_root = Path(tempfile.mkdtemp(prefix="jitops-cache-"))
        atexit.register(shutil.rmtree, _fallback_root, ignore_errors=True)
        warn(
            f"{problem}, nor the fallback {fallback_root()} ({err}); building into the private temporary "
            f"cache {_fallback_root}, removed at exit. Set JITOPS_CACHE_DIR to a directory you own."
        )
    return _fallback_root


def usable_root(root: Path) -> Path:
    ensure_private_dir(root)
    if not os.access(root, os.W_OK | os.X_OK):
        raise CacheError(f"cache directory {root} is not writable")
    return root


def shared_root(cache_dir: str | None) -> Path:
    """The root of what every extension shares (precompiled headers): the cache
    root; for an extension with a root of its own (build_directory), that root where the
    configured one is unusable, without the warning (its caller chose a folder)."""
    if cache_dir is None:
        return cache_root()
    try:
        return usable_root(Path(configured_root()[0]))
    except (OSError, CacheError):
        return Path(cache_dir)


def configured_roots() -> list[str]:
    """Every root JITOPS_CACHE_DIR decides: the configured one and its fallbacks."""
    return [configured_root()[0], str(fallback_root()), *([str(_fallback_root)] if _fallback_root else [])]


# Keys and entries
class RecordFile:
    """A JSON object in the cache root that only saves work: a lost, stale or unreadable record
    costs recomputing what it held, never a wrong result."""

    def __init__(self, path: Path | None):
        self.path = path
        self.records: dict = {}
        self.changed = False
        if path is not None:
            try:
                loaded = json.loads(path.read_text())
                self.records = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                pass

    def put(self, key: str, value) -> None:
        self.records[key] = value
        self.changed = True

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        try:
            write_json_atomic(self.path, self.records, durable=False)
            self.changed = False
        except OSError:
            pass  # recomputing next time is only slower


class KnownFileHashes(RecordFile):
    """sha256 of files as last hashed, each with the identity it had then (<root>/file-hashes.json)."""

    def sha256(self, path: str) -> str:
        identity = file_identity(path)
        record = self.records.get(path)
        if isinstance(record, list) and len(record) == 2 and record[0] == identity:
            return record[1]
        digest = sha256_file(path)
        # Recorded with the identity read before hashing: a write during the hash changes the
        # identity, so the next load hashes again rather than trusting a torn read.
        self.put(path, [identity, digest])
        return digest


_root_records: dict[tuple[Path, str], RecordFile] = {}


def _root_record(kind: type[RecordFile], name: str, root: Path | str | None) -> RecordFile:
    """The record file `name` of a root, read once per process (every op shares it): of an
    extension's own root (build_directory) where it has one, so that a caller who chose a folder
    finds nothing written elsewhere; else (None) of the cache root."""
    root = Path(root) if root is not None else cache_root()
    if (root, name) not in _root_records:
        _root_records[root, name] = kind(root / name)
    return _root_records[root, name]


def known_file_hashes(root: Path | str | None = None) -> KnownFileHashes:
    return _root_record(KnownFileHashes, FILE_HASHES_NAME, root)


def binary_identity(path: Path) -> tuple[str, str]:
    """The binary's resolved path, and that path with its file identity: the identity changes
    whenever the binary is replaced or rewritten."""
    resolved = os.path.realpath(path)
    return resolved, "|".join(map(str, [resolved, *file_identity(resolved)]))


def torch_flags_record(root: Path | str | None = None) -> RecordFile:
    """torch's compile and link flags for an extension, by everything they are made of
    (<root>/torch-flags.json): importing torch's build code costs a rebuild more than its edit."""
    return _root_record(RecordFile, TORCH_FLAGS_NAME, root)


def toolchain_probes(root: Path | str | None = None) -> RecordFile:
    """Each compiler's `--version` line, by its binary_identity (<root>/toolchain.json): a warm
    load must start no process, and `c++ --version` costs one."""
    return _root_record(RecordFile, TOOLCHAIN_PROBES_NAME, root)


def hash_files(
    paths: list[str] | list[Path], relative_to: Path, known: KnownFileHashes | None = None, each: dict | None = None
) -> str:
    """sha256 over each file's name relative to relative_to and its sha256 (a rename changes it).
    each: filled with every file's sha256, by its relative name."""
    known = known or KnownFileHashes(None)
    prefix = os.path.join(str(relative_to), "")
    digest = hashlib.sha256()
    for path in sorted(map(str, paths)):
        if not path.startswith(prefix):
            raise ValueError(f"{path} is not under {relative_to}")
        file_digest = known.sha256(path)
        if each is not None:
            each[path[len(prefix) :]] = file_digest
        digest.update(path[len(prefix) :].encode())
        digest.update(b"\0")
        digest.update(file_digest.encode())
        digest.update(b"\0")
    known.save()
    return digest.hexdigest()


def compute_key(components: dict) -> str:
    canonical = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:KEY_LENGTH]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class StaleEntry(CacheError):
    """A sound entry built from a header that has changed since: rebuilt in place, without a warning."""


class Entry:
    """One `<namespace>.<name>-<key>` directory of a cache root (which may not exist yet).
    source_root: the extension's root, for the manifest's header names (None: headers unchecked)."""

    def __init__(self, root: Path, name: str, key: str, source_root: str | None = None):
        self.root = Path(root)
        self.name = name  # Extension.qualified_name
        self.key = key
        self.source_root = source_root
        self.verified_identities: tuple[list[int], list[int] | None] | None = None  # set by verified_library
        self.checked_headers: list[tuple[str, list[int] | None]] = []  # set by verified_library
        self.stale_because = ""  # set where verified_or_discarded found a header changed: which

    @property
    def path(self) -> Path:
        return self.root / f"{self.name}-{self.key}"

    @property
    def lock_path(self) -> Path:
        return self.root / f"{self.name}-{self.key}.lock"

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST_NAME

    def read_manifest(self) -> dict | None:
        """The manifest, or None if the entry is absent. Malformed manifests raise CacheError."""
        try:
            text = self.manifest_path.read_text()
        except FileNotFoundError:
            return None
        try:
            manifest = json.loads(text)
        except json.JSONDecodeError as err:
            raise CacheError(f"{self.manifest_path} is not valid JSON: {err}") from None
        if not isinstance(manifest, dict):
            raise CacheError(f"{self.manifest_path} is not a JSON object")
        return manifest

    def verified_library(self, touch: bool = True, private: bool = True, full_hash: bool = False) -> Path | None:
        """The entry's .so if its manifest matches this key, the .so its sha256 (hashed in full
        unless its identity is the one recorded, or full_hash) and every header the build included
        its recorded sha256; None where the entry is absent. Raises CacheError when it is corrupt
        or (private: cache entries) not ours alone; StaleEntry when a header changed. touch=False
        writes nothing. Sets verified_identities and checked_headers, for the warm record."""
        if not self.path.is_dir():
            return None
        if self.path.is_symlink():
            raise CacheError(f"{self.path} is a symbolic link; refusing to load from it")
        if private:
            _check_private_dir(self.path)
        manifest_identity = identity_or_none(str(self.manifest_path))  # read before its content
        manifest = self.read_manifest()
        if manifest is None:
            raise CacheError(f"{self.path} has no {MANIFEST_NAME}")
        if manifest.get("key") != self.key or manifest.get("name") != self.name:
            raise CacheError(
                f"{self.manifest_path} describes another build ({manifest.get('name')!r} key {manifest.get('key')!r})"
            )
        library_name = manifest.get("library")
        if not isinstance(library_name, str) or os.path.basename(library_name) != library_name:
            raise CacheError(f"{self.manifest_path} names no valid library file")
        library = self.path / library_name
        try:
            identity = file_identity(library)
        except FileNotFoundError:
            raise CacheError(f"{library} is missing") from None
        self.checked_headers = self._check_headers(manifest.get("headers", {}))
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
        self.verified_identities = (identity, manifest_identity)
        return library

    def _check_headers(self, headers) -> list[tuple[str, list[int] | None]]:
        """Each header the build included (manifest "headers": name relative to the extension's
        root, or absolute -> sha256), with the identity it had when found unchanged."""
        if not isinstance(headers, dict):
            raise CacheError(f"{self.manifest_path} has no valid header list")
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
                known.save()
                raise StaleEntry(f"{os.path.basename(path)} changed")
            checked.append((path, identity))
        known.save()
        return checked

    def last_used(self) -> float:
        """When the entry was last loaded (its folder's mtime: _core.mark_used), or else built."""
        return os.stat(self.path).st_mtime

    def discard(self) -> None:
        """Remove a corrupt or stale entry (renamed away first: no loader sees it half deleted)."""
        if self.path.exists() or self.path.is_symlink():
            remove_tree(self.path)


def verified_or_discarded(entry: Entry, full_hash: bool = False) -> Path | None:
    """The entry's verified library, or None: absent, stale or corrupt (then removed, with a
    warning where corrupt)."""
    try:
        return entry.verified_library(full_hash=full_hash)
    except StaleEntry as err:
        entry.stale_because = str(err)
        entry.discard()
        return None
    except CacheError as err:
        warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
        entry.discard()
        return None


def make_manifest(entry: Entry, components: dict, library: Path, headers: dict, **extra) -> dict:
    """The manifest of an entry whose library is `library` (in its staging folder): the one writer,
    for builds and ahead-of-time wheels. headers: see Entry._check_headers."""
    return {
        "name": entry.name,
        "key": entry.key,
        "components": components,
        "library": library.name,
        "library_sha256": sha256_file(library),
        # Renaming the staging folder into place keeps the file's identity: loads can trust this hash.
        "library_identity": file_identity(library),
        "headers": headers,
        **extra,
    }


def new_build_dir(entry: Entry) -> Path:
    """A fresh private directory for one build attempt, named with this process's id so that a
    later build can tell an orphan (remove_orphans)."""
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{entry.name}-{entry.key}-{os.getpid()}-", dir=entry.root))


def remove_orphans(entry: Entry) -> None:
    """Remove the staging folders killed builds of this entry left. Called under the entry's lock,
    which a build holds while its staging folder exists: a folder whose process is gone is no one's."""
    remove_dead_staging(entry.root, f"{TMP_PREFIX}{entry.name}-{entry.key}-")


def publish(entry: Entry, staging: Path, manifest: dict) -> None:
    """Make `staging` the entry: manifest written last, then one atomic rename."""
    write_json_atomic(staging / MANIFEST_NAME, manifest)
    os.chmod(staging, 0o700)
    entry.discard()  # only a corrupt or stale entry can be here: the caller holds the entry's lock
    publish_folder(staging, entry.path)


def list_entries(root: Path, name: str | None = None, source_root: str | None = None) -> list[tuple[Entry, dict | None]]:
    """Every published entry under root (of the extension `name` alone, if given) with its
    manifest (None when unreadable)."""
    found = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        parsed = parse_entry_name(child.name)
        if not parsed or (name is not None and parsed[0] != name) or not child.is_dir():
            continue
        entry = Entry(root, *parsed, source_root=source_root)
        try:
            manifest = entry.read_manifest()
        except CacheError:
            manifest = None
        found.append((entry, manifest))
    return found
