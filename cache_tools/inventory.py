# SPDX-License-Identifier: MIT
"""What is in a cache root, entry by entry, and what the lock files under torch's extension root
are doing. Reads only: removing is the commands' business (__main__.py)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitops import _cache

# An entry's status, as `jitops-cache list` shows it.
OK, STALE, CORRUPT, BUILDING, ORPHAN = "ok", "stale", "corrupt", "building", "orphan"
# A torch FileBaton `lock` older than this, whose holders cannot be known, is taken for stale.
BATON_STALE_AGE_S = 3600.0


@dataclass
class Row:
    """One entry (or leftover build directory) of a cache root."""

    op: str
    key: str
    status: str
    reason: str  # why the status is not ok; empty when it is
    path: str
    size: int
    backends: list[str] = field(default_factory=list)
    torch: str | None = None
    cuda: str | None = None
    arch: str | None = None
    built_at: float | None = None
    build_seconds: float | None = None
    last_used: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


_running: dict[str, dict] = {}


def running_components(op: str) -> dict | None:
    """The running torch/CUDA/Python/source components for op (None for an op this jitops lacks)."""
    from jitops import _build, available_ops

    if op not in available_ops():
        return None
    if op not in _running:
        _running[op] = _build.abi_components(_build.OpSources(op), record_hashes=False)  # inspecting writes nothing
    return _running[op]


def entry_rows(root: Path) -> list[Row]:
    rows = []
    for entry, _ in _cache.list_entries(root):
        rows.append(_entry_row(entry))
    for temporary in _cache.orphan_dirs(root):
        lock = _cache.lock_of_temporary(root, temporary)
        op, _, rest = temporary.name[len(_cache.TMP_PREFIX) :].partition("-")
        building = lock is not None and _cache.flock_is_held(lock)
        status, reason = (BUILDING, "its build is running") if building else (ORPHAN, "left by a build that did not finish")
        rows.append(Row(op, rest, status, reason, str(temporary), _cache.tree_size(temporary)))
    return rows


def _entry_row(entry: _cache.Entry) -> Row:
    size = _cache.tree_size(entry.path)
    status, reason, manifest = OK, "", None
    try:
        entry.verified_library(touch=False)
        manifest = entry.read_manifest()
    except (_cache.CacheError, OSError) as err:
        status, reason = CORRUPT, str(err)
    if manifest is not None:
        wanted = running_components(entry.op)
        differences = None if wanted is None else _cache.prebuilt_mismatch(manifest.get("components", {}), wanted)
        if wanted is None:
            status, reason = STALE, f"this jitops has no op {entry.op!r}"
        elif differences:
            status, reason = STALE, "built for " + ", ".join(differences)
    if _cache.flock_is_held(entry.lock_path):
        status, reason = BUILDING, "its lock is held: " + _holder(entry.lock_path)
    components = (manifest or {}).get("components", {})
    return Row(
        op=entry.op,
        key=entry.key,
        status=status,
        reason=reason,
        path=str(entry.path),
        size=size,
        backends=components.get("backends") or [],
        torch=components.get("torch"),
        cuda=components.get("torch_cuda"),
        arch=components.get("cuda_arch_list"),
        built_at=(manifest or {}).get("built_at"),
        build_seconds=(manifest or {}).get("build_seconds"),
        last_used=(manifest or {}).get("last_used"),
    )


def _holder(lock_path: Path) -> str:
    """Who holds a jitops entry lock: the loader writes `<op>-<key>.owner` while it builds."""
    try:
        return lock_path.with_suffix(".owner").read_text().strip()
    except OSError:
        pids = _cache.pids_holding_open(lock_path)
        return f"pid {', '.join(map(str, pids))}" if pids else "holder unknown"


@dataclass
class LockRow:
    """One lock file: a torch FileBaton `lock` (any project's) or a jitops entry lock."""

    path: str
    kind: str  # "torch FileBaton" or "jitops (flock)"
    state: str  # FileBaton: live or stale; jitops: held or free (a free flock file blocks no one)
    pids: list[int] | None  # processes that have it open; None where that cannot be known
    age_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def lock_rows(roots: list[Path]) -> list[LockRow]:
    """Every lock file under the given roots (torch's extension root, jitops' cache root)."""
    seen, rows = set(), []
    now = time.time()
    for root in roots:
        if not root.is_dir():
            continue
        for parent, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(parent, d))]
            for name in files:
                path = Path(parent, name)
                if path in seen or not (name == "lock" or name.endswith(".lock")):
                    continue
                seen.add(path)
                try:
                    age = now - path.lstat().st_mtime
                except OSError:
                    continue
                pids = _cache.pids_holding_open(path)
                if name == "lock":
                    # A FileBaton holder keeps the file open until it deletes it; no holder, no use.
                    live = bool(pids) if pids is not None else age < BATON_STALE_AGE_S
                    rows.append(LockRow(str(path), "torch FileBaton", "live" if live else "stale", pids, age))
                else:
                    held = _cache.flock_is_held(path)
                    rows.append(LockRow(str(path), "jitops (flock)", "held" if held else "free", pids, age))
    return rows
