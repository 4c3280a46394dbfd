# SPDX-License-Identifier: MIT
"""Build add2 (the first run shows the build), check it against a + b, and time it.

    python examples/add2.py [--device cuda|cpu] [--numel N]

On CUDA it times with events (warm-up, median of many runs, inputs much larger than the L2) and
prints achieved bandwidth next to torch.add's and a device-to-device copy's.
"""

import argparse
import time

import torch
from timing import median_ms

import jitops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--numel", type=int, default=None, help="elements per tensor")
    args = parser.parse_args()
    device = args.device
    numel = args.numel or (1 << 28 if device == "cuda" else 1 << 24)  # 1 GiB per fp32 tensor on a GPU

    started = time.perf_counter()
    small = torch.randn(1000, device=device)
    jitops.add2(small, small)  # the first call builds or loads the extension
    print(f"add2 ready in {time.perf_counter() - started:.2f}s (build or cache load)")

    dtypes = [torch.float32, torch.float64] + ([torch.float16, torch.bfloat16] if device == "cuda" else [])
    print(f"{'dtype':<10}{'numel':>12}{'add2 ms':>10}{'add2 GB/s':>11}{'torch.add GB/s':>16}{'copy GB/s':>11}{'add2/copy':>11}")
    above_floor = False
    for dtype in dtypes:
        a = torch.randn(numel, device=device, dtype=dtype)
        b = torch.randn(numel, device=device, dtype=dtype)
        out = torch.empty_like(a)
        torch.testing.assert_close(jitops.add2(a, b), a + b, rtol=0, atol=0)
        moved = 3 * a.numel() * a.element_size()  # read a and b, write out
        copied = 2 * a.numel() * a.element_size()  # read a, write out
        ms_add2 = median_ms(lambda: jitops.add2(a, b, out=out), device)
        ms_torch = median_ms(lambda: torch.add(a, b, out=out), device)
        ms_copy = min(median_ms(lambda: out.copy_(a), device) for _ in range(3))  # a floor read high reads as >100%
        gbps = lambda nbytes, ms: nbytes / ms / 1e6  # noqa: E731
        add2_gbps, copy_gbps = gbps(moved, ms_add2), gbps(copied, ms_copy)
        print(
            f"{str(dtype)[6:]:<10}{numel:>12}{ms_add2:>10.3f}{add2_gbps:>11.0f}{gbps(moved, ms_torch):>16.0f}"
            f"{copy_gbps:>11.0f}{add2_gbps / copy_gbps:>10.0%}" + ("*" if add2_gbps > copy_gbps else "")
        )
        above_floor = above_floor or add2_gbps > copy_gbps
        del a, b, out
    if above_floor:
        print("* above 100%: add2 cannot beat a copy of its bytes; the copy's timing was noisy (busy machine)")
    print("correct: add2 matches a + b exactly for every dtype")


if __name__ == "__main__":
    main()
