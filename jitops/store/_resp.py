# SPDX-License-Identifier: MIT
"""A bounded Redis/Valkey client (RESP2) for the remote cache. Ours rather than redis-py: redis-py's
timeout bounds each socket read, not a call, and its parser allocates whatever length a server
announces; here every call has one deadline and every reply a byte cap, checked before a byte is
kept, and a bulk string can stream into a file."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.parse
from typing import BinaryIO

CHUNK = 1 << 16
STREAM_CHUNK = 1 << 20  # a bulk string streamed into a file


class ReplyError(Exception):
    """The server answered an error (`-ERR ...`, `-NOPERM ...`)."""


class ReplyTooLarge(Exception):
    """A reply longer than the caller's cap: the connection is dropped, not read to its end."""


class Address:
    """Where JITOPS_REMOTE_CACHE's redis://, rediss:// or unix:// URL points. ValueError saying what
    is wrong otherwise."""

    def __init__(self, url: str):
        parsed = urllib.parse.urlsplit(url)
        self.tls, self.unix = parsed.scheme == "rediss", parsed.scheme == "unix"
        query = urllib.parse.parse_qs(parsed.query)
        self.username = urllib.parse.unquote(parsed.username) if parsed.username else None
        self.password = urllib.parse.unquote(parsed.password) if parsed.password else None
        try:
            port = parsed.port or 6379  # urllib raises ValueError for a port that is not 0-65535
        except ValueError:
            raise ValueError(f"its port {parsed.netloc.rpartition(':')[2]!r} is not a number from 1 to 65535") from None
        if self.unix:
            self.target: tuple[str, int] | str = parsed.path
            db = query.get("db", ["0"])[0]
        else:
            if not parsed.hostname:
                raise ValueError("it names no host (redis://host:6379/0)")
            self.target, db = (parsed.hostname, port), parsed.path.strip("/") or "0"
        if not db.isdigit():
            raise ValueError(f"its database {db!r} is not a number")
        self.db = int(db)


class Client:
    """One connection per thread, opened on first use. `call` sends commands and reads their
    replies before `deadline` (time.monotonic()), each reply at most `max_bytes` long."""

    def __init__(self, url: str):
        self.address = Address(url)
        self._local = threading.local()

    def call(self, commands: list[tuple], deadline: float, max_bytes: int, sink: BinaryIO | None = None) -> list:
        """The replies to `commands`, pipelined. A bulk string reply goes into `sink` where given
        (its length is returned instead). A connection reused from an earlier call that turns out
        closed (a server restarted meanwhile) is replaced once."""
        connection = getattr(self._local, "connection", None)
        reused = connection is not None
        while True:
            try:
                if connection is None:
                    connection = self._local.connection = _Connection(self.address, deadline)
                connection.send(commands, deadline)
                return [connection.reply(deadline, max_bytes, sink) for _ in commands]
            except BaseException as err:  # the connection's state is unknown: never used again
                self.close()
                if not (reused and isinstance(err, ConnectionError) and connection is not None and not connection.received):
                    raise
                connection, reused = None, False

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.sock.close()


class _Connection:
    def __init__(self, address: Address, deadline: float):
        self.received = 0  # bytes read from the server since the last send: 0 means none arrived
        self.buffer = bytearray()
        target = address.target
        if isinstance(target, str):  # a unix socket's path
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(_remaining(deadline))
            self.sock.connect(target)
        else:
            self.sock = socket.create_connection(target, timeout=_remaining(deadline))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if address.tls:
                self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=target[0])
        hello: list[tuple] = []
        if address.password is not None:
            hello.append(("AUTH", address.username, address.password) if address.username else ("AUTH", address.password))
        if address.db:
            hello.append(("SELECT", address.db))
        if hello:
            self.send(hello, deadline)
            for _ in hello:
                self.reply(deadline, 1 << 10)

    def send(self, commands: list[tuple], deadline: float) -> None:
        out = bytearray()
        for command in commands:
            words = [w if isinstance(w, bytes) else str(w).encode() for w in command]
            out += b"*%d\r\n" % len(words)
            for word in words:
                out += b"$%d\r\n%s\r\n" % (len(word), word)
        self.received = 0
        self.sock.settimeout(_remaining(deadline))
        self.sock.sendall(out)

    def _fill(self, deadline: float) -> None:
        self.sock.settimeout(_remaining(deadline))
        chunk = self.sock.recv(CHUNK)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.received += len(chunk)
        self.buffer += chunk

    def _line(self, deadline: float, budget: list[int]) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            if len(self.buffer) > budget[0]:
                raise ReplyTooLarge(f"a reply longer than {budget[0]} bytes")
            self._fill(deadline)
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        _spend(budget, end + 2)
        return line

    def reply(self, deadline: float, max_bytes: int, sink: BinaryIO | None = None, budget: list[int] | None = None):
        """One reply; `budget` (a one-item list) is what is left of max_bytes across an array."""
        budget = budget if budget is not None else [max_bytes]
        line = self._line(deadline, budget)
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise ReplyError(rest.decode(errors="replace")[:200])
        if kind == b":":
            return int(rest)
        if kind == b"$":
            length = int(rest)
            if length < 0:
                return None
            _spend(budget, length + 2)  # before any of it is read
            return self._bulk(length, deadline, sink)
        if kind == b"*":
            count = int(rest)
            if count < 0:
                return None
            _spend(budget, 4 * count)  # each element takes 4 bytes at least ("$0\r\n\r\n" is 6)
            budget[0] += 4 * count
            return [self.reply(deadline, max_bytes, None, budget) for _ in range(count)]
        raise ConnectionError(f"not a Redis reply: {line[:40]!r}")

    def _bulk(self, length: int, deadline: float, sink: BinaryIO | None):
        if sink is None:
            while len(self.buffer) < length + 2:
                self._fill(deadline)
            data = bytes(self.buffer[:length])
            del self.buffer[: length + 2]
            return data
        piece = self.buffer[:length]
        sink.write(piece)
        del self.buffer[: len(piece)]
        left = length - len(piece)
        if left:  # the rest straight from the socket into one reused buffer: no copies, few reads
            view = memoryview(bytearray(min(left, STREAM_CHUNK)))
            while left:
                self.sock.settimeout(_remaining(deadline))
                got = self.sock.recv_into(view, min(left, len(view)))
                if not got:
                    raise ConnectionError("the server closed the connection")
                self.received += got
                sink.write(view[:got])
                left -= got
        while len(self.buffer) < 2:
            self._fill(deadline)
        del self.buffer[:2]
        return length


def _spend(budget: list[int], amount: int) -> None:
    if amount > budget[0]:
        raise ReplyTooLarge(f"a reply longer than the {budget[0]} bytes left of its cap")
    budget[0] -= amount


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline (JITOPS_REMOTE_TIMEOUT) passed")
    return left
