# SPDX-License-Identifier: MIT
"""The store: the one owner of a cache root on disk. It decides the root, and owns what is in it
(_layout names where): entries, stored objects, precompiled headers, inline sources and records;
how each folder is staged and published (one rename) and removed (renamed away first); the locks
that readers and removers take; last-use times and the budget (JITOPS_CACHE_MAX_SIZE, least
recently used evicted first, never what a live process holds); listing and removal.

Published entries never change: an entry is addressed by its key and the headers its build
included (its variant), so a tree that differs in a header gets an entry of its own.

Standard library only, and nothing here compiles: the CLI (`jitops-cache`) imports this module on
machines whose toolchain is broken. A hash recorded with a file's identity (_core.file_identity) is
trusted while the file keeps it: a load reads no file in full unless it has changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import _layout
from ._core import (
    file_identity,
    identity_or_none,
    mark_used,
    private_dir_problem,
    write_json_atomic,
)
from ._errors import CacheError, warn
from ._layout import MANIFEST_NAME, TMP_PREFIX, configured_root, parse_entry_name


# Folders: staged beside their place, published in one rename, removed by renaming away first
def remove_dead_staging(folder: Path, prefix: str = TMP_PREFIX) -> None:
    """Remove the `<prefix><pid>-*` staging folders in folder whose process is gone (killed while
    writing): nothing in one is ever read."""
    try:
        with os.scandir(folder) as found:
            names = [f.name for f in found if f.name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        if staging_is_dead(name, prefix):
            shutil.rmtree(Path(folder) / name, ignore_errors=True)


def staging_is_dead(name: str, prefix: str = TMP_PREFIX) -> bool:
    """Whether the `<prefix><pid>-*` staging folder `name` belongs to a process that is gone."""
    pid = name[len(prefix) :].partition("-")[0]
    return pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}")


def new_staging(parent: Path, prefix: str = TMP_PREFIX) -> Path:
    """A fresh private folder in parent, named <prefix><pid>-*: a later writer tells a killed one's."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def publish_folder(staging: Path, target: Path) -> None:
    """Every folder jitops writes (entries, stored objects, PCHs, load_inline's sources, exported
    prebuilts) is filled in a staging folder beside it, then made `target` in one rename: a reader
    sees all of it or none. A folder already there makes the rename fail (OSError): published
    folders are never replaced."""
    os.rename(staging, target)


def remove_tree(path: Path) -> None:
    """Delete a directory (or a file or link in its place) so that no reader sees it half deleted.
    One removed meanwhile (by another remover) is no error."""
    # Not named after path: an entry's name may already be near the file system's 255 bytes.
    trash = Path(path).parent / f"{TMP_PREFIX}removing-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)


