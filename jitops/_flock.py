# SPDX-License-Identifier: MIT
"""Kernel file locks (flock): the OS drops one when its holder dies, so a killed process blocks no
one. A taker checks that the file it locked is still the one at the path (a remover unlinks it
while held). Standard library only."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _open_lock_file(path: Path | str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _locked_fd(path: Path | str, operation: int) -> int | None:
    """An fd of the file at path with flock(operation) held on it; None where LOCK_NB found it
    held. Raises OSError where it cannot be opened."""
    import fcntl

    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, operation)
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except BlockingIOError:
            os.close(fd)
            return None
        except FileNotFoundError:  # unlinked by a remover once this fd was open: take the new one
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def try_flock(path: Path | str) -> int | None:
    """The open lock file at path (created 0600), its exclusive kernel lock held until the fd is
    closed; None where another process holds it. Raises OSError where it cannot be opened."""
    import fcntl

    return _locked_fd(path, fcntl.LOCK_EX | fcntl.LOCK_NB)


@contextlib.contextmanager
def flocked(path: Path | str, shared: bool = False, blocking: bool = True):
    """Hold the kernel lock on path (created 0600). Yields False where it cannot be had: held by
    another process (not blocking), or the file cannot be opened."""
    import fcntl

    try:
        fd = _locked_fd(path, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
    except OSError:
        fd = None
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)  # releases the lock


def flock_is_held(lock_path: Path | str) -> bool:
    """Whether some process holds the kernel lock on lock_path, without waiting or creating it."""
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if it was taken here
    return False
