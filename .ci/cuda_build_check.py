# SPDX-License-Identifier: MIT
"""Build every op with its CUDA kernels through jitops' own loader, into a throw-away cache.

Run with a CUDA build of torch and TORCH_CUDA_ARCH_LIST set: no GPU is needed to compile, and a
compile or link error in any .cu file fails this script.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Removed on exit: each CI run would otherwise leave its libraries (tens of MB) in /tmp.
os.environ["JITOPS_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitops-cuda-check-")
atexit.register(shutil.rmtree, os.environ["JITOPS_CACHE_DIR"], ignore_errors=True)

import jitops  # noqa: E402
import jitops.warm  # noqa: E402

jitops.load_all()
loaded = {op: jitops.warm.loaded[f"jitops.{op}"] for op in jitops.available_ops()}
without_cuda = {op: library.cuda_reason for op, library in loaded.items() if not library.with_cuda}
if without_cuda:
    sys.exit(f"built without CUDA kernels: {without_cuda}")
# No op library may name torch's CUDA library among its dependencies: every dlopen would walk its
# two dozen CUDA libraries (bindings/stable.h looks up the one symbol the ops need from it).
for op in jitops.available_ops():
    dynamic = subprocess.run(["readelf", "-d", str(loaded[op].library)], capture_output=True, text=True, check=True).stdout
    if "[libtorch_cuda.so]" in dynamic or "[libc10_cuda.so]" in dynamic:
        sys.exit(f"{op}'s library depends on torch's CUDA libraries:\n{dynamic}")
print(f"CUDA kernels compiled and linked for: {', '.join(jitops.available_ops())}")

# Instead, the ops find that symbol (the current CUDA stream's getter) in the libtorch_cuda.so this
# torch has loaded. A probe built on bindings/stable.h asks for device 0's stream: with no GPU here
# the getter itself fails, which shows it was found; "cannot find" would mean the lookup is broken.
PROBE = """
#include "bindings/stable.h"
extern "C" const char* jitops_stream_probe() {
  static std::string result;
  try {
    jitops::current_cuda_stream(0);
    result = "a stream";
  } catch (const std::exception& e) {
    result = e.what();
  }
  return result.c_str();
}
"""
import ctypes  # noqa: E402

import torch  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402

probe_dir = Path(os.environ["JITOPS_CACHE_DIR"])
(probe_dir / "probe.cpp").write_text(PROBE)
includes = [f"-I{Path(__file__).resolve().parent.parent}"] + [f"-isystem{p}" for p in cpp_extension.include_paths("cuda")]
subprocess.run(
    [
        "c++",
        "-DWITH_CUDA",
        "-std=c++20",
        "-fPIC",
        "-shared",
        *includes,
        str(probe_dir / "probe.cpp"),
        f"-L{Path(torch.__file__).parent / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        "-o",
        str(probe_dir / "probe.so"),
    ],
    check=True,
)
probe = ctypes.CDLL(str(probe_dir / "probe.so")).jitops_stream_probe
probe.restype = ctypes.c_char_p
answer = probe().decode()
if "cannot find aoti_torch_get_current_cuda_stream" in answer:
    sys.exit(f"bindings/stable.h does not find the CUDA stream getter in this torch: {answer}")
print(f"the CUDA stream getter is found in libtorch_cuda.so (device 0 here: {answer.splitlines()[0][:80]})")
