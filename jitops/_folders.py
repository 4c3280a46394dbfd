# SPDX-License-Identifier: MIT
"""How jitops writes and removes folders in a cache, so that no reader ever sees half of one: each
is filled in a `.tmp-<pid>-...` staging folder beside its place and published in one rename, and
removed by first renaming it out of the way. A staging folder whose process is gone is garbage."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

TMP_PREFIX = ".tmp-"


def remove_dead_staging(folder: Path, prefix: str = TMP_PREFIX) -> None:
    """Remove the `<prefix><pid>-*` staging folders in folder whose process is gone (killed while
    writing): nothing in one is ever read."""
    try:
        with os.scandir(folder) as found:
            names = [f.name for f in found if f.name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        if staging_is_dead(name, prefix):
            shutil.rmtree(folder / name, ignore_errors=True)


def staging_is_dead(name: str, prefix: str = TMP_PREFIX) -> bool:
    """Whether the `<prefix><pid>-*` staging folder `name` belongs to a process that is gone."""
    pid = name[len(prefix) :].partition("-")[0]
    return pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}")


def publish_folder(staging: Path, target: Path, replace: bool = False) -> None:
    """Every folder jitops writes (entries, stored objects, PCHs, load_inline's sources, exported
    prebuilts) is filled in a staging folder beside it, then made `target` in one rename: a
    reader sees all of it or none. replace: a folder (or file) there goes first, itself in one
    rename; else one there makes the rename fail (OSError), and the caller keeps the one there."""
    if replace and os.path.lexists(target):
        remove_tree(target)
    os.rename(staging, target)


def remove_tree(path: Path) -> None:
    """Delete a directory (or a file or link in its place) so that no reader sees it half deleted."""
    # Not named after path: an entry's name may already be near the file system's 255 bytes.
    trash = path.parent / f"{TMP_PREFIX}removing-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, trash)
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)
