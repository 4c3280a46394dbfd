# SPDX-License-Identifier: MIT
"""What a cache root holds beside its entries, as the store lists it for `jitops-cache` (list,
clear, prune): builds' staging folders (running, or left by killed builds), objects' and PCHs'
stores in progress, entry folders of an older layout, build locks whose entries are gone, and warm
records that only ever miss. The CLI formats and removes; it does not walk the root."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import _flock, _layout


def older_layout_entries(root: Path) -> list[Path]:
    """Entry folders named <op>-<key>, as jitops named them before extensions had namespaces:
    never loaded now, so stale (removed by `clear --stale` and `prune`)."""
    return sorted(p for p in _folders(root) if _layout.is_older_entry_name(p.name))


def staging_folders(root: Path) -> list[Path]:
    """Builds' staging folders under root (a running build's, or a killed one's)."""
    return sorted(p for p in _folders(root) if p.name.startswith(_layout.TMP_PREFIX))


def lock_of_staging(root: Path, folder: Path) -> Path | None:
    """The entry lock a build's staging folder was made under, where its name tells and it exists."""
    parsed = _layout.parse_staging_name(folder.name)
    lock = Path(_layout.lock_path(root, *parsed)) if parsed else None
    return lock if lock is not None and lock.exists() else None


def parts_staging(root: Path) -> list[tuple[Path, str]]:
    """The folders being written into objects/ and pch/ (or left by killed writers), by kind."""
    found = []
    for kind, parent in (("object", _layout.objects_dir(root)), ("pch", _layout.pch_dir(root))):
        try:
            with os.scandir(parent) as children:
                found += [
                    (Path(c.path), kind)
                    for c in children
                    if c.name.startswith(_layout.TMP_PREFIX) and c.is_dir(follow_symlinks=False)
                ]
        except OSError:
            continue
    return sorted(found)


def dangling_warm_records(root: Path) -> list[Path]:
    """The warm records under root whose entry is gone, or that cannot be read: they only ever miss,
    so removing them loses nothing."""
    dangling = []
    for record in sorted(root.glob(f"{_layout.RECORD_PREFIX}*.json")) if root.is_dir() else []:
        try:
            entry = _layout.record_entry(str(root), json.loads(record.read_bytes()))
            if entry is not None and os.path.isdir(entry):
                continue
        except (OSError, ValueError, AttributeError):  # unreadable, not JSON, or not an object
            pass
        dangling.append(record)
    return dangling


def dangling_locks(root: Path) -> list[Path]:
    """The entries' build locks under root with no entry of their key left (entries removed before
    removers took their locks along, or by hand). A build holding one is never listed."""
    if not root.is_dir():
        return []
    published = {_layout.key_name(*parsed[:2]) for f in os.listdir(root) if (parsed := _layout.parse_entry_name(f))}
    return [
        lock
        for lock in sorted(root.glob(f"*{_layout.LOCK_SUFFIX}"))  # <namespace>.<name>-<key>.lock
        if _layout.parse_entry_name(lock.stem) and lock.stem not in published and not _flock.flock_is_held(lock)
    ]


def _folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
