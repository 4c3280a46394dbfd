# SPDX-License-Identifier: MIT
"""Where the remote cache keeps bytes by name: Redis or Valkey, a shared folder, or a third party's
Backend (`module:Class`). A backend checks nothing: _remote bounds every call by a deadline and
every value by a cap, verifies every byte, and turns the remote off for the process on any fault."""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import json
import os
import stat
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import BinaryIO

from .._errors import CacheError

# The caps on what one read may return (docs/cache.md, "Remote cache"); a blob's is its record's
# size, at most JITOPS_REMOTE_MAX_BLOB.
RECORD_MAX = 64 << 10  # a record, a lease or a counter
LIST_MAX = 16 << 20  # the names under one folder


class Unreadable(OSError):
    """This one name holds something that is not a value (a FIFO, a device, a link out of the
    folder): the record is skipped, the remote stays on."""


CALL = threading.local()  # the deadline (time.monotonic()) of the call this thread runs


def call_deadline(timeout: float) -> float:
    """The deadline of the remote call running in this thread (set by _remote.Remote.call; a
    backend used directly gets `timeout` from now)."""
    return getattr(CALL, "deadline", None) or time.monotonic() + timeout


class Backend:
    """The interface. url: JITOPS_REMOTE_CACHE as given; timeout: seconds any one call may take."""

    # Whether the backend's calls keep to their deadline themselves. Others run in a worker thread
    # that jitops stops waiting for at the deadline (a third party's client, a hung network mount).
    bounded = False

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout

    def get(self, name: str, max_bytes: int | None = None) -> bytes | None:  # implement
        """The bytes stored under name, or None. max_bytes (optional to implement): jitops reads no
        more than that, so a backend may stop after max_bytes + 1 bytes and return those."""
        raise NotImplementedError

    def put(self, name: str, data: bytes, exclusive: bool = False) -> bool:  # implement
        """Store data under name, atomically (a reader sees all of it or nothing); exclusive: only
        where nothing is stored under name yet. Returns whether it was stored."""
        raise NotImplementedError

    def list(self, folder: str) -> list[str]:  # implement
        """The names stored directly under `folder/` (the part after it)."""
        raise NotImplementedError

    def delete(self, name: str) -> None:  # implement
        raise NotImplementedError

    def size(self) -> int | None:  # implement
        """Bytes the backend holds (None: unknown)."""
        raise NotImplementedError

    # Over the methods above; a backend with round trips to save, or a way to stream, overrides them.
    def read(self, name: str, max_bytes: int) -> bytes | None:
        """get(name), passing max_bytes where the backend's get takes it."""
        return self.get(name, max_bytes=max_bytes) if takes_max_bytes(self.get) else self.get(name)

    def get_many(
        self, names: builtins.list[str], max_bytes: int
    ) -> builtins.list[bytes | None | Unreadable]:  # list: the method above
        """One value per name; an Unreadable in place of one that could not be read."""
        found: list[bytes | None | Unreadable] = []
        for name in names:
            try:
                found.append(self.read(name, max_bytes))
            except Unreadable as err:
                found.append(err)
        return found

    def get_into(self, name: str, file: BinaryIO, max_bytes: int) -> int | None:
        """Write name's bytes into file (at most max_bytes + 1 of them); their length, or None."""
        data = self.read(name, max_bytes)
        if data is None:
            return None
        file.write(bytes(data[: max_bytes + 1]))
        return len(data)

    def exists(self, name: str) -> bool:
        return self.read(name, 0) is not None

    def add_many(self, amounts: dict[str, int]) -> None:
        for name, amount in amounts.items():
            self.add(name, amount)

    def describe(self) -> str:
        return describe(self.url)

    # Leases and counters, over the five methods above; a backend with atomic ones overrides them.
    def lease(self, name: str, owner: str, seconds: float) -> bool:
        """Take (or extend, for its owner) the lease `name` for `seconds`; False where another
        owner holds it. Two owners may both win an expired lease: harmless, both build."""
        record = json.dumps({"owner": owner, "until": time.time() + seconds}).encode()
        if self.put(name, record, exclusive=True):
            return True
        held = _small_json(self.read(name, RECORD_MAX))
        if held.get("owner") == owner or not isinstance(held.get("until"), (int, float)) or held["until"] < time.time():
            self.put(name, record)
            return True
        return False

    def release(self, name: str, owner: str) -> None:
        if _small_json(self.read(name, RECORD_MAX)).get("owner") == owner:
            self.delete(name)

    def add(self, name: str, amount: int) -> None:
        """Add to the counter `name` (approximate where several writers race: counters only inform)."""
        self.put(name, str(self.counter(name) + amount).encode())

    def counter(self, name: str) -> int:
        data = self.read(name, RECORD_MAX)
        try:
            return int(data or b"0") if isinstance(data, bytes) and len(data) <= 32 else 0
        except ValueError:
            return 0


