# SPDX-License-Identifier: MIT
"""Real servers for the remote cache's tests and benchmark: Debian's redis-server on a free port
under a folder of its own, stopped by its PID; and a TCP proxy in front of it that adds latency,
caps the rate, or cuts every connection at a chosen moment (mid-download, mid-upload)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1:port, its data in folder, without persistence (a restart empties it)."""

    def __init__(self, folder: Path, port: int | None = None, *extra: str):
        self.folder, self.port, self.extra = folder, port or free_port(), extra
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.folder), *self.extra]
        self.process = subprocess.Popen(args, stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(self.folder / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.02)

    def answers(self) -> bool:
        try:
            return self.command("PING") == b"+PONG" or self.command("PING").startswith(b"-NOAUTH")  # a password set
        except OSError:
            return False

    def command(self, *words: str | bytes) -> bytes:
        """One command in Redis' protocol; its reply's first line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
            encoded = [word if isinstance(word, bytes) else word.encode() for word in words]
            conn.sendall(b"*%d\r\n" % len(encoded) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in encoded))
            return conn.recv(1 << 16).split(b"\r\n")[0]

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


class _Loopback:
    """A listener on 127.0.0.1 (a free port) that hands each connection to `_connected` in a thread
    of its own, until closed."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._connected(client)

    def _connected(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class Proxy(_Loopback):
    """127.0.0.1:port forwarding to target_port. delay_s: added once to each reply (a request's
    round trip: the first bytes the server sends after the client sent some); rate: bytes per
    second each way (0: unlimited). watch: bytes whose appearance in the client's traffic sets
    `seen` and holds that connection's traffic until `cut`."""

    def __init__(self, target_port: int, delay_s: float = 0.0, rate: float = 0.0, watch: bytes = b""):
        self.target_port, self.delay_s, self.rate, self.watch = target_port, delay_s, rate, watch
        self.seen, self.cut_event = threading.Event(), threading.Event()
        self.connections: list[socket.socket] = []
        super().__init__()

    def _connected(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        self.connections += [client, upstream]
        asked = threading.Event()  # the client sent a request the server has not begun to answer
        threading.Thread(target=self._pump, args=(client, upstream, asked, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client, asked, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, asked: threading.Event, from_client: bool) -> None:
        started, sent = time.monotonic(), 0  # the rate cap: a token bucket over the connection's life
        try:
            while chunk := source.recv(1 << 16):
                if from_client and self.watch and self.watch in chunk:
                    self.seen.set()
                    self.cut_event.wait()
                if self.cut_event.is_set():
                    break
                if from_client:
                    asked.set()
                elif asked.is_set() and self.delay_s:
                    asked.clear()
                    time.sleep(self.delay_s)
                sent += len(chunk)
                if self.rate and (ahead := sent / self.rate - (time.monotonic() - started)) > 0:
                    time.sleep(ahead)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every connection now, as a server that died would."""
        self.cut_event.set()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.cut()
        super().close()


class HostileServer(_Loopback):
    """127.0.0.1:port answering every Redis request the way a broken or hostile server would. mode:
    "drip": an array of a million elements, then one element a second; "huge": a 1 GB bulk string
    streamed as fast as loopback takes it; "int": an integer for every command; "silent": nothing."""

    def __init__(self, mode: str):
        self.mode = mode
        super().__init__()

    def _connected(self, client: socket.socket) -> None:
        threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            while request := client.recv(1 << 16):
                commands = sum(1 for line in request.split(b"\r\n") if line.startswith(b"*"))
                if self.mode == "int":
                    client.sendall(b":7\r\n" * commands)
                elif self.mode == "drip":
                    client.sendall(b"*1000000\r\n")
                    while True:
                        time.sleep(1)
                        client.sendall(b":1\r\n")
                elif self.mode == "huge":
                    client.sendall(b"$1000000000\r\n")
                    zeros = bytes(1 << 20)
                    for _ in range(1000):
                        client.sendall(zeros)
        except OSError:
            pass
        finally:
            client.close()
