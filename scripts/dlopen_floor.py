# SPDX-License-Identifier: MIT
"""What a bare dlopen costs in a process that has imported torch (and initialised CUDA), apart
from any loader: an empty library, one linked against torch's libraries but without static
initialisers, and each op's cached library; median over new processes.

    python scripts/dlopen_floor.py [--ops add2,bias_act] [--repeats 9]

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


def median_ms(library: str, repeats: int) -> tuple[float, int]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", CHILD, library], capture_output=True, text=True, check=True).stdout
        ms, mapped = out.split()
        runs.append(float(ms))
    return statistics.median(runs), int(mapped)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="add2,bias_act,lltm,trilinear_interpolation,upfirdn2d")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import jitops.ops
    from jitops import _loader

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = ["c10", "torch_cpu"] + (["torch_cuda", "c10_cuda"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "empty.c"
        source.write_text("int jitops_probe(void) { return 1; }\n")
        empty, linked = f"{tmp}/empty.so", f"{tmp}/linked.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(source), "-o", empty], check=True)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(source), "-o", linked, f"-L{torch_lib}",
                        "-Wl,--no-as-needed", *[f"-l{lib}" for lib in libs]], check=True)
        rows = [("empty library", empty), (f"linked to {','.join(libs)}, no code", linked)]
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        if torch.cuda.is_available() and os.path.exists(nvcc):
            # One trivial kernel and no torch: what registering a fat binary with the CUDA runtime costs.
            kernel = Path(tmp) / "kernel.cu"
            kernel.write_text("__global__ void jitops_probe_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n")
            with_kernel = f"{tmp}/kernel.so"
            subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", "-arch=sm_90", str(kernel),
                            "-o", with_kernel], check=True)
            rows.append(("one CUDA kernel, no torch", with_kernel))
        for op in args.ops.split(","):
            jitops.ops.require(op)
            rows.append((f"jitops {op}", str(_loader.load_op(op).library)))
        print(f"{'library':<44}{'dlopen ms':>10}  (median of {args.repeats} new processes)")
        for name, path in rows:
            ms, mapped = median_ms(path, args.repeats)
            print(f"{name:<44}{ms:>10.3f}")
        print(f"shared objects mapped in the child before the dlopen: {mapped}")


if __name__ == "__main__":
    main()
