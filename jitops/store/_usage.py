# SPDX-License-Identifier: MIT
"""Use records, which only inform: counters per extension (`jitops-cache stats`) and the trees each
entry served (`list`). Only the long way writes them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from .._files import write_json_atomic
from .._flock import flocked
from .._layout import LOCATIONS_NAME, STATS_LOCK_NAME, STATS_NAME
from ._entries import Entry
from ._root import RecordFile

STATS_FIELDS = ("builds", "build_seconds", "failed_builds", "cache_loads", "prebuilt_loads", "remote_loads")


def read_stats(root: Path) -> tuple[dict[str, dict[str, float]], float | None]:
    """The counters in <root>/stats.json, each extension's with every field (0 where absent), and
    when they were zeroed. Whatever is malformed reads as no count."""
    records = RecordFile(root / STATS_NAME).records
    extensions = records.get("extensions")
    extensions = extensions if isinstance(extensions, dict) else {}
    counters = {
        name: {f: v if isinstance(v := fields.get(f), (int, float)) else 0 for f in STATS_FIELDS}
        for name, fields in extensions.items()
        if isinstance(fields, dict)
    }
    zeroed_at = records.get("zeroed_at")
    return counters, zeroed_at if isinstance(zeroed_at, (int, float)) else None


def _stats_locked(root: Path):
    """The counters' lock (a kernel lock, not filelock: importing that would cost a cache load
    more than the count itself). Yields False where the lock file cannot be opened."""
    return flocked(Path(root) / STATS_LOCK_NAME)  # held for a read and a write: never long


def count(root: Path, name: str, **increments: float) -> None:
    """Add to the extension's counters in <root>/stats.json under the lock (concurrent counts add up).
    Only the long way counts; a failure to count is ignored."""
    with _stats_locked(root) as locked:
        if not locked:
            return
        extensions, zeroed_at = read_stats(root)
        counters = extensions.setdefault(name, dict.fromkeys(STATS_FIELDS, 0))
        for field, increment in increments.items():
            counters[field] = round(counters[field] + increment, 3)
        try:
            write_json_atomic(root / STATS_NAME, {"zeroed_at": zeroed_at or time.time(), "extensions": extensions}, durable=False)
        except OSError:
            pass


LOCATIONS_KEPT = 8  # per entry, the newest


def read_locations(root: Path) -> dict[str, list[str]]:
    records = RecordFile(root / LOCATIONS_NAME).records
    return {name: [r for r in roots if isinstance(r, str)] for name, roots in records.items() if isinstance(roots, list)}


def note_location(entry: Entry, source_root: str) -> None:
    """Record that entry was loaded for sources in source_root (entries are keyed by content, so
    one entry serves every copy of a tree: `jitops-cache list` shows where). Only informs."""
    if source_root in read_locations(entry.root).get(entry.path.name, []):
        return
    with _stats_locked(entry.root) as locked:
        if not locked:
            return
        locations = read_locations(entry.root)
        roots = [r for r in locations.get(entry.path.name, []) if r != source_root] + [source_root]
        locations[entry.path.name] = roots[-LOCATIONS_KEPT:]
        try:
            write_json_atomic(entry.root / LOCATIONS_NAME, locations, durable=False)
        except OSError:
            pass


def zero_stats(root: Path) -> None:
    """Remove the counters (under their lock: a count meanwhile is not lost into the old file)."""
    with _stats_locked(root), contextlib.suppress(FileNotFoundError):
        (root / STATS_NAME).unlink()
