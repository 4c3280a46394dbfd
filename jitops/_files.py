# SPDX-License-Identifier: MIT
"""The ground floor's file primitives that the store, the build wing and the CLI share: sha256 of
bytes, of a file and of a value's JSON, and a tree's size. Standard library only. (A warm start's
own, file identity and reading a record, are in warm/_libraries: it imports nothing it can spare.)"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path


def json_digest(value, length: int = 64) -> str:
    """sha256 (hex, its first `length` digits) of a value's JSON, keys sorted: the key of what a
    dict of inputs made (objects, PCHs, variants, remote records)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    """A regular file's sha256; OSError for anything else (opened without blocking: a FIFO where a
    header or library should be, planted or named by a record, never stalls a load)."""
    digest = hashlib.sha256()
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tree_size(path: Path | str) -> int:
    """Bytes of the regular files under path (symbolic links are not followed)."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size if stat.S_ISREG(info.st_mode) else 0
    total = 0
    for parent, _, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:
                continue  # removed while walking
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total