# Locks. Builds take theirs with filelock (_lock.HeldLock); readers, removers and counters take
# the same kernel locks (flock) here, without importing it.
@contextlib.contextmanager
def flocked(path: Path | str, shared: bool = False, blocking: bool = True):
    """Hold the kernel lock on path (created 0600). Yields False where it cannot be had: held by
    another process (not blocking), or the file cannot be opened."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
        except OSError:  # BlockingIOError: held
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def flock_is_held(lock_path: Path | str) -> bool:
    """Whether some process holds the kernel lock on lock_path, without waiting or creating it."""
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if it was taken here
    return False


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


# The parts a root can do without (objects/, pch/): unusable, they cost compiles, never a load.
_parts_warned: set[str] = set()


def part_problem(root: Path | str, part: str, write: bool = True, create: bool = True) -> str | None:
    """Why root's `part` (_layout.OPTIONAL_PARTS) cannot be used (created 0700 where missing, unless
    not create: then a missing one is no problem), or None. write=False: reading it is enough (a
    read-only store still serves objects)."""
    path = Path(root) / part
    if not create and not os.path.lexists(path):
        return None
    try:
        ensure_private_dir(path)
    except (OSError, CacheError) as err:
        return str(err)
    if not os.access(path, (os.W_OK if write else os.R_OK) | os.X_OK):
        return f"cache directory {path} is not {'writable' if write else 'readable'}"
    return None


def usable_part(root: Path | str, part: str, write: bool = True) -> Path | None:
    """root/part where it can be used, else None, with one warning per process and problem: the
    build goes on without it (`jitops-cache doctor` names it too)."""
    problem = part_problem(root, part, write)
    if problem is None:
        return Path(root) / part
    if problem not in _parts_warned:
        _parts_warned.add(problem)
        what = "stored objects" if part == _layout.OBJECTS_DIR else "precompiled headers"
        warn(f"{problem}; building without {what} there (more compiles, nothing else)")
    return None


# Records that only save work
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
    return _root_record(KnownFileHashes, _layout.FILE_HASHES_NAME, root)


def binary_identity(path: Path) -> tuple[str, str]:
    """The binary's resolved path, and that path with its file identity: the identity changes
    whenever the binary is replaced or rewritten."""
    resolved = os.path.realpath(path)
    return resolved, "|".join(map(str, [resolved, *file_identity(resolved)]))


def torch_flags_record(root: Path | str | None = None) -> RecordFile:
    """torch's compile and link flags for an extension, by everything they are made of
    (<root>/torch-flags.json): importing torch's build code costs a rebuild more than its edit."""
    return _root_record(RecordFile, _layout.TORCH_FLAGS_NAME, root)


def toolchain_probes(root: Path | str | None = None) -> RecordFile:
    """Each compiler's `--version` line, by its binary_identity (<root>/toolchain.json): a warm
    load must start no process, and `c++ --version` costs one."""
    return _root_record(RecordFile, _layout.TOOLCHAIN_PROBES_NAME, root)


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
    return hashlib.sha256(canonical.encode()).hexdigest()[: _layout.KEY_LENGTH]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# Entries
class StaleEntry(CacheError):
    """A sound entry built from a header that has changed since: another variant may match."""


def variant_of(headers: dict) -> str:
    """An entry's variant: the headers its build included, each with its sha256 (names relative to
    the extension's root, so two clones of one tree share it)."""
    return hashlib.sha256(json.dumps(headers, sort_keys=True).encode()).hexdigest()[: _layout.VARIANT_LENGTH]


class Entry:
    """The entries of one key in a root: `<namespace>.<name>-<key>-<variant>` folders (which may
    not exist yet), or the one `<namespace>.<name>-<key>` of a prebuilt folder (variant None).
    variant: the one this object stands for, set by verified_or_discarded and publish.
    source_root: the extension's root, for the manifest's header names (None: headers unchecked)."""

    def __init__(self, root: Path, name: str, key: str, source_root: str | None = None, variant: str | None = None):
        self.root = Path(root)
        self.name = name  # Extension.qualified_name
        self.key = key
        self.source_root = source_root
        self.variant = variant
        self.verified_identities: tuple[list[int], list[int] | None] | None = None  # set by verified_library
        self.checked_headers: list[tuple[str, list[int] | None]] = []  # set by verified_library
        self.stale_because = ""  # set where verified_or_discarded found a header changed: which

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
        """This variant's .so if its manifest matches this key and variant, the .so its sha256
        (hashed in full unless its identity is the one recorded, or full_hash) and every header the
        build included its recorded sha256; None where the entry is absent. Raises CacheError when
        it is corrupt or (private: cache entries) not ours alone; StaleEntry when a header changed.
        touch=False writes nothing. Sets verified_identities and checked_headers, for the warm record."""
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
            identity = file_identity(library)
        except FileNotFoundError:
            raise CacheError(f"{library} is missing") from None
        self.checked_headers = self._check_headers(headers, save=touch)
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

    def _check_headers(self, headers: dict, save: bool) -> list[tuple[str, list[int] | None]]:
        """Each header the build included (manifest "headers": name relative to the extension's
        root, or absolute -> sha256), with the identity it had when found unchanged. save=False
        records no hash (the CLI's inspection writes nothing)."""
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
        """When the entry was last loaded (its folder's mtime: _core.mark_used), or else built."""
        return os.stat(self.path).st_mtime

    def discard(self) -> None:
        """Remove a corrupt entry (renamed away first: no loader sees it half deleted)."""
        if self.path.exists() or self.path.is_symlink():
            remove_tree(self.path)


