# SPDX-License-Identifier: MIT
"""Every extension this machine's packages declare: jitops' own ops, and those installed packages
register under the entry-point group `jitops.extensions` (a value is an Extension, or a list or
tuple of them). Only the CLI reads entry points: loading a library never scans them."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from importlib.metadata import entry_points

from jitops.extension import Extension

GROUP = "jitops.extensions"
OWN = "jitops"  # the owner of jitops' own ops
DROP_IN = "jitops.load"  # the owner shown for jitops.load/load_inline's libraries (declared in scripts)

_declared: dict[str, tuple[str, Extension]] | None = None
_broken: dict[str, str] = {}  # owner -> why its entry point was skipped


def declared() -> dict[str, tuple[str, Extension]]:
    """<namespace>.<name> -> (owner, Extension), ours first. An entry point that fails to load or
    holds no Extension is reported on stderr and skipped: one broken package must not break the CLI."""
    global _declared
    if _declared is None:
        from jitops.ops._framework import available_ops, extension

        found = {extension(op).qualified_name: (OWN, extension(op)) for op in available_ops()}
        for point in entry_points(group=GROUP):
            owner = point.dist.name if point.dist is not None else point.name
            try:
                value = _load_isolated(point)
            except (Exception, SystemExit) as err:  # noqa: BLE001 - anything another package's import raises
                what = f"sys.exit({err.code!r})" if isinstance(err, SystemExit) else str(err)
                print(f"jitops-cache: skipping the {GROUP} entry point {point.value!r} of {owner}: {what}", file=sys.stderr)
                _broken[owner] = f"its entry point {point.value!r} failed: {what}"
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            if not values or not all(isinstance(v, Extension) for v in values):
                print(
                    f"jitops-cache: skipping the {GROUP} entry point {point.value!r} of {owner}: it holds no jitops.Extension",
                    file=sys.stderr,
                )
                _broken[owner] = f"its entry point {point.value!r} holds no jitops.Extension"
                continue
            for extension_ in values:
                found.setdefault(extension_.qualified_name, (owner, extension_))
        _declared = found
    return _declared


def _load_isolated(point):
    """point.load(), its module's prints sent to stderr (stdout may be --json's), and its
    sys.exit or KeyboardInterrupt raised as errors; a real Ctrl-C meanwhile still stops the CLI."""
    interrupted = []

    def on_sigint(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return point.load()
    except KeyboardInterrupt:
        if interrupted:
            raise
        raise RuntimeError("its import raised KeyboardInterrupt") from None
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)


def broken() -> dict[str, str]:
    """The packages whose entry point was skipped, each with why (after declared())."""
    declared()
    return dict(_broken)


def owner(qualified_name: str) -> str:
    """Who declares an extension of the cache: a package, jitops.load for a script's, else '-'."""
    from jitops._core import DROP_IN_NAMESPACE

    if qualified_name in declared():
        return declared()[qualified_name][0]
    return DROP_IN if qualified_name.partition(".")[0] == DROP_IN_NAMESPACE else "-"


def packages() -> list[str]:
    return sorted({owner_ for owner_, _ in declared().values()})
