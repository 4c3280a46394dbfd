# SPDX-License-Identifier: MIT
"""The errors jitops raises for what users can fix (exported as jitops.BuildError, jitops.CacheError)."""


class BuildError(RuntimeError):
    """An extension could not be built or loaded. The message says why and what to do."""


class CacheError(RuntimeError):
    """The cache root is unusable (permissions, ownership) or an entry is malformed."""
