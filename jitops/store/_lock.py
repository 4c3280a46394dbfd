# SPDX-License-Identifier: MIT
"""File locks for builds: an entry's (one build per key per node) and the precompiled headers'.
Kernel (flock) locks: the OS drops one when its holder dies, so a killed build blocks no one."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _flock, _layout, _settings
from .._errors import BuildError
from . import _root

if TYPE_CHECKING:
    from collections.abc import Iterator


def setting_for(path: Path | str) -> str:
    """The setting that moves `path` (a root, or a file in one) elsewhere: JITOPS_CACHE_DIR for the
    configured root and its fallbacks, else the caller's own build_directory (Extension.cache_dir)."""
    path = os.path.realpath(path)
    for root in map(os.path.realpath, _root.configured_roots()):
        if path == root or path.startswith(os.path.join(root, "")):
            return "JITOPS_CACHE_DIR"
    return "build_directory"


def write_private(path: Path, text: str) -> None:
    """Write a small file readable by its owner alone, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)
        file.write(text)


class HeldLock:
    """A held kernel lock at `path`, with `<path minus suffix>.owner` naming its holder while held.
    blocking=False: acquired is False where another process holds it (nothing waits)."""

    def __init__(self, path: Path, what: str, blocking: bool = True):
        self.path, self.owner = path, Path(_layout.owner_path(path))
        self._fd = None
        try:
            self._fd = _flock.try_flock(path)
            if self._fd is None and blocking:
                self._fd = self._wait(what)
        except OSError as err:  # not a lock file: a directory, say, or no permission
            raise BuildError(
                f"jitops: cannot take the lock {path} to build {what}: {err.strerror or err}; "
                f"remove whatever is at that path (`rm -r {path}`), or point {setting_for(path)} elsewhere"
            ) from None
        self.acquired = self._fd is not None
        if not self.acquired:
            return
        try:
            write_private(self.owner, f"pid {os.getpid()} on {os.uname().nodename}\n")
        except BaseException as err:
            self.release()
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                raise BuildError(
                    f"jitops: cannot take the lock {path} to build {what}: the disk holding it is full "
                    f"({err.strerror or err}); free some space or point {setting_for(path)} elsewhere"
                ) from None
            raise

    def _wait(self, what: str) -> int:
        """The lock, once its holder lets go, polled for as filelock polls. Not filelock itself:
        it would keep waiting on a lock file that a remover unlinked (_flock._locked_fd)."""
        timeout = _settings.get("JITOPS_LOCK_TIMEOUT")
        deadline, pause = time.monotonic() + timeout, 0.01
        while (fd := _flock.try_flock(self.path)) is None:
            if time.monotonic() >= deadline:
                try:
                    holder = self.owner.read_text().strip()
                except OSError:
                    holder = "unknown"
                raise BuildError(
                    f"jitops: timed out after {timeout:.0f} s waiting for another process ({holder}) to build "
                    f"{what} (lock {self.path}); raise JITOPS_LOCK_TIMEOUT or stop that process"
                )
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, 0.25)
        return fd

    def release(self) -> None:
        if self.acquired and self._fd is not None:
            self.owner.unlink(missing_ok=True)
            os.close(self._fd)  # releases the flock
            self.acquired = False

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def entry_lock(entry, doing: str) -> Iterator[None]:
    """The entry's file lock, held for the block: one build, download or publish of a key at a time
    in a root. A full disk met inside is one error naming the root and the setting that moves it
    (the block has removed its staging folder). doing: the block's work, for that error."""
    with HeldLock(entry.lock_path, entry.name):
        try:
            yield
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            raise BuildError(
                f"jitops: {doing} {entry.name} failed: the disk holding the cache {entry.root} is full "
                f"({err.strerror or err}); free some space or point {setting_for(entry.root)} elsewhere"
            ) from err
