# SPDX-License-Identifier: MIT
"""The commands that read: dir, list, info, verify, stats, locks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jitops import _files, _layout, _settings
from jitops._errors import CacheError
from jitops.store import Store, prebuilt_dirs

from . import doctor, inventory, registry
from .output import EXIT_OK, EXIT_PROBLEM, emit, fit_to_terminal, human_size, plural, print_table, when
from .remote import cmd_list_remote
from .selection import check_package, selected_rows


def cmd_dir(args: argparse.Namespace) -> int:
    root, reason = _layout.configured_root()
    emit(args, {"root": str(root), "reason": reason}, lambda: print(f"{root}  ({reason})"))
    return EXIT_OK


# list's columns, and the order they are dropped in to fit a terminal (the last ones stay).
LIST_COLUMNS = [
    "OWNER",
    "NAMESPACE",
    "NAME",
    "BACKENDS",
    "KEY",
    "TORCH",
    "CUDA",
    "ARCH",
    "SIZE",
    "BUILT",
    "BUILD S",
    "LAST USED",
    "SEEN IN",
    "STATUS",
]
LIST_DROPPED_FIRST = [
    "SEEN IN",
    "BUILT",
    "BUILD S",
    "NAMESPACE",
    "ARCH",
    "TORCH",
    "CUDA",
    "KEY",
    "OWNER",
    "BACKENDS",
    "LAST USED",
]


def cmd_list(args: argparse.Namespace) -> int:
    if args.remote:
        return cmd_list_remote(args)
    root, rows = selected_rows(args.names, args.package, other_roots=True)

    def human():
        table = [
            [
                r.owner,
                r.namespace,
                r.name,
                "+".join(r.backends) or "-",
                r.key[:8],
                r.torch or "-",
                r.cuda or "-",
                r.arch or "-",
                human_size(r.size),
                when(r.built_at),
                f"{r.build_seconds:.1f}" if r.build_seconds else "-",
                when(r.last_used),
                _seen_in(r.seen_in),
                r.status,
            ]
            for r in rows
        ]
        print_table(*fit_to_terminal(LIST_COLUMNS, table, LIST_DROPPED_FIRST))
        for r in rows:
            if r.reason:
                print(f"  {r.namespace}.{r.name}-{r.key[:8]} {r.status}: {r.reason}")
            if r.fetched_under:  # what `clear --signed-by KEY` takes
                print(f"  {r.namespace}.{r.name}-{r.key[:8]} fetched from the remote cache, signed by {r.fetched_under}")
        print(f"{plural(len(rows), 'entry', 'entries')}, {human_size(sum(r.size for r in rows))} in {root}")
        for other in sorted({str(Path(r.path).parent) for r in rows} - {str(root)}):
            print(f"  (and in {other}: entries built with a build_directory there)")
        print(store_summary(store))
        print(budget_summary(data))

    store = inventory.store_rows(root) if not (args.names or args.package) else []
    data = {"root": str(root), "entries": [r.as_dict() for r in rows], "store": [r.as_dict() for r in store]}
    data.update(budget_data(root))
    emit(args, data, human)
    return EXIT_OK


def _seen_in(roots: list[str]) -> str:
    """Where an entry's sources were seen: the newest tree, and how many others."""
    return "-" if not roots else roots[-1] + (f" (+{len(roots) - 1})" if len(roots) > 1 else "")


def budget_data(root: Path) -> dict:
    """The whole cache's size against the budget (JITOPS_CACHE_MAX_SIZE), and the parts of it that
    cannot be used (objects/, pch/: each costs compiles)."""
    try:
        budget = _settings.get("JITOPS_CACHE_MAX_SIZE")
    except CacheError as err:
        budget = str(err).removeprefix("jitops: ")
    problems = [p for part in _layout.OPTIONAL_PARTS if (p := Store(root).part_problem(part))]
    return {"total_bytes": _files.tree_size(root), "budget_bytes": budget, "unusable_parts": problems}


def budget_summary(data: dict) -> str:
    budget = data["budget_bytes"]
    if isinstance(budget, str):
        of = f"budget {budget}"
    else:
        of = f"of a budget of {human_size(budget)}" if budget else "no budget"
    line = f"in all {human_size(data['total_bytes'])}, {of} (JITOPS_CACHE_MAX_SIZE)"
    return "\n".join([line] + [f"  unusable: {problem} (costs compiles)" for problem in data["unusable_parts"]])


