# SPDX-License-Identifier: MIT
"""The store wing: the cache on disk and the tiers behind it (a package's shipped prebuilt, the
remote cache), behind one door, `Store` (store/_door.py). The loader asks it for a library; on a
miss the build wing compiles into a folder the store stages, and the store publishes it (and
pushes it where a remote is set). Imports the ground and the warm wing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._door import CudaPlan, Found, PlannedEntry, StagedEntry, Store, Verified, remote_tier
    from ._inline import inline_sources
    from ._key import plan_cuda
    from ._pch_store import PchStore
    from ._remote_backends import Backend, FolderBackend, RedisBackend, Unreadable

# Each name from the module that holds it, imported when first named: a warm load_inline's
# inline_sources imports the store's ground alone, not the door's ten modules.
_HOLDERS = {"inline_sources": "_inline", "plan_cuda": "_key", "PchStore": "_pch_store"}
_HOLDERS |= dict.fromkeys(("Backend", "FolderBackend", "RedisBackend", "Unreadable"), "_remote_backends")  # jitops.remote's
__all__ = ["CudaPlan", "Found", "PchStore", "PlannedEntry", "StagedEntry", "Store", "Verified", "inline_sources", "plan_cuda"]
__all__ += ["remote_tier"]
__all__ += ["Backend", "FolderBackend", "RedisBackend", "Unreadable"]


def __getattr__(name: str):
    if name in __all__:
        value = getattr(importlib.import_module(f"{__name__}.{_HOLDERS.get(name, '_door')}"), name)
        globals()[name] = value  # later lookups skip this
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
