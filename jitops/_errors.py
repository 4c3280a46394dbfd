# SPDX-License-Identifier: MIT
"""The errors jitops raises for what users can fix (exported as jitops.BuildError, jitops.CacheError,
jitops.NamespaceConflict), and its warnings."""

import os
import sys
import warnings


class BuildError(RuntimeError):
    """An extension could not be built or loaded. The message says why and what to do."""


class CacheError(RuntimeError):
    """The cache root is unusable (permissions, ownership) or an entry is malformed."""


class NamespaceConflict(RuntimeError):
    """A library would register a torch.ops namespace that another declaration already holds in
    this process (two versions of one package): raised before dlopen, which would abort."""


# Shown as jitops.BuildError (their public name) in tracebacks, not the private jitops._errors.
for _error in (BuildError, CacheError, NamespaceConflict):
    _error.__module__ = "jitops"
# What the public entry points (jitops.load, load_inline, Extension.load) re-raise with the
# traceback through jitops' internals dropped: the message says what failed and where.
ERRORS = (BuildError, CacheError, NamespaceConflict)

# A warning skips jitops' own frames (the package, and cache_tools/ beside it in a checkout).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN_CODE = (os.path.join(_PACKAGE_DIR, ""), os.path.join(os.path.dirname(_PACKAGE_DIR), "cache_tools", ""))


def warn(message: str) -> None:
    """A RuntimeWarning "jitops: message", attributed to the first caller outside jitops."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_CODE):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"jitops: {message}", RuntimeWarning, stacklevel=level)
