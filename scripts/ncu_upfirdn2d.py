# SPDX-License-Identifier: MIT
# Profiling helper (not part of the suite): one launch of each tiled kernel at 8x512x256x256, for ncu.
import torch

import jitops
import jitops.ops._framework

jitops.ops._framework.require("upfirdn2d")
f = torch.outer(torch.tensor([1.0, 3, 3, 1]), torch.tensor([1.0, 3, 3, 1])).cuda() / 64
k = torch.ops.jitops._upfirdn2d_kernel
for dtype in (torch.float32, torch.float16):
    x = torch.randn(8, 512, 256, 256, device="cuda", dtype=dtype)
    ff = f.to(dtype)
    k(x, ff, [2, 2], [1, 1], [2, 1, 2, 1], False, 4.0, "tiled")
    k(x, ff, [1, 1], [2, 2], [1, 1, 1, 1], False, 1.0, "tiled")
torch.cuda.synchronize()