def store_summary(store: list[inventory.Row]) -> str:
    """One line on what every extension shares: stored objects and precompiled headers."""
    parts = []
    for kind, one, many in (("object", "stored object", "stored objects"), ("pch", "precompiled header", "precompiled headers")):
        found = [r for r in store if r.kind == kind]
        parts.append(f"{plural(len(found), one, many)} ({human_size(sum(r.size for r in found))})")
        parts[-1] += "".join(
            f", {sum(r.status == s for r in found)} {s}"
            for s in (inventory.CORRUPT, inventory.ORPHAN)
            if any(r.status == s for r in found)
        )
    return "shared by every extension: " + ", ".join(parts)


def cmd_info(args: argparse.Namespace) -> int:

    root, rows = selected_rows([], args.package)
    store = inventory.store_rows(root) if args.package is None else []
    reason = _layout.configured_root()[1]
    settings = settings_data()
    by_status = {
        s: sum(1 for r in rows if r.status == s)
        for s in (inventory.OK, inventory.STALE, inventory.CORRUPT, inventory.BUILDING, inventory.ORPHAN)
    }
    data = {
        "root": str(root),
        "root_reason": reason,
        "entries": len(rows),
        "bytes": sum(r.size for r in rows),
        "by_status": by_status,
        "environment": environment_summary(),
        "lock_timeout_s": settings["JITOPS_LOCK_TIMEOUT"]["error"] or settings["JITOPS_LOCK_TIMEOUT"]["value"],
        "settings": settings,
        "prebuilt_dirs": [str(d) for d in prebuilt_dirs(None)],
        "remote": doctor.remote_settings(),
        "store_bytes": sum(r.size for r in store),
        "seen_in": {f"{r.namespace}.{r.name}-{r.key}": r.seen_in for r in rows},
        **budget_data(root),
    }

    def human():
        print(f"cache root      {root}  ({reason})")
        print(f"entries         {len(rows)}, {human_size(data['bytes'])}")
        print("by status       " + ", ".join(f"{s} {n}" for s, n in by_status.items()))
        for name, value in data["environment"].items():
            print(f"{name:<15} {value}")
        print(f"prebuilt dirs   {doctor.existing_or_absent(data['prebuilt_dirs'])}")
        print(f"remote cache    {doctor.remote_line(data['remote'])}")
        print(f"shared          {store_summary(store).partition(': ')[2]}")
        print(f"cache size      {budget_summary(data)}")
        for name, roots in data["seen_in"].items():
            print(f"seen in         {name}: {', '.join(roots) or '-'}")
        print("settings")
        width = max(map(len, data["settings"]))
        for name, setting in data["settings"].items():
            print(f"  {name:<{width}}  {setting['error'] or shown(setting['value'])}  ({setting['source']})")

    emit(args, data, human)
    return EXIT_OK


def settings_data() -> dict:
    """Every JITOPS_* setting: its value (its default where unset), where that came from, and
    why a value set is refused ("" where it is not)."""
    data = {}
    for name, setting in _settings.SETTINGS.items():
        value, error = setting.default, ""
        try:
            value = _settings.get(name)
        except CacheError as err:
            value, error = _settings.text(name), f"invalid: {str(err).removeprefix('jitops: ')}"
        variable = _settings.source(name)
        source = "default" if variable == "default" else "environment" + (f", as {variable}" if variable != name else "")
        data[name] = {"value": list(value) if isinstance(value, tuple) else value, "source": source, "error": error}
    return data


def shown(value) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, list):
        return ",".join(value) or "-"
    if isinstance(value, float):
        return f"{value:g} s"
    if isinstance(value, int):
        return human_size(value)
    return value or "-"


def environment_summary() -> dict:
    import torch

    return {
        "python": f"{sys.version.split()[0]} ({_layout.PYTHON_SOABI})",
        "torch": torch.__version__,
        "torch cuda": torch.version.cuda or "none (CPU-only build)",
    }


