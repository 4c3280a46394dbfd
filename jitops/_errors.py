# SPDX-License-Identifier: MIT
"""The errors jitops raises for what users can fix (exported as jitops.BuildError, jitops.CacheError, jitops.NamespaceConflict)."""


class BuildError(RuntimeError):
    """An extension could not be built or loaded. The message says why and what to do."""


class CacheError(RuntimeError):
    """The cache root is unusable (permissions, ownership) or an entry is malformed."""


class NamespaceConflict(RuntimeError):
    """A library would register a torch.ops namespace that another declaration already holds in
    this process (two versions of one package): raised before dlopen, which would abort."""
