# SPDX-License-Identifier: MIT
"""The loader's own speed, per op: jitops against a plain torch.utils.cpp_extension.load() of the
same sources and a bare dlopen of the built library; and each op's per-call overhead.

    python examples/load_time.py [--ops add2,bias_act] [--repeats 7] [--json results.json]

Every load is timed in a fresh process, with its own empty cache or build directory for a cold
build. The clock starts after `import torch` (and CUDA initialisation where there is a GPU: a CUDA
user pays that anyway) and stops when the op can be called. Warm figures are the median over
--repeats new processes (--baseline-repeats for plain load(), whose warm figure is tens of
milliseconds); each also counts the processes it spawned and the file locks it took (a
warm jitops load must take neither). Rows:
  jitops        `import jitops`, then the op's first use (jitops.ops._framework.require), or load_all()
  plain load()  load() of the op's own kernel and binding files (one unit each), as a user
                without jitops would call it; warm = load() again in a new process
  dlopen        torch.ops.load_library of the library jitops built: a bare dlopen, every symbol
                bound at once (a warm jitops start binds each on first call, see jitops/warm/__init__.py)
  tutorial      the extension tutorials' add2 (torch/extension.h, pybind11) with plain load()
Per call (CPU tensors of 16 elements, one thread): jitops.add2 against torch.add, and
jitops.bias_act on inputs that require grad against eager lrelu(x + b) * gain.

    python examples/load_time.py --phases add2 [--repeats 9]

times a warm load's steps one by one instead (median over new processes, the cache warmed first):
where the milliseconds go on this machine, and how much of the imports is unmarshalling bytecode.

    python examples/load_time.py --installed [--ops ...] [--repeats 11]

times the jitops installed in this Python as users have it (`pip install .`, not editable), from
a folder outside the checkout: one cold load_all into an empty cache, then warm add2 and warm
load_all, each in --repeats new processes (median and range).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs first in every child: CUDA up, spawn and lock counters on, a collection, then the clock.
CHILD_PRELUDE = """
import fcntl, json, os, sys, time, torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
SPAWNED, LOCKS = [], []
def _count(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.system"):
        SPAWNED.append(event)
    elif event == "fcntl.flock" and args[1] & fcntl.LOCK_EX:  # a build's lock file, taken directly or by filelock
        path = os.readlink(f"/proc/self/fd/{args[0]}")
        if path.endswith(".lock"):
            LOCKS.append(path)
sys.addaudithook(_count)
def report(seconds, **extra):
    print(json.dumps({"seconds": seconds, "spawned": len(SPAWNED), "locks": len(LOCKS), **extra}))
# Every child starts the clock from the same collector state. Otherwise the collection that torch's
# import left due falls inside or outside the timed load by a few dozen objects (3-5 ms on the VM),
# whichever loader or tree allocates them: BENCHMARKS.md, "a warm-start regression".
import gc
gc.freeze()
"""

JITOPS_CHILD = (
    CHILD_PRELUDE
    + """
ops = sys.argv[1].split(",")
started = time.perf_counter()
import jitops, jitops.ops._framework
if len(ops) > 1:
    jitops.load_all(ops)
else:
    jitops.ops._framework.require(ops[0])
seconds = time.perf_counter() - started
# The registry beside LoadedLibrary, wherever the tree keeps them (scripts/warm_ab.py times older trees).
loaded = sys.modules[jitops.LoadedLibrary.__module__].loaded
libraries = {op: str((loaded.get(f"jitops.{op}") or loaded[op]).library) for op in ops}
modules = [m.__file__ for name, m in sys.modules.items() if name.partition(".")[0] == "jitops"]  # what it imported
report(seconds, libraries=libraries, package=jitops.__file__, modules=modules)
"""
)

# The op's source files, given to load() under names of their own (two may share a file stem, and
# load() names object files after it), with the flags jitops uses.
PLAIN_CHILD = (
    CHILD_PRELUDE
    + """
op, build = sys.argv[1], sys.argv[2]
from pathlib import Path
import jitops.ops._framework
from jitops.store import find_cxx, key_components, plan_cuda
from torch.utils.cpp_extension import load
extension = jitops.ops._framework.extension(op)
cuda = plan_cuda(extension)
with_cuda = cuda.enabled
components = key_components(extension, find_cxx(), cuda)
wrappers = []
for relative in components["sources"]:
    wrapper = Path(build) / relative.replace("/", "_")
    if not wrapper.exists():
        wrapper.write_text(f'#include "{Path(extension.root) / relative}"\\n')
    wrappers.append(str(wrapper))
started = time.perf_counter()
load(f"plain_{op}", wrappers, extra_cflags=components["cflags"], extra_cuda_cflags=components["cuda_cflags"],
     extra_ldflags=components["ldflags"], build_directory=build, with_cuda=with_cuda, is_python_module=False)
report(time.perf_counter() - started)
"""
)

DLOPEN_CHILD = (
    CHILD_PRELUDE
    + """
started = time.perf_counter()
torch.ops.load_library(sys.argv[1])
report(time.perf_counter() - started)
"""
)

TUTORIAL_CHILD = (
    CHILD_PRELUDE
    + """
from torch.utils.cpp_extension import load
cuda = torch.cuda.is_available()
sources = [sys.argv[2] + "/add2.cpp", sys.argv[2] + ("/add2_kernel.cu" if cuda else "/add2_cpu.cpp")]
started = time.perf_counter()
ext = load("baseline_add2", sources, extra_cflags=["-O3"], build_directory=sys.argv[1])
report(time.perf_counter() - started)
"""
)

# A warm load's steps, each timed: what jitops.ops._framework.require(op) does on a warm start, spelled out.
PHASES_CHILD = (
    CHILD_PRELUDE
    + """
op = sys.argv[1]
# importlib unmarshals each module's bytecode with marshal.loads, looked up at each call: wrapped,
# it gives how much of the imports is unmarshalling (a cost that grows with the code imported). Its
# own frame adds about a microsecond per module to the import steps.
import marshal
unmarshal = [0.0, 0]  # ms, bytes
def _timed_loads(data, _loads=marshal.loads):
    began = time.perf_counter()
    try:
        return _loads(data)
    finally:
        unmarshal[0] += (time.perf_counter() - began) * 1e3
        unmarshal[1] += len(data)
marshal.loads = _timed_loads
steps, last = {}, time.perf_counter()
def step(name):
    global last
    now = time.perf_counter()
    steps[name], last = (now - last) * 1e3, now
import jitops; step("import jitops")
import jitops.ops._framework; step("import jitops.ops._framework")
import importlib; module = importlib.import_module(f"jitops.ops.{op}"); step("import the op's module")
import jitops.warm
settings = jitops.warm.settings(module.EXTENSION); step("settings")
library, record, _ = jitops.warm.recorded_library(module.EXTENSION, settings); step(f"warm record: read, {len(record['checked'])} stat calls")
jitops.warm.open_library(library, verified=True); step("dlopen (lazy binding)")
module._register(); step("Python registrations")
report(sum(steps.values()) / 1e3, steps=steps, unmarshal=unmarshal, spawned_and_locks=[len(SPAWNED), len(LOCKS)])
"""
)

PER_CALL_CHILD = """
import json, math, timeit, torch, jitops
torch.set_num_threads(1)
def us(fn, number=20000):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6
a, b = torch.randn(16), torch.randn(16)
x, bias = torch.randn(2, 8, 4, 4, requires_grad=True), torch.randn(8, requires_grad=True)
gain = math.sqrt(2)
rows = {
    "add2": (us(lambda: jitops.add2(a, b)), us(lambda: torch.add(a, b)), "torch.add"),
    "bias_act (requires grad)": (
        us(lambda: jitops.bias_act(x, bias, act="lrelu"), 5000),
        us(lambda: torch.nn.functional.leaky_relu(x + bias.reshape(1, -1, 1, 1), 0.2) * gain, 5000),
        "eager lrelu(x + b) * gain",
    ),
}
print(json.dumps(rows))
"""


def child_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("JITOPS_CACHE_DIR", "JITOPS_VERBOSE", "PYTHONDONTWRITEBYTECODE")}
    # The child imports this checkout's jitops, installed or not.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p)
    return {**env, **extra}


def run_child(code: str, args: list[str], env: dict, cwd: Path | None = None) -> dict:
    """Run code in a new Python. `python -c` puts its working directory first on sys.path, ahead
    of PYTHONPATH: a child meant to import another tree's jitops must run in that tree (cwd)."""
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"measurement failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def cold_and_warm(code: str, args: list[str], env: dict, repeats: int) -> dict:
    """One cold run, then `repeats` warm ones in new processes."""
    cold = run_child(code, args, env)
    warm = [run_child(code, args, env) for _ in range(repeats)]
    return {
        "cold_s": cold["seconds"],
        "warm_ms": statistics.median(w["seconds"] for w in warm) * 1e3,
        "warm_spawned": max(w["spawned"] for w in warm),
        "warm_locks": max(w["locks"] for w in warm),
        "libraries": cold.get("libraries", {}),
    }


def warm_only(code: str, args: list[str], env: dict, repeats: int) -> dict:
    warm = [run_child(code, args, env) for _ in range(repeats)]
    return {"warm_ms": statistics.median(w["seconds"] for w in warm) * 1e3, "warm_spawned": max(w["spawned"] for w in warm)}


def slowest_units(library: Path, count: int = 4) -> dict:
    """The cold build's slowest compile units and their seconds (from its manifest): what bounds
    a parallel build."""
    units = json.loads((library.parent / "manifest.json").read_text()).get("unit_seconds", {})
    return dict(sorted(units.items(), key=lambda unit: -unit[1])[:count])


def measure(ops: list[str], repeats: int, baseline_repeats: int, tmp: Path) -> dict:
    results = {"ops": {}}
    for op in ops:
        jit = cold_and_warm(JITOPS_CHILD, [op], child_env(JITOPS_CACHE_DIR=str(tmp / f"cache-{op}")), repeats)
        build = tmp / f"plain-{op}"
        build.mkdir()
        plain = cold_and_warm(PLAIN_CHILD, [op, str(build)], child_env(), baseline_repeats)
        dlopen = warm_only(DLOPEN_CHILD, [jit["libraries"][op]], child_env(), repeats)
        jit["slowest_units_s"] = slowest_units(Path(jit["libraries"][op]))
        results["ops"][op] = {"jitops": jit, "plain load()": plain, "dlopen": dlopen}
        print(
            f"  {op}: jitops cold {jit['cold_s']:.2f} s, warm {jit['warm_ms']:.2f} ms (spawns {jit['warm_spawned']}, "
            f"locks {jit['warm_locks']}); plain load() cold {plain['cold_s']:.2f} s, warm {plain['warm_ms']:.2f} ms; "
            f"dlopen {dlopen['warm_ms']:.2f} ms; slowest units of the cold build {jit['slowest_units_s']}",
            file=sys.stderr,
            flush=True,
        )
    if len(ops) > 1:
        print("  load_all ...", file=sys.stderr, flush=True)
        results["load_all"] = cold_and_warm(
            JITOPS_CHILD, [",".join(ops)], child_env(JITOPS_CACHE_DIR=str(tmp / "cache-all")), repeats
        )
    if "add2" in ops:
        build = tmp / "tutorial"
        build.mkdir()
        results["tutorial add2"] = cold_and_warm(
            TUTORIAL_CHILD, [str(build), str(HERE / "baseline_add2")], child_env(), baseline_repeats
        )
        results["per_call_us"] = run_child(PER_CALL_CHILD, [], child_env(JITOPS_CACHE_DIR=str(tmp / "cache-all")))
    return results


def installed(ops: list[str], repeats: int, tmp: Path) -> None:
    env = {k: v for k, v in child_env(JITOPS_CACHE_DIR=str(tmp / "cache")).items() if k != "PYTHONPATH"}
    cold = run_child(JITOPS_CHILD, [",".join(ops)], env, cwd=tmp)
    if Path(cold["package"]).resolve().parent == (HERE.parent / "jitops").resolve():
        raise SystemExit(f"jitops came from the checkout ({cold['package']}): `pip install .` it first")
    print(f"jitops {cold['package']}\ncold load_all of {len(ops)} ops: {cold['seconds']:.2f} s")
    for name, load in (("add2", "add2"), ("load_all", ",".join(ops))):
        warm = [run_child(JITOPS_CHILD, [load], env, cwd=tmp) for _ in range(repeats)]
        ms = sorted(w["seconds"] * 1e3 for w in warm)
        print(
            f"warm {name}: median {statistics.median(ms):.2f} ms of {repeats} new processes, range {ms[0]:.2f}-{ms[-1]:.2f} ms, "
            f"spawned {max(w['spawned'] for w in warm)}, locks {max(w['locks'] for w in warm)}"
        )


def phases(op: str, repeats: int, tmp: Path) -> None:
    env = child_env(JITOPS_CACHE_DIR=str(tmp / "cache"))
    run_child(JITOPS_CHILD, [op], env)  # build, or load: the cache is warm from here on
    results = [run_child(PHASES_CHILD, [op], env) for _ in range(repeats)]
    runs = [result["steps"] for result in results]
    print(f"{op}: a warm load's steps, median of {repeats} new processes (ms)")
    for name in runs[0]:
        print(f"  {name:<28}{statistics.median(r[name] for r in runs):>8.3f}")
    print(f"  {'total':<28}{statistics.median(sum(r.values()) for r in runs):>8.3f}")
    kb = results[0]["unmarshal"][1] / 1024
    print(
        f"  {'of which unmarshalling':<28}{statistics.median(r['unmarshal'][0] for r in results):>8.3f}  ({kb:.0f} KB of bytecode)"
    )


def print_tables(results: dict) -> None:
    print(
        f"{'op':<24}{'jitops cold s':>14}{'plain cold s':>13}{'jitops warm ms':>16}{'plain warm ms':>15}"
        f"{'dlopen ms':>11}{'warm / plain':>14}{'warm / dlopen':>15}{'spawns':>8}{'locks':>7}"
    )
    for op, r in results["ops"].items():
        jit, plain, dlopen = r["jitops"], r["plain load()"], r["dlopen"]
        print(
            f"{op:<24}{jit['cold_s']:>14.2f}{plain['cold_s']:>13.2f}{jit['warm_ms']:>16.2f}{plain['warm_ms']:>15.2f}"
            f"{dlopen['warm_ms']:>11.2f}{jit['warm_ms'] / plain['warm_ms']:>13.3f}x{jit['warm_ms'] / dlopen['warm_ms']:>14.2f}x"
            f"{jit['warm_spawned']:>8}{jit['warm_locks']:>7}"
        )
    if "load_all" in results:
        r = results["load_all"]
        print(
            f"{'all (load_all)':<24}{r['cold_s']:>14.2f}{'':>13}{r['warm_ms']:>16.2f}{'':>15}{'':>11}{'':>14}{'':>15}"
            f"{r['warm_spawned']:>8}{r['warm_locks']:>7}"
        )
    if "tutorial add2" in results:
        r = results["tutorial add2"]
        print(f"{'tutorial add2, load()':<24}{'':>14}{r['cold_s']:>13.2f}{'':>16}{r['warm_ms']:>15.2f}")
    if "per_call_us" in results:
        print(f"\n{'per call (CPU, 1 thread)':<28}{'jitops us':>10}{'baseline us':>13}{'ratio':>8}  baseline")
        for name, (jit, base, what) in results["per_call_us"].items():
            print(f"{name:<28}{jit:>10.2f}{base:>13.2f}{jit / base:>7.2f}x  {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated ops (default: all)")
    parser.add_argument("--repeats", type=int, default=7, help="new processes per warm jitops or dlopen figure")
    parser.add_argument("--baseline-repeats", type=int, default=3, help="new processes per warm plain load() figure")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--phases", metavar="OP", help="time the steps of OP's warm load instead")
    parser.add_argument("--installed", action="store_true", help="time the installed jitops's cold and warm loads instead")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent))
    import jitops

    if args.phases:
        with tempfile.TemporaryDirectory(prefix="jitops-load-time-") as tmp:
            phases(args.phases, args.repeats, Path(tmp))
        return
    ops = args.ops.split(",") if args.ops else jitops.available_ops()
    if args.installed:
        with tempfile.TemporaryDirectory(prefix="jitops-load-time-") as tmp:
            installed(ops, args.repeats, Path(tmp))
        return
    with tempfile.TemporaryDirectory(prefix="jitops-load-time-") as tmp:
        results = measure(ops, args.repeats, args.baseline_repeats, Path(tmp))
    print_tables(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