def describe(url: str) -> str:
    """The server or folder a setting names, for messages (no password)."""
    parsed = urllib.parse.urlsplit(url)
    return parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl() if parsed.scheme else url


def takes_max_bytes(method) -> bool:
    """Whether a backend's method has the optional max_bytes (older third-party backends do not)."""
    try:
        return "max_bytes" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


def _small_json(data) -> dict:
    """A lease's record as an object ({} where it is anything else)."""
    try:
        value = json.loads(data) if isinstance(data, bytes) and len(data) <= RECORD_MAX else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


class FolderBackend(Backend):
    """file:///path: one file per name under a folder every machine mounts. Writes go to a temporary
    file beside the target, then a hard link (exclusive) or rename: atomic on NFS and Lustre. Reads
    take regular files only, never through a link, opened without blocking (a FIFO)."""

    def __init__(self, url: str, timeout: float):
        super().__init__(url, timeout)
        parsed = urllib.parse.urlsplit(url)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r}: a folder is written file:///absolute/path")
        self.root = Path(urllib.parse.unquote(parsed.path))
        if not self.root.is_dir():
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r}: {self.root} is not a folder")
        self.real_root = os.path.realpath(self.root)

    def _path(self, name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"not a remote name: {name!r}")
        return self.root / name

    def _open(self, name: str) -> int | None:
        """A read-only descriptor of name's regular file, or None where there is none."""
        path = self._path(name)
        if os.path.realpath(path) != os.path.join(self.real_root, name):
            raise Unreadable(f"{name} is reached through a link")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:  # ELOOP: the name itself is a link
            raise Unreadable(f"{name} cannot be opened ({err.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Unreadable(f"{name} is not a regular file")
        return fd

    def get(self, name: str, max_bytes: int | None = None) -> bytes | None:
        fd = self._open(name)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as file:
            return file.read() if max_bytes is None else file.read(max_bytes + 1)

    def get_into(self, name: str, file: BinaryIO, max_bytes: int) -> int | None:
        fd = self._open(name)
        if fd is None:
            return None
        copied = 0
        with os.fdopen(fd, "rb") as source:
            while copied <= max_bytes and (chunk := source.read(min(1 << 20, max_bytes + 1 - copied))):
                file.write(chunk)
                copied += len(chunk)
        return copied

    def exists(self, name: str) -> bool:
        fd = self._open(name)
        if fd is not None:
            os.close(fd)
        return fd is not None

    def put(self, name: str, data: bytes, exclusive: bool = False) -> bool:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.chmod(temporary, 0o644)  # the fleet's other users read it; the folder's mode decides who writes
            if exclusive:
                try:
                    os.link(temporary, path)
                except FileExistsError:
                    return False
            else:
                os.replace(temporary, path)
                temporary = ""
            return True
        finally:
            if temporary:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary)

    def list(self, folder: str) -> list[str]:
        names, size = [], 0
        try:
            with os.scandir(self._path(folder)) as found:
                for item in found:  # bounded as a Redis reply is: LIST_MAX bytes of names
                    size += len(item.name) + 1
                    if size > LIST_MAX:
                        raise ValueError(f"{folder} holds more than {LIST_MAX} bytes of names")
                    names += [] if item.name.startswith(".") else [item.name]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(names)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()

    def size(self) -> int:
        total = 0
        for folder, _, files in os.walk(self.root):
            for file in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(folder, file)).st_size
        return total


