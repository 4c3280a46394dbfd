# SPDX-License-Identifier: MIT
"""Where the remote cache keeps bytes by name: Redis or Valkey, a shared folder, or a third party's
Backend (`module:Class`). A backend checks nothing: _remote verifies every byte, and turns the
remote off for the process on any exception."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import tempfile
import time
import urllib.parse
from pathlib import Path

from .._errors import CacheError


class Backend:
    """The interface. url: JITOPS_REMOTE_CACHE as given; timeout: seconds any one call may wait."""

    def __init__(self, url: str, timeout: float):
        self.url, self.timeout = url, timeout

    def get(self, name: str) -> bytes | None:  # implement
        """The bytes stored under name, or None."""
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

    # Batches, over the methods above; a backend with round trips to save overrides them.
    def get_many(self, names: list[str]) -> list[bytes | None]:
        return [self.get(name) for name in names]

    def add_many(self, amounts: dict[str, int]) -> None:
        for name, amount in amounts.items():
            self.add(name, amount)

    def describe(self) -> str:
        """The server or folder, for messages (no password)."""
        parsed = urllib.parse.urlsplit(self.url)
        return parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl() if parsed.scheme else self.url

    # Leases and counters, over the five methods above; a backend with atomic ones overrides them.
    def lease(self, name: str, owner: str, seconds: float) -> bool:
        """Take (or extend, for its owner) the lease `name` for `seconds`; False where another
        owner holds it. Two owners may both win an expired lease: harmless, both build."""
        record = json.dumps({"owner": owner, "until": time.time() + seconds}).encode()
        if self.put(name, record, exclusive=True):
            return True
        try:
            held = json.loads(self.get(name) or b"{}")
        except ValueError:
            held = {}
        if held.get("owner") == owner or held.get("until", 0) < time.time():
            self.put(name, record)
            return True
        return False

    def release(self, name: str, owner: str) -> None:
        with contextlib.suppress(ValueError):
            if json.loads(self.get(name) or b"{}").get("owner") == owner:
                self.delete(name)

    def add(self, name: str, amount: int) -> None:
        """Add to the counter `name` (approximate where several writers race: counters only inform)."""
        try:
            value = int(self.get(name) or b"0")
        except ValueError:
            value = 0
        self.put(name, str(value + amount).encode())

    def counter(self, name: str) -> int:
        try:
            return int(self.get(name) or b"0")
        except ValueError:
            return 0


class FolderBackend(Backend):
    """file:///path: one file per name under a folder every machine mounts. Writes go to a temporary
    file beside the target, then a hard link (exclusive) or rename: atomic on NFS and Lustre."""

    def __init__(self, url: str, timeout: float):
        super().__init__(url, timeout)
        parsed = urllib.parse.urlsplit(url)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r}: a folder is written file:///absolute/path")
        self.root = Path(urllib.parse.unquote(parsed.path))
        if not self.root.is_dir():
            raise CacheError(f"jitops: JITOPS_REMOTE_CACHE={url!r}: {self.root} is not a folder")

    def _path(self, name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"not a remote name: {name!r}")
        return self.root / name

    def get(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None

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
        try:
            return sorted(n for n in os.listdir(self._path(folder)) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

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
    """redis:// or rediss:// (TLS): Redis or Valkey, through redis-py; names are keys under `jitops:`,
    each folder's names kept in a set beside them (a lookup never scans the server)."""

    PREFIX = "jitops:"

    def __init__(self, url: str, timeout: float):
        super().__init__(url, timeout)
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise CacheError(
                f"jitops: JITOPS_REMOTE_CACHE={self.describe()} needs the redis client: pip install 'jitops[remote]'"
            ) from None
        # One retry, on a new connection (a server restarted since the last call); no more: a failed
        # call disables the remote for the process, and each retry could cost a timeout.
        # No CLIENT SETINFO round trips on each new connection (driver_info since redis-py 7).
        try:
            import redis.driver_info  # noqa: F401

            no_setinfo = {"driver_info": None}
        except ImportError:
            no_setinfo = {"lib_name": None, "lib_version": None}
        self.client = redis.Redis.from_url(
            url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 1), **no_setinfo
        )

    def _folder(self, name: str) -> tuple[str, str]:
        folder, _, child = name.rpartition("/")
        return self.PREFIX + "ls:" + folder, child

    def get(self, name: str) -> bytes | None:
        return self.client.get(self.PREFIX + name)

    def put(self, name: str, data: bytes, exclusive: bool = False) -> bool:
        stored = bool(self.client.set(self.PREFIX + name, data, nx=exclusive))
        if stored:  # each folder above it lists it
            pipe = self.client.pipeline(transaction=False)
            while "/" in name:
                pipe.sadd(*self._folder(name))
                name = name.rpartition("/")[0]
            pipe.execute()
        return stored

    def list(self, folder: str) -> list[str]:
        return sorted(n.decode() for n in self.client.smembers(self.PREFIX + "ls:" + folder))

    def delete(self, name: str) -> None:
        self.client.delete(self.PREFIX + name)
        self.client.srem(*self._folder(name))

    def size(self) -> int | None:
        return int(self.client.info("memory").get("used_memory", 0)) or None

    def lease(self, name: str, owner: str, seconds: float) -> bool:
        key = self.PREFIX + name
        if self.client.set(key, owner, nx=True, px=int(seconds * 1000)):
            return True
        if self.client.get(key) == owner.encode():
            return bool(self.client.set(key, owner, xx=True, px=int(seconds * 1000)))
        return False

    def release(self, name: str, owner: str) -> None:
        if self.client.get(self.PREFIX + name) == owner.encode():
            self.client.delete(self.PREFIX + name)

    def add(self, name: str, amount: int) -> None:
        self.client.incrby(self.PREFIX + name, amount)

    def get_many(self, names: list[str]) -> list[bytes | None]:
        return self.client.mget([self.PREFIX + name for name in names]) if names else []

    def add_many(self, amounts: dict[str, int]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for name, amount in amounts.items():
            pipe.incrby(self.PREFIX + name, amount)
        pipe.execute()


def open_backend(url: str, timeout: float) -> Backend:
    """The backend JITOPS_REMOTE_CACHE names: a URL, or `module:Class` (a Backend subclass, given
    the URL and timeout)."""
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