def verified_or_discarded(entry: Entry, full_hash: bool = False, inspect: bool = False) -> Path | None:
    """The library of the key's variant whose recorded headers all hold (the most recently used
    first), with entry.variant set to it; else None, with entry.stale_because saying which header
    changed where only stale variants are there. A corrupt variant is removed, with a warning;
    a stale one stays (another tree may use it: the budget evicts it once unused).
    inspect=True writes and removes nothing, and says nothing (the CLI's)."""
    stale = ""
    for variant in entry.variants():
        entry.variant = variant
        try:
            library = entry.verified_library(touch=not inspect, full_hash=full_hash)
        except StaleEntry as err:
            stale = stale or str(err)
            continue
        except (CacheError, OSError) as err:
            if inspect:
                continue
            if not isinstance(err, CacheError):
                raise
            warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
            entry.discard()
            continue
        if library is not None:
            entry.stale_because = ""
            return library
    entry.variant = None
    entry.stale_because = stale
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
    return new_staging(entry.root, _layout.staging_prefix(entry.name, entry.key))


def remove_orphans(entry: Entry) -> None:
    """Remove the staging folders killed builds of this key left. Called under the key's lock,
    which a build holds while its staging folder exists: a folder whose process is gone is no one's."""
    remove_dead_staging(entry.root, _layout.staging_prefix(entry.name, entry.key))


def publish(entry: Entry, staging: Path, manifest: dict) -> None:
    """Make `staging` the entry of its key and headers (entry.variant is set to it): manifest
    written last, then one atomic rename. Called under the key's lock, after verified_or_discarded
    found no variant whose headers hold: a folder of this very variant there now is corrupt, or
    was built from the same inputs, and is renamed away first (that alone is never a new tree's
    code in an old place); every other variant stays as it was."""
    entry.variant = variant_of(manifest.get("headers", {}))
    write_json_atomic(staging / MANIFEST_NAME, manifest)
    os.chmod(staging, 0o700)
    entry.discard()
    publish_folder(staging, entry.path)


def list_entries(root: Path, name: str | None = None, source_root: str | None = None) -> list[tuple[Entry, dict | None]]:
    """Every published entry under root (of the extension `name` alone, if given), one per variant,
    with its manifest (None when unreadable)."""
    found = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        parsed = parse_entry_name(child.name)
        if not parsed or (name is not None and parsed[0] != name) or not child.is_dir():
            continue
        entry = Entry(root, parsed[0], parsed[1], source_root=source_root, variant=parsed[2])
        try:
            manifest = entry.read_manifest()
        except CacheError:
            manifest = None
        found.append((entry, manifest))
    return found


# The budget: the whole root (PCHs and objects included) under JITOPS_CACHE_MAX_SIZE
DEFAULT_MAX_SIZE = 2 << 30  # holds an edit loop: one or two PCHs, its objects and entries (docs/cache.md)


def parse_size(text: str) -> int:
    """Bytes from '2G', '500M', '1.5GiB', '4096' (binary units). ValueError for anything else."""
    import re  # only where a size is read

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, flags=re.I)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 500M, 2G, 1048576)")
    number, unit = match.groups()
    return int(float(number) * 1024 ** ["", "k", "m", "g", "t"].index(unit.lower()))


def max_size() -> int:
    """JITOPS_CACHE_MAX_SIZE in bytes (0: no budget), else DEFAULT_MAX_SIZE."""
    value = os.environ.get("JITOPS_CACHE_MAX_SIZE", "").strip()
    if not value:
        return DEFAULT_MAX_SIZE
    try:
        return parse_size(value)
    except ValueError:
        raise CacheError(
            f"jitops: JITOPS_CACHE_MAX_SIZE must be a size such as 2G, 500M or 0 (no budget), got {value!r}"
        ) from None


