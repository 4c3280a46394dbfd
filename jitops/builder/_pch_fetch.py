# SPDX-License-Identifier: MIT
"""A fleet's precompiled headers, downloaded from the remote cache (store/_remote_pch) while a build's
other units compile: the unit that uses one waits on a ninja edge for the download's end."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _flock, _layout
from .._errors import CacheError
from .._files import file_identity, write_json_atomic
from ..store import PchStore

if TYPE_CHECKING:
    from .._records import PchJob


class Fetches:
    """PCHs downloaded from the remote cache (a fleet's, made in the same image: _remote_pch) while a
    build's other units compile. A unit that waits for one -includes <build>/pch-<key>/pch.h (the
    header's text), after a ninja edge that waits for the download to end; beside it the published
    .gch is linked where one came (held in use until close()), else it compiles from the text."""

    def __init__(self, build_dir: Path):
        self.build_dir, self.held = build_dir, contextlib.ExitStack()
        self.threads: list[threading.Thread] = []
        self._holding = threading.Lock()

    def start(self, spec: PchJob) -> tuple[str, str] | None:
        """Where the remote holds this PCH, its download started: (the path -included, the file made once it ended)."""
        pch = PchStore(spec["root"])
        if pch.folder() is None or (found := pch.in_remote(spec["key"], spec["header"], spec["compiler"])) is None:
            return None
        folder = self.build_dir / f"pch-{spec['key'][:16]}"
        waited = str(folder / _layout.PCH_HEADER_NAME), str(folder / _layout.PCH_FETCHED_NAME)
        if folder.exists():  # another unit of this build waits for the same PCH
            return waited
        folder.mkdir()
        (folder / _layout.PCH_HEADER_NAME).write_text(spec["header"], encoding="utf-8")
        thread = threading.Thread(target=self._download, args=(pch, spec, found, folder), daemon=True)
        thread.start()
        self.threads.append(thread)
        return waited

    def _download(self, pch: PchStore, spec: PchJob, found, folder: Path) -> None:
        try:
            with pch.lock(spec["key"], blocking=False) as lock:
                if lock.acquired and pch.find(spec["key"]) is None:
                    self._publish(pch, spec, found)
            published = pch.find(spec["key"])
            if published is not None:
                with self._holding:  # in use (not evicted) until the build ends
                    self.held.enter_context(_flock.flocked(pch.lock_path(spec["key"]), shared=True))
                os.symlink(published + ".gch", folder / _layout.GCH_NAME)
        except (OSError, CacheError):
            pass  # the unit compiles from the header's text
        finally:
            (folder / _layout.PCH_FETCHED_NAME).touch()

    @staticmethod
    def _publish(pch: PchStore, spec: PchJob, found) -> None:
        with pch.staged(spec["key"]) as staging:
            record = pch.fetch(staging.path, found)
            if record is None:
                staging.discard()
            else:
                made = {**record, "identity": file_identity(staging.path / _layout.GCH_NAME), "command": spec["command"]}
                write_json_atomic(staging.path / _layout.RECORD_NAME, made)

    def close(self) -> None:
        for thread in self.threads:
            thread.join()
        self.held.close()
