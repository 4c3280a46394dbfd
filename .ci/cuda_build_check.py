# SPDX-License-Identifier: MIT
"""Build every op with its CUDA kernels through jitops' own loader, into a throw-away cache.

Run with a CUDA build of torch and TORCH_CUDA_ARCH_LIST set: no GPU is needed to compile, and a
compile or link error in any .cu file fails this script.
"""

import os
import sys
import tempfile

os.environ["JITOPS_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitops-cuda-check-")

import jitops  # noqa: E402
from jitops import _loader  # noqa: E402

jitops.load_all()
without_cuda = {op: _loader.load_op(op).cuda_reason for op in jitops.available_ops() if not _loader.load_op(op).with_cuda}
if without_cuda:
    sys.exit(f"built without CUDA kernels: {without_cuda}")
print(f"CUDA kernels compiled and linked for: {', '.join(jitops.available_ops())}")
