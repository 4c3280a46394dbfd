# SPDX-License-Identifier: MIT
"""The remote cache seen whole, for the CLI (`remote status`, `list --remote`, `prune --remote`,
`doctor`): every record listed and judged as a reader here would, pruning, and whether the remote
holds an extension. Every call goes through Remote.call: bounded, and a fault raises Fault."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import _layout
from ._key import PlannedEntry
from ._remote import Remote
from ._remote_backends import Unreadable
from ._remote_records import candidates, lookup_key, shape_problem, unfit, unseal

KINDS = {_layout.REMOTE_ENTRIES: "entry", _layout.REMOTE_OBJECTS: "object"}


@dataclass
class Record:
    name: str  # <kind>/<key>/<variant>
    signer: str | None  # the public key it names, trusted or not
    trusted: bool  # a reader here would take it (its signature, or JITOPS_REMOTE_TRUST=server)
    problem: str  # why it is malformed ('' where it is not)
    body: dict | None  # well formed (where untrusted too: bounded by _remote_records.unseal); None: malformed

    @property
    def extension(self) -> str | None:
        return self.body.get("name") if self.body else None

    @property
    def size(self) -> int:
        return self.body["size"] if self.body else 0

    @property
    def pushed_at(self) -> float:
        return (self.body["pushed_at"] or 0) if self.body else 0

    @property
    def blob(self) -> str | None:
        return (self.body.get("library_sha256") or self.body.get("object_sha256")) if self.body else None


def listing(remote: Remote, kind: str) -> list[Record]:
    """Every record of a kind ("entries", "objects")."""
    found = []
    for key in remote.call("listing", "list", kind, check=lambda v: isinstance(v, list)):
        if not isinstance(key, str) or "/" in key or key in ("", ".", ".."):
            continue
        for name, data in remote.records(f"{kind}/{key}", "records"):
            if data is None:
                continue
            if isinstance(data, Unreadable):
                found.append(Record(name, None, False, str(data), None))
                continue
            sealed = unseal(data, remote.trusted, parse_untrusted=True)
            problem = sealed.problem or shape_problem(sealed.body or {}, KINDS[kind])  # a body: parsed where no problem
            trusted = not problem and (sealed.trusted or remote.trust_server)
            found.append(Record(name, sealed.signer, trusted, problem, None if problem else sealed.body))
    return found


def status(remote: Remote) -> dict:
    """What jitops keeps on the server (entries, objects, blobs and their bytes), the server's own
    memory apart, and the counters."""
    entries, objects = listing(remote, _layout.REMOTE_ENTRIES), listing(remote, _layout.REMOTE_OBJECTS)
    named = {r.blob: r.size for r in entries + objects if r.blob}
    blobs = remote.call("listing", "list", _layout.REMOTE_BLOBS, check=lambda v: isinstance(v, list))
    server_bytes = remote.call("asking", "size", check=lambda v: v is None or type(v) is int)
    counters = ("hits", "misses", "object_hits", "pushes", "bytes_down", "bytes_up")
    return {
        "entries": len(entries),
        "untrusted_entries": sum(1 for r in entries if not r.trusted),
        "objects": len(objects),
        "blobs": len(blobs),
        "unnamed_blobs": sum(1 for b in blobs if b not in named),
        "blob_bytes": sum(named.values()),
        "bytes": server_bytes,  # the server's own memory (Redis: every database's), or the folder's size
        **{
            name: remote.call("asking", "counter", _layout.remote_counter(name), check=lambda v: type(v) is int)
            for name in counters
        },
    }


def to_prune(
    remote: Remote,
    *,
    untrusted: bool = False,
    signed_by: str | None = None,
    older_than: float | None = None,
    max_size: int | None = None,
) -> list[Record]:
    """The entry records a prune removes: what a reader here refuses (untrusted), what a key signed
    (signed_by); malformed ones, then those pushed before older_than seconds ago, then the oldest
    (untrusted first) until max_size bytes hold."""
    found = sorted(listing(remote, _layout.REMOTE_ENTRIES), key=lambda r: (r.trusted, r.pushed_at))
    doomed = [r for r in found if (untrusted and not r.trusted) or (signed_by and r.signer == signed_by)]
    if older_than is not None or max_size is not None:
        doomed += [r for r in found if r.problem and r not in doomed]
    if older_than is not None:
        doomed += [r for r in found if r not in doomed and r.pushed_at < time.time() - older_than]
    if max_size is not None:
        total = sum(r.size for r in found if r not in doomed)
        for r in found:
            if total <= max_size:
                break
            if r not in doomed:
                doomed.append(r)
                total -= r.size
    return doomed


def remove(remote: Remote, names: list[str]) -> int:
    """Remove records, then every blob no remaining record names; returns the bytes of those blobs
    that a record gave the size of. (A writer pushing meanwhile may lose a blob: its record is then
    a miss, never a wrong load.)"""
    everything = listing(remote, _layout.REMOTE_ENTRIES) + listing(remote, _layout.REMOTE_OBJECTS)
    for name in names:
        remote.call("removing from", "delete", name)
    sizes = {r.blob: r.size for r in everything if r.blob}
    named = {r.blob for r in everything if r.blob and r.name not in names}
    freed = 0
    for digest in remote.call("listing", "list", _layout.REMOTE_BLOBS, check=lambda v: isinstance(v, list)):
        if isinstance(digest, str) and "/" not in digest and digest not in named:
            freed += sizes.get(digest, 0)
            remote.call("removing from", "delete", _layout.remote_blob(digest))
    return freed


def holds(remote: Remote, planned: PlannedEntry) -> tuple[bool, str]:
    """Whether a load here would take the extension from the remote: a record it trusts, that fits
    this machine, whose blob is there (not downloaded). With what it found."""
    found = []
    for components in candidates(planned):
        key = lookup_key(components)
        for name, data in remote.records(_layout.remote_records(_layout.REMOTE_ENTRIES, key), planned.entry.name):
            body, signer, why = remote.judge(data, "entry", key)
            why = why or (unfit(body, planned) if body is not None else "")
            if not why and body is not None:
                if remote.call(
                    "looking up", "exists", _layout.remote_blob(body["library_sha256"]), check=lambda v: isinstance(v, bool)
                ):
                    return True, f"{remote.server}, signed by {signer or 'no key (JITOPS_REMOTE_TRUST=server)'}"
                why = "its blob is missing"
            if why:
                found.append(f"{name.rpartition('/')[2]}: {why}")
    return False, f"{remote.server} has " + ("; ".join(found) if found else "no entry for it")
