# SPDX-License-Identifier: MIT
"""jitops-cache: inspect, verify, prune and clear jitops' build cache; report the environment;
build ops ahead of time. Only `build` ever compiles.

Every command takes --json. Exit status: 0 success, 1 a problem was found (a corrupt entry, a
stale lock left in place, an op that cannot be had, a failed build), 2 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import jitops
from jitops import _cache, _core, _stats
from jitops._errors import BuildError, CacheError

from . import inventory, registry

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments that argparse cannot see (exit 2)."""


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def when(timestamp: float | None) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "-"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(v)) for v in column) for column in zip(headers, *rows)]
    for line in [headers, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip())


JSON_SCHEMA = 1  # bump when a field changes meaning or goes; new fields may appear within one schema


def emit(args: argparse.Namespace, data: dict, human) -> None:
    """--json: data as one JSON object carrying the schema version; else human() prints the readable form."""
    if args.json:
        print(json.dumps({"schema": JSON_SCHEMA, **data}, indent=2, default=str))
    else:
        human()


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 500M, 2G, 1048576)")
    number, unit = match.groups()
    return int(float(number) * 1024 ** ["", "k", "m", "g", "t"].index(unit.lower()))


def parse_age(text: str) -> float:
    match = _AGE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (examples: 90m, 12h, 30d)")
    number, unit = match.groups()
    return float(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit.lower()]


# ---------------------------------------------------------------------------------------------
# Commands that read
# ---------------------------------------------------------------------------------------------


def configured_root() -> tuple[Path, str]:
    """The cache root asked for, and why."""
    root, reason = _core.configured_root()
    return Path(root), reason


def cmd_dir(args: argparse.Namespace) -> int:
    root, reason = configured_root()
    emit(args, {"root": str(root), "reason": reason}, lambda: print(f"{root}  ({reason})"))
    return EXIT_OK


def selected_rows(ops: list[str], package: str | None = None) -> tuple[Path, list[inventory.Row]]:
    """The cache's rows of the named ops (all rows for none), each named `op` or
    `<namespace>.<op>`, of one owner with --package. A name that is neither declared here nor
    one with entries in the cache is a typo: a usage error, not "0 entries"."""
    root, _ = configured_root()
    rows = inventory.entry_rows(root)
    check_op_names(ops, {row.op for row in rows} | {f"{row.namespace}.{row.op}" for row in rows})
    check_package(package, {row.owner for row in rows})
    return root, [
        row for row in rows if (not ops or row.op in ops or f"{row.namespace}.{row.op}" in ops) and package in (None, row.owner)
    ]


def check_op_names(ops: list[str], also_known: set[str] = frozenset()) -> None:
    """Each name an op of ours, or <namespace>.<name> of an extension declared here or in the cache."""
    ours = [name.partition(".")[2] for name, (owner, _) in registry.declared().items() if owner == registry.OWN]
    others = [name for name, (owner, _) in registry.declared().items() if owner != registry.OWN]
    unknown = sorted(set(ops) - set(ours) - set(others) - also_known)
    if unknown:
        known = sorted(set(others) | {n for n in also_known if "." in n and n.split(".")[0] not in ("", "jitops")})
        raise UsageError(f"unknown op(s) {', '.join(unknown)}; available: {', '.join(ours + known)}")


def check_package(package: str | None, also_known: set[str] = frozenset()) -> None:
    if package is not None and package not in set(registry.packages()) | also_known:
        raise UsageError(f"unknown package {package!r}; packages with extensions: {', '.join(registry.packages())}")


# list's columns, and the order they are dropped in to fit a terminal (the last ones stay).
LIST_COLUMNS = [
    "OWNER",
    "NAMESPACE",
    "OP",
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


def fit_to_terminal(headers: list[str], rows: list[list[str]], drop_order: list[str]) -> tuple[list[str], list[list[str]]]:
    """On a terminal, the columns that fit its width (dropped in drop_order); piped, all of them."""
    if not sys.stdout.isatty():
        return headers, rows
    width = shutil.get_terminal_size().columns
    keep = list(range(len(headers)))
    for name in drop_order:
        widths = [max(len(str(line[i])) for line in [headers, *rows]) for i in keep]
        if sum(widths) + 2 * (len(keep) - 1) <= width:
            break
        keep.remove(headers.index(name))
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]


