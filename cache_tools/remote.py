# SPDX-License-Identifier: MIT
"""The remote cache's commands (JITOPS_REMOTE_CACHE): remote status, push and keygen; list --remote
and prune --remote. They print; jitops/store/_remote_admin reads, judges and removes."""

from __future__ import annotations

import argparse
import contextlib
import warnings
from pathlib import Path

from jitops import _layout
from jitops._errors import BuildError, CacheError
from jitops.store import (
    Fault,
    Store,
    parse_public_key,
    remote_listing,
    remote_remove,
    remote_status,
    remote_to_prune,
)
from jitops.store import active_remote as configured_remote  # active_remote() below says how to name one
from jitops.store import keygen as write_key_pair  # keygen() below is the command

from . import inventory
from .output import EXIT_OK, EXIT_PROBLEM, UsageError, emit, human_size, plural, print_table, when
from .selection import selected_rows


def active_remote():
    """The remote the settings name, or a usage error saying how to name one."""

    try:
        remote = configured_remote()
    except (CacheError, BuildError) as err:  # a bad setting (BuildError: JITOPS_REMOTE_TIMEOUT's)
        raise UsageError(str(err).removeprefix("jitops: ")) from None
    if remote is None:
        raise UsageError("no remote cache is set: JITOPS_REMOTE_CACHE=redis://host:6379/0 or file:///shared/folder")
    return remote


@contextlib.contextmanager
def one_line_on_fault(command: str, remote):
    """A fault of the server (or a backend) ends the command with one line and exit 1; the
    process-wide warning a load would show is not repeated."""

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="jitops: the remote cache is off")
        try:
            yield
        except Fault:
            print(f"jitops-cache {command}: {remote.disabled}")
            raise SystemExit(EXIT_PROBLEM) from None


def cmd_remote(args: argparse.Namespace) -> int:
    if args.action == "keygen":
        return keygen(args)
    remote = active_remote()
    with one_line_on_fault(f"remote {args.action}", remote):
        return status(args, remote) if args.action == "status" else push(args, remote)


def keygen(args: argparse.Namespace) -> int:
    if len(args.names) != 1:
        raise UsageError("remote keygen needs one argument: the file to write the private key to")
    path = Path(args.names[0]).absolute()
    try:
        public = write_key_pair(path)
    except FileExistsError:
        raise UsageError(f"{path} exists: a key is never overwritten") from None
    except (CacheError, OSError) as err:
        raise UsageError(f"cannot write {path}: {getattr(err, 'strerror', None) or err}") from None

    def human():
        print(f"private key: {path} (mode 0600): JITOPS_REMOTE_SIGNING_KEY={path} on the machines that push")
        print(f"public key:  {public} (also in {path}.pub)")
        print(f"readers: JITOPS_REMOTE_TRUSTED_KEYS={public}")

    emit(args, {"private_key": str(path), "public_key": public, "public_key_file": f"{path}.pub"}, human)
    return EXIT_OK


def status(args: argparse.Namespace, remote) -> int:

    data = {
        "server": remote.server,
        "mode": remote.mode,
        "trust": "server" if remote.trust_server else f"{len(remote.trusted)} trusted key(s)",
        "signing_key": remote.signer.public if remote.signer else None,
        **remote_status(remote),
    }

    def human():
        for name in ("server", "mode", "trust", "signing_key"):
            print(f"{name + ':':13}{data[name] or '-'}")
        print(f"{'entries:':13}{data['entries']} ({data['untrusted_entries']} that a reader here refuses)")
        print(
            f"{'blobs:':13}{data['blobs']}, {human_size(data['blob_bytes'])} named by {data['entries']} entries "
            f"and {data['objects']} objects ({data['unnamed_blobs']} named by no record)"
        )
        memory = human_size(data["bytes"]) if data["bytes"] is not None else "unknown"
        print(f"{'server:':13}{memory} in all (the server's own count, other data included)")
        print(
            f"{'traffic:':13}{plural(data['hits'], 'hit', 'hits')}, {plural(data['misses'], 'miss', 'misses')}, "
            f"{plural(data['object_hits'], 'object hit', 'object hits')}, {plural(data['pushes'], 'push', 'pushes')}; "
            f"{human_size(data['bytes_down'])} down, {human_size(data['bytes_up'])} up (read-only readers count none)"
        )

    emit(args, data, human)
    return EXIT_OK


