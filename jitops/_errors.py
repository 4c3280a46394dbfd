# SPDX-License-Identifier: MIT
"""The errors jitops raises for what users can fix (exported as jitops.BuildError, jitops.CacheError,
jitops.NamespaceConflict), and its warnings."""

import os
import sys
import threading
import types
import warnings


class BuildError(RuntimeError):
    """An extension could not be built or loaded. The message says why and what to do."""


class CacheError(RuntimeError):
    """The cache root is unusable (permissions, ownership) or an entry is malformed."""


class NamespaceConflict(RuntimeError):
    """A library would register a torch.ops namespace that another declaration already holds in
    this process (two versions of one package): raised before dlopen, which would abort."""


class SettingError(BuildError, CacheError):
    """A JITOPS_* variable holds a value it does not take (the message names both). A BuildError and
    a CacheError, as the errors of the settings it replaced were."""


class FlagRefused(ValueError, RuntimeError):
    """A flag or include path refused before any build (shell code, an unbalanced quote). A ValueError,
    and a RuntimeError too: programs wrap torch's load() in `except RuntimeError` for a failed compile."""


# Shown as jitops.BuildError (their public name) in tracebacks, not the private jitops._errors.
for _error in (BuildError, CacheError, NamespaceConflict):
    _error.__module__ = "jitops"
# What the public entry points (jitops.load, load_inline, Extension.load) re-raise with the
# traceback through jitops' internals dropped: the message says what failed and where.
ERRORS = (BuildError, CacheError, NamespaceConflict)

# A warning skips jitops' own frames (the package, and cache_tools/ beside it in a checkout).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN_CODE = (os.path.join(_PACKAGE_DIR, ""), os.path.join(os.path.dirname(_PACKAGE_DIR), "cache_tools", ""))


_collected = threading.local()


def in_threads(calls: dict, max_workers: int | None = None) -> dict:
    """Run each call (name -> function of no arguments) in a pool of threads; return name ->
    the exception it raised, or None. Their warnings are issued again in this thread, once each,
    attributed to its caller's line (from a worker, warnings.warn would name the thread pool)."""
    from concurrent.futures import ThreadPoolExecutor

    said: list[str] = []

    def collected(call):
        _collected.into = said
        try:
            return call()
        finally:
            _collected.into = None

    with ThreadPoolExecutor(max_workers=max_workers or len(calls) or 1) as pool:
        futures = {name: pool.submit(collected, call) for name, call in calls.items()}
    for message in dict.fromkeys(said):
        warn(message)
    return {name: future.exception() for name, future in futures.items()}


def warn(message: str) -> None:
    """A RuntimeWarning "jitops: message", attributed to the first caller outside jitops."""
    if (into := getattr(_collected, "into", None)) is not None:
        into.append(message)
        return
    frame: types.FrameType | None = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_CODE):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"jitops: {message}", RuntimeWarning, stacklevel=level)
