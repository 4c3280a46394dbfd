# SPDX-License-Identifier: MIT
"""Precompiled headers through the remote cache. A PCH of torch's headers is 0.4-0.8 GB, and Redis
refuses a value over 512 MB: it travels as zlib-compressed chunks of at most CHUNK_MAX bytes, each a
blob checked by its size and sha256 as it streams to disk, under one signed record (kind "pch") named
by the local PCH key (torch's exact identity, the compiler's path and version, flags and include
paths: one image and checkout path). gcc does not check a PCH against the compiler that made it,
so a reader takes one only where its compiler's bytes (driver and cc1plus) are the writer's."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
import types
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _layout
from ._remote import Fault, Remote
from ._remote_records import FORMAT, seal

if TYPE_CHECKING:
    from .._records import RemoteRecordBody

inflating: types.ModuleType  # zlib's API
try:  # ISA-L's inflate reads the same zlib streams about twice as fast (the `remote` extra installs it)
    from isal import isal_zlib as inflating
except ImportError:
    inflating = zlib
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, inflating.error)

CHUNK_MAX = 64 << 20  # a chunk blob, compressed
RAW_PER_CHUNK = 60 << 20  # the bytes of .gch in one chunk: zlib adds at most 0.03% to what it cannot shrink
READ_S = 1 << 20


@functools.cache
def compiler_sha256(compiler: str) -> str | None:
    """sha256 of the compiler's driver and, for gcc, its cc1plus (what reads a PCH); None where unknown."""
    try:
        driver = shutil.which(shlex.split(compiler)[-1])
        if driver is None:
            return None
        files = [os.path.realpath(driver)]
        found = subprocess.run([driver, "-print-prog-name=cc1plus"], capture_output=True, text=True, timeout=30).stdout.strip()
        files += [os.path.realpath(found)] if os.path.isabs(found) else []
        digest = hashlib.sha256()
        for path in files:
            with open(path, "rb") as file:
                while chunk := file.read(READ_S):
                    digest.update(chunk)
        return digest.hexdigest()
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def push(remote: Remote, folder: Path, pch_key: str, compiler: str) -> bool:
    """Upload a published PCH folder: its chunks, then its record. False where nothing was pushed
    (read-only, off, a trusted record there already, an unknown compiler)."""
    op = f"the precompiled header {pch_key[:16]}"
    compiler_digest = compiler_sha256(compiler)
    if remote.read_only or remote.disabled or compiler_digest is None:
        return False
    remote.warn_unsigned()
    name = _layout.remote_record(_layout.REMOTE_PCH, pch_key, compiler_digest[:16])
    try:
        there = remote.replaceable(name, op)
        if there is None:
            return False
        record = json.loads((folder / _layout.RECORD_NAME).read_text())
        chunks: list[dict[str, Any]] = []
        size, whole = 0, hashlib.sha256()
        with open(folder / _layout.GCH_NAME, "rb") as gch:
            while raw := gch.read(RAW_PER_CHUNK):
                whole.update(raw)
                data = zlib.compress(raw, 1)  # fast: the PCH is read once per fresh machine
                chunks.append({"sha256": remote.put_blob(data, op), "size": len(data), "raw": len(raw)})
                size += len(raw)
        if whole.hexdigest() != record["sha256"]:
            return False  # changed on disk: not ours to spread
        body = {
            "format": FORMAT,
            "kind": "pch",
            "key": pch_key,
            "size": size,
            "header": (folder / _layout.PCH_HEADER_NAME).read_text(encoding="utf-8"),
            "gch_sha256": record["sha256"],
            "chunks": chunks,
            "compiler_sha256": compiler_digest,
            "built_by": socket.gethostname(),
            "built_at": record.get("built_at"),
            "pushed_at": time.time(),
        }
        if not remote.call(f"uploading {op} to", "put", name, seal(body, remote.signer), not there):
            return False
        remote.count(pushes=1, bytes_up=sum(c["size"] for c in chunks))
        return True
    except (Fault, OSError, ValueError, KeyError):
        return False


def find(remote: Remote, pch_key: str, header: str, compiler: str) -> tuple[str, RemoteRecordBody] | None:
    """The name and body of a trusted remote record of a PCH of this key, header and compiler (a
    listing and one read: the build asks before it starts), or None."""
    op = f"the precompiled header {pch_key[:16]}"
    compiler_digest = compiler_sha256(compiler)
    if compiler_digest is None:
        return None
    try:
        for name, data in remote.records(_layout.remote_records(_layout.REMOTE_PCH, pch_key), op):
            body = remote.opened(data, name, "pch", pch_key, op)
            if body is not None and body["compiler_sha256"] == compiler_digest and body["header"] == header:
                return name, body
    except Fault:
        pass
    return None


def fetch(remote: Remote, staging: Path, found: tuple[str, dict]) -> dict | None:
    """Write the PCH of a record find() returned into staging (its header and .gch, each chunk
    checked against the signed record); its record for the local folder, or None."""
    name, body = found
    try:
        if _assemble(remote, body, staging, f"the precompiled header {body['key'][:16]}", name):
            remote.count(pch_hits=1, bytes_down=sum(c["size"] for c in body["chunks"]))
            return {"sha256": body["gch_sha256"], "built_at": body["built_at"], "remote": remote.server}
    except Fault:
        pass
    for leftover in [staging / _layout.GCH_NAME, *staging.glob("chunk-*")]:
        leftover.unlink(missing_ok=True)
    return None


def _assemble(remote: Remote, body: dict, staging: Path, op: str, name: str) -> bool:
    """The .gch from the record's chunks: each downloaded (its size and sha256 checked against the
    signed record), then inflated to exactly its stated length at its offset, in threads (zlib
    releases the GIL) while the next downloads. The signed sha256s of the compressed chunks vouch
    for the whole; the local record keeps the .gch's signed sha256 for later checks."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = body["chunks"]
    fits = all(c["size"] <= CHUNK_MAX and c["raw"] <= RAW_PER_CHUNK for c in chunks)
    if not fits or sum(c["raw"] for c in chunks) != body["size"]:
        remote.skip(op, name, body["signed_by"], "its chunks are larger than a chunk may be, or do not add up to its size")
        return False
    offsets = [sum(c["raw"] for c in chunks[:n]) for n in range(len(chunks))]
    fd = os.open(staging / _layout.GCH_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(len(chunks), os.cpu_count() or 1))) as pool:
            inflated = []
            for n, chunk in enumerate(chunks):
                path = staging / f"chunk-{n}"
                if not remote.download({"size": chunk["size"], "signed_by": body["signed_by"]}, chunk["sha256"], path, op, name):
                    return False
                inflated.append(pool.submit(_inflate, path, chunk["raw"], fd, offsets[n]))
            if not all(future.result() for future in inflated):
                remote.skip(op, name, body["signed_by"], "a chunk does not inflate to its stated length")
                return False
    finally:
        os.close(fd)
    (staging / _layout.PCH_HEADER_NAME).write_text(body["header"], encoding="utf-8")
    return True


def _inflate(path: Path, length: int, fd: int, offset: int) -> bool:
    """Inflate one chunk file into fd at offset: exactly `length` bytes and the stream's end (zlib
    checks its own adler32), else False. The chunk file goes either way."""
    try:
        inflate = inflating.decompressobj()
        raw = inflate.decompress(path.read_bytes(), length + 1)
        if len(raw) != length or not inflate.eof or inflate.unconsumed_tail:
            return False
        return os.pwrite(fd, raw, offset) == length
    except INFLATE_ERRORS + (OSError,):
        return False
    finally:
        path.unlink(missing_ok=True)