def cmd_verify(args: argparse.Namespace) -> int:
    root, rows = selected_rows([], args.package)
    chosen = {row.path for row in rows}
    results: list[dict[str, Any]] = []
    for entry, _ in Store(root).entries():
        if str(entry.path) not in chosen:
            continue
        try:
            entry.verified_library(touch=False, full_hash=True)
            torch = inventory.torch_text((entry.read_manifest() or {}).get("components", {}))
            results.append(
                {"name": entry.name, "key": entry.key, "path": str(entry.path), "ok": True, "problem": "", "torch": torch}
            )
        except (CacheError, OSError) as err:
            results.append({"name": entry.name, "key": entry.key, "path": str(entry.path), "ok": False, "problem": str(err)})
    for row in inventory.store_rows(root, check=True) if args.package is None else []:
        ok = row.status != inventory.CORRUPT
        results.append(
            {
                "name": f"{row.kind} {row.name}",
                "key": row.key,
                "path": row.path,
                "ok": ok,
                "problem": row.reason if not ok else "",
            }
        )
    for part in _layout.OPTIONAL_PARTS:  # unusable, it costs compiles: a problem to fix, not a wrong load
        problem = Store(root).part_problem(part)
        if problem:
            results.append({"name": f"{part}/", "key": "", "path": str(root / part), "ok": False, "problem": problem})
    bad = [r for r in results if not r["ok"]]

    def human():
        for r in results:
            torch = f" (torch {r['torch']})" if r.get("torch") and "any Python" in r["torch"] else ""
            print(
                f"{'ok' if r['ok'] else 'MISMATCH':<9} {r['name']}-{r['key']}{torch}"
                + (f": {r['problem']}" if r["problem"] else "")
            )
        print(f"{plural(len(results), 'entry', 'entries')} checked, {len(bad)} with problems")

    emit(args, {"entries": results, "problems": len(bad)}, human)
    return EXIT_PROBLEM if bad else EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    """ccache -s for jitops: per extension, what the long way did since the counters were zeroed."""
    root = Path(_layout.configured_root()[0])
    if args.zero:
        try:
            Store(root).zero_stats()
        except OSError as err:  # a read-only root: one line, the counters kept
            print(f"jitops-cache stats --zero: cannot zero the statistics in {root}: {err.strerror or err}", file=sys.stderr)
            return EXIT_PROBLEM
        emit(args, {"root": str(root), "zeroed": True}, lambda: print(f"statistics zeroed in {root}"))
        return EXIT_OK
    extensions, zeroed_at = Store(root).stats()
    owners = {name: registry.owner(name) for name in extensions}
    check_package(args.package, set(owners.values()))
    rows: list[dict[str, Any]] = [
        {"name": name, "owner": owners[name], **counters}
        for name, counters in sorted(extensions.items())
        if args.package in (None, owners[name])
    ]
    totals = {f: round(sum(row[f] for row in rows), 3) for f in Store.STATS_FIELDS}

    def human():
        print_table(
            ["EXTENSION", "OWNER", "BUILDS", "BUILD S", "FAILED", "CACHE LOADS", "REMOTE LOADS", "PREBUILT LOADS"],
            [
                [
                    r["name"],
                    r["owner"],
                    r["builds"],
                    f"{r['build_seconds']:.1f}",
                    r["failed_builds"],
                    r["cache_loads"],
                    r["remote_loads"],
                    r["prebuilt_loads"],
                ]
                for r in rows
            ],
        )
        print(
            f"{plural(int(totals['builds']), 'build', 'builds')} ({totals['build_seconds']:.1f} s), "
            f"{plural(int(totals['failed_builds']), 'failed build', 'failed builds')}, "
            f"{plural(int(totals['cache_loads']), 'cache load', 'cache loads')}, "
            f"{plural(int(totals['remote_loads']), 'remote load', 'remote loads')}, "
            f"{plural(int(totals['prebuilt_loads']), 'prebuilt load', 'prebuilt loads')} since "
            f"{when(zeroed_at) if zeroed_at else 'the cache was made'}, in {root}"
        )
        print("(warm loads, which write nothing, are not counted)")

    emit(args, {"root": str(root), "zeroed_at": zeroed_at, "extensions": rows, "totals": totals}, human)
    return EXIT_OK


def cmd_locks(args: argparse.Namespace) -> int:
    roots = [Path(_layout.torch_extensions_root()), Path(_layout.configured_root()[0])]
    rows = inventory.lock_rows(roots)
    cleared = []
    if args.clear_stale:
        for row in rows:
            if row.state == "stale":
                Path(row.path).unlink(missing_ok=True)
                cleared.append(row.path)
    remaining_stale = [r for r in rows if r.state == "stale" and r.path not in cleared]

    def human():
        print_table(
            ["STATE", "KIND", "PIDS", "AGE", "PATH"],
            [
                [
                    r.state,
                    r.kind,
                    ",".join(map(str, r.pids)) if r.pids else ("?" if r.pids is None else "-"),
                    f"{r.age_s / 60:.0f} min",
                    r.path,
                ]
                for r in rows
            ],
        )
        for path in cleared:
            print(f"removed stale lock {path}")
        print(f"{len(rows)} lock files under {', '.join(map(str, dict.fromkeys(roots)))}; {len(remaining_stale)} stale left")

    emit(args, {"locks": [r.as_dict() for r in rows], "cleared": cleared}, human)
    return EXIT_PROBLEM if remaining_stale else EXIT_OK
