# SPDX-License-Identifier: MIT
"""The object store: compiled units kept in the cache root, so that a build compiles only the units
whose inputs changed. An object is reused only where its headers and itself still have their
recorded sha256, and stored only where no input changed while it compiled."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

from .. import _files, _layout
from .._errors import warn
from .._files import file_identity, identity_or_none, mark_used, read_regular, write_json_atomic
from . import _root, _staging
from ._entries import variant_of  # a stored object's variant is named as an entry's: by its headers
from ._key import portable_components

if TYPE_CHECKING:
    from .._records import KeyComponents

FORMAT = 1  # of a unit key and record: bump when their meaning changes
# A file whose status changed less than this before a build started may have changed after it
# (timestamps come from a clock this coarse): it is not trusted to be what the compiler read.
TIMESTAMP_SLACK_NS = 10_000_000
OBJECT_MAX = 4 << 30  # a stored object is read whole (to hash and push): device code can be large

# The key components that describe the toolchain (every unit's key has them).
TOOLCHAIN_COMPONENTS: tuple[str, ...] = ("recipe", "torch", "torch_git", "torch_cuda", "python_soabi", "cxx11_abi", "cxx", "nvcc")
TOOLCHAIN_COMPONENTS += ("environment", "environment_tools")


def toolchain(components: KeyComponents) -> KeyComponents:
    """The key components that describe the toolchain, which every unit and PCH key holds."""
    return cast("KeyComponents", {name: components.get(name) for name in TOOLCHAIN_COMPONENTS})


def unit_key(unit, components: KeyComponents, source_sha256: str, portable: bool = False, name_free: bool = False) -> str:
    """The object's key: what made it but its headers. portable: without the compiler's identity (the
    remote's; paths stay absolute). name_free: without the extension's name, for a unit that never reads it."""
    command = unit.command
    if name_free:
        command = [_NAME_WORD.sub(lambda m: NAME_FREE if m[0] == unit.name_define else m[0], part) for part in command]
    made_of = {
        "format": FORMAT,
        "toolchain": portable_components(toolchain(components)) if portable else toolchain(components),
        "command": command,
        "source": unit.source,
        "source_sha256": source_sha256,
    }
    return _files.json_digest(made_of, 32)


# The macro torch's headers never read and every unit gets: a unit whose source and headers never
# name it compiles to the same object under any extension name, so a notebook's renamed module
# (<name>_v1) reuses it. A unit that names it (the bindings) is keyed with the name.
NAME_MACRO = "TORCH_EXTENSION_NAME"
NAME_FREE = f"-D{NAME_MACRO}=*"
_NAME_WORD = re.compile(rf"(?<!\S)-D{NAME_MACRO}=\S*")


class ObjectKeys(NamedTuple):
    """A unit's keys: its own; the name-free one where its source never names the extension (reuse
    tries that first; keep uses it where its headers do not name it either); the remote's."""

    key: str
    name_free_key: str | None
    portable_key: str


def keys_of(unit, components: KeyComponents, source_sha256: str) -> ObjectKeys:
    return ObjectKeys(
        unit_key(unit, components, source_sha256),
        None if names_extension(unit.source) else unit_key(unit, components, source_sha256, name_free=True),
        unit_key(unit, components, source_sha256, portable=True),
    )


def names_extension(path: str) -> bool:
    """Whether a source or header spells the extension's name macro (unreadable: assumed so)."""
    try:
        with open(path, "rb") as file:
            return NAME_MACRO.encode() in file.read()
    except OSError:
        return True


def headers_hold(root: Path, headers: dict) -> bool:
    """Whether every header still has its recorded sha256 here."""
    known = _root.known_file_hashes(root)
    held = all(_sha256_or_none(known, path) == digest for path, digest in headers.items())
    known.save()
    return held


def stored(root: Path, key: str, variant: str) -> tuple[dict, bytes] | None:
    """The record and object of a stored variant, the object checked against its sha256; or None."""
    folder = Path(_layout.objects_dir(root), key, variant)
    try:
        record = json.loads(read_regular(folder / _layout.RECORD_NAME))
        data = read_regular(folder / _layout.OBJECT_NAME, OBJECT_MAX)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or _files.sha256_bytes(data) != record.get("object_sha256"):
        return None
    return record, data


def reuse(root: Path, unit, build_dir: Path) -> tuple[str, dict[str, str]] | None:
    """Put the unit's object into build_dir from a variant whose headers and object still hold, under
    its name-free key first, then its own: (the key it was found under, its headers); else None."""
    objects = _root.usable_part(root, _layout.OBJECTS_DIR, write=False)
    if objects is None:
        return None
    known = _root.known_file_hashes(root)
    try:
        for key in filter(None, (unit.name_free_key, unit.key)):
            if (headers := _reuse_variant(objects / key, key, unit, build_dir, known)) is not None:
                return key, headers
        return None
    finally:
        known.save()


