# SPDX-License-Identifier: MIT
"""What gcc's later garbage collection (jitops' --param=ggc-min-heapsize, docs/ARCHITECTURE.md)
does to one compile of a unit that includes torch/extension.h, with torch's flags:

    python examples/gcc_heap.py [--repeats 3] [--opt=-O3] [--json results.json]

Each repeat compiles the unit without the flag and with it, in turns (the first of each turn
alternating), one compile at a time; it reports the median wall time and peak memory of each, and
whether every object was the same, bit for bit.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNIT = """#include <torch/extension.h>
torch::Tensor scale(torch::Tensor x, double factor) { return x * factor; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); }
"""


def compile_once(command: list[str]) -> tuple[float, float]:
    """Seconds and peak memory (GB) of one compile."""
    started = time.perf_counter()
    proc = subprocess.Popen(command)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the compile failed: {shlex.join(command)}")
    return time.perf_counter() - started, usage.ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--opt", default="", help="an optimisation flag for the unit (torch's load() adds none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import torch

    from jitops.builder import _buildfile, _torch_flags

    cxx = os.environ.get("CXX", "c++")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    cflags, _ = _torch_flags.compile_flags("gcc_heap_unit", [args.opt] if args.opt else [], [], [], None)
    results: dict = {"compiler": version, "torch": torch.__version__, "cores": os.cpu_count(), "opt": args.opt}
    with tempfile.TemporaryDirectory(prefix="jitops-gcc-heap-") as tmp:
        unit = Path(tmp) / "unit.cpp"
        unit.write_text(UNIT)
        ways = {"without": [], "with": [_buildfile.GCC_HEAP_FLAG]}
        runs: dict = {way: [] for way in ways}
        objects: dict = {way: set() for way in ways}
        for repeat in range(args.repeats):
            for way in list(ways) if repeat % 2 == 0 else list(ways)[::-1]:
                output = Path(tmp) / f"{way}.o"
                command = [cxx, *shlex.split(cflags), *ways[way], "-c", str(unit), "-o", str(output)]
                runs[way].append(compile_once(command))
                objects[way].add(output.read_bytes())
                print(f"  {way} the flag: {runs[way][-1][0]:.2f} s, {runs[way][-1][1]:.2f} GB", file=sys.stderr, flush=True)
    for way in ways:
        results[way] = {
            "seconds": statistics.median(s for s, _ in runs[way]),
            "peak_gb": statistics.median(m for _, m in runs[way]),
            "samples_s": [round(s, 2) for s, _ in runs[way]],
        }
    results["same_objects"] = len(objects["with"] | objects["without"]) == 1
    without, with_ = results["without"], results["with"]
    print(f"gcc's garbage collection on one torch/extension.h unit ({version}; torch {torch.__version__}; {args.opt or 'no -O'})")
    print("| compile | seconds (median) | peak memory (GB) |")
    print("| --- | ---: | ---: |")
    print(f"| torch's flags | {without['seconds']:.2f} | {without['peak_gb']:.2f} |")
    print(f"| with {_buildfile.GCC_HEAP_FLAG} | {with_['seconds']:.2f} | {with_['peak_gb']:.2f} |")
    print(
        f"with / without: {with_['seconds'] / without['seconds']:.3f}x; the same objects, bit for bit: {results['same_objects']}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
