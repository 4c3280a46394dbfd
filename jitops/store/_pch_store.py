# SPDX-License-Identifier: MIT
"""One cache root's precompiled headers (pch/), as the store keeps them: the folder, a PCH's lock,
finding a published one (verified, a corrupt one removed), staging one, the budget that holds it,
and the remote's copies (pushed and fetched where a remote is set). What goes into a PCH and
compiling it are the build wing's (builder/_pch)."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _files, _layout, _settings
from .._errors import warn
from .._files import file_identity, mark_used, read_regular
from . import _budget, _root, _staging
from ._door import remote_tier
from ._lock import HeldLock
from ._object_store import TOOLCHAIN_COMPONENTS, toolchain

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._records import RemoteRecordBody

# What a PCH of torch's headers takes on disk where none of the same headers was built before.
ESTIMATED_SIZE = 800 << 20


class PchStore:
    """One root's pch/ part: each PCH a folder named by its key (the header, the compiler's flags
    and the toolchain), published under its own lock and evicted by the root's budget."""

    # The toolchain a PCH key names: the object store's (torch's exact identity, the compilers).
    TOOLCHAIN_COMPONENTS = TOOLCHAIN_COMPONENTS
    toolchain = staticmethod(toolchain)

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def folder(self, write: bool = True) -> Path | None:
        """The root's pch/ folder, or None where it cannot be used (one warning; builds go on without)."""
        return _root.usable_part(self.root, _layout.PCH_DIR, write=write)

    def _usable_folder(self) -> Path:
        """pch/, or OSError where it cannot be used (the build goes on without the PCH)."""
        if (parent := self.folder()) is None:
            raise OSError(f"{self.root}: its pch/ folder cannot be used")
        return parent

    def lock_path(self, pch_key: str) -> Path:
        return Path(_layout.pch_lock_path(self._usable_folder() / pch_key))

    def lock(self, pch_key: str, blocking: bool) -> HeldLock:
        """The PCH's build lock (.acquired says whether it was had); held while it is built or fetched."""
        return HeldLock(self.lock_path(pch_key), f"the precompiled header {pch_key}", blocking=blocking)

    def find(self, pch_key: str) -> str | None:
        """The path to -include for a published, verified PCH (its .gch's sha256, hashed in full
        unless its identity is the one recorded), else None; a corrupt one is removed."""
        parent = self.folder(write=False)
        if parent is None:
            return None
        folder = parent / pch_key
        gch = folder / _layout.GCH_NAME
        problem = _root.foreign_problem([folder], [folder / _layout.RECORD_NAME, gch, folder / _layout.PCH_HEADER_NAME])
        if problem:
            warn(f"not using the precompiled header {folder}: {problem}")
            return None
        try:
            record = json.loads(read_regular(folder / _layout.RECORD_NAME))
            if file_identity(gch) != record["identity"] and _files.sha256_file(gch) != record["sha256"]:
                raise ValueError(f"{gch} does not match its sha256")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            warn(f"discarding the corrupt precompiled header {folder}: {err}")
            with contextlib.suppress(OSError):  # a read-only pch/: it stays, unused
                _root.remove_tree(folder)
            return None
        mark_used(str(folder), folder.stat().st_mtime)  # for the budget's least-recently-used order
        return str(folder / _layout.PCH_HEADER_NAME)

    @contextlib.contextmanager
    def staged(self, pch_key: str) -> Iterator[_staging.Staging]:
        """A folder for the PCH, published on a clean exit (unless discarded), removed on any error;
        killed builds' staging folders are removed first (under the PCH's lock: none is live)."""
        parent = self._usable_folder()
        _root.remove_dead_staging(parent)
        with _staging.staged(parent, parent / pch_key) as staging:
            yield staging

    def fits_budget(self, header: str) -> bool:
        """Whether the root's budget holds a PCH of `header` (its size: the last one of these headers,
        else ESTIMATED_SIZE) beside the entries live processes have mapped: none is built to be evicted."""
        limit = _settings.get("JITOPS_CACHE_MAX_SIZE")
        if limit <= 0:
            return True
        items = _budget.items(self.root)
        estimate = next((i.size for i in items if i.kind == "pch" and self.same_header(i.path, header)), ESTIMATED_SIZE)
        live = _budget.live_paths(self.root) or set()
        in_use = sum(item.size for item in items if item.kind == "entry" and _budget.is_live(item.path, live))
        return estimate + in_use <= limit

    @staticmethod
    def same_header(folder: Path, header: str) -> bool:
        """Whether a PCH folder was built from this header's text."""
        try:
            return (folder / _layout.PCH_HEADER_NAME).read_text(encoding="utf-8") == header
        except OSError:
            return False

    @staticmethod
    def describe(folder: Path) -> tuple[str, float | None, Path, str]:
        """A published PCH folder, for the CLI: the header it holds, when it was built, its .gch and the
        sha256 recorded for it. Raises OSError, ValueError or KeyError where it is unreadable."""
        record = json.loads(read_regular(folder / _layout.RECORD_NAME))
        headers = " ".join(re.findall(r"<([^>]+)>", (folder / _layout.PCH_HEADER_NAME).read_text()))
        return headers, record.get("built_at"), folder / _layout.GCH_NAME, record["sha256"]

    def enforce_budget(self) -> None:
        _budget.enforce_budget(self.root)

    # The remote's PCHs (a fleet's, made in the same image), where a remote is set
    def push(self, pch_key: str, compiler: str) -> None:
        """A PCH built here, to the remote cache where one is set that this machine writes to."""
        if (remote := remote_tier()) is not None:
            from . import _remote_pch  # only where a remote is set

            _remote_pch.push(remote, Path(_layout.pch_dir(self.root), pch_key), pch_key, compiler)

    @staticmethod
    def in_remote(pch_key: str, header: str, compiler: str) -> tuple[str, RemoteRecordBody] | None:
        """The remote's record of this PCH, where a remote is set and holds one for this compiler."""
        if (remote := remote_tier()) is None:
            return None
        from . import _remote_pch  # only where a remote is set

        return _remote_pch.find(remote, pch_key, header, compiler)

    @staticmethod
    def fetch(staging: Path, found: tuple[str, dict]) -> dict | None:
        """The PCH in_remote found, downloaded into staging: its record, or None."""
        from . import _remote_pch  # only where a remote is set (in_remote found it)

        remote = remote_tier()
        return None if remote is None else _remote_pch.fetch(remote, staging, found)
