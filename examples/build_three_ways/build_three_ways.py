# SPDX-License-Identifier: MIT
"""The same op (add2), from the same sources, built three ways, with identical results:

  1. jit         jitops' loader: torch.utils.cpp_extension.load() into the managed cache
  2. setuptools  CppExtension + BuildExtension (setup.py here), loaded with torch.ops.load_library
  3. cmake       find_package(Torch) (CMakeLists.txt here), a shared library loaded
                 with torch.ops.load_library

    python examples/build_three_ways/build_three_ways.py [--work DIR]

Each way builds and runs in a fresh process (all three register `jitops::add2`, which one process
can hold only once) on the same saved inputs; this script then checks that the three outputs are
bitwise equal and prints each build's time. CPU only: add2's CUDA kernel is built the JIT way by
every other example.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def build_jit(work: Path) -> None:
    # A private cache, so that this is a real build, not a cache hit.
    os.environ["JITOPS_CACHE_DIR"] = str(work / "jit-cache")
    import jitops  # after the variable: jitops reads it on first use

    jitops.load_all(["add2"])


def build_setuptools(work: Path) -> None:
    lib = work / "setuptools-lib"
    run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(lib), "--build-temp", str(work / "setuptools-tmp")])
    # Loading runs its STABLE_TORCH_LIBRARY registrations (the library defines no Python module).
    (library,) = lib.glob("jitops_add2_setuptools*.so")
    torch.ops.load_library(str(library))


def build_cmake(work: Path) -> None:
    build = work / "cmake-build"
    prefix = torch.utils.cmake_prefix_path
    run(["cmake", "-S", str(HERE), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", str(build), "--parallel"])
    torch.ops.load_library(str(build / "libjitops_add2_cmake.so"))


WAYS = {"jit": build_jit, "setuptools": build_setuptools, "cmake": build_cmake}


def run(command: list[str]) -> None:
    """Run a build step in this folder; on failure show its output."""
    result = subprocess.run(command, cwd=HERE, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


def one_way(way: str, work: Path) -> None:
    """In a fresh process: build, load, compute add2 on the saved inputs, save the output."""
    started = time.perf_counter()
    WAYS[way](work)
    seconds = time.perf_counter() - started
    a, b = torch.load(work / "inputs.pt")
    torch.save(torch.ops.jitops.add2(a, b), work / f"{way}.pt")
    print(json.dumps({"way": way, "build_seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", help="build directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # the child's role
    args = parser.parse_args()
    if args.way:
        return one_way(args.way, Path(args.work))

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="jitops-three-ways-"))
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    a, b = torch.randn(100_003), torch.randn(100_003)  # an odd size: the vector loop's tail too
    torch.save((a, b), work / "inputs.pt")
    outputs, times = {}, {}
    for way in WAYS:
        print(f"building add2 with {way} ...", flush=True)
        child = subprocess.run(
            [sys.executable, __file__, "--way", way, "--work", str(work)], capture_output=True, text=True, cwd=HERE
        )
        if child.returncode != 0:
            sys.exit(f"the {way} build failed:\n{child.stdout}\n{child.stderr}")
        times[way] = json.loads(child.stdout.strip().splitlines()[-1])["build_seconds"]
        outputs[way] = torch.load(work / f"{way}.pt")

    expected = a + b
    for way, out in outputs.items():
        same = torch.equal(out, outputs["jit"])
        print(
            f"{way:<11} build {times[way]:6.1f} s   output {'identical to jit' if same else 'DIFFERENT'}"
            f", max |out - (a + b)| = {(out - expected).abs().max().item():.1e}"
        )
        if not same:
            sys.exit(f"the {way} build gives a different result")
    if not args.work:
        shutil.rmtree(work)
    print("all three builds give identical results")


if __name__ == "__main__":
    main()
