# SPDX-License-Identifier: MIT
"""What the budget costs after a build, on a cache root as it is (nothing is removed while it is
within its budget): the walk every build does, and the listing and /proc scan it adds when over.

    python scripts/budget_cost.py CACHE_ROOT [--repeats 20]
"""

import argparse
import os
import statistics
import time
from pathlib import Path

from jitops import _files, _settings
from jitops.store import _budget


def median_ms(run, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if _files.tree_size(args.root) > _settings.get("JITOPS_CACHE_MAX_SIZE"):
        raise SystemExit(f"{args.root} is over its budget: measuring would evict")
    files = sum(1 for _ in args.root.rglob("*"))
    processes = sum(1 for p in os.listdir("/proc") if p.isdigit())
    print(f"{args.root}: {files} files and folders, {processes} processes")
    print(
        f"after every build (within budget: one walk)   {median_ms(lambda: _budget.enforce_budget(args.root), args.repeats):6.2f} ms"
    )
    print(f"over budget, listing what can go            + {median_ms(lambda: _budget.items(args.root), args.repeats):6.2f} ms")
    print(
        f"over budget, what live processes map (/proc) + {median_ms(lambda: _budget.live_paths(args.root), args.repeats):6.2f} ms"
    )


if __name__ == "__main__":
    main()