def _reuse_variant(folder: Path, key: str, unit, build_dir: Path, known: _root.KnownFileHashes) -> dict[str, str] | None:
    try:
        variants = sorted(os.scandir(folder), key=lambda v: v.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for variant in variants:
        if variant.name.startswith(".") or not variant.is_dir(follow_symlinks=False):
            continue
        stored_object = os.path.join(variant.path, _layout.OBJECT_NAME)
        record_path = os.path.join(variant.path, _layout.RECORD_NAME)
        problem = _root.foreign_problem([folder, variant.path], [record_path, stored_object])
        if problem:
            warn(f"not reusing the stored object {variant.path}: {problem}")
            continue
        try:
            record = json.loads(read_regular(record_path))
            headers = record["headers"]
            if record.get("key") != key or not all(_sha256_or_none(known, p) == d for p, d in headers.items()):
                continue
            # Hashed again whenever its file identity changes (as headers are): a rewrite, a
            # truncation or a same-size edit changes its ctime, which no one can set back.
            intact = known.sha256(stored_object) == record.get("object_sha256")
            if intact:  # a copy, not a hard link: linking changes the stored object's ctime
                shutil.copyfile(stored_object, build_dir / unit.object)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            if not os.path.isdir(variant.path):
                continue  # evicted or cleared meanwhile: a miss
            warn(f"discarding the unreadable stored object {variant.path}: {err}")
            _discard(Path(variant.path))
            continue
        if not intact:
            warn(f"discarding the stored object {variant.path}: it does not match its sha256 (truncated or modified)")
            _discard(Path(variant.path))
            continue
        mark_used(variant.path, variant.stat().st_mtime)  # for prune's last-used order
        return dict(headers)
    return None


def _discard(variant: Path) -> None:
    with contextlib.suppress(OSError):  # a read-only store: skipped, as before
        _root.remove_tree(variant)


def _sha256_or_none(known: _root.KnownFileHashes, path: str) -> str | None:
    try:
        return known.sha256(path)
    except OSError:
        return None


def settled_before(started_ns: int, known_before: dict, path: str) -> str | None:
    """The sha256 of `path` where it provably has not changed since before started_ns (its status
    changed before then, or it still has the identity it was hashed with before then), else None."""
    identity = identity_or_none(path)
    if identity is None:
        return None
    record = known_before.get(path)
    if isinstance(record, list) and len(record) == 2 and record[0] == identity:
        return record[1]
    if identity[2] < started_ns - TIMESTAMP_SLACK_NS:  # its ctime, which no one can set back
        try:
            digest = _files.sha256_file(path)
        except OSError:
            return None
        return digest if identity_or_none(path) == identity else None
    return None


def describe(folder: Path) -> tuple[str, float | None, Path, str]:
    """A stored variant, for the CLI: its source's file name, when it was stored, its object and the
    sha256 recorded for it. Raises OSError, ValueError or KeyError where it is unreadable."""
    record = json.loads(read_regular(folder / _layout.RECORD_NAME))
    return os.path.basename(record["source"]), record.get("stored_at"), folder / _layout.OBJECT_NAME, record["object_sha256"]


def keep(root: Path, unit, build_dir: Path) -> str:
    """Keep a compiled unit's object (unit.headers set), staged and renamed into place; a variant
    already there stays. A failure (a full disk, an unusable objects/) costs only a later compile.
    Returns the key it is kept under: the name-free one where no header names the extension either."""
    name_free = unit.name_free_key and not any(names_extension(header) for header in unit.headers)
    key = unit.name_free_key if name_free else unit.key
    variant = variant_of(unit.headers)
    objects = _root.usable_part(root, _layout.OBJECTS_DIR)
    if objects is None or (target := objects / key / variant).exists():
        return key
    try:
        (objects / key).mkdir(mode=0o700, exist_ok=True)
        with _staging.staged(objects, target) as staging:
            stored = staging.path / _layout.OBJECT_NAME
            shutil.copyfile(build_dir / unit.object, stored)
            identity = file_identity(stored)  # before hashing: as KnownFileHashes
            record = {
                "key": key,
                "source": unit.source,
                "command": unit.command,
                "headers": unit.headers,
                "object_sha256": _files.sha256_file(stored),
                "stored_at": time.time(),
            }
            write_json_atomic(staging.path / _layout.RECORD_NAME, record)
    except OSError:
        return key  # a full disk, an unusable objects/: a compile later
    if staging.published:  # (one stored meanwhile by another build stays)
        # Its hash known, so that its first reuse need not read it again (the folder's rename
        # keeps the object's identity); saved once by the build, after all its units are stored.
        _root.known_file_hashes(root).put(str(target / _layout.OBJECT_NAME), [identity, record["object_sha256"]])
    return key
