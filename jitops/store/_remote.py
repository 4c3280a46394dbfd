# SPDX-License-Identifier: MIT
"""The remote tier behind the store (JITOPS_REMOTE_CACHE; docs/cache.md, "Remote cache"): a local
miss asks it before building, and a local build is pushed to it. Imported only on a local miss.

Its layout (a backend stores bytes by name, _remote_backends):
  blobs/<sha256>                  a library or a compiled unit's object
  entries/<lookup key>/<variant>  a signed record: a library, what it was built from and for
  objects/<unit key>/<variant>    a signed record: one unit's object and the headers it included
  leases/<lookup key>             held by the one machine building that key
  stats/<counter>                 hits, misses, bytes
Blobs go first and the record last, so a half-uploaded entry is never visible. Any failed call turns
the remote off for the process, with one warning (`call`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from .._errors import CacheError, warn
from . import _entries, _root, _signing
from ._key import PlannedEntry
from ._remote_backends import Backend, open_backend
from ._remote_records import FORMAT, candidates, glibc_needed, inspect, local_manifest, lookup_key, record_variant, seal, unfit

DEFAULT_TIMEOUT_S = 5.0
LEASE_S = 30.0  # a builder's lease outlives it by at most this; refreshed every third of it
POLL_S = 0.25  # how often a machine waiting for another's build looks for its entry
MODES = ("read-write", "read-only")


class Fault(Exception):
    """The remote failed (it is disabled now): the caller goes on without it."""


class Remote:
    """The remote of this process's settings, its trust, and what it did (for `remote status`)."""

    def __init__(self, environ: dict):
        self.setting = environ["JITOPS_REMOTE_CACHE"]
        self.mode = environ.get("JITOPS_REMOTE_MODE", "read-write") or "read-write"
        if self.mode not in MODES:
            raise CacheError(f"jitops: JITOPS_REMOTE_MODE={self.mode!r}: use {' or '.join(MODES)}")
        self.read_only = self.mode == "read-only"
        from ._lock import seconds_from_env

        self.timeout = seconds_from_env("JITOPS_REMOTE_TIMEOUT", DEFAULT_TIMEOUT_S)
        trust = environ.get("JITOPS_REMOTE_TRUST", "keys") or "keys"
        if trust not in ("keys", "server"):
            raise CacheError(f"jitops: JITOPS_REMOTE_TRUST={trust!r}: use keys (the default) or server")
        self.trust_server = trust == "server"
        self.trusted = _signing.trusted_keys(environ.get("JITOPS_REMOTE_TRUSTED_KEYS", ""))
        signing_key = environ.get("JITOPS_REMOTE_SIGNING_KEY", "")
        self.signer = _signing.Signer(signing_key) if signing_key and self.mode == "read-write" else None
        self.backend: Backend = open_backend(self.setting, self.timeout)
        self.disabled = ""  # why, once a call failed
        self.warned: set[str] = set()
        self.refused: set[str] = set()  # lookup keys whose library did not open here

    def call(self, doing: str, method, *args):
        """backend.method(*args); any failure disables the remote for the process, with one warning."""
        if self.disabled:
            raise Fault(self.disabled)
        try:
            return method(*args)
        except Exception as err:  # a third party's backend may raise anything: never a failed load
            self.disabled = f"{doing} {self.backend.describe()} failed ({type(err).__name__}: {err})"
            warn(f"the remote cache is off for this process: {self.disabled}; building locally")
            raise Fault(self.disabled) from None

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            warn(message)

    def count(self, **amounts: int) -> None:
        """Add to the server's counters (`remote status`). They only inform: a reader the server
        does not let write (read-only ACLs) loses its counts, not its remote."""
        if self.disabled:
            return
        try:
            self.backend.add_many({f"stats/{name}": amount for name, amount in amounts.items()})
        except Exception:
            pass

    def opened(self, data: bytes | None, name: str, kind: str, key: str) -> dict | None:
        """The body of the record `name` where it is well formed, of this kind and key, and signed
        by a trusted key (or JITOPS_REMOTE_TRUST=server); else None, with one warning."""
        if data is None:
            return None
        try:
            body, signer, trusted = inspect(data, self.trusted)
        except ValueError as err:
            self.warn_once(f"ignoring the malformed remote record {name} ({err}): not loaded")
            return None
        if not (trusted or self.trust_server):
            why = f"its signature does not verify under a trusted key ({signer})" if signer else "it is not signed"
            self.warn_once(
                f"ignoring the remote record {name}: {why}; not loaded. Trust its writer's public key in "
                "JITOPS_REMOTE_TRUSTED_KEYS (or the server itself: JITOPS_REMOTE_TRUST=server)"
            )
            return None
        if body.get("format") != FORMAT or body.get("kind") != kind or body.get("key") != key:
            self.warn_once(f"ignoring the remote record {name}: it is for another {kind} or format; not loaded")
            return None
        return {**body, "signed_by": signer if trusted else None}

    def blob(self, digest: str, record: str) -> bytes | None:
        """The blob of sha256 `digest`, checked; None (one warning) where it is missing or differs."""
        data = self.call("downloading from", self.backend.get, f"blobs/{digest}")
        if data is None or _root.sha256_bytes(data) != digest:
            why = "missing" if data is None else "does not match its sha256"
            self.warn_once(f"ignoring the remote record {record}: its blob {digest[:16]} {why}; not loaded")
            return None
        return data

    def put_blob(self, data: bytes) -> str:
        digest = _root.sha256_bytes(data)
        self.call("uploading to", self.backend.put, f"blobs/{digest}", data, True)
        return digest

    # Libraries
    def fetch(self, planned: PlannedEntry, count: bool = True) -> Path | None:
        """The entry of this build from the remote, verified and published in the local store (under
        the key's lock), or None. count=False: a miss is not counted (a machine waiting for a build)."""
        entry, refused = planned.entry, []
        try:
            for components in candidates(planned):
                key = lookup_key(components)
                if key in self.refused:
                    continue
                names = [f"entries/{key}/{v}" for v in self.call("looking up in", self.backend.list, f"entries/{key}")]
                for name, data in zip(names, self.call("downloading from", self.backend.get_many, names)):
                    body = self.opened(data, name, "entry", key)
                    if body is None:
                        continue
                    if why := unfit(body, planned):
                        refused.append(why)
                        continue
                    data = self.blob(body["library_sha256"], name)
                    if data is None:
                        continue
                    manifest = local_manifest(self.backend.describe(), planned, body, name.rpartition("/")[2])
                    library = _entries.publish_library(entry, manifest, data)
                    entry.backends = body.get("backends")  # a pod without nvcc may get CUDA kernels
                    self.count(hits=1, bytes_down=len(data))
                    return library
        except Fault:
            return None
        if refused:
            self.warn_once(f"the remote cache has {entry.name} only for another machine: " + "; ".join(refused))
        if count:
            self.count(misses=1)
        return None

    def push(self, entry: _entries.Entry) -> bool:
        """Upload a local entry (built here, not fetched): its objects, its library, then its record.
        False where it was not pushed (read-only, off, or the remote has it)."""
        if self.read_only or self.disabled:
            return False
        manifest = entry.read_manifest()
        library = entry.path / manifest["library"] if manifest else None
        if manifest is None or "remote" in manifest or library is None:
            return False
        components = manifest.get("components", {})
        key = lookup_key(components)
        variant = record_variant(components.get("cuda_arch_list"), manifest.get("headers", {}))
        name = f"entries/{key}/{variant}"
        try:
            if self.call("looking up in", self.backend.get, name) is not None:
                return False  # another writer's (harmless: the same inputs)
            for unit in manifest.get("units", []):
                self.push_object(entry.root, unit)
            data = library.read_bytes()
            if _root.sha256_bytes(data) != manifest.get("library_sha256"):
                return False  # changed on disk: not ours to spread
            body = {
                "format": FORMAT,
                "kind": "entry",
                "key": key,
                "name": entry.name,
                "library": manifest["library"],
                "library_sha256": self.put_blob(data),
                "size": len(data),
                "headers": manifest.get("headers", {}),
                "cuda_arch_list": components.get("cuda_arch_list"),
                "backends": components.get("backends"),
                "glibc": glibc_needed(data),
                "built_by": {"cxx": components.get("cxx"), "nvcc": components.get("nvcc"), "host": socket.gethostname()},
                "built_at": manifest.get("built_at"),
                "pushed_at": time.time(),
            }
            stored = self.call("uploading to", self.backend.put, name, seal(body, self.signer), True)
            if stored:
                self.count(pushes=1, bytes_up=len(data))
            return bool(stored)
        except Fault:
            return False

    def refuse(self, planned: PlannedEntry, why: str) -> None:
        self.refused.update(lookup_key(components) for components in candidates(planned))
        self.warn_once(f"the library of {planned.entry.name} from the remote cache does not open here ({why}); building it here")

    # Objects (only between trees at the same paths: an object's key holds its command line)
    def push_object(self, root: Path, unit: dict) -> None:
        from . import _object_store

        found = _object_store.stored(root, unit.get("object_key", ""), unit.get("object_variant", ""))
        if found is None:
            return
        record, data = found
        name = f"objects/{unit['portable_key']}/{unit['object_variant']}"
        if self.call("looking up in", self.backend.get, name) is not None:
            return
        body = {
            "format": FORMAT,
            "kind": "object",
            "key": unit["portable_key"],
            "source": unit.get("source"),
            "headers": record["headers"],
            "object_sha256": self.put_blob(data),
            "size": len(data),
            "pushed_at": time.time(),
        }
        self.call("uploading to", self.backend.put, name, seal(body, self.signer), True)

    def fetch_object(self, root: Path, portable_key: str) -> tuple[dict, bytes] | None:
        """A unit's object whose headers all still hold here, and its headers; or None."""
        from . import _object_store

        try:
            names = [
                f"objects/{portable_key}/{v}" for v in self.call("looking up in", self.backend.list, f"objects/{portable_key}")
            ]
            for name, data in zip(names, self.call("downloading from", self.backend.get_many, names)):
                body = self.opened(data, name, "object", portable_key)
                if (
                    body is None
                    or not isinstance(body.get("headers"), dict)
                    or not _object_store.headers_hold(root, body["headers"])
                ):
                    continue
                data = self.blob(body.get("object_sha256", ""), name)
                if data is not None:
                    self.count(object_hits=1, bytes_down=len(data))
                    return body["headers"], data
        except Fault:
            pass
        return None

    # One build per key across machines
    def build_once(self, planned: PlannedEntry, build) -> tuple[Path, str]:
        """(library, "built") from build() under the key's lease, pushed before it goes; or (library,
        "remote") where another machine pushed it meanwhile (waiting at most JITOPS_BUILD_TIMEOUT)."""
        from ._lock import build_timeout

        if self.read_only or self.disabled:
            return build(), "built"
        lease, owner = f"leases/{lookup_key(planned.components)}", f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        deadline = time.monotonic() + build_timeout()
        try:
            while not self.call("taking a lease on", self.backend.lease, lease, owner, LEASE_S):
                time.sleep(POLL_S)
                if (library := self.fetch(planned, count=False)) is not None:
                    return library, "remote"
                if time.monotonic() > deadline:
                    self.warn_once(
                        f"waited {build_timeout():g} s for another machine's build of {planned.entry.name}; building it here"
                    )
                    return self._build_and_push(planned, build), "built"
        except Fault:
            return build(), "built"
        # Its holder may have pushed and let go between this machine's miss and its lease.
        if (library := self.fetch(planned, count=False)) is not None:
            with contextlib.suppress(Fault):
                self.call("releasing a lease on", self.backend.release, lease, owner)
            return library, "remote"
        stop = threading.Event()
        keeper = threading.Thread(target=self._keep, args=(lease, owner, stop), daemon=True)
        keeper.start()
        try:
            return self._build_and_push(planned, build), "built"  # pushed before the lease goes
        finally:
            stop.set()
            keeper.join()
            with contextlib.suppress(Fault):
                self.call("releasing a lease on", self.backend.release, lease, owner)

    def _build_and_push(self, planned: PlannedEntry, build) -> Path:
        library = build()
        self.push(planned.entry)
        return library

    def _keep(self, lease: str, owner: str, stop: threading.Event) -> None:
        while not stop.wait(LEASE_S / 3):
            with contextlib.suppress(Fault):
                self.call("renewing a lease on", self.backend.lease, lease, owner, LEASE_S)


_active: tuple[tuple, Remote | None] | None = None
SETTINGS = tuple(f"JITOPS_REMOTE_{name}" for name in ("CACHE", "MODE", "TIMEOUT", "TRUST", "TRUSTED_KEYS", "SIGNING_KEY"))


def active() -> Remote | None:
    """The remote this process's settings name (one per settings, kept with its failures), or None.
    A bad setting raises CacheError naming it."""
    global _active
    values = tuple(os.environ.get(name, "") for name in SETTINGS)
    if _active is None or _active[0] != values:
        _active = (values, Remote(dict(zip(SETTINGS, values))) if values[0] else None)
    return _active[1]
