# SPDX-License-Identifier: MIT
"""Staging: every folder the store publishes (an entry, a stored object, a PCH, load_inline's
sources, a prebuilt export) is filled in a private folder beside its place and published in one
rename that never replaces a folder already there: a reader sees all of it or none."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .._layout import TMP_PREFIX

if TYPE_CHECKING:
    from collections.abc import Iterator


def new_staging(parent: Path, prefix: str = TMP_PREFIX) -> Path:
    """A fresh private folder in parent, named <prefix><pid>-*: a later writer tells a killed one's."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


def publish_folder(staging: Path, target: Path) -> None:
    """Make a filled staging folder `target` in one rename: a reader sees all of it or none, and a
    folder already there makes it fail (OSError), so published folders are never replaced."""
    os.rename(staging, target)


class Staging:
    """A folder being filled (path). discard(): the block decided not to publish it. published:
    whether it became its target (False: discarded, or another writer's folder stood there)."""

    def __init__(self, path: Path):
        self.path, self.published, self._discarded = path, False, False

    def discard(self) -> None:
        self._discarded = True


@contextlib.contextmanager
def staged(parent: Path, target: Path, mode: int = 0o700, prefix: str = TMP_PREFIX) -> Iterator[Staging]:
    """A fresh private folder in parent for the block to fill, made `mode` and published as target in
    one rename where the block ends cleanly (and did not discard it); removed on any error, which goes
    on, but for an OSError (in the block or the rename) where target exists by then: another writer
    published it first, and theirs stays (a published folder is never replaced). A killed writer's
    folder is named with its pid (remove_dead_staging)."""
    staging = Staging(new_staging(parent, prefix))
    try:
        yield staging
        if not staging._discarded:
            os.chmod(staging.path, mode)
            publish_folder(staging.path, target)
            staging.published = True
    except OSError:
        if not os.path.lexists(target):
            raise
    finally:
        if not staging.published:
            with contextlib.suppress(OSError):
                shutil.rmtree(staging.path)