def cmd_list(args: argparse.Namespace) -> int:
    root, rows = selected_rows(args.ops, args.package)

    def human():
        table = [
            [
                r.owner,
                r.namespace,
                r.op,
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
                print(f"  {r.namespace}.{r.op}-{r.key[:8]} {r.status}: {r.reason}")
        print(f"{plural(len(rows), 'entry', 'entries')}, {human_size(sum(r.size for r in rows))} in {root}")
        print(store_summary(store))

    store = inventory.store_rows(root) if not (args.ops or args.package) else []
    data = {"root": str(root), "entries": [r.as_dict() for r in rows], "store": [r.as_dict() for r in store]}
    emit(args, data, human)
    return EXIT_OK


def _seen_in(roots: list[str]) -> str:
    """Where an entry's sources were seen: the newest tree, and how many others."""
    return "-" if not roots else roots[-1] + (f" (+{len(roots) - 1})" if len(roots) > 1 else "")


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


def lock_timeout_or_why() -> float | str:
    """JITOPS_LOCK_TIMEOUT in seconds, or why it is refused (a build would fail with that)."""
    from jitops import _lock

    try:
        return _lock.lock_timeout()
    except BuildError as err:
        return f"invalid: {str(err).removeprefix('jitops: ')}"


def cmd_info(args: argparse.Namespace) -> int:
    from jitops import _prebuilt

    from . import doctor

    root, rows = selected_rows([], args.package)
    store = inventory.store_rows(root) if args.package is None else []
    reason = configured_root()[1]
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
        "lock_timeout_s": lock_timeout_or_why(),
        "prebuilt_dirs": [str(d) for d in _prebuilt.prebuilt_dirs(None)],
        "store_bytes": sum(r.size for r in store),
        "seen_in": {f"{r.namespace}.{r.op}-{r.key}": r.seen_in for r in rows},
    }

    def human():
        print(f"cache root      {root}  ({reason})")
        print(f"entries         {len(rows)}, {human_size(data['bytes'])}")
        print("by status       " + ", ".join(f"{s} {n}" for s, n in by_status.items()))
        for name, value in data["environment"].items():
            print(f"{name:<15} {value}")
        timeout = data["lock_timeout_s"]
        print(f"lock timeout    {f'{timeout:.0f} s' if isinstance(timeout, float) else timeout} (JITOPS_LOCK_TIMEOUT)")
        print(f"prebuilt dirs   {doctor.existing_or_absent(data['prebuilt_dirs'])}")
        print(f"shared          {store_summary(store).partition(': ')[2]}")
        for name, roots in data["seen_in"].items():
            print(f"seen in         {name}: {', '.join(roots) or '-'}")

    emit(args, data, human)
    return EXIT_OK


def environment_summary() -> dict:
    import torch

    return {
        "python": f"{sys.version.split()[0]} ({_core.PYTHON_SOABI})",
        "torch": torch.__version__,
        "torch cuda": torch.version.cuda or "none (CPU-only build)",
    }


def cmd_verify(args: argparse.Namespace) -> int:
    root, rows = selected_rows([], args.package)
    chosen = {row.path for row in rows}
    results = []
    for entry, _ in _cache.list_entries(root):
        if str(entry.path) not in chosen:
            continue
        try:
            entry.verified_library(touch=False, full_hash=True)
            results.append({"name": entry.name, "key": entry.key, "path": str(entry.path), "ok": True, "problem": ""})
        except (CacheError, OSError) as err:
            results.append({"name": entry.name, "key": entry.key, "path": str(entry.path), "ok": False, "problem": str(err)})
    for row in inventory.store_rows(root, check=True) if args.package is None else []:
        ok = row.status != inventory.CORRUPT
        results.append(
            {"name": f"{row.kind} {row.op}", "key": row.key, "path": row.path, "ok": ok, "problem": row.reason if not ok else ""}
        )
    bad = [r for r in results if not r["ok"]]

    def human():
        for r in results:
            print(f"{'ok' if r['ok'] else 'MISMATCH':<9} {r['name']}-{r['key']}" + (f": {r['problem']}" if r["problem"] else ""))
        print(f"{plural(len(results), 'entry', 'entries')} checked, {len(bad)} with problems")

    emit(args, {"entries": results, "problems": len(bad)}, human)
    return EXIT_PROBLEM if bad else EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    """ccache -s for jitops: per extension, what the long way did since the counters were zeroed."""
    root, _ = configured_root()
    if args.zero:
        _stats.zero_stats(root)
        emit(args, {"root": str(root), "zeroed": True}, lambda: print(f"statistics zeroed in {root}"))
        return EXIT_OK
    extensions, zeroed_at = _stats.read_stats(root)
    owners = {name: registry.owner(name) for name in extensions}
    check_package(args.package, set(owners.values()))
    rows = [
        {"name": name, "owner": owners[name], **counters}
        for name, counters in sorted(extensions.items())
        if args.package in (None, owners[name])
    ]
    totals = {f: round(sum(row[f] for row in rows), 3) for f in _stats.STATS_FIELDS}

    def human():
        print_table(
            ["EXTENSION", "OWNER", "BUILDS", "BUILD S", "FAILED", "CACHE LOADS", "PREBUILT LOADS"],
            [
                [
                    r["name"],
                    r["owner"],
                    r["builds"],
                    f"{r['build_seconds']:.1f}",
                    r["failed_builds"],
                    r["cache_loads"],
                    r["prebuilt_loads"],
                ]
                for r in rows
            ],
        )
        print(
            f"{plural(int(totals['builds']), 'build', 'builds')} ({totals['build_seconds']:.1f} s), "
            f"{plural(int(totals['failed_builds']), 'failed build', 'failed builds')}, "
            f"{plural(int(totals['cache_loads']), 'cache load', 'cache loads')}, "
            f"{plural(int(totals['prebuilt_loads']), 'prebuilt load', 'prebuilt loads')} since "
            f"{when(zeroed_at) if zeroed_at else 'the cache was made'}, in {root}"
        )
        print("(warm loads, which write nothing, are not counted)")

    emit(args, {"root": str(root), "zeroed_at": zeroed_at, "extensions": rows, "totals": totals}, human)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Commands that remove
# ---------------------------------------------------------------------------------------------


def remove_rows(args: argparse.Namespace, root: Path, rows: list[inventory.Row]) -> int:
    """Remove the rows' directories (never one being built) and report what was freed."""
    removed, skipped = [], []
    for row in rows:
        if row.status == inventory.BUILDING:
            skipped.append({"path": row.path, "why": "being built"})
            continue
        if not args.dry_run:
            try:
                with entry_lock_taken(root, row) as acquired:
                    if not acquired:
                        skipped.append({"path": row.path, "why": "a build started"})
                        continue
                    _cache.remove_tree(Path(row.path))
            except FileNotFoundError:
                continue  # removed meanwhile
        removed.append(
            {
                "kind": row.kind,
                "namespace": row.namespace,
                "op": row.op,
                "key": row.key,
                "status": row.status,
                "path": row.path,
                "bytes": row.size,
            }
        )
    freed = sum(r["bytes"] for r in removed)
    # The warm records of what is gone (each names its entry folder): small, but one per op and
    # setting would otherwise pile up. A dry run removes nothing, so it lists only those already
    # dangling.
    records = inventory.dangling_warm_records(root)
    if not args.dry_run:
        for record in records:
            record.unlink(missing_ok=True)

    def human():
        verb = "would remove" if args.dry_run else "removed"
        for r in removed:
            label = f"{r['namespace']}.{r['op']}" if r["kind"] == "entry" else f"{r['kind']} {r['op']}"
            print(f"{verb} {label}-{r['key'][:8]} ({r['status']}, {human_size(r['bytes'])})  {r['path']}")
        for s in skipped:
            print(f"kept {s['path']}: {s['why']}")
        print(
            f"{verb} {plural(len(removed), 'entry', 'entries')}, {human_size(freed)} {'would be ' if args.dry_run else ''}freed"
        )
        if records:
            print(f"{verb} {plural(len(records), 'warm record', 'warm records')} of entries that are gone")

    data = {
        "dry_run": args.dry_run,
        "removed": removed,
        "skipped": skipped,
        "bytes_freed": freed,
        "warm_records_removed": [str(r) for r in records],
    }
    emit(args, data, human)
    return EXIT_OK


@contextlib.contextmanager
def entry_lock_taken(root: Path, row: inventory.Row):
    """Hold the entry's build lock while removing it, so that no build starts on it meanwhile.
    Yields False when a build holds it. Orphans, and entries of the older layout (no namespace),
    have no entry lock that a build takes."""
    if row.status == inventory.ORPHAN or not row.namespace or row.kind != "entry":
        yield True  # stored objects and PCHs are published whole and read without a lock
        return
    fd = os.open(root / f"{row.namespace}.{row.op}-{row.key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def cmd_clear(args: argparse.Namespace) -> int:
    if not (args.ops or args.stale or args.all or args.package):
        raise UsageError("say what to clear: OP names, --package PKG, --stale or --all")
    root, rows = selected_rows(args.ops, args.package)
    if not (args.ops or args.package):  # stored objects and PCHs belong to no one extension
        rows += inventory.store_rows(root)
    if args.stale and not args.all:
        rows = [r for r in rows if r.status in (inventory.STALE, inventory.CORRUPT, inventory.ORPHAN)]
    if args.all and not (args.yes or args.dry_run or args.json) and sys.stdin.isatty() and sys.stdout.isatty():
        # As conda clean asks: a person at a terminal confirms; scripts (no terminal) and --yes do not.
        size = human_size(sum(r.size for r in rows))
        # On stdout, not input()'s: without readline that writes the prompt to stderr.
        print(f"Remove {plural(len(rows), 'entry', 'entries')} ({size}) from {root}? [y/N] ", end="", flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return EXIT_PROBLEM
    status = remove_rows(args, root, rows)
    inline = root / _cache.INLINE_SOURCES  # load_inline's sources: written again by the next call that needs them
    if args.all and not args.ops and args.package in (None, registry.DROP_IN) and inline.is_dir():
        if not args.dry_run:
            _cache.remove_tree(inline)
        if not args.json:
            print(f"{'would remove' if args.dry_run else 'removed'} jitops.load_inline's sources {inline}")
    return status


def cmd_prune(args: argparse.Namespace) -> int:
    if args.max_size is None and args.older_than is None:
        raise UsageError("give --max-size SIZE, --older-than AGE, or both")
    import time

    root, rows = selected_rows([], args.package)
    rows += inventory.store_rows(root) if args.package is None else []
    rows = [r for r in rows if r.status != inventory.BUILDING]
    # Stale, corrupt and orphan entries go first, then the least recently used.
    useless = [r for r in rows if r.status != inventory.OK]
    usable = sorted((r for r in rows if r.status == inventory.OK), key=lambda r: r.last_used or 0)
    doomed = list(useless)
    if args.older_than is not None:
        cutoff = time.time() - args.older_than
        doomed += [r for r in usable if (r.last_used or 0) < cutoff]
    if args.max_size is not None:
        total = sum(r.size for r in rows) - sum(r.size for r in doomed)
        for r in usable:
            if total <= args.max_size:
                break
            if r not in doomed:
                doomed.append(r)
                total -= r.size
    return remove_rows(args, root, doomed)


def cmd_locks(args: argparse.Namespace) -> int:
    roots = [Path(_core.torch_extensions_root()), configured_root()[0]]
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


# ---------------------------------------------------------------------------------------------
# doctor and build
# ---------------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor

    report = doctor.report()
    emit(args, report, lambda: doctor.print_report(report))
    return EXIT_OK if all(op["available"] for op in report["ops"]) else EXIT_PROBLEM


def chosen_extensions(names: list[str], package: str | None) -> list[tuple[str, jitops.Extension]]:
    """(owner, Extension) of each name (`op` of ours, else <namespace>.<name>), or of every
    extension declared here (of one package with --package)."""
    check_op_names(names)
    check_package(package)
    chosen = []
    for qualified, (owner, extension) in registry.declared().items():
        short = qualified.partition(".")[2] if owner == registry.OWN else qualified
        if (not names or short in names or qualified in names) and package in (None, owner):
            chosen.append((owner, extension))
    return chosen


def cmd_build(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    if args.arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = args.arch
    chosen = chosen_extensions(args.ops, args.package)
    with ThreadPoolExecutor(max_workers=len(chosen) or 1) as pool:  # builds run in parallel, as load_all's
        futures = [(owner, extension, pool.submit(extension.load)) for owner, extension in chosen]
    errors = [f"  {extension.qualified_name}: {f.exception()}" for _, extension, f in futures if f.exception()]
    failure = f"{len(errors)} of {len(chosen)} failed:\n" + "\n".join(errors) if errors else None
    results = []
    for owner, extension, future in futures:
        if future.exception() is not None:
            continue
        loaded = future.result()
        op = extension.name if owner == registry.OWN else extension.qualified_name
        result = {"op": op, "owner": owner, "how": loaded.how, "with_cuda": loaded.with_cuda, "library": str(loaded.library)}
        if args.out:
            result["prebuilt"] = str(export_prebuilt(loaded.library.parent, Path(args.out)))
        results.append(result)

    def human():
        for r in results:
            where = f" -> {r['prebuilt']}" if "prebuilt" in r else ""
            print(f"{r['op']:<24} {r['how']:<8} {'cpu+cuda' if r['with_cuda'] else 'cpu':<8} {r['library']}{where}")
        if failure:
            print(failure, file=sys.stderr)

    emit(args, {"built": results, "error": failure}, human)
    return EXIT_PROBLEM if failure else EXIT_OK


def export_prebuilt(entry_dir: Path, out: Path) -> Path:
    """Copy a published entry (.so and manifest) into out/<namespace>.<name>-<key>/ for JITOPS_PREBUILT_DIR,
    replacing an older copy in one rename, so a reader never sees half of it. Everything it
    creates is readable by all and writable by its owner alone, whatever the umask: the loader
    refuses a prebuilt entry that anyone else could write (_prebuilt.untrusted_prebuilt)."""
    if not out.exists():
        out.mkdir(parents=True)
        os.chmod(out, 0o755)
    target = out / entry_dir.name
    staging = Path(tempfile.mkdtemp(prefix=f".{entry_dir.name}-", dir=out))
    try:
        manifest = json.loads((entry_dir / _core.MANIFEST_NAME).read_text())
        shutil.copy2(entry_dir / manifest["library"], staging / manifest["library"])
        _core.write_json_atomic(staging / _core.MANIFEST_NAME, manifest)
        os.chmod(staging / manifest["library"], 0o755)
        os.chmod(staging / _core.MANIFEST_NAME, 0o644)
        os.chmod(staging, 0o755)
        if target.exists():
            _cache.remove_tree(target)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitops-cache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--version", action="version", version=f"%(prog)s {jitops.__version__}")
    # --json after the command works too (`jitops-cache list --json`).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help_text, package=True):
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        if package:
            p.add_argument("--package", metavar="PKG", help="only the extensions of this owner (`list` shows owners)")
        return p

    command("dir", cmd_dir, "the cache root in use and why", package=False)
    command("list", cmd_list, "one row per cache entry, with its status").add_argument("ops", nargs="*", metavar="OP")
    command("info", cmd_info, "totals, the environment, the lock timeout")
    command("stats", cmd_stats, "builds, build seconds, cache and prebuilt loads per extension (as ccache -s)").add_argument(
        "--zero", action="store_true", help="zero the counters"
    )
    command("verify", cmd_verify, "re-hash every entry against its manifest; exit 1 on a mismatch")
    clear = command("clear", cmd_clear, "remove entries (never one being built)")
    clear.add_argument("ops", nargs="*", metavar="OP")
    clear.add_argument("--stale", action="store_true", help="only stale, corrupt and orphan entries")
    clear.add_argument("--all", action="store_true", help="every entry and leftover")
    clear.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask before --all on a terminal")
    prune = command("prune", cmd_prune, "evict least recently used entries (stale and orphan ones first)")
    prune.add_argument("--max-size", type=parse_size, metavar="SIZE", help="evict until the cache is at most SIZE (e.g. 2G)")
    prune.add_argument("--older-than", type=parse_age, metavar="AGE", help="evict entries unused for AGE (e.g. 30d)")
    prune.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    locks = command("locks", cmd_locks, "lock files under torch's extension root, live or stale", package=False)
    locks.add_argument("--clear-stale", action="store_true", help="remove stale torch FileBaton locks")
    command("doctor", cmd_doctor, "environment report; exit 1 when an op cannot be had")
    build = command("build", cmd_build, "build ops now, in parallel")
    build.add_argument("ops", nargs="*", metavar="OP")
    build.add_argument("--arch", help="TORCH_CUDA_ARCH_LIST for this build, e.g. '8.0;9.0'")
    build.add_argument("--out", help="also write prebuilt .so files with manifests here (for JITOPS_PREBUILT_DIR)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as err:
        parser.print_usage(sys.stderr)
        print(f"jitops-cache {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