class RedisBackend(Backend):
    """redis://, rediss:// (TLS) or unix://: Redis or Valkey, through jitops' bounded client
    (_resp); names are keys under `jitops:`, each folder's names kept in a set beside them (a lookup
    never scans the server). Values are read with GETRANGE, so the server itself stops at a cap."""

    PREFIX = "jitops:"
    bounded = True

    def __init__(self, url: str, timeout: float):
        super().__init__(url, timeout)
        from ._resp import Client  # only where Redis is used (it imports ssl)

        try:
            self.client = Client(url)
        except ValueError as err:
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={self.describe()!r}: {err}") from None

    def _send(self, *commands: tuple, max_bytes: int = RECORD_MAX, sink: BinaryIO | None = None) -> list:
        return self.client.call(list(commands), call_deadline(self.timeout), max_bytes, sink)

    def _folders(self, name: str) -> list[tuple[str, str]]:
        """(the set listing a folder, the child's name in it) for each folder above name."""
        pairs = []
        while "/" in name:
            folder, _, child = name.rpartition("/")
            pairs.append((self.PREFIX + "ls:" + folder, child))
            name = folder
        return pairs

    def get(self, name: str, max_bytes: int | None = None) -> bytes | None:
        # GETRANGE of a missing key is empty, as no value jitops writes is
        if max_bytes is None:
            (data,) = self._send(("GET", self.PREFIX + name), max_bytes=(1 << 31) + 64)
            return data
        (data,) = self._send(("GETRANGE", self.PREFIX + name, 0, max_bytes), max_bytes=max_bytes + 64)
        return data or None

    def get_many(self, names: list[str], max_bytes: int) -> list[bytes | None | Unreadable]:
        if not names:
            return []
        commands = [("GETRANGE", self.PREFIX + name, 0, max_bytes) for name in names]
        return [data or None for data in self._send(*commands, max_bytes=len(names) * (max_bytes + 64))]

    def get_into(self, name: str, file: BinaryIO, max_bytes: int) -> int | None:
        (length,) = self._send(("GETRANGE", self.PREFIX + name, 0, max_bytes), max_bytes=max_bytes + 64, sink=file)
        return length or None

    def exists(self, name: str) -> bool:
        return self._send(("EXISTS", self.PREFIX + name))[0] == 1

    def put(self, name: str, data: bytes, exclusive: bool = False) -> bool:
        command = ("SET", self.PREFIX + name, data) + (("NX",) if exclusive else ())
        (stored,) = self._send(command)
        if stored is not None:  # each folder above it lists it
            self._send(*[("SADD", folder, child) for folder, child in self._folders(name)])
        return stored is not None

    def list(self, folder: str) -> list[str]:
        (names,) = self._send(("SMEMBERS", self.PREFIX + "ls:" + folder), max_bytes=LIST_MAX)
        return sorted(n.decode(errors="replace") for n in names)

    def delete(self, name: str) -> None:
        folder, child = self._folders(name)[0] if "/" in name else ("", "")
        self._send(("DEL", self.PREFIX + name), *([("SREM", folder, child)] if folder else []))

    def size(self) -> int | None:
        (info,) = self._send(("INFO", "memory"))
        for line in info.splitlines():
            if line.startswith(b"used_memory:"):
                return int(line.split(b":")[1]) or None
        return None

    def lease(self, name: str, owner: str, seconds: float) -> bool:
        key, ms = self.PREFIX + name, int(seconds * 1000)
        taken, held = self._send(("SET", key, owner, "NX", "PX", ms), ("GET", key))
        if taken is not None:
            return True
        return held == owner.encode() and self._send(("SET", key, owner, "XX", "PX", ms))[0] is not None

    def release(self, name: str, owner: str) -> None:
        if self._send(("GET", self.PREFIX + name))[0] == owner.encode():
            self._send(("DEL", self.PREFIX + name))

    def add(self, name: str, amount: int) -> None:
        self._send(("INCRBY", self.PREFIX + name, amount))

    def add_many(self, amounts: dict[str, int]) -> None:
        if amounts:
            self._send(*[("INCRBY", self.PREFIX + name, amount) for name, amount in amounts.items()])

    def counter(self, name: str) -> int:
        data = self.get(name, 32)
        return int(data) if data and data.isdigit() else 0


def open_backend(url: str, timeout: float) -> Backend:
    """The backend JITOPS_REMOTE_CACHE names: a URL, or `module:Class` (a Backend subclass, given
    the URL and timeout). CacheError for a setting that names none."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme in ("redis", "rediss", "unix", "valkey"):
        return RedisBackend(url.replace("valkey://", "redis://", 1), timeout)
    if scheme == "file":
        return FolderBackend(url, timeout)
    module, _, name = url.partition(":")
    if name and module.replace(".", "").replace("_", "").isalnum() and name.isidentifier():
        try:
            backend = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r}: cannot import the backend class: {err}") from None
        if not (isinstance(backend, type) and issubclass(backend, Backend)):
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r} is not a subclass of jitops.remote.Backend")
        return backend(url, timeout)
    raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r} is neither redis://host:port/db, file:///folder nor module:Class")
