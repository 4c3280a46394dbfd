# SPDX-License-Identifier: MIT
"""Every extension this machine's packages declare: jitops' own ops, and those installed packages
register under the entry-point group `jitops.extensions` (a value is an Extension, or a list or
tuple of them). Only the CLI reads entry points: loading a library never scans them."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

from jitops.extension import Extension

GROUP = "jitops.extensions"
OWN = "jitops"  # the owner of jitops' own ops
DROP_IN = "jitops.load"  # the owner shown for jitops.load/load_inline's libraries (declared in scripts)

_declared: dict[str, tuple[str, Extension]] | None = None


def declared() -> dict[str, tuple[str, Extension]]:
    """<namespace>.<name> -> (owner, Extension), ours first. An entry point that fails to load or
    holds no Extension is reported on stderr and skipped: one broken package must not break the CLI."""
    global _declared
    if _declared is None:
        from jitops.ops import available_ops, extension

        found = {extension(op).qualified_name: (OWN, extension(op)) for op in available_ops()}
        for point in entry_points(group=GROUP):
            owner = point.dist.name if point.dist is not None else point.name
            try:
                value = point.load()
            except Exception as err:  # noqa: BLE001 - any error in another package's import
                print(f"jitops-cache: skipping the {GROUP} entry point {point.value!r} of {owner}: {err}", file=sys.stderr)
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            if not values or not all(isinstance(v, Extension) for v in values):
                print(
                    f"jitops-cache: skipping the {GROUP} entry point {point.value!r} of {owner}: it holds no jitops.Extension",
                    file=sys.stderr,
                )
                continue
            for extension_ in values:
                found.setdefault(extension_.qualified_name, (owner, extension_))
        _declared = found
    return _declared


def owner(qualified_name: str) -> str:
    """Who declares an extension of the cache: a package, jitops.load for a script's, else '-'."""
    from jitops._core import DROP_IN_NAMESPACE

    if qualified_name in declared():
        return declared()[qualified_name][0]
    return DROP_IN if qualified_name.partition(".")[0] == DROP_IN_NAMESPACE else "-"


def packages() -> list[str]:
    return sorted({owner_ for owner_, _ in declared().values()})