def push(args: argparse.Namespace, remote) -> int:
    """Seed the remote with the local entries built here (not those fetched from it); re-sign those
    whose record there a reader here would refuse (after a key rotation)."""
    if remote.read_only:
        raise UsageError("JITOPS_REMOTE_MODE is read-only: nothing is pushed")
    root, rows = selected_rows(args.names, args.package)
    done: dict[str, list[str]] = {"pushed": [], "re-signed": []}
    skipped = 0
    for row in rows:
        parsed = _layout.parse_entry_name(Path(row.path).name)
        # A stale entry (its headers changed here, or its extension is not declared here) is still a
        # sound build of what its record names; push() checks its library against its sha256.
        if row.kind != "entry" or not parsed or row.status not in (inventory.OK, inventory.STALE):
            continue
        name, key, variant = parsed
        outcome = remote.push(Store(root).entry(name, key, variant=variant))
        if outcome:
            done[outcome].append(row.path)
        else:
            skipped += 1
    if remote.disabled:
        print(f"jitops-cache remote push: {remote.disabled}")
        return EXIT_PROBLEM

    def human():
        for outcome, paths in done.items():
            for path in paths:
                print(f"{outcome} {path}")
        print(
            f"pushed {plural(len(done['pushed']), 'entry', 'entries')} to {remote.server}, re-signed "
            f"{len(done['re-signed'])} whose record there was not trusted here; {skipped} there already, or fetched from it"
        )

    emit(args, {"pushed": done["pushed"], "re_signed": done["re-signed"], "skipped": skipped}, human)
    return EXIT_OK


def row(record) -> dict:
    return {
        "record": record.name,
        "name": record.extension,
        "size": record.size,
        "archs": record.body.get("cuda_arch_list") if record.body else None,
        "signed_by": record.signer,
        "trusted": record.trusted,
        "problem": record.problem or None,
        "pushed_at": record.pushed_at or None,
    }


def signer_text(r: dict) -> str:
    if r["problem"]:
        return f"MALFORMED: {r['problem']}"
    if not r["signed_by"]:
        return "unsigned, " + ("trusted (JITOPS_REMOTE_TRUST=server)" if r["trusted"] else "REFUSED here")
    return f"{r['signed_by'][:20]}..., {'trusted' if r['trusted'] else 'REFUSED here'}"


def cmd_list_remote(args: argparse.Namespace) -> int:

    remote = active_remote()
    with one_line_on_fault("list --remote", remote):
        found = [row(r) for r in remote_listing(remote, "entries")]
    found = [r for r in found if not args.names or (r["name"] or "").split(".")[-1] in args.names or r["name"] in args.names]

    def human():
        print_table(
            ["EXTENSION", "SIZE", "ARCHS", "SIGNER", "PUSHED", "RECORD"],
            [
                [r["name"] or "-", human_size(r["size"]), r["archs"] or "-", signer_text(r), when(r["pushed_at"]), r["record"]]
                for r in found
            ],
        )
        print(f"{plural(len(found), 'entry', 'entries')} on {remote.server}")

    emit(args, {"server": remote.server, "entries": found}, human)
    return EXIT_OK


def cmd_prune_remote(args: argparse.Namespace) -> int:
    """--untrusted / --signed-by: what a reader here refuses, or what a key signed (removed only with
    --yes: a server may be shared by teams that trust other keys); --older-than / --max-size: by push
    time, malformed records first, then the blobs no record names."""

    if not (args.untrusted or args.signed_by) and args.older_than is None and args.max_size is None:
        raise UsageError("prune --remote needs --untrusted, --signed-by KEY, --older-than AGE or --max-size SIZE")
    if args.signed_by:
        check_public_key(args.signed_by)
    remote = active_remote()
    by_key = bool(args.untrusted or args.signed_by)
    dry_run = args.dry_run or (by_key and not args.yes)
    with one_line_on_fault("prune --remote", remote):
        doomed = remote_to_prune(
            remote,
            untrusted=args.untrusted,
            signed_by=args.signed_by and args.signed_by.strip(),
            older_than=args.older_than,
            max_size=args.max_size,
        )
        freed = 0 if dry_run else remote_remove(remote, [r.name for r in doomed])
    rows = [row(r) for r in doomed]

    def human():
        verb = "would remove" if dry_run else "removed"
        for r in rows:
            print(f"{verb} {r['name'] or '-'} ({human_size(r['size'])}, {signer_text(r)})  {r['record']}")
        print(
            f"{verb} {plural(len(rows), 'entry', 'entries')} from {remote.server}"
            + ("" if dry_run else f"; {human_size(freed)} of blobs freed")
        )
        if dry_run and by_key and not args.dry_run and rows:
            print("nothing removed: add --yes to remove them (other teams may trust keys this machine does not)")

    emit(args, {"dry_run": dry_run, "removed": [r["record"] for r in rows], "entries": rows, "bytes_freed": freed}, human)
    return EXIT_OK


def check_public_key(text: str) -> None:
    """A usage error where text is not an `ed25519:` public key (a typo would match nothing)."""
    try:
        parse_public_key(text, setting="--signed-by")
    except CacheError as err:
        raise UsageError(str(err).removeprefix("jitops: ")) from None
