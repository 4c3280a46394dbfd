# SPDX-License-Identifier: MIT
"""load_inline's sources in the cache root: one folder per content, checked at every call and
never rewritten. Imported at every load_inline, so it imports only the store's ground (_root and
_staging), never the door's other modules."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .. import _layout
from .._errors import BuildError
from ._root import cache_root, ensure_private_dir
from ._staging import staged

INLINE_COPIES = 8  # folders of one content tried, each found damaged, before an error


def inline_sources(name: str, files: dict[str, str], cache_dir: str | None) -> str:
    """A folder holding `files`, named after their content (<name>-<sha256>), checked at every call; a
    damaged one is never rewritten (a build may read it): the content goes into <name>-<sha256>-<n>."""
    contents = {file: text.encode("utf-8") for file, text in files.items()}
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    parent = ensure_private_dir(Path(_layout.inline_dir(cache_root(cache_dir))))
    for copy in range(INLINE_COPIES):
        folder = parent / (f"{name}-{digest}" + (f"-{copy}" if copy else ""))
        if _holds(folder, contents):
            return str(folder)
        if os.path.lexists(folder):
            continue  # damaged: left as it is
        try:
            with staged(parent, folder) as staging:
                for file, data in contents.items():
                    with open(staging.path / file, "wb") as out:
                        out.write(data)
                        out.flush()
                        os.fsync(out.fileno())
        except OSError as err:
            raise BuildError(f"jitops: cannot write load_inline's sources of {name} into {parent}: {err}") from None
        if staging.published or _holds(folder, contents):  # or another process wrote the same content first
            return str(folder)
    raise BuildError(
        f"jitops: load_inline's sources of {name} are damaged in {INLINE_COPIES} folders {parent}/{name}-{digest}*; "
        "remove them (`jitops-cache clear --all` removes every folder of load_inline's sources)"
    )


def _holds(folder: Path, contents: dict[str, bytes]) -> bool:
    """Whether folder (a real directory) holds each file with exactly this content."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return False
        return all((folder / file).read_bytes() == data for file, data in contents.items())
    except OSError:
        return False
