# SPDX-License-Identifier: MIT
"""The store wing: the cache on disk and the tiers behind it (a package's shipped prebuilt, the
remote cache), behind one door: the names below, `Store` (store/_door.py) first. The loader asks it
for a library; on a miss the build wing compiles into a folder the store stages, and the store
publishes it (and pushes it where a remote is set). The CLI lists, verifies, prunes and clears
through the same names. Imports the ground and the warm wing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._door import CudaPlan, Found, PlannedEntry, StagedEntry, Store, Verified, remote_tier
    from ._entries import Entry, StaleEntry
    from ._inline import inline_sources
    from ._key import abi_components, find_cuda_home, find_cxx, key_components, missing_sources, plan_cuda, tool_probe
    from ._pch_store import PchStore
    from ._prebuilt import find_prebuilt, prebuilt_dirs
    from ._prebuilt import mismatch as prebuilt_mismatch
    from ._remote import Fault
    from ._remote import active as active_remote
    from ._remote_admin import holds as remote_holds
    from ._remote_admin import listing as remote_listing
    from ._remote_admin import remove as remote_remove
    from ._remote_admin import status as remote_status
    from ._remote_admin import to_prune as remote_to_prune
    from ._remote_backends import Backend, FolderBackend, RedisBackend, Unreadable
    from ._root import compute_key
    from ._signing import keygen
    from ._signing import parse_public as parse_public_key
    from ._signing import public_text as public_key_text
    from ._stable import built_under, demangled, floor_text
    from ._stable import components as stable_components
    from ._staging import staged

# Each name is imported when first named, from the module that holds it ("module" or "module:its
# name there"): a warm load_inline's inline_sources imports the store's ground alone, not the door's
# ten modules.
_HOLDERS = {
    **dict.fromkeys(["CudaPlan", "Found", "PlannedEntry", "StagedEntry", "Store", "Verified", "remote_tier"], "_door"),
    "Entry": "_entries",  # what Store.entry and Store.entries give
    "StaleEntry": "_entries",
    "inline_sources": "_inline",
    **dict.fromkeys(
        ["abi_components", "find_cuda_home", "find_cxx", "key_components", "missing_sources", "plan_cuda", "tool_probe"], "_key"
    ),
    "PchStore": "_pch_store",
    "find_prebuilt": "_prebuilt",
    "prebuilt_dirs": "_prebuilt",
    "prebuilt_mismatch": "_prebuilt:mismatch",
    "Fault": "_remote",
    "active_remote": "_remote:active",
    **{f"remote_{name}": f"_remote_admin:{name}" for name in ("holds", "listing", "remove", "status", "to_prune")},
    **dict.fromkeys(["Backend", "FolderBackend", "RedisBackend", "Unreadable"], "_remote_backends"),  # jitops.remote's
    "keygen": "_signing",
    "parse_public_key": "_signing:parse_public",
    "public_key_text": "_signing:public_text",
    "stable_components": "_stable:components",
    **dict.fromkeys(["built_under", "demangled", "floor_text"], "_stable"),
    "compute_key": "_root",
    "staged": "_staging",
}
__all__ = [
    "Backend",
    "CudaPlan",
    "Entry",
    "Fault",
    "FolderBackend",
    "Found",
    "PchStore",
    "PlannedEntry",
    "RedisBackend",
    "StagedEntry",
    "StaleEntry",
    "Store",
    "Unreadable",
    "Verified",
    "abi_components",
    "active_remote",
    "built_under",
    "compute_key",
    "demangled",
    "find_cuda_home",
    "find_cxx",
    "find_prebuilt",
    "floor_text",
    "inline_sources",
    "key_components",
    "keygen",
    "missing_sources",
    "parse_public_key",
    "plan_cuda",
    "prebuilt_dirs",
    "prebuilt_mismatch",
    "public_key_text",
    "remote_holds",
    "remote_listing",
    "remote_remove",
    "remote_status",
    "remote_tier",
    "remote_to_prune",
    "stable_components",
    "staged",
    "tool_probe",
]


def __getattr__(name: str):
    if name in _HOLDERS:
        module, _, attribute = _HOLDERS[name].partition(":")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute or name)
        globals()[name] = value  # later lookups skip this
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
