# SPDX-License-Identifier: MIT
"""jitops-cache: inspect, verify, prune and clear jitops' build cache; report the environment;
build ops ahead of time. Only `build` ever compiles.

Every command takes --json. Exit status: 0 success, 1 a problem was found (a corrupt entry, a
stale lock left in place, an extension that cannot be had, a failed build), 2 bad usage, 141 the reader
of the output left early.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import jitops

from . import building, reading, remote, removing
from .output import EXIT_USAGE, UsageError, parse_age, parse_size


class Parser(argparse.ArgumentParser):
    """argparse's, whose usage errors are JSON on stdout when --json was asked for (the commands'
    parsers are of this class too: add_subparsers makes them of their parent's)."""

    json_errors = False

    def error(self, message: str):
        if Parser.json_errors:
            print(json.dumps({"error": message, "usage": self.format_usage().strip()}))
            self.exit(EXIT_USAGE)
        super().error(message)


RUN_HELP = """\
python -m jitops also runs programs with every torch.utils.cpp_extension.load/load_inline
going through jitops:
  python -m jitops run script.py [args]
  python -m jitops run -m package.module [args]"""


def build_parser(prog: str = "jitops-cache") -> argparse.ArgumentParser:
    """The CLI's parser, calling itself prog (`python -m jitops` also says what `run` does)."""
    parser = Parser(
        prog=prog,
        description=__doc__,
        epilog=RUN_HELP if prog != "jitops-cache" else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--version", action="version", version=f"%(prog)s {jitops.__version__}")
    # --json after the command works too (`jitops-cache list --json`).
    common = Parser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help_text, package=True):
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        if package:
            p.add_argument("--package", metavar="PKG", help="only the extensions of this owner (`list` shows owners)")
        return p

    command("dir", reading.cmd_dir, "the cache root in use and why", package=False)
    listing = command("list", reading.cmd_list, "one row per cache entry, with its status")
    listing.add_argument("names", nargs="*", metavar="NAME")
    listing.add_argument("--remote", action="store_true", help="the remote cache's entries (JITOPS_REMOTE_CACHE)")
    command("info", reading.cmd_info, "totals, the environment, every JITOPS_* setting and its source")
    command(
        "stats", reading.cmd_stats, "builds, build seconds, cache and prebuilt loads per extension (as ccache -s)"
    ).add_argument("--zero", action="store_true", help="zero the counters")
    command("verify", reading.cmd_verify, "re-hash every entry against its manifest; exit 1 on a mismatch")
    _removing_commands(command)
    _building_commands(command)
    return parser


def _removing_commands(command) -> None:
    """clear and prune."""
    clear = command("clear", removing.cmd_clear, "remove entries (never one being built)")
    clear.add_argument("names", nargs="*", metavar="NAME")
    clear.add_argument("--stale", action="store_true", help="only stale, corrupt and orphan entries")
    clear.add_argument("--all", action="store_true", help="every entry and leftover")
    clear.add_argument(
        "--signed-by", metavar="KEY", help="only entries fetched from the remote cache under this public key (ed25519:...)"
    )
    clear.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask before --all on a terminal")
    prune = command(
        "prune", removing.cmd_prune, "keep the cache within its budget: stale entries first, then least recently used"
    )
    prune.add_argument(
        "--max-size",
        type=parse_size,
        metavar="SIZE",
        help="evict until the cache is at most SIZE (default: JITOPS_CACHE_MAX_SIZE, 2G)",
    )
    prune.add_argument("--older-than", type=parse_age, metavar="AGE", help="evict entries unused for AGE (e.g. 30d)")
    prune.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    prune.add_argument(
        "--remote",
        action="store_true",
        help="prune the remote cache instead: --untrusted or --signed-by KEY (with --yes), or by push time (--older-than, --max-size)",
    )
    prune.add_argument("--untrusted", action="store_true", help="with --remote: the records a reader here refuses")
    prune.add_argument("--signed-by", metavar="KEY", help="with --remote: the records this public key signed")
    prune.add_argument("-y", "--yes", action="store_true", help="with --untrusted or --signed-by: remove them (else only listed)")


def _building_commands(command) -> None:
    """remote, locks, doctor, pch and build."""
    remote_cmd = command(
        "remote", remote.cmd_remote, "the remote cache: status (server, hits, misses, bytes), push local entries, keygen"
    )
    remote_cmd.add_argument("action", choices=["status", "push", "keygen"])
    remote_cmd.add_argument(
        "names", nargs="*", metavar="NAME", help="push: only these extensions; keygen: the private key's file"
    )
    locks = command("locks", reading.cmd_locks, "lock files under torch's extension root, live or stale", package=False)
    locks.add_argument("--clear-stale", action="store_true", help="remove stale torch FileBaton locks")
    command("doctor", building.cmd_doctor, "environment report; exit 1 when an extension cannot be had")
    command(
        "pch",
        building.cmd_pch,
        "build now the precompiled headers of torch/extension.h this machine's jitops.load builds use (0.4-0.8 GB each)",
        package=False,
    )
    build = command("build", building.cmd_build, "build ops now, in parallel")
    build.add_argument("names", nargs="*", metavar="NAME")
    build.add_argument("--arch", help="TORCH_CUDA_ARCH_LIST for this build, e.g. '8.0;9.0'")
    build.add_argument(
        "--out",
        help="also write prebuilt .so files with manifests here (for JITOPS_PREBUILT_DIR, or a package's prebuilt_dir: "
        "there, from the sources of the source tree DIR lies in)",
    )


def main(argv: list[str] | None = None, prog: str = "jitops-cache") -> int:
    parser = build_parser(prog)
    argv = sys.argv[1:] if argv is None else argv
    Parser.json_errors = "--json" in argv  # a usage error is JSON too, on stdout, where the caller parses
    args = parser.parse_args(argv)
    try:
        if getattr(args, "package", None):  # a distribution's name in any spelling, or its import name
            from . import registry  # only for --package: the other commands read no entry points

            args.package = registry.owner_named(args.package) or args.package
        return args.handler(args)
    except UsageError as err:
        if Parser.json_errors:
            parser.error(f"{args.command}: {err}")
        parser.print_usage(sys.stderr)
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `jitops-cache list | head`: the reader left, as SIGPIPE would end a C tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
