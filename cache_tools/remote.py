# SPDX-License-Identifier: MIT
"""The remote cache's commands (JITOPS_REMOTE_CACHE): remote status, push and keygen; list --remote
and prune --remote."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jitops import _layout
from jitops._errors import BuildError, CacheError
from jitops.store import _entries, _signing
from jitops.store._remote_records import inspect

from . import inventory
from .output import EXIT_OK, EXIT_PROBLEM, UsageError, emit, human_size, plural, print_table, when
from .selection import selected_rows

COUNTERS = ("hits", "misses", "object_hits", "pushes", "bytes_down", "bytes_up")  # stats/<name>: _remote.Remote.count


def active_remote():
    """The remote the settings name, or a usage error saying how to name one."""
    from jitops.store import _remote

    try:
        remote = _remote.active()
    except (CacheError, BuildError) as err:  # a bad setting (BuildError: JITOPS_REMOTE_TIMEOUT's)
        raise UsageError(str(err).removeprefix("jitops: ")) from None
    if remote is None:
        raise UsageError("no remote cache is set: JITOPS_REMOTE_CACHE=redis://host:6379/0 or file:///shared/folder")
    return remote


def cmd_remote(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        return keygen(args)
    remote = active_remote()
    try:
        if args.action == "status":
            return status(args, remote)
        return push(args, remote)
    except UsageError:
        raise
    except Exception as err:  # the server's own failure, as one line
        print(f"jitops-cache remote {args.action}: {remote.backend.describe()} failed: {type(err).__name__}: {err}")
        return EXIT_PROBLEM


def keygen(args: argparse.Namespace) -> int:
    if len(args.names) != 1:
        raise UsageError("remote keygen needs one argument: the file to write the private key to")
    path = args.names[0]
    try:
        public = _signing.keygen(Path(path))
    except FileExistsError:
        raise UsageError(f"{path} exists: a key is never overwritten") from None
    except CacheError as err:
        raise UsageError(str(err).removeprefix("jitops: ")) from None

    def human():
        print(f"private key: {path} (mode 0600): JITOPS_REMOTE_SIGNING_KEY={path} on the machines that push")
        print(f"public key:  {public}")
        print(f"readers: JITOPS_REMOTE_TRUSTED_KEYS={public}")

    emit(args, {"private_key": path, "public_key": public}, human)
    return EXIT_OK


def status(args: argparse.Namespace, remote) -> int:
    entries = records(remote, "entries")
    data = {
        "server": remote.backend.describe(),
        "mode": remote.mode,
        "trust": "server" if remote.trust_server else f"{len(remote.trusted)} trusted key(s)",
        "signing_key": remote.signer.public if remote.signer else None,
        "entries": len(entries),
        "untrusted_entries": sum(1 for r in entries if not r["trusted"]),
        "bytes": remote.backend.size(),
        **{name: remote.backend.counter(f"stats/{name}") for name in COUNTERS},
    }

    def human():
        for name in ("server", "mode", "trust", "signing_key"):
            print(f"{name + ':':13}{data[name] or '-'}")
        print(f"{'entries:':13}{data['entries']} ({data['untrusted_entries']} not signed by a trusted key)")
        print(f"{'size:':13}{human_size(data['bytes']) if data['bytes'] is not None else 'unknown'}")
        print(
            f"{'traffic:':13}{plural(data['hits'], 'hit', 'hits')}, {plural(data['misses'], 'miss', 'misses')}, "
            f"{plural(data['object_hits'], 'object hit', 'object hits')}, {plural(data['pushes'], 'push', 'pushes')}; "
            f"{human_size(data['bytes_down'])} down, {human_size(data['bytes_up'])} up"
        )

    emit(args, data, human)
    return EXIT_OK


def push(args: argparse.Namespace, remote) -> int:
    """Seed the remote with the local entries built here (not those fetched from it)."""
    if remote.read_only:
        raise UsageError("JITOPS_REMOTE_MODE is read-only: nothing is pushed")
    root, rows = selected_rows(args.names, args.package)
    pushed, skipped = [], 0
    for row in rows:
        parsed = _layout.parse_entry_name(Path(row.path).name)
        # A stale entry (its headers changed here, or its extension is not declared here) is still a
        # sound build of what its record names; push() checks its library against its sha256.
        if row.kind != "entry" or not parsed or row.status not in (inventory.OK, inventory.STALE):
            continue
        name, key, variant = parsed
        entry = _entries.Entry(root, name, key, variant=variant)
        if remote.push(entry):
            pushed.append(row.path)
        else:
            skipped += 1
    if remote.disabled:
        print(f"jitops-cache remote push: {remote.disabled}")
        return EXIT_PROBLEM

    def human():
        for path in pushed:
            print(f"pushed {path}")
        print(
            f"pushed {plural(len(pushed), 'entry', 'entries')} to {remote.backend.describe()}; {skipped} there already or fetched from it"
        )

    emit(args, {"pushed": pushed, "skipped": skipped}, human)
    return EXIT_OK


def rows(remote) -> list[dict]:
    """One row per remote entry record."""
    found = []
    for record in records(remote, "entries"):
        body = record["body"] or {}
        found.append(
            {
                "record": record["record"],
                "name": body.get("name"),
                "size": body.get("size", 0),
                "archs": body.get("cuda_arch_list"),
                "signed_by": record["signed_by"],
                "trusted": record["trusted"],
                "built_by": (body.get("built_by") or {}).get("cxx"),
                "pushed_at": body.get("pushed_at"),
            }
        )
    return found


def cmd_list_remote(args: argparse.Namespace) -> int:
    remote = active_remote()
    try:
        found = [
            r for r in rows(remote) if not args.names or (r["name"] or "").split(".")[-1] in args.names or r["name"] in args.names
        ]
    except Exception as err:
        print(f"jitops-cache list --remote: {remote.backend.describe()} failed: {type(err).__name__}: {err}")
        return EXIT_PROBLEM

    def human():
        print_table(
            ["EXTENSION", "SIZE", "ARCHS", "SIGNED", "PUSHED", "RECORD"],
            [
                [
                    r["name"] or "(malformed)",
                    human_size(r["size"] or 0),
                    r["archs"] or "-",
                    ("trusted" if r["trusted"] else "UNTRUSTED") if r["signed_by"] else "unsigned",
                    when(r["pushed_at"]),
                    r["record"],
                ]
                for r in found
            ],
        )
        print(f"{plural(len(found), 'entry', 'entries')} on {remote.backend.describe()}")

    emit(args, {"server": remote.backend.describe(), "entries": found}, human)
    return EXIT_OK


def cmd_prune_remote(args: argparse.Namespace) -> int:
    """Remove remote entries pushed before --older-than, then the oldest until --max-size holds, then
    the blobs no record names. Untrusted and malformed records go first."""
    if args.older_than is None and args.max_size is None:
        raise UsageError("prune --remote needs --older-than AGE or --max-size SIZE")
    remote = active_remote()
    try:
        found = sorted(rows(remote), key=lambda r: (r["trusted"], r["pushed_at"] or 0))
        doomed = [r for r in found if not r["name"]]
        if args.older_than is not None:
            doomed += [r for r in found if r not in doomed and (r["pushed_at"] or 0) < time.time() - args.older_than]
        if args.max_size is not None:
            total = sum(r["size"] or 0 for r in found if r not in doomed)
            for r in found:
                if total <= args.max_size:
                    break
                if r not in doomed:
                    doomed.append(r)
                    total -= r["size"] or 0
        freed = 0 if args.dry_run else remove(remote, [r["record"] for r in doomed])
    except Exception as err:
        print(f"jitops-cache prune --remote: {remote.backend.describe()} failed: {type(err).__name__}: {err}")
        return EXIT_PROBLEM

    def human():
        verb = "would remove" if args.dry_run else "removed"
        for r in doomed:
            print(f"{verb} {r['name']} ({human_size(r['size'] or 0)})  {r['record']}")
        print(
            f"{verb} {plural(len(doomed), 'entry', 'entries')} from {remote.backend.describe()}"
            + ("" if args.dry_run else f"; {human_size(freed)} of blobs freed")
        )

    emit(args, {"dry_run": args.dry_run, "removed": [r["record"] for r in doomed], "bytes_freed": freed}, human)
    return EXIT_OK


def records(remote, kind: str) -> list[dict]:
    """Every record of a kind ("entries", "objects"): its name, body (None: malformed), signer, and
    whether that is trusted. Raises where the remote fails."""
    found = []
    for key in remote.backend.list(kind):
        for variant in remote.backend.list(f"{kind}/{key}"):
            name = f"{kind}/{key}/{variant}"
            data = remote.backend.get(name)
            if data is None:
                continue
            try:
                body, signer, trusted = inspect(data, remote.trusted)
            except ValueError:
                body, signer, trusted = None, None, False
            found.append({"record": name, "body": body, "signed_by": signer, "trusted": trusted})
    return found


def remove(remote, names: list[str]) -> int:
    """Remove records, then every blob no remaining record names; returns the bytes of those blobs
    that a record gave the size of. (A writer pushing meanwhile may lose a blob: its record is then
    a miss, never a wrong load.)"""
    everything = records(remote, "entries") + records(remote, "objects")
    for name in names:
        remote.backend.delete(name)
    sizes, named = {}, set()
    for record in everything:
        if body := record["body"]:
            digest = body.get("library_sha256") or body.get("object_sha256")
            sizes[digest] = body.get("size", 0)
            if record["record"] not in names:
                named.add(digest)
    freed = 0
    for digest in remote.backend.list("blobs"):
        if digest not in named:
            freed += sizes.get(digest, 0)
            remote.backend.delete(f"blobs/{digest}")
    return freed
