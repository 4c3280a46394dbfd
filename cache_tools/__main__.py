# SPDX-License-Identifier: MIT
"""jitops-cache: `dir` and `list` so far; the full command set is tracked in issue 5."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from jitops import _cache


def cmd_dir(args: argparse.Namespace) -> int:
    root, reason = _cache.configured_root()
    if args.json:
        print(json.dumps({"root": str(root), "reason": reason}))
    else:
        print(f"{root}  ({reason})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    root, _ = _cache.configured_root()
    rows = []
    for entry, manifest in _cache.list_entries(root):
        if args.ops and entry.op not in args.ops:
            continue
        manifest = manifest or {}
        components = manifest.get("components", {})
        rows.append(
            {
                "op": entry.op,
                "key": entry.key,
                "backends": components.get("backends"),
                "torch": components.get("torch"),
                "built_at": manifest.get("built_at"),
                "build_seconds": manifest.get("build_seconds"),
                "path": str(entry.path),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        built = datetime.datetime.fromtimestamp(row["built_at"]).isoformat(" ", "seconds") if row["built_at"] else "?"
        backends = "+".join(row["backends"] or ["?"])
        print(f"{row['op']:<24} {row['key']}  {backends:<9} torch {row['torch']}  built {built}")
    print(f"{len(rows)} entries in {root}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jitops-cache", description=__doc__)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dir", help="the cache root in use and why").set_defaults(handler=cmd_dir)
    listing = sub.add_parser("list", help="one row per cached build")
    listing.add_argument("ops", nargs="*", help="only these ops")
    listing.set_defaults(handler=cmd_list)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
