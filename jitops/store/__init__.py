# SPDX-License-Identifier: MIT
"""The store wing: the cache on disk and the tiers behind it (a package's shipped prebuilt, the
remote cache), behind one door, `Store` (store/_door.py). The loader asks it for a library; on a
miss the build wing compiles into a folder the store stages, and the store publishes it (and
pushes it where a remote is set). Imports the ground and the warm wing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._door import CudaPlan, Found, PlannedEntry, StagedEntry, Store, Verified, remote_tier

__all__ = ["CudaPlan", "Found", "PlannedEntry", "StagedEntry", "Store", "Verified", "remote_tier"]


def __getattr__(name: str):
    if name in __all__:
        from . import _door  # when first named: a warm path's store module (_root, _staging) imports no other

        return getattr(_door, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
