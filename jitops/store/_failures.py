# SPDX-License-Identifier: MIT
"""Builds that failed on a compiler's or linker's own error, remembered a while per key and inputs, so
that a process with a prebuilt to stand in takes it at once; never an interrupt, a timeout, a killed
compiler or a full disk."""

from __future__ import annotations

import hashlib
import json
import os
import time

from .. import _layout
from .._files import identity_or_none, write_json_atomic

REMEMBERED_S = 15 * 60

# Log lines of a failure that a retry may not repeat (_ninja.run_ninja's log): a timeout, a
# compiler killed by a signal (the OOM killer), a full disk.
_TRANSIENT = (
    "(JITOPS_BUILD_TIMEOUT)",
    "Killed signal terminated program",  # gcc
    "due to signal",  # nvcc: "'cicc' died due to signal 9"
    "[code=137]",  # ninja >= 1.12: a step's exit status, 128 + SIGKILL
    "No space left on device",
)


def may_pass_next_time(log: str) -> bool:
    # /bin/sh (which runs each of ninja's steps) reports a child killed by a signal with its name.
    return any(marker in log for marker in _TRANSIENT) or any(
        line.strip() in ("Killed", "Terminated") for line in log.splitlines()
    )


def _inputs(planned) -> str:
    """A digest of what a retry could change: the key, and the identities described above."""
    extension = planned.extension
    folders = {os.path.dirname(path) for path in extension.paths()} | set(extension.include_paths())
    files = []
    for folder in sorted(folders):
        try:
            files += [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
        except OSError:
            continue
    identities = [[str(path), identity] for path, identity in planned.dependencies]
    identities += [[path, identity_or_none(path)] for path in files]
    return hashlib.sha256(json.dumps([planned.entry.key, identities]).encode()).hexdigest()


def _record_path(planned) -> str:
    entry = planned.entry
    return _layout.failed_record_path(entry.root, entry.name, entry.key)


def remember(planned, failure: str) -> None:
    """Remember a build's failure (why, and where its log is). Only saves work: a failure to write
    is ignored."""
    try:
        write_json_atomic(_record_path(planned), {"inputs": _inputs(planned), "at": time.time(), "failure": failure})
    except OSError:
        pass


def forget(planned) -> None:
    try:
        os.unlink(_record_path(planned))
    except OSError:
        pass


def recall(planned) -> tuple[str, float] | None:
    """(the failure, its age in seconds) where this very build failed less than REMEMBERED_S ago."""
    try:
        with open(_record_path(planned), "rb") as file:
            record = json.loads(file.read())
        age = time.time() - float(record["at"])
        failure = str(record["failure"])
        if not 0 <= age < REMEMBERED_S or record["inputs"] != _inputs(planned):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return failure, age
