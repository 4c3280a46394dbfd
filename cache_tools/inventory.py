# SPDX-License-Identifier: MIT
"""What is in a cache root, entry by entry, and what the lock files under torch's extension root
are doing. Reads only: removing is the commands' business (removing.py)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from jitops import _files, _flock, _layout, warm
from jitops._errors import CacheError
from jitops.store import PchStore, StaleEntry, Store, abi_components, prebuilt_mismatch, stable_components

from . import registry

if TYPE_CHECKING:
    from jitops._records import KeyComponents, Manifest
    from jitops.store import Entry

# An entry's status, as `jitops-cache list` shows it.
OK, STALE, CORRUPT, BUILDING, ORPHAN = "ok", "stale", "corrupt", "building", "orphan"
# A torch FileBaton `lock` older than this, whose holders cannot be known, is taken for stale.
BATON_STALE_AGE_S = 3600.0


@dataclass
class Row:
    """One entry (or leftover build directory) of a cache root."""

    namespace: str
    name: str  # the extension's name in its namespace
    owner: str
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
    kind: str = "entry"  # or "object" (a stored unit: jitops/store/_object_store.py) or "pch" (jitops/store/_pch_store.py)
    seen_in: list[str] = field(default_factory=list)  # the extension roots an entry was loaded for
    fetched_under: str | None = None  # fetched from the remote cache: the key that signed it ("unsigned"); built here: None

    def as_dict(self) -> dict:
        return asdict(self)


_running: dict[tuple[str, bool], dict | None] = {}


def running_components(name: str, stable: bool = False) -> dict | None:
    """The running torch/CUDA/Python/source components for the extension <namespace>.<name>: all
    of them for one a package declares, the process's alone for a script's (jitops.load: its
    sources are known only to the script), None for any other. stable: for an entry on the stable
    ABI (what it shares with this process instead of torch's and Python's version)."""

    if (name, stable) not in _running:
        if name in registry.declared():
            extension = registry.declared()[name][1]
            try:  # inspecting writes nothing
                found = abi_components(extension, record_hashes=False, exact=not stable)
                _running[name, stable] = found if found.get("abi") == ("stable" if stable else None) else {"abi": "exact"}
            except OSError:  # a package that lacks a source: its entries cannot be judged (doctor says why)
                _running[name, stable] = None
        elif registry.owner(name) == registry.DROP_IN:
            _running[name, stable] = stable_components() if stable else warm.process_abi()  # CUDA: mismatch()
        else:
            return None
    return _running[name, stable]


def torch_text(components: KeyComponents) -> str | None:
    """The torch an entry runs under, as list, verify and doctor show it."""
    if components.get("abi") == "stable":
        return f"≥ {components.get('torch_floor')}, any Python"
    return components.get("torch")


def entry_rows(root: Path) -> list[Row]:
    rows, store = [], Store(root)
    locations = store.locations()
    entries = store.entries()
    newest: dict[str, float] = {}  # by name: when its newest entry was built
    for entry, manifest in entries:
        built_at = (manifest or {}).get("built_at")
        if isinstance(built_at, (int, float)):
            newest[entry.name] = max(newest.get(entry.name, built_at), built_at)
    for entry, manifest in entries:
        rows.append(_entry_row(entry))
        rows[-1].seen_in = locations.get(entry.path.name, [])
        if rows[-1].status == OK and _superseded(entry, manifest, rows[-1].seen_in, newest.get(entry.name)):
            rows[-1].status = STALE
            rows[-1].reason = "superseded: a newer build of it exists, and its sources are in none of the trees it was loaded for"
    for old in store.older_layout_entries():
        name, _, key = old.name.rpartition("-")
        rows.append(
            Row(
                "",
                name,
                "-",
                key,
                STALE,
                "left by an older jitops (entries are now <namespace>.<name>-<key>)",
                str(old),
                _files.tree_size(old),
            )
        )
    for temporary in store.staging_folders():
        lock = store.lock_of_staging(temporary)
        name = (_layout.parse_staging_name(temporary.name) or ("", ""))[0]
        key = temporary.name.removeprefix(f"{_layout.TMP_PREFIX}{name}-")  # the key, the builder's pid and a random part
        building = lock is not None and _flock.flock_is_held(lock)
        status, reason = (BUILDING, "its build is running") if building else (ORPHAN, "left by a build that did not finish")
        namespace, _, short = name.rpartition(".")
        rows.append(Row(namespace, short, registry.owner(name), key, status, reason, str(temporary), _files.tree_size(temporary)))
    return rows


def _entry_row(entry: Entry) -> Row:
    size = _files.tree_size(entry.path)
    if entry.name in registry.declared():  # its headers are checked where its sources are
        entry.source_root = registry.declared()[entry.name][1].root
    status, reason, manifest = OK, "", None
    try:
        entry.verified_library(touch=False)
        manifest = entry.read_manifest()
    except StaleEntry as err:
        status, reason = STALE, f"built from other headers ({err}): another tree's, or an older one's"
    except (CacheError, OSError) as err:
        status, reason = CORRUPT, str(err)
    if manifest is not None:
        built = manifest.get("components", {})
        wanted = running_components(entry.name, stable=built.get("abi") == "stable")
        differences = None if wanted is None else prebuilt_mismatch(built, wanted, list(wanted))
        if wanted is None:
            status, reason = STALE, f"no extension {entry.name} is declared here"
        elif differences:
            status, reason = STALE, "built for " + ", ".join(differences)
    if _flock.flock_is_held(entry.lock_path):
        status, reason = BUILDING, "its lock is held: " + _holder(entry.lock_path)
    components = (manifest or {}).get("components", {})
    namespace, _, name = entry.name.partition(".")
    return Row(
        namespace=namespace,
        name=name,
        owner=registry.owner(entry.name),
        key=entry.key,
        status=status,
        reason=reason,
        path=str(entry.path),
        size=size,
        backends=components.get("backends") or [],
        torch=torch_text(components),
        cuda=components.get("torch_cuda"),
        arch=components.get("cuda_arch_list"),
        built_at=(manifest or {}).get("built_at"),
        build_seconds=(manifest or {}).get("build_seconds"),
        last_used=_last_used(entry),
        fetched_under=_fetched_under(manifest),
    )


def _fetched_under(manifest: Manifest | None) -> str | None:
    fetched = (manifest or {}).get("remote")
    if not isinstance(fetched, dict):
        return None
    return fetched.get("signed_by") if isinstance(fetched.get("signed_by"), str) else "unsigned"


def _superseded(entry: Entry, manifest: Manifest | None, seen_in: list[str], newest: float | None) -> bool:
    """A jitops.load entry that a newer build of its name replaced: its sources (the manifest's
    sha256 of each) are in none of the trees it was loaded for. Another clone may still use an
    entry whose sources are somewhere, so only one matching none is stale."""
    if registry.owner(entry.name) != registry.DROP_IN or not manifest or not seen_in:
        return False
    built_at, sources = manifest.get("built_at"), manifest.get("source_hashes")
    if not isinstance(built_at, (int, float)) or newest is None or built_at >= newest or not isinstance(sources, dict):
        return False
    for tree in seen_in:
        try:
            if all(_files.sha256_file(os.path.join(tree, name)) == digest for name, digest in sources.items()):
                return False
        except (OSError, TypeError):
            continue
    return True


def _last_used(entry: Entry) -> float | None:
    try:
        return entry.last_used()
    except OSError:
        return None  # removed meanwhile


def _holder(lock_path: Path) -> str:
    """Who holds a jitops entry lock: the loader writes `<namespace>.<name>-<key>.owner` while it builds."""
    try:
        return Path(_layout.owner_path(lock_path)).read_text().strip()
    except OSError:
        pids = pids_holding_open(lock_path)
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
                if path in seen or not (name == "lock" or name.endswith(_layout.LOCK_SUFFIX)):
                    continue
                seen.add(path)
                try:
                    age = now - path.lstat().st_mtime
                except OSError:
                    continue
                pids = pids_holding_open(path)
                if name == "lock":
                    # A FileBaton holder keeps the file open until it deletes it; no holder, no use.
                    live = bool(pids) if pids is not None else age < BATON_STALE_AGE_S
                    rows.append(LockRow(str(path), "torch FileBaton", "live" if live else "stale", pids, age))
                else:
                    held = _flock.flock_is_held(path)
                    rows.append(LockRow(str(path), "jitops (flock)", "held" if held else "free", pids, age))
    return rows


# Locks, orphans


def pids_holding_open(path: Path) -> list[int] | None:
    """Processes with path open, from /proc; None where that cannot be known (no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    try:
        target = os.path.realpath(path)
    except OSError:
        return []
    pids = []
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) == target:
                    pids.append(int(pid_dir.name))
                    break
        except OSError:
            continue  # gone, or another user's process
    return pids


