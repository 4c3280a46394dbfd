# SPDX-License-Identifier: MIT
"""The commands that remove: clear and prune (never an entry being built)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jitops import _files, _layout, _settings
from jitops._errors import CacheError
from jitops.store import Store

from . import inventory, registry
from .output import EXIT_OK, EXIT_PROBLEM, UsageError, emit, human_size, plural
from .remote import check_public_key, cmd_prune_remote
from .selection import selected_rows


def remove_rows(args: argparse.Namespace, root: Path, rows: list[inventory.Row]) -> int:
    """Remove the rows' directories (never one being built) and report what was freed."""
    removed: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for row in rows:
        if row.status == inventory.BUILDING:
            skipped.append({"path": row.path, "why": "being built"})
            continue
        if not args.dry_run:
            try:
                if not Store.remove_locked(Path(row.path), entry_lock(root, row)):
                    skipped.append({"path": row.path, "why": "a build started"})
                    continue
            except FileNotFoundError:
                continue  # removed meanwhile
            except OSError as err:  # one entry that cannot go never stops the others
                skipped.append({"path": row.path, "why": f"cannot remove it: {err.strerror or err}"})
                continue
        removed.append(
            {
                "kind": row.kind,
                "namespace": row.namespace,
                "name": row.name,
                "key": row.key,
                "status": row.status,
                "path": row.path,
                "bytes": row.size,
            }
        )
    freed = sum(r["bytes"] for r in removed)
    # The warm records of what is gone (each names its entry folder): small, but one per op and
    # setting would otherwise pile up. A dry run removes nothing, so it lists only those already
    # dangling.
    records = Store(root).dangling_warm_records()
    if not args.dry_run:
        for record in records:
            record.unlink(missing_ok=True)
        for lock in Store(root).dangling_locks():  # empty files, but one per key ever built
            Store.remove_locked(None, lock)

    def human():
        verb = "would remove" if args.dry_run else "removed"
        for r in removed:
            label = f"{r['namespace']}.{r['name']}" if r["kind"] == "entry" else f"{r['kind']} {r['name']}"
            print(f"{verb} {label}-{r['key'][:8]} ({r['status']}, {human_size(r['bytes'])})  {r['path']}")
        for s in skipped:
            print(f"kept {s['path']}: {s['why']}")
        print(
            f"{verb} {plural(len(removed), 'entry', 'entries')}, {human_size(freed)} {'would be ' if args.dry_run else ''}freed"
        )
        if records:
            print(f"{verb} {plural(len(records), 'warm record', 'warm records')} of entries that are gone")

    data = {
        "dry_run": args.dry_run,
        "removed": removed,
        "skipped": skipped,
        "bytes_freed": freed,
        "warm_records_removed": [str(r) for r in records],
    }
    emit(args, data, human)
    return EXIT_PROBLEM if any(s["why"].startswith("cannot remove") for s in skipped) else EXIT_OK


def entry_lock(root: Path, row: inventory.Row) -> Path | None:
    """The lock a build of the row's entry takes, held while it is removed so that no build starts
    on it meanwhile. Orphans, and entries of the older layout (no namespace), have none; stored
    objects and PCHs are published whole and read without one."""
    if row.status == inventory.ORPHAN or not row.namespace or row.kind != "entry":
        return None
    return Store(root).entry(f"{row.namespace}.{row.name}", row.key).lock_path


def cmd_clear(args: argparse.Namespace) -> int:
    if not (args.names or args.stale or args.all or args.package or args.signed_by):
        raise UsageError("say what to clear: extension NAMEs, --package PKG, --stale, --signed-by KEY or --all")
    if args.signed_by:
        check_public_key(args.signed_by)
    root, rows = selected_rows(args.names, args.package)
    if args.signed_by:  # a key no longer trusted: what was fetched under it goes
        rows = [r for r in rows if r.fetched_under == args.signed_by.strip()]
    if not (args.names or args.package or args.signed_by):  # stored objects and PCHs belong to no one extension
        rows += inventory.store_rows(root)
    if args.stale and not args.all:
        rows = [r for r in rows if r.status in (inventory.STALE, inventory.CORRUPT, inventory.ORPHAN)]
    if args.all and not (args.yes or args.dry_run or args.json) and sys.stdin.isatty() and sys.stdout.isatty():
        # As conda clean asks: a person at a terminal confirms; scripts (no terminal) and --yes do not.
        size = human_size(sum(r.size for r in rows))
        # On stdout, not input()'s: without readline that writes the prompt to stderr.
        print(f"Remove {plural(len(rows), 'entry', 'entries')} ({size}) from {root}? [y/N] ", end="", flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return EXIT_PROBLEM
    status = remove_rows(args, root, rows)
    inline = Path(_layout.inline_dir(root))  # load_inline's sources: written again by the next call that needs them
    if args.all and not args.names and args.package in (None, registry.DROP_IN) and inline.is_dir():
        if not args.dry_run:
            Store.remove_tree(inline)
        if not args.json:
            print(f"{'would remove' if args.dry_run else 'removed'} jitops.load_inline's sources {inline}")
    if args.all and not args.names and args.package is None:  # the logs (and remembered failures) of failed builds
        failed = sorted(root.glob(f"*{_layout.FAILED_LOG_SUFFIX}")) + sorted(root.glob(f"*{_layout.FAILED_RECORD_SUFFIX}"))
        if failed and not args.dry_run:
            for path in failed:
                path.unlink(missing_ok=True)
        if failed and not args.json:
            print(f"{'would remove' if args.dry_run else 'removed'} {plural(len(failed), 'file', 'files')} of failed builds")
    return status


def cmd_prune(args: argparse.Namespace) -> int:
    """Stale, corrupt and orphan entries first (superseded jitops.load builds among them), then the
    least recently used until the cache is within --max-size (default: the budget,
    JITOPS_CACHE_MAX_SIZE), never one a live process has loaded; --older-than AGE adds every
    entry unused for that long."""
    import time

    if args.remote:
        return cmd_prune_remote(args)
    if args.untrusted or args.signed_by:
        raise UsageError("--untrusted and --signed-by prune the remote (with --remote); locally: clear --signed-by KEY")
    root, rows = selected_rows([], args.package)
    rows += inventory.store_rows(root) if args.package is None else []
    rows = [r for r in rows if r.status != inventory.BUILDING]
    live = Store(root).live_paths() or set()
    in_use = [r for r in rows if Store.is_live(r.path, live)]
    rows = [r for r in rows if r not in in_use]
    useless = [r for r in rows if r.status != inventory.OK]
    usable = sorted((r for r in rows if r.status == inventory.OK), key=lambda r: r.last_used or 0)
    doomed = list(useless)
    if args.older_than is not None:
        cutoff = time.time() - args.older_than
        doomed += [r for r in usable if (r.last_used or 0) < cutoff]
    limit = args.max_size if args.max_size is not None else budget()
    if args.max_size is not None or limit:  # a budget of 0 is none; --max-size 0 empties the cache
        # The whole root counts (records and warm records too), as the budget does after builds.
        total = _files.tree_size(root) - sum(r.size for r in doomed)
        for r in usable:
            if total <= limit:
                break
            if r not in doomed:
                doomed.append(r)
                total -= r.size
    return remove_rows(args, root, doomed)


def budget() -> int:
    """JITOPS_CACHE_MAX_SIZE in bytes (0: none), or a usage error naming it."""
    try:
        return _settings.get("JITOPS_CACHE_MAX_SIZE")
    except CacheError as err:
        raise UsageError(str(err).removeprefix("jitops: ")) from None
