# SPDX-License-Identifier: MIT
"""Which cache jitops-cache looks at, and which of its rows a command's NAMEs and --package
select (an unknown name is a usage error, not "0 entries")."""

from __future__ import annotations

import os
import shlex
from collections.abc import Set as AbstractSet
from pathlib import Path

from jitops import _layout
from jitops.store import Store

from . import inventory, registry
from .output import UsageError


def selected_rows(ops: list[str], package: str | None = None, other_roots: bool = False) -> tuple[Path, list[inventory.Row]]:
    """The cache's rows of the named extensions (all rows for none), each named by its name or
    `<namespace>.<name>`, of one owner with --package; other_roots: also those of the roots that
    extensions with a build_directory built into (the configured root lists them). A name that is
    neither declared here nor one with entries in the cache is a typo: a usage error, not "0
    entries"; one with entries only in another root is a usage error naming that root."""
    root = Path(_layout.configured_root()[0])
    rows = inventory.entry_rows(root)
    if other_roots:
        rows += rows_elsewhere()
    names = {row.name for row in rows} | {f"{row.namespace}.{row.name}" for row in rows}
    unknown = set(ops) - names
    for row in rows_elsewhere() if unknown and not other_roots else []:
        if named := {row.name, f"{row.namespace}.{row.name}"} & unknown:
            where = str(Path(row.path).parent)
            raise UsageError(
                f"{min(named)}'s entries are in {where} (built with a build_directory), not in {root}: "
                f"run JITOPS_CACHE_DIR={shlex.quote(where)} jitops-cache with the same arguments"
            )
    check_names(ops, names)
    check_package(package, {row.owner for row in rows})
    return root, [
        row
        for row in rows
        if (not ops or row.name in ops or f"{row.namespace}.{row.name}" in ops) and package in (None, row.owner)
    ]


def rows_elsewhere() -> list[inventory.Row]:
    """The rows of the roots jitops.load built into with a build_directory (the configured root
    lists them), those still there."""
    return [row for other in Store.other_roots() if os.path.isdir(other) for row in inventory.entry_rows(Path(other))]


def check_names(ops: list[str], also_known: AbstractSet[str] = frozenset()) -> None:
    """Each name an op of ours (its extension's name), or <namespace>.<name> of an extension
    declared here or in the cache."""
    ours = [name.partition(".")[2] for name, (owner, _) in registry.declared().items() if owner == registry.OWN]
    others = [name for name, (owner, _) in registry.declared().items() if owner != registry.OWN]
    unknown = sorted(set(ops) - set(ours) - set(others) - also_known)
    if unknown:
        known = sorted(set(others) | {n for n in also_known if "." in n and n.split(".")[0] not in ("", "jitops")})
        raise UsageError(f"unknown extension(s) {', '.join(unknown)}; available: {', '.join(ours + known)}")


def check_package(package: str | None, also_known: AbstractSet[str] = frozenset()) -> None:
    """--package names an owner (after registry.owner_named), or one with entries in the cache."""
    if package is not None and package not in set(registry.packages()) | also_known:
        known = [f"{owner} (import {name})" if name else owner for owner, name in registry.import_names().items()]
        raise UsageError(
            f"unknown package {package!r}: --package takes a distribution's name as `list` shows it, or "
            f"its import name; packages with extensions: {', '.join(known)}"
        )
