# SPDX-License-Identifier: MIT
"""Cold build and warm load of add2: jitops against a plain torch.utils.cpp_extension.load().

    python examples/load_time.py [--repeats 7] [--json results.json]

Every measurement runs in a fresh process with its own empty cache/build directory; the clock
starts after `import torch` (and CUDA initialisation where there is a GPU: a CUDA user pays that
anyway) and stops when the op can be called; a correctness check follows, outside the clock. The warm figure is the median over --repeats new
processes; each also counts the processes it spawned (a warm jitops load must spawn none).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BASELINE = Path(__file__).parent / "baseline_add2"

CHILD_PRELUDE = """
import json, sys, time, torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
SPAWNED = []
sys.addaudithook(lambda event, args: event in ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.system") and SPAWNED.append(event))
started = time.perf_counter()
"""

JITOPS_CHILD = CHILD_PRELUDE + """
import jitops, jitops.ops
jitops.ops.require("add2")
seconds = time.perf_counter() - started
a = torch.randn(1000, device="cuda" if torch.cuda.is_available() else "cpu")
torch.testing.assert_close(jitops.add2(a, a), a + a)
print(json.dumps({"seconds": seconds, "spawned": len(SPAWNED)}))
"""

BASELINE_CHILD = CHILD_PRELUDE + """
from torch.utils.cpp_extension import load
cuda = torch.cuda.is_available()
sources = [sys.argv[2] + "/add2.cpp", sys.argv[2] + ("/add2_kernel.cu" if cuda else "/add2_cpu.cpp")]
ext = load("baseline_add2", sources, extra_cflags=["-O3"], build_directory=sys.argv[1])
seconds = time.perf_counter() - started
a = torch.randn(1000, device="cuda" if cuda else "cpu")
out = torch.empty_like(a)
ext.add2(out, a, a)
torch.testing.assert_close(out, a + a)
print(json.dumps({"seconds": seconds, "spawned": len(SPAWNED)}))
"""


def run_child(code: str, args: list[str], env: dict) -> dict:
    result = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"measurement failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(code: str, args: list[str], env: dict, repeats: int) -> dict:
    cold = run_child(code, args, env)
    warm = [run_child(code, args, env) for _ in range(repeats)]
    return {
        "cold_s": cold["seconds"],
        "warm_ms": statistics.median(w["seconds"] for w in warm) * 1e3,
        "warm_spawned": max(w["spawned"] for w in warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("JITOPS_CACHE_DIR", "JITOPS_VERBOSE")}
    with tempfile.TemporaryDirectory(prefix="jitops-load-time-") as tmp:
        jitops_env = {**env, "JITOPS_CACHE_DIR": f"{tmp}/jitops-cache"}
        os.mkdir(f"{tmp}/baseline-build")  # load() expects its build_directory to exist
        results = {
            "jitops": measure(JITOPS_CHILD, [], jitops_env, args.repeats),
            "plain load()": measure(BASELINE_CHILD, [f"{tmp}/baseline-build", str(BASELINE)], env, args.repeats),
        }
    jit, base = results["jitops"], results["plain load()"]
    print(f"{'loader':<14}{'cold build s':>14}{'warm load ms':>14}{'warm spawns':>13}")
    for name, r in results.items():
        print(f"{name:<14}{r['cold_s']:>14.2f}{r['warm_ms']:>14.2f}{r['warm_spawned']:>13}")
    print(f"jitops/plain: cold {jit['cold_s'] / base['cold_s']:.2f}x, warm {jit['warm_ms'] / base['warm_ms']:.3f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
