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

from jitops import _settings
from jitops._layout import DROP_IN_NAMESPACE
from jitops.extension import Extension

GROUP = "jitops.extensions"
OWN = "jitops"  # the owner of jitops' own ops
DROP_IN = "jitops.load"  # the owner shown for jitops.load/load_inline's libraries (declared in scripts)

_declared: dict[str, tuple[str, Extension]] | None = None
_broken: dict[str, str] = {}  # owner -> why its entry point was skipped
_import_names: dict[str, str] = {}  # a package's import name (its entry point's top module) -> owner


def declared() -> dict[str, tuple[str, Extension]]:
    """<namespace>.<name> -> (owner, Extension), ours first. An entry point that fails to load or
    holds no Extension is reported on stderr and skipped: one broken package must not break the CLI."""
    global _declared
    if _declared is None:
        from jitops.ops._framework import available_ops, op_libraries  # jitops.ops imports torch: only to list

        found = {e.qualified_name: (OWN, e) for op in available_ops() for e in op_libraries(op)}
        for point in entry_points(group=GROUP):
            owner = point.dist.name if point.dist is not None else point.name
            _import_names.setdefault(point.module.partition(".")[0], owner)
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


class _ImportTimedOut(Exception):
    pass


def _load_isolated(point):
    """point.load(), its module's prints sent to stderr (stdout may be --json's), its sys.exit or
    KeyboardInterrupt raised as errors, and its import stopped after JITOPS_ENTRY_POINT_TIMEOUT
    seconds; a real Ctrl-C meanwhile still stops the CLI."""
    interrupted = []
    timeout = _settings.get("JITOPS_ENTRY_POINT_TIMEOUT")  # a module that waits on a server: reported, not a hang

    def on_sigint(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    def on_timer(signum, frame):
        raise _ImportTimedOut

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:  # signals reach the main thread alone
        previous = signal.signal(signal.SIGINT, on_sigint), signal.signal(signal.SIGALRM, on_timer)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return point.load()
    except KeyboardInterrupt:
        if interrupted:
            raise
        raise RuntimeError("its import raised KeyboardInterrupt") from None
    except _ImportTimedOut:
        raise RuntimeError(
            f"its import did not finish within {timeout:g} s (stopped; JITOPS_ENTRY_POINT_TIMEOUT sets the limit)"
        ) from None
    finally:
        if main_thread:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGALRM, previous[1])


def broken() -> dict[str, str]:
    """The packages whose entry point was skipped, each with why (after declared())."""
    declared()
    return dict(_broken)


def owner(qualified_name: str) -> str:
    """Who declares an extension of the cache: a package, jitops.load for a script's, else '-'."""

    if qualified_name in declared():
        return declared()[qualified_name][0]
    return DROP_IN if qualified_name.partition(".")[0] == DROP_IN_NAMESPACE else "-"


def owner_named(name: str) -> str | None:
    """The owner (a distribution's name, as `list` shows it) that --package NAME means: the name
    itself, the distribution in any spelling pip accepts (demo-pkg, Demo_Pkg), or its import name."""
    owners = {owner_ for owner_, _ in declared().values()} | set(_broken)
    if name in owners:
        return name

    def normal(text: str) -> str:  # PEP 503: case, and runs of -, _ and . are one
        return "-".join(text.lower().replace("_", "-").replace(".", "-").split("-"))

    by_normal = {normal(owner_): owner_ for owner_ in owners}
    return by_normal.get(normal(name)) or _import_names.get(name)


def import_names() -> dict[str, str | None]:
    """Each owner of packages(), with its import name where it came from an entry point."""
    names = {owner_: name for name, owner_ in _import_names.items()}
    return {owner_: names.get(owner_) for owner_ in packages()}


def packages() -> list[str]:
    return sorted({owner_ for owner_, _ in declared().values()})
