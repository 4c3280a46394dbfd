# SPDX-License-Identifier: MIT
"""jitops.load against torch.utils.cpp_extension.load on the same sources, cold and warm, each in
a fresh process, the clock started before `import jitops` / `from torch.utils.cpp_extension
import load` (after `import torch` and CUDA initialisation, as examples/load_time.py does).

    python examples/drop_in_time.py [--repeats 11] [--baseline-repeats 11] [--cold-repeats 1] [--json results.json] [--installed] [--phases]

--installed times the jitops installed in this Python as users have it (`pip install .`, not
editable), every child run from a temporary folder outside the checkout; it refuses to run where
jitops would come from the checkout. --phases times each step of a warm jitops.load instead
(the median of each over --repeats new processes): where the milliseconds above the floor go.

Extensions:
  tutorial add2   the extension tutorials' add2: add2.cpp (pybind11) + add2_cpu.cpp, or
                  add2_kernel.cu where there is a GPU (examples/baseline_add2)
  3 units         three C++ units: tests/downstream_pkg's scale.cpp (a torch.library op) and
                  fused.cpp (a pybind11 module), and the tutorial's add2_cpu.cpp

Cold figures are the median of --cold-repeats builds each, jitops and torch alternating which
goes first. Both are called with the same arguments; torch's with a build_directory of its own (it needs
one to exist), jitops' with an empty cache of its own (JITOPS_CACHE_DIR). Warm figures are the
median over new processes; jitops' warm loads also count spawned processes and file locks. The
floor: the library jitops built, imported by its path alone (lazy binding, no checks), in new
processes: what any loader's warm start costs at least; jitops' warm figure above it is its own.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from load_time import CHILD_PRELUDE, child_env, run_child

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEMO = REPO / "tests" / "downstream_pkg" / "src" / "demo_pkg" / "csrc"

CHILD = (
    CHILD_PRELUDE
    + """
which, name, build, sources, cflags, includes = sys.argv[1], sys.argv[2], sys.argv[3] or None, *map(json.loads, sys.argv[4:])
started = time.perf_counter()
if which == "jitops":
    import jitops
    load = jitops.load
else:
    from torch.utils.cpp_extension import load
module = load(name, sources, extra_cflags=cflags, extra_include_paths=includes, build_directory=build)
seconds = time.perf_counter() - started
report(seconds, module=module.__name__, library=module.__file__, package=sys.modules["jitops"].__file__ if which == "jitops" else "")
"""
)

# The floor under any loader's warm start: the library jitops built, imported by its path alone
# (with lazy binding, as jitops opens it), no checks and no loader imported.
FLOOR_CHILD = (
    CHILD_PRELUDE
    + """