@dataclass
class Item:
    """What the budget can evict: an entry, a stored object (one variant) or a PCH."""

    kind: str  # "entry", "object" or "pch"
    path: Path
    size: int
    last_used: float
    lock: Path | None  # taken (not blocking) while it is removed: a holder keeps it


def tree_size(path: Path | str) -> int:
    """Bytes of the regular files under path (symbolic links are not followed)."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size if stat.S_ISREG(info.st_mode) else 0
    total = 0
    for parent, _, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:
                continue  # removed while walking
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _subfolders(folder: Path | str) -> list[os.DirEntry]:
    """The published folders in folder (staging folders and links aside)."""
    try:
        with os.scandir(folder) as found:
            return [f for f in found if f.is_dir(follow_symlinks=False) and not f.name.startswith(TMP_PREFIX)]
    except OSError:
        return []


def items(root: Path) -> list[Item]:
    """Every entry, stored object and PCH of root, with its size and last use."""
    found = []
    for entry, _ in list_entries(root):
        with contextlib.suppress(OSError):
            found.append(Item("entry", entry.path, tree_size(entry.path), entry.last_used(), entry.lock_path))
    for unit in _subfolders(_layout.objects_dir(root)):
        for variant in _subfolders(unit.path):
            with contextlib.suppress(OSError):
                found.append(Item("object", Path(variant.path), tree_size(variant.path), variant.stat().st_mtime, None))
    for pch in _subfolders(_layout.pch_dir(root)):
        with contextlib.suppress(OSError):
            lock = Path(_layout.pch_lock_path(pch.path))
            found.append(Item("pch", Path(pch.path), tree_size(pch.path), pch.stat().st_mtime, lock))
    return found


def staging_folders(root: Path) -> list[tuple[Path, str]]:
    """The folders being written into objects/ and pch/ (or left by killed writers), by kind."""
    found = []
    for kind, parent in (("object", _layout.objects_dir(root)), ("pch", _layout.pch_dir(root))):
        try:
            with os.scandir(parent) as children:
                found += [
                    (Path(c.path), kind) for c in children if c.name.startswith(TMP_PREFIX) and c.is_dir(follow_symlinks=False)
                ]
        except OSError:
            continue
    return sorted(found)


def live_paths(root: Path) -> set[str] | None:
    """The files under root that a live process has mapped (loaded libraries, a PCH a compiler
    reads), from /proc/*/maps; None where that cannot be known (no /proc)."""
    if not os.path.isdir("/proc/self"):
        return None
    prefix = os.path.join(os.path.realpath(root), "")
    mapped = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                for line in maps:
                    path = line.split(None, 5)[5:]
                    if path and path[0].startswith(prefix.encode()):
                        mapped.add(os.fsdecode(path[0].rstrip(b"\n")))
        except OSError:
            continue  # gone, or another user's
    return mapped


def enforce_budget(root: Path, limit: int | None = None) -> list[Item]:
    """Evict the least recently used entries, objects and PCHs of root until the whole root is
    within limit (default max_size()). Never one a live process has mapped, one whose lock is
    held (being built, or a PCH a build uses), or anything where /proc cannot say what is mapped.
    Returns what was removed. Only saves disk: a failure to remove costs nothing else."""
    limit = max_size() if limit is None else limit
    if limit <= 0:
        return []
    total = tree_size(root)
    if total <= limit:
        return []
    live = live_paths(root)
    if live is None:
        return []
    removed = []
    for item in sorted(items(root), key=lambda i: i.last_used):
        if total <= limit:
            break
        inside = os.path.join(os.path.realpath(item.path), "")
        if any(path.startswith(inside) for path in live):
            continue
        with flocked(item.lock, blocking=False) if item.lock else contextlib.nullcontext(True) as free:
            if not free:
                continue
            try:
                remove_tree(item.path)
            except OSError:
                continue
        total -= item.size
        removed.append(item)
    return removed
