# SPDX-License-Identifier: MIT
"""The remote tier behind the store (JITOPS_REMOTE_CACHE; docs/cache.md, "Remote cache"): a local
miss asks it before building, and a local build is pushed to it. Imported only on a local miss.

Its layout (a backend stores bytes by name, _remote_backends):
  blobs/<sha256>                  a library or a compiled unit's object
  entries/<lookup key>/<variant>  a signed record: a library, what it was built from and for
  objects/<unit key>/<variant>    a signed record: one unit's object and the headers it included
  leases/<lookup key>             held by the one machine building that key
  stats/<counter>                 hits, misses, bytes (read-write machines only)
Blobs go first and the record last, so a half-uploaded entry is never visible. Every call has one
deadline and every value a cap (`call`); a fault of the server turns the remote off for the process
with one warning, a bad record is skipped with one warning, and nothing it returns raises out.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import _files, _layout, _settings
from .._errors import CacheError, warn
from . import _entries, _object_store, _remote_records, _signing
from ._key import PlannedEntry
from ._remote_backends import CALL, RECORD_MAX, Backend, Unreadable, describe, open_backend, takes_max_bytes
from ._remote_records import FORMAT, candidates, judge, lookup_key, seal, unseal

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._records import RemoteRecordBody, UnitRecord

LEASE_S = 30.0  # a builder's lease outlives it by at most this; refreshed every third of it
POLL_S = 0.25  # how often a machine waiting for another's build looks for its entry


class Fault(Exception):
    """The remote failed (it is disabled now): the caller goes on without it."""


class Remote:
    """The remote of this process's settings, its trust, and what it did (for `remote status`)."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        """The remote that environ's settings (else this process's) name; a bad setting raises, naming it."""
        setting = functools.partial(_settings.get, environ=environ)
        self.setting = setting("JITOPS_REMOTE_CACHE")
        self.server = describe(self.setting)
        self.mode = setting("JITOPS_REMOTE_MODE")
        self.read_only = self.mode == "read-only"
        self.timeout = setting("JITOPS_REMOTE_TIMEOUT")
        self.max_blob = setting("JITOPS_REMOTE_MAX_BLOB")
        self.trust_server = setting("JITOPS_REMOTE_TRUST") == "server"
        self.trusted = _signing.trusted_keys(setting("JITOPS_REMOTE_TRUSTED_KEYS"))
        signing_key = setting("JITOPS_REMOTE_SIGNING_KEY")
        self.signer = _signing.Signer(signing_key) if signing_key and self.mode == "read-write" else None
        self.disabled = ""  # why, once a call failed
        self.warned: set[str] = set()
        self.refused: set[str] = set()  # lookup keys whose library did not open here
        self.said: dict[str, str] = {}  # per extension, what the remote said last (a failure's message)
        self.seconds = 0.0  # spent inside calls (the fault soak's measure)
        self.backend: Backend | None = None
        try:
            self.backend = open_backend(self.setting, self.timeout)
        except CacheError:
            raise  # a setting that names no backend: an error of its own
        except Exception as err:  # a third party's constructor (expired credentials, say): only the remote goes
            self.disable(f"opening {self.server} failed ({type(err).__name__}: {err})")
        self._takes_cap = self.backend is not None and takes_max_bytes(self.backend.get_many)

    # The fault policy: one deadline per call, results checked, a fault turns the remote off.
    def call(self, doing: str, method: str, *args, check=None):
        """self.backend.<method>(*args) within JITOPS_REMOTE_TIMEOUT, its result passing check; any other
        outcome disables the remote for the process, with one warning, and raises Fault. Unreadable
        (one name holds no value) is raised as it is: the caller skips that record."""
        if self.disabled:
            raise Fault(self.disabled)
        try:
            result = self._run(getattr(self.backend, method), args)
            if check is not None and not check(result):
                raise TypeError(f"{method}() returned {type(result).__name__} {str(result)[:40]!r}")
            return result
        except Unreadable:
            raise
        except Exception as err:  # a third party's backend may raise anything: never a failed load
            self.disable(f"{doing} {self.server} failed ({type(err).__name__}: {err})")
            raise Fault(self.disabled) from None

    def _run(self, method: Callable[..., Any], args: tuple) -> Any:
        """The call under its deadline: in this thread for a backend that keeps to it itself, else
        in a worker thread left behind at the deadline."""
        started = time.monotonic()
        deadline = started + self.timeout
        box: dict = {}

        def run():
            CALL.deadline = deadline
            try:
                box["result"] = method(*args)
            except BaseException as err:  # handed to the caller's thread
                box["error"] = err
            finally:
                CALL.deadline = None

        try:
            if self.backend is not None and self.backend.bounded:
                run()
            else:
                worker = threading.Thread(target=run, name="jitops-remote-call", daemon=True)
                worker.start()
                worker.join(self.timeout)
                if worker.is_alive():
                    raise TimeoutError(f"no answer within JITOPS_REMOTE_TIMEOUT ({self.timeout:g} s)")
        finally:
            self.seconds += time.monotonic() - started
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def disable(self, why: str) -> None:
        self.disabled = why
        then = "building locally" if _build_allowed() else "JITOPS_DISABLE_BUILD is set, so a miss is not built here either"
        warn(f"the remote cache is off for this process: {why}; {then}")

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            warn(message)

    def count(self, **amounts: int) -> None:
        """Add to the server's counters (`remote status`). They only inform: a reader the server
        does not let write loses its counts, not its remote; a read-only one writes none."""
        if self.disabled or self.read_only or self.backend is None:
            return
        with contextlib.suppress(Exception):
            self._run(self.backend.add_many, ({_layout.remote_counter(name): amount for name, amount in amounts.items()},))

    # Reading records and blobs, each bounded and checked.
    def records(self, folder: str, op: str) -> list[tuple[str, object]]:
        """(name, raw value) of each record under folder (`entries/<key>`): a value may be None
        (gone meanwhile), an Unreadable, or anything a backend returned."""
        names = self.call(
            f"looking up {op} in", "list", folder, check=lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v)
        )
        names = [f"{folder}/{variant}" for variant in names if variant and "/" not in variant and variant not in (".", "..")]
        if not names:
            return []
        args = (names, RECORD_MAX) if self._takes_cap else (names,)
        values = self.call(f"looking up {op} in", "get_many", *args, check=lambda v: isinstance(v, list) and len(v) == len(names))
        return list(zip(names, values))

    def opened(self, data, name: str, kind: str, key: str, op: str) -> RemoteRecordBody | None:
        """The body of the record `name` where `judge` takes it; else None, with one warning naming
        the op, the server and the signer."""
        body, signer, why = self.judge(data, kind, key)
        if why:
            self.skip(op, name, signer, why)
        return body

    def judge(self, data, kind: str, key: str) -> tuple[RemoteRecordBody | None, str | None, str]:
        return judge(data, kind, key, self.trusted, self.trust_server, self.max_blob)

    def skip(self, op: str, name: str, signer: str | None, why: str) -> None:
        self.said[op] = f"has a record of {op} that was not loaded: {why}"
        self.warn_once(
            f"ignoring the remote cache's record of {op} on {self.server} ({name}, signed by {signer or 'no key'}): {why}"
        )
        return None

    def download(self, body: RemoteRecordBody, digest: str, destination: Path, op: str, record: str) -> bool:
        """The blob of sha256 `digest` and the record's size, streamed into destination with a
        running sha256; False (one warning) where it is missing, unreadable, longer or different."""
        size, hasher = body["size"], hashlib.sha256()
        with open(destination, "wb") as file:

            class Hashing:  # what the backend writes into, hashed on the way
                def write(self, chunk) -> int:
                    hasher.update(chunk)
                    return file.write(chunk)

            try:
                read = (_layout.remote_blob(digest), Hashing(), size)
                self.call(f"downloading {op} from", "get_into", *read, check=lambda n: n is None or type(n) is int)
                written, why = file.tell(), f"its blob {digest[:16]} does not match its size and sha256"
                why = (
                    f"its blob {digest[:16]} is missing"
                    if written == 0
                    else ""
                    if (written, hasher.hexdigest()) == (size, digest)
                    else why
                )
            except Unreadable as err:
                why = f"its blob cannot be read ({err})"
        if why:
            destination.unlink()
            self.skip(op, record, body["signed_by"], why)
        return not why

    def put_blob(self, data: bytes, op: str) -> str:
        digest = _files.sha256_bytes(data)
        self.call(f"uploading {op} to", "put", _layout.remote_blob(digest), data, True)
        return digest

    # Libraries
    def fetch(self, planned: PlannedEntry, count: bool = True) -> Path | None:
        """The entry of this build from the remote, verified and published in the local store (under
        the key's lock), or None. count=False: a miss is not counted (a machine waiting for a build)."""
        entry, refused = planned.entry, []
        op = entry.name
        try:
            for components in candidates(planned):
                key = lookup_key(components)
                if key in self.refused:
                    continue
                for name, data in self.records(_layout.remote_records(_layout.REMOTE_ENTRIES, key), op):
                    body = self.opened(data, name, "entry", key, op)
                    if body is None:
                        continue
                    if why := _remote_records.unfit(body, planned):
                        refused.append(why)
                        continue
                    manifest = _remote_records.local_manifest(self.server, planned, body, name.rpartition("/")[2])
                    fill = lambda path: self.download(body, body["library_sha256"], path, op, name)  # noqa: E731
                    library = _entries.publish_library(entry, manifest, fill)
                    if library is None:
                        continue
                    self.count(hits=1, bytes_down=body["size"])
                    self.said.pop(op, None)
                    return library
        except Fault:
            self.said[op] = f"is off for this process: {self.disabled}"
            return None
        if refused:
            self.said[op] = "has it only for another machine: " + "; ".join(refused)
            self.warn_once(f"the remote cache {self.server} has {op} only for another machine: " + "; ".join(refused))
        self.said.setdefault(op, "has no entry for it")
        if count:
            self.count(misses=1)
        return None

    def push(self, entry: _entries.Entry) -> str:
        """Upload a local entry (built here, not fetched): its objects, its library, then its record.
        Returns "pushed"; "re-signed" where the remote's record of it was not trusted and is replaced
        (after a key rotation); "" where nothing was pushed (read-only, off, the remote has a
        trusted one, or the library no longer matches its sha256)."""
        manifest = entry.read_manifest()
        if self.read_only or self.disabled or manifest is None or "remote" in manifest:
            return ""
        self.warn_unsigned()
        components = manifest.get("components", {})
        key, op = lookup_key(components), entry.name
        variant = _remote_records.record_variant(components.get("cuda_arch_list"), manifest.get("headers", {}))
        name = _layout.remote_record(_layout.REMOTE_ENTRIES, key, variant)
        try:
            there = self.replaceable(name, op)
            if there is None:
                return ""
            for unit in manifest.get("units", []):
                self.push_object(entry.root, unit, op)
            data = (entry.path / manifest["library"]).read_bytes()
            if _files.sha256_bytes(data) != manifest.get("library_sha256"):
                return ""  # changed on disk: not ours to spread
            body = {
                "format": FORMAT,
                "kind": "entry",
                "key": key,
                "name": entry.name,
                "library": manifest["library"],
                "library_sha256": self.put_blob(data, op),
                "size": len(data),
                "headers": manifest.get("headers", {}),
                "cuda_arch_list": components.get("cuda_arch_list"),
                "backends": components.get("backends"),
                "glibc": _remote_records.glibc_needed(data),
                "built_by": {"cxx": components.get("cxx"), "nvcc": components.get("nvcc"), "host": socket.gethostname()},
                # A stable library's: the torch that built it, its floor, CUDA toolkit and C++ runtime.
                "built_under": manifest.get("built_under"),
                "built_at": manifest.get("built_at"),
                "pushed_at": time.time(),
            }
            if not self.call(f"uploading {op} to", "put", name, seal(body, self.signer), not there):
                return ""
            self.count(pushes=1, bytes_up=len(data))
            return "re-signed" if there else "pushed"
        except (Fault, OSError):
            return ""

    def replaceable(self, name: str, op: str) -> bool | None:
        """Whether the record `name` is to be written: False where there is none (write it), True
        where there is one this machine's keys do not trust and a signer is here to replace it;
        None where it stays."""
        data = self.call(f"looking up {op} in", "read", name, RECORD_MAX)
        if data is None:
            return False
        sealed = unseal(data, self.trusted)
        return None if sealed.trusted or self.signer is None else True

    def warn_unsigned(self) -> None:
        if self.signer is None and not self.trust_server:
            self.warn_once(
                f"pushing unsigned records to {self.server}: readers refuse them unless they set JITOPS_REMOTE_TRUST=server. "
                "To sign them: `jitops-cache remote keygen KEYFILE`, JITOPS_REMOTE_SIGNING_KEY=KEYFILE here, and its "
                "public key in the readers' JITOPS_REMOTE_TRUSTED_KEYS"
            )

    def refuse(self, planned: PlannedEntry, why: str) -> None:
        self.refused.update(lookup_key(components) for components in candidates(planned))
        self.said[planned.entry.name] = f"had a library that does not open here ({why})"
        self.warn_once(f"the library of {planned.entry.name} from the remote cache does not open here ({why}); building it here")

    # Objects (only between trees at the same paths: an object's key holds its command line)
    def push_object(self, root: Path, unit: UnitRecord, op: str) -> None:

        found = _object_store.stored(root, unit.get("object_key", ""), unit.get("object_variant", ""))
        if found is None:
            return
        record, data = found
        name = _layout.remote_record(_layout.REMOTE_OBJECTS, unit["portable_key"], unit["object_variant"])
        there = self.replaceable(name, op)
        if there is None:
            return
        body = {
            "format": FORMAT,
            "kind": "object",
            "key": unit["portable_key"],
            "source": unit.get("source"),
            "headers": record["headers"],
            "object_sha256": self.put_blob(data, op),
            "size": len(data),
            "pushed_at": time.time(),
        }
        self.call(f"uploading {op} to", "put", name, seal(body, self.signer), not there)

    def fetch_object(self, root: Path, portable_key: str, destination: Path, op: str) -> dict | None:
        """A unit's object whose headers all still hold here, written to destination; its headers,
        or None."""

        try:
            for name, data in self.records(_layout.remote_records(_layout.REMOTE_OBJECTS, portable_key), op):
                body = self.opened(data, name, "object", portable_key, op)
                if body is None or not _object_store.headers_hold(root, body["headers"]):
                    continue
                if self.download(body, body["object_sha256"], destination, op, name):
                    self.count(object_hits=1, bytes_down=body["size"])
                    return body["headers"]
        except Fault:
            destination.unlink(missing_ok=True)  # a half download: compiled instead
        return None

    # One build per key across machines
    def build_once(self, planned: PlannedEntry, build: Callable[[], Path]) -> tuple[Path, Literal["built", "remote"]]:
        """(library, "built") from build() under the key's lease, pushed before it goes; or (library,
        "remote") where another machine pushed it meanwhile (waiting at most JITOPS_BUILD_TIMEOUT)."""
        if self.read_only or self.disabled:
            return build(), "built"
        op = planned.entry.name
        lease, owner = (
            _layout.remote_lease(lookup_key(planned.components)),
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}",
        )
        timeout = _settings.get("JITOPS_BUILD_TIMEOUT")
        deadline = time.monotonic() + timeout
        try:
            while not self.call(f"taking a lease on {op} on", "lease", lease, owner, LEASE_S):
                time.sleep(POLL_S)
                if (library := self.fetch(planned, count=False)) is not None:
                    return library, "remote"
                if time.monotonic() > deadline:
                    self.warn_once(f"waited {timeout:g} s for another machine's build of {op}; building it here")
                    return self._build_and_push(planned, build), "built"
        except Fault:
            return build(), "built"
        # Its holder may have pushed and let go between this machine's miss and its lease.
        if (library := self.fetch(planned, count=False)) is not None:
            with contextlib.suppress(Fault):
                self.call(f"releasing a lease on {op} on", "release", lease, owner)
            return library, "remote"
        stop = threading.Event()
        keeper = threading.Thread(target=self._keep, args=(lease, owner, op, stop), daemon=True)
        keeper.start()
        try:
            return self._build_and_push(planned, build), "built"  # pushed before the lease goes
        finally:
            stop.set()
            keeper.join()
            with contextlib.suppress(Fault):
                self.call(f"releasing a lease on {op} on", "release", lease, owner)

    def _build_and_push(self, planned: PlannedEntry, build) -> Path:
        library = build()
        self.push(planned.entry)
        return library

    def _keep(self, lease: str, owner: str, op: str, stop: threading.Event) -> None:
        while not stop.wait(LEASE_S / 3):
            with contextlib.suppress(Fault):
                self.call(f"renewing a lease on {op} on", "lease", lease, owner, LEASE_S)


def _build_allowed() -> bool:
    return not _settings.get("JITOPS_DISABLE_BUILD")


_active: tuple[tuple, Remote | None] | None = None
REMOTE_SETTINGS = tuple(name for name in _settings.SETTINGS if name.startswith("JITOPS_REMOTE_"))


def active() -> Remote | None:
    """The remote this process's settings name (one per settings, kept with its failures), or None.
    A bad setting raises CacheError (or BuildError: a timeout's) naming it."""
    global _active
    values = tuple(_settings.text(name) for name in REMOTE_SETTINGS)
    if _active is None or _active[0] != values:
        _active = (values, Remote() if _settings.text("JITOPS_REMOTE_CACHE") else None)
    return _active[1]