import importlib.util, os
name, path = sys.argv[1], sys.argv[2]
started = time.perf_counter()
sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_LOCAL)
spec = importlib.util.spec_from_file_location(name, path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
report(time.perf_counter() - started)
"""
)


# A warm jitops.load's steps, each timed: what it does on a warm start, spelled out.
PHASES_CHILD = (
    CHILD_PRELUDE
    + """
import os
name, sources, cflags, includes = sys.argv[1], *map(json.loads, sys.argv[2:])
steps, last = {}, time.perf_counter()
def step(what):
    global last
    now = time.perf_counter()
    steps[what], last = (now - last) * 1e3, now
import jitops; step("import jitops")
jitops.load; step("import jitops.compat._torch_load")
import jitops.warm
from jitops.compat import _torch_load
root = os.path.commonpath([os.path.dirname(s) for s in sources])
extension = _torch_load.declare(
    name, root, [os.path.relpath(s, root) for s in sources], cflags, None, None, includes, None, True, None
); step("declare the Extension")
jitops.warm.cxx_runtime(); step("settings: the C++ runtime")
settings = jitops.warm.settings(extension); step("settings: the rest")
library, record, _ = jitops.warm.recorded_library(extension, settings); step(f"warm record: read, {len(record['checked'])} stat calls")
jitops.warm.open_library(library, verified=True); step("dlopen (lazy binding)")
jitops.warm.LoadedLibrary(extension, library, False, "", "cache").module; step("import the module")
report(sum(steps.values()) / 1e3, steps=steps)
"""
)


def phases(repeats: int, tmp: Path, installed: bool) -> None:
    """Each extension's warm jitops.load, step by step: the median of each step over new processes."""
    for case, (name, sources, cflags, includes) in cases().items():
        env = child_env(JITOPS_CACHE_DIR=str(tmp / f"cache-{name}"))
        if installed:
            env.pop("PYTHONPATH")
        args = [name, *map(json.dumps, (sources, cflags, includes))]
        run_child(CHILD, ["jitops", name, "", *args[1:]], env, cwd=tmp)  # build, or load: warm from here on
        runs = [run_child(PHASES_CHILD, args, env, cwd=tmp)["steps"] for _ in range(repeats)]
        print(f"{case}: a warm jitops.load's steps, median of {repeats} new processes (ms)")
        for what in runs[0]:
            print(f"  {what:<40}{statistics.median(r[what] for r in runs):>8.3f}")
        print(f"  {'total':<40}{statistics.median(sum(r.values()) for r in runs):>8.3f}", flush=True)


def cases() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    tutorial = [
        str(HERE / "baseline_add2" / "add2.cpp"),
        str(HERE / "baseline_add2" / ("add2_kernel.cu" if cuda else "add2_cpu.cpp")),
    ]
    three = [str(DEMO / "scale.cpp"), str(DEMO / "fused.cpp"), str(HERE / "baseline_add2" / "add2_cpu.cpp")]
    includes = [str(REPO / "jitops" / "include"), str(DEMO / "include")]
    return {
        "tutorial add2": ("tutorial_add2", tutorial, ["-O3"], []),
        "3 units": ("three_units", three, ["-O3", "-DJITOPS_NAMESPACE=demo_pkg"], includes),
    }


def measure(repeats: int, baseline_repeats: int, tmp: Path, installed: bool, cold_repeats: int = 1) -> dict:
    results = {}
    for case, (name, sources, cflags, includes) in cases().items():
        row, colds, warm_from = {}, {"jitops": [], "torch": []}, {}
        # Cold builds, each into an empty cache or build directory of its own; over several rounds
        # the order alternates, so that neither loader always builds first (into colder file caches).
        for round in range(cold_repeats):
            for which in ("jitops", "torch") if round % 2 == 0 else ("torch", "jitops"):
                build = tmp / f"{which}-{name}-{round}"
                build.mkdir()
                env = child_env(JITOPS_CACHE_DIR=str(tmp / f"cache-{name}-{round}"))
                if installed:  # the installed package, not the checkout that child_env puts first
                    env.pop("PYTHONPATH")
                args = [which, name, str(build) if which == "torch" else "", *map(json.dumps, (sources, cflags, includes))]
                cold = run_child(CHILD, args, env, cwd=tmp)
                if installed and which == "jitops" and Path(cold["package"]).resolve().is_relative_to(REPO):
                    raise SystemExit(f"jitops came from the checkout ({cold['package']}): `pip install .` it first")
                colds[which].append(cold["seconds"])
                warm_from[which] = (args, env, cold)
                print(f"  {case}, {which}: cold {cold['seconds']:.2f} s", file=sys.stderr, flush=True)
        for which, count in (("jitops", repeats), ("torch", baseline_repeats)):
            args, env, cold = warm_from[which]
            warm = [run_child(CHILD, args, env, cwd=tmp) for _ in range(count)]
            if which == "jitops":
                floor = [run_child(FLOOR_CHILD, [name, cold["library"]], env, cwd=tmp) for _ in range(count)]
                row["floor_ms"] = statistics.median(f["seconds"] for f in floor) * 1e3
            row[which] = {
                "cold_s": statistics.median(colds[which]),
                "cold_range_s": [min(colds[which]), max(colds[which])],
                "warm_ms": statistics.median(w["seconds"] for w in warm) * 1e3,
                "warm_range_ms": [min(w["seconds"] for w in warm) * 1e3, max(w["seconds"] for w in warm) * 1e3],
                "warm_spawned": max(w["spawned"] for w in warm),
                "warm_locks": max(w["locks"] for w in warm),
            }
            print(f"  {case}, {which}: warm {row[which]['warm_ms']:.2f} ms", file=sys.stderr, flush=True)
        results[case] = row
    return results


def print_table(results: dict) -> None:
    print(
        f"{'extension':<16}{'jitops cold s':>14}{'torch cold s':>13}{'cold ratio':>11}{'jitops warm ms':>16}"
        f"{'torch warm ms':>15}{'warm speed-up':>15}{'floor ms':>10}{'above floor ms':>16}{'spawns':>8}{'locks':>7}"
    )
    for case, row in results.items():
        jit, base = row["jitops"], row["torch"]
        print(
            f"{case:<16}{jit['cold_s']:>14.2f}{base['cold_s']:>13.2f}{jit['cold_s'] / base['cold_s']:>10.2f}x"
            f"{jit['warm_ms']:>16.2f}{base['warm_ms']:>15.2f}{base['warm_ms'] / jit['warm_ms']:>14.1f}x"
            f"{row['floor_ms']:>10.2f}{jit['warm_ms'] - row['floor_ms']:>16.2f}{jit['warm_spawned']:>8}{jit['warm_locks']:>7}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="new processes per warm jitops figure")
    parser.add_argument("--baseline-repeats", type=int, default=11, help="new processes per warm torch load() figure")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--installed", action="store_true", help="time the installed jitops (pip install .), not the checkout")
    parser.add_argument("--cold-repeats", type=int, default=1, help="cold builds of each, in alternating order (median)")
    parser.add_argument("--phases", action="store_true", help="time the steps of each warm jitops.load instead")
    args = parser.parse_args()
    if args.phases:
        with tempfile.TemporaryDirectory(prefix="jitops-drop-in-") as tmp:
            phases(args.repeats, Path(tmp), args.installed)
        return
    with tempfile.TemporaryDirectory(prefix="jitops-drop-in-") as tmp:
        results = measure(args.repeats, args.baseline_repeats, Path(tmp), args.installed, args.cold_repeats)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
