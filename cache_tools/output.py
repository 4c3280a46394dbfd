# SPDX-License-Identifier: MIT
"""How jitops-cache speaks: exit codes, usage errors, tables fitted to the terminal, sizes,
ages and times, and `--json` output (one object with a schema number)."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys

from jitops import _settings

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments that argparse cannot see (exit 2)."""


def human_size(n: float) -> str:
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


JSON_SCHEMA = (
    2  # bump when a field changes meaning or goes (2: an entry's "op" is its "name"); new fields may appear within one schema
)


def emit(args: argparse.Namespace, data: dict, human) -> None:
    """--json: data as one JSON object carrying the schema version; else human() prints the readable form."""
    if args.json:
        print(json.dumps({"schema": JSON_SCHEMA, **data}, indent=2, default=str))
    else:
        human()


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    try:
        return _settings.parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_age(text: str) -> float:
    match = _AGE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not an age: {text!r} (examples: 90m, 12h, 30d)")
    number, unit = match.groups()
    return float(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit.lower()]


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
