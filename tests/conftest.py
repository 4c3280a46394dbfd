# SPDX-License-Identifier: MIT
import os
import tempfile

import pytest
import torch

# Tests build into a cache of their own, unless one is named (e.g. to reuse builds between runs).
os.environ.setdefault("JITOPS_CACHE_DIR", tempfile.mkdtemp(prefix="jitops-test-cache-"))

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
CPU_DTYPES = [torch.float32, torch.float64]
CUDA_DTYPES = CPU_DTYPES + [torch.float16, torch.bfloat16]
# (device, dtype) pairs every op supports, each marked so a CUDA case shows as skipped, not absent.
DEVICE_DTYPES = [pytest.param("cpu", d, id=f"cpu-{str(d)[6:]}") for d in CPU_DTYPES] + [
    pytest.param("cuda", d, id=f"cuda-{str(d)[6:]}", marks=needs_cuda) for d in CUDA_DTYPES
]
