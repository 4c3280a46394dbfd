# SPDX-License-Identifier: MIT
"""The ground floor's file primitives, which every wing shares: the private-directory rule, file
identity (what says a file is unchanged without reading it), reading a small record safely, writing
JSON atomically, an entry's last-used mark, sha256 of bytes, a file and a value's JSON, and a tree's
size. Standard library only: every warm start imports it."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path


# Which directories may hold libraries we load
def private_dir_problem(path: str, info: os.stat_result | None = None) -> str | None:
    """Why `path` may not hold libraries we load (another user could write into it), or None."""
    return unsafe_path_problem(path, "cache directory", (os.getuid(),), directory=True, info=info)


def unsafe_path_problem(
    path: str, what: str, owners: tuple[int, ...], directory: bool, info: os.stat_result | None = None
) -> str | None:
    """Why `path` (a directory, or a regular file) may not hold or be a library we load, or None:
    a link, of the other kind, owned by none of `owners`, or writable by group or others."""
    info = info or os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{what} {path} is a symbolic link; refusing to follow it"
    if not (stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)):
        return f"{what} {path} is not a {'directory' if directory else 'regular file'}"
    if info.st_uid not in owners:
        return f"{what} {path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} {path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); run `chmod go-w {path}`"
    return None


# File identity: what says a file is unchanged without reading it
def file_identity(path: str | Path) -> list[int]:
    """(size, mtime_ns, ctime_ns, inode, device), as git's index keeps it: the ctime cannot be set
    back, so an edit that keeps size, mtime and inode still changes it."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


IDENTITY_FIELDS = 5  # file_identity's length: a recorded identity of another length is no identity


def identity_or_none(path: str | Path) -> list[int] | None:
    """The identity of what a path leads to (links followed), None where there is nothing."""
    try:
        return file_identity(path)
    except OSError:
        return None


def write_json_atomic(path: Path | str, data: object, durable: bool = True) -> None:
    """Readers see the old file or the new one, never a half-written one. durable=False skips the
    fsync, for records whose loss after a power cut reads as a miss (warm records, counters)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(data, file, indent=2, sort_keys=True)
            file.write("\n")
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# An entry's last-used time (its folder's mtime) is set at most once a minute: enough for pruning,
# and 64 ranks that start together do not all write it.
LAST_USED_RESOLUTION_S = 60.0


def mark_used(entry: str, last_used: float) -> None:
    """Mark a cache entry used, for pruning: its folder's mtime (not the manifest's: warm records
    check that)."""
    if time.time() - last_used >= LAST_USED_RESOLUTION_S:
        try:
            os.utime(entry)
        except OSError:
            pass  # a read-only cache still loads; pruning order is all that is lost


def read_regular(path: str | Path, cap: int = 1 << 20) -> bytes:
    """A small regular file's bytes, with os.read (a buffered file object is slower). A link, FIFO,
    device or folder planted where a record belongs, or a file over cap bytes, is ValueError: never
    followed, waited on or read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_size > cap:
            raise ValueError(f"{path} is larger than {cap} bytes")
        # Its size, not the cap: os.read allocates what it is asked for first.
        return os.read(fd, info.st_size)
    finally:
        os.close(fd)


# Hashes and sizes
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
