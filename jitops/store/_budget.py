# SPDX-License-Identifier: MIT
"""The store's budget: the whole cache root within JITOPS_CACHE_MAX_SIZE, least recently used evicted
first, never what a live process maps or a lock holder holds (after each build, and `prune`)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import _layout, _settings
from .._files import tree_size
from .._layout import TMP_PREFIX
from ._entries import entries
from ._root import remove_dead_staging, remove_locked


@dataclass
class Item:
    """What the budget can evict: an entry, a stored object (one variant) or a PCH."""

    kind: str  # "entry", "object" or "pch"
    path: Path
    size: int
    last_used: float
    lock: Path | None  # taken (not blocking) while it is removed: a holder keeps it


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
    for entry in entries(root):  # by their names: no manifest is read
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


def is_live(folder: Path | str, live: set[str]) -> bool:
    """Whether a file under folder is among live_paths()."""
    inside = os.path.join(os.path.realpath(folder), "")
    return any(path.startswith(inside) for path in live)


def enforce_budget(root: Path, limit: int | None = None) -> list[Item]:
    """Evict the least recently used entries, objects and PCHs until the root is within limit (default
    JITOPS_CACHE_MAX_SIZE), never one a live process maps or a lock holder holds. Returns what was removed."""
    limit = _settings.get("JITOPS_CACHE_MAX_SIZE") if limit is None else limit
    if limit <= 0:
        return []
    total = tree_size(root)
    if total <= limit:
        return []
    # What a remover killed mid-delete renamed away is counted but never read: it goes first (RELIABILITY S6).
    for folder in (root, _layout.pch_dir(root), *(unit.path for unit in _subfolders(_layout.objects_dir(root)))):
        remove_dead_staging(Path(folder), _layout.REMOVING_PREFIX)
    total = tree_size(root)
    live = live_paths(root)
    if live is None:
        return []
    removed = []
    for item in sorted(items(root), key=lambda i: i.last_used):
        if total <= limit:
            break
        if is_live(item.path, live):
            continue
        try:
            if not remove_locked(item.path, item.lock):
                continue
        except OSError:
            continue
        total -= item.size
        removed.append(item)
    return removed
