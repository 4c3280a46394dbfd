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

# Removed on exit: each CI run would otherwise leave its libraries (tens of MB) in /tmp.
os.environ["JITOPS_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitops-cuda-check-")
atexit.register(shutil.rmtree, os.environ["JITOPS_CACHE_DIR"], ignore_errors=True)

import jitops  # noqa: E402
from jitops import _loader  # noqa: E402

jitops.load_all()
without_cuda = {op: _loader.load_op(op).cuda_reason for op in jitops.available_ops() if not _loader.load_op(op).with_cuda}
if without_cuda:
    sys.exit(f"built without CUDA kernels: {without_cuda}")
# No op library may name torch's CUDA library among its dependencies: every dlopen would walk its
# two dozen CUDA libraries (bindings/stable.h looks up the one symbol the ops need from it).
for op in jitops.available_ops():
    dynamic = subprocess.run(["readelf", "-d", str(_loader.load_op(op).library)], capture_output=True, text=True,
                             check=True).stdout
    if "[libtorch_cuda.so]" in dynamic or "[libc10_cuda.so]" in dynamic:
        sys.exit(f"{op}'s library depends on torch's CUDA libraries:\n{dynamic}")
print(f"CUDA kernels compiled and linked for: {', '.join(jitops.available_ops())}")