def store_rows(root: Path, check: bool = False) -> list[Row]:
    """The stored objects and precompiled headers the store lists, one row each (check: their
    sha256 hashed in full, as `verify` does), and their stores in progress or left by killed ones.
    Shared by every extension: no owner."""
    rows, store = [], Store(root)
    for folder, kind in store.parts_staging():
        dead = Store.staging_is_dead(folder.name)
        status, reason = (ORPHAN, "left by a store that did not finish") if dead else (BUILDING, "a process is writing it")
        rows.append(Row("", "-", "-", "-", status, reason, str(folder), _files.tree_size(folder), kind=kind))
    for item in sorted(store.stored_items(), key=lambda i: (i.kind, str(i.path))):  # objects, then PCHs
        if item.kind == "entry":
            continue
        status, reason, name, built_at = OK, "", "-", None
        try:
            name, built_at, data, digest = (Store.describe_object if item.kind == "object" else PchStore.describe)(item.path)
            if check and _files.sha256_file(data) != digest:
                status, reason = CORRUPT, f"{data} does not match the sha256 in its record"
        except (OSError, ValueError, KeyError, TypeError) as err:
            status, reason = CORRUPT, f"unreadable: {err}"
        key = (item.path.parent if item.kind == "object" else item.path).name[:16]
        rows.append(
            Row(
                "",
                name,
                "-",
                key,
                status,
                reason,
                str(item.path),
                item.size,
                built_at=built_at,
                last_used=item.last_used,
                kind=item.kind,
            )
        )
    return rows
