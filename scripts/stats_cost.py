# SPDX-License-Identifier: MIT
"""What one update of the cache's statistics (jitops-cache stats) costs, against which a warm load
is weighed: `python scripts/stats_cost.py [--repeats 50]`."""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from jitops.store import _usage

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--repeats", type=int, default=50)
repeats = parser.parse_args().repeats
root = Path(tempfile.mkdtemp(prefix="jitops-stats-cost-"))
_usage.count(root, "jitops.add2", cache_loads=1)  # the file exists, as it does after the first build
seconds = []
for _ in range(repeats):
    started = time.perf_counter()
    _usage.count(root, "jitops.add2", cache_loads=1)
    seconds.append(time.perf_counter() - started)
print(
    f"one counter update: median {statistics.median(seconds) * 1e3:.2f} ms, range {min(seconds) * 1e3:.2f}-"
    f"{max(seconds) * 1e3:.2f} ms over {repeats}"
)
