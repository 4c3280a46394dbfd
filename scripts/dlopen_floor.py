# SPDX-License-Identifier: MIT
"""What a bare dlopen costs in a process that has imported torch (and initialised CUDA), apart
from any loader: an empty library, one linked against torch's libraries but without static
initialisers, and each op's cached library; median over new processes.

    python scripts/dlopen_floor.py [--ops add2,bias_act] [--repeats 9] [--link-variants "-Wl,-X;-Wl,-Y"]

--link-variants rebuilds each op once per variant, with that variant's flags added to the loader's
link flags (a cache of its own each), checks the op still computes and still reports a bad argument,
and times that library's dlopen beside the others.

Tells how much of an op library's dlopen is the dynamic linker's fixed cost in this process (many
libraries loaded) and how much is the library's own relocations and registrations.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import ctypes, os, sys, time, torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")
mapped = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
started = time.perf_counter()
ctypes.CDLL(sys.argv[1], mode=os.RTLD_GLOBAL)
print((time.perf_counter() - started) * 1e3, len(mapped))
"""


# Builds OP with extra link flags in a cache of its own, checks it, prints the library's path.
VARIANT_CHILD = """
import sys, torch
from jitops.store import _key
from jitops import _resolution
_key.LDFLAGS = _key.LDFLAGS + sys.argv[2].split()
import jitops, jitops.ops._framework
op = sys.argv[1]
jitops.ops._framework.require(op)
if op == "add2":
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        a, b = torch.randn(3, 1000, device=device), torch.randn(3, 1000, device=device)
        assert torch.equal(jitops.add2(a, b), a + b), device
        try:
            jitops.add2(a, b[:, :10])
            raise AssertionError("a bad argument went through")
        except RuntimeError as error:
            assert "b" in str(error), error
print(_resolution.resolve(jitops.ops._framework.extension(op)).library)
"""


def build_variant(op: str, flags: str, cache: str) -> str:
    env = {**os.environ, "JITOPS_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", VARIANT_CHILD, op, flags], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"variant {flags!r} of {op} failed:\n{out.stderr[-3000:]}")
    return out.stdout.split()[-1]


def describe(library: str) -> str:
    """Size and how many symbols the library exports (a static libstdc++ exports thousands)."""
    exported = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True).stdout
    return f"{os.path.getsize(library) / 1e3:.0f} kB, {len(exported.splitlines())} exported"


def median_ms(library: str, repeats: int) -> tuple[float, int]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CHILD, library], capture_output=True, text=True, check=True).stdout
        ms, mapped = out.split()
        runs.append(float(ms))
    return statistics.median(runs), int(mapped)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="", help="comma-separated; default: every op")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--link-variants", default="", help="';'-separated sets of extra link flags")
    args = parser.parse_args()
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import jitops.ops._framework
    from jitops import _resolution

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = ["c10", "torch_cpu"] + (["torch_cuda", "c10_cuda"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "empty.c"
        source.write_text("int jitops_probe(void) { return 1; }\n")
        empty, linked = f"{tmp}/empty.so", f"{tmp}/linked.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(source), "-o", empty], check=True)
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                "-O2",
                str(source),
                "-o",
                linked,
                f"-L{torch_lib}",
                "-Wl,--no-as-needed",
                *[f"-l{lib}" for lib in libs],
            ],
            check=True,
        )
        rows = [("empty library", empty), (f"linked to {','.join(libs)}, no code", linked)]
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        if torch.cuda.is_available() and os.path.exists(nvcc):
            # One trivial kernel and no torch: what registering a fat binary with the CUDA runtime costs.
            kernel = Path(tmp) / "kernel.cu"
            kernel.write_text("__global__ void jitops_probe_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n")
            with_kernel = f"{tmp}/kernel.so"
            subprocess.run(
                [nvcc, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-arch=sm_90", str(kernel), "-o", with_kernel],
                check=True,
            )
            rows.append(("one CUDA kernel, no torch", with_kernel))
        for op in args.ops.split(",") if args.ops else jitops.ops._framework.available_ops():
            jitops.ops._framework.require(op)
            rows.append((f"jitops {op}", str(_resolution.resolve(jitops.ops._framework.extension(op)).library)))
            for number, flags in enumerate(filter(None, args.link_variants.split(";"))):
                rows.append((f"jitops {op} + {flags}", build_variant(op, flags, f"{tmp}/variant{number}")))
        print(f"{'library':<44}{'dlopen ms':>10}  (median of {args.repeats} new processes)")
        for name, path in rows:
            ms, mapped = median_ms(path, args.repeats)
            print(f"{name:<44}{ms:>10.3f}  {describe(path)}")
        print(f"shared objects mapped in the child before the dlopen: {mapped}")


if __name__ == "__main__":
    main()
