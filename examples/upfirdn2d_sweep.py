# SPDX-License-Identifier: MIT
"""upfirdn2d on CUDA: the tiled kernel against the general one, StyleGAN3's plugin and the copy floor.

    python examples/upfirdn2d_sweep.py [--dtype float32 float16] [--json FILE]
    python examples/upfirdn2d_sweep.py --from-json FILE   # print saved results again

Two tables per dtype, all figures measured in this run (examples/timing.py: fresh random inputs,
warm-up, median of many samples) except StyleGAN3's:

1. Issue 12's configurations (N=8, C=512, the [1, 3, 3, 1] filter), through jitops.upfirdn2d as a
   user calls it: forward, and forward+backward through autograd. "StyleGAN3 ms" are the figures
   issue 12 measured for NVlabs' upfirdn2d plugin (float32, H200, torch 2.11.0+cu130); they are not
   re-measured here (the plugin's source is not part of jitops). On another GPU they are scaled by
   the ratio of this run's copy floor to the issue's (copy bandwidth), and the table says so. The
   goal is jitops <= 0.77x StyleGAN3 (1.3x faster) in every row, and >= 60% of the copy floor's
   bandwidth for the 256x256 rows.
2. Every StyleGAN2 resolution from 4x4 to 1024x1024 at batch 8 with its channel count (512 up to
   64x64, then 256, 128, 64, 32): up 2 (from half the resolution), down 2 (to half), the filter
   alone (up = down = 1, padding [2, 1, 2, 1]) and the padding alone (no filter, padding 1). For
   each, the forward and its gradient's upfirdn2d with the kernel jitops picks (tiled where it has
   one) against the general kernel (jitops' only CUDA kernel before issue 12), and the copy floor.
3. The CPU time one call costs (tiny tensors, so the GPU waits on the CPU): a training step can be
   no faster than this, whatever its kernels take.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from benchmark import copy_floor_ms, nbytes
from timing import median_ms

import jitops
from jitops.ops.upfirdn2d import _filter_2d, gradient_args, upfirdn2d_ref

FILTER = [1.0, 3.0, 3.0, 1.0]

# Issue 12's table: (side, name) -> (StyleGAN3 forward ms, StyleGAN3 forward+backward ms, copy
# floor ms), float32 on an H200 with torch 2.11.0+cu130.
ISSUE_12_H200 = {
    (64, "up2"): (0.266, 0.599, 0.079),
    (64, "down2"): (0.072, 0.230, 0.020),
    (256, "up2"): (4.10, 9.20, 1.26),
    (256, "down2"): (1.06, 2.18, 0.32),
}
RESAMPLE = {"up2": dict(up=2, padding=[2, 1, 2, 1], gain=4), "down2": dict(down=2, padding=1)}


def peer_table(dtype: torch.dtype) -> list[dict]:
    # The filter as StyleGAN's layers hold it and pass it to its plugin: setup_filter([1, 3, 3, 1])
    # is the normalised 4x4 outer product (a 4-tap filter is not kept separable), made once.
    f = _filter_2d(torch.tensor(FILTER, device="cuda") / 8, torch.empty(0, device="cuda", dtype=dtype))
    rows = []
    for (side, name), (peer_fwd, peer_train, peer_floor) in ISSUE_12_H200.items():
        x = torch.randn(8, 512, side, side, device="cuda", dtype=dtype, requires_grad=True)
        kwargs = RESAMPLE[name]
        with torch.no_grad():
            out = jitops.upfirdn2d(x, f, **kwargs)
        grad = torch.randn_like(out)
        with torch.no_grad():
            forward = median_ms(lambda: jitops.upfirdn2d(x, f, **kwargs), "cuda")
        train = median_ms(lambda: torch.autograd.grad(jitops.upfirdn2d(x, f, **kwargs), x, grad), "cuda")
        floor = copy_floor_ms(nbytes(x, out), "cuda")
        # The issue's figures are float32: compare on the float32 floor, whatever dtype runs here.
        float32_floor = floor * 4 / x.element_size()
        scale = float32_floor / peer_floor
        for pass_name, ms, peer, floor_ms in (
            ("forward", forward, peer_fwd, floor),
            ("forward+backward", train, peer_train, 2 * floor),
        ):
            rows.append(
                dict(
                    size=f"8x512x{side}x{side} {name}",
                    pass_=pass_name,
                    jitops=ms,
                    stylegan3=peer * scale,
                    scale=scale,
                    floor=floor_ms,
                )
            )
        del x, out, grad
        torch.cuda.empty_cache()
    return rows


def print_peer_table(rows: list[dict], dtype: torch.dtype) -> None:
    print(
        f"\nIssue 12's table, {str(dtype)[6:]} (StyleGAN3: issue 12's H200 figures x {rows[0]['scale']:.2f}, this run's float32 copy floor / the issue's)"
    )
    print(
        f"{'config':<24}{'pass':<18}{'jitops ms':>10}{'StyleGAN3 ms':>14}{'jitops/SG3':>11}{'goal <=0.77':>12}{'floor ms':>10}{'% copy BW':>10}"
    )
    for r in rows:
        ratio = r["jitops"] / r["stylegan3"]
        print(
            f"{r['size']:<24}{r['pass_']:<18}{r['jitops']:>10.4f}{r['stylegan3']:>14.4f}{ratio:>11.2f}"
            f"{'met' if ratio <= 0.77 else 'NOT met':>12}{r['floor']:>10.4f}{r['floor'] / r['jitops']:>10.0%}"
        )


# StyleGAN2's channel count at each resolution.
CHANNELS = {4: 512, 8: 512, 16: 512, 32: 512, 64: 512, 128: 256, 256: 128, 512: 64, 1024: 32}
KINDS = {  # name -> (input side from the resolution, 1-D filter or None, upfirdn2d arguments)
    "up2": (lambda r: r // 2, True, dict(up=[2, 2], down=[1, 1], padding=[2, 1, 2, 1], gain=4.0)),
    "down2": (lambda r: r, True, dict(up=[1, 1], down=[2, 2], padding=[1, 1, 1, 1], gain=1.0)),
    "filter": (lambda r: r, True, dict(up=[1, 1], down=[1, 1], padding=[2, 1, 2, 1], gain=1.0)),
    "pad": (lambda r: r, False, dict(up=[1, 1], down=[1, 1], padding=[1, 1, 1, 1], gain=1.0)),
}


def sweep(dtype: torch.dtype) -> list[dict]:
    rows = []
    kernel = torch.ops.jitops._upfirdn2d_kernel
    for resolution, channels in CHANNELS.items():
        for kind, (input_side, filtered, kw) in KINDS.items():
            side = input_side(resolution)
            if side < 1:
                continue
            x = torch.randn(8, channels, side, side, device="cuda", dtype=dtype)
            f = _filter_2d(torch.tensor(FILTER, device="cuda") / 8 if filtered else None, x)
            forward = (x, f, kw["up"], kw["down"], kw["padding"], False, kw["gain"])
            out = kernel(*forward, "auto")
            grad = torch.randn_like(out)
            backward = (
                grad,
                f,
                *gradient_args(x.shape, out.shape[2:], f.shape, kw["up"], kw["down"], kw["padding"], False, kw["gain"]),
            )
            floor = copy_floor_ms(nbytes(x, out), "cuda")
            for pass_name, args in (("forward", forward), ("backward", backward)):
                times = {which: median_ms(lambda which=which: kernel(*args, which), "cuda") for which in ("auto", "general")}
                rows.append(
                    dict(
                        resolution=resolution,
                        channels=channels,
                        kind=kind,
                        pass_=pass_name,
                        size="x".join(map(str, x.shape)),
                        floor=floor,
                        **times,
                    )
                )
            del x, out, grad
            torch.cuda.empty_cache()
    return rows


def print_sweep(rows: list[dict], dtype: torch.dtype) -> None:
    print(f"\nStyleGAN2's shapes, {str(dtype)[6:]}: the kernel jitops picks against the general one (kernel time, no autograd)")
    print(
        f"{'res':>5}{'C':>5} {'kind':<7}{'input':<16}{'pass':<10}{'jitops ms':>10}{'general ms':>11}{'speed-up':>9}{'floor ms':>10}{'% copy BW':>10}"
    )
    for r in rows:
        print(
            f"{r['resolution']:>5}{r['channels']:>5} {r['kind']:<7}{r['size']:<16}{r['pass_']:<10}{r['auto']:>10.4f}{r['general']:>11.4f}"
            f"{r['general'] / r['auto']:>9.2f}{r['floor']:>10.4f}{r['floor'] / r['auto']:>10.0%}"
        )


def call_overhead_us(repeats: int = 2000) -> dict[str, float]:
    """Microseconds of wall time per call on a 1x1x8x8 CUDA tensor, where the kernels take next to
    nothing: the CPU's share of every call (median of 5 runs of `repeats` calls)."""
    x = torch.randn(1, 1, 8, 8, device="cuda", requires_grad=True)
    f = torch.tensor(FILTER, device="cuda") / 8
    grad = torch.randn(1, 1, 4, 4, device="cuda")
    conv_weight = torch.randn(1, 1, 4, 4, device="cuda")
    steps = {
        "jitops forward": lambda: jitops.upfirdn2d(x.detach(), f, down=2, padding=1),
        "jitops forward+backward": lambda: torch.autograd.grad(jitops.upfirdn2d(x, f, down=2, padding=1), x, grad),
        "eager reference forward+backward": lambda: torch.autograd.grad(upfirdn2d_ref(x, f, down=2, padding=1), x, grad),
        "torch conv2d forward+backward": lambda: torch.autograd.grad(
            torch.nn.functional.conv2d(x, conv_weight, stride=2, padding=1), x, grad
        ),
    }
    results = {}
    for name, step in steps.items():
        runs = []
        for _ in range(6):  # the first run is the warm-up
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(repeats):
                step()
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - started) * 1e6 / repeats)
        results[name] = sorted(runs[1:])[2]
    return results


def print_results(results: dict) -> None:
    print(results["environment"])
    print(
        "\nCPU time per call, 1x1x8x8 down 2 (us): " + ", ".join(f"{k} {v:.1f}" for k, v in results["call_overhead_us"].items())
    )
    for name, tables in results.items():
        if name in ("float32", "float16", "bfloat16"):
            print_peer_table(tables["issue_12"], getattr(torch, name))
            print_sweep(tables["sweep"], getattr(torch, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", nargs="+", default=["float32", "float16"], choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--from-json", help="measure nothing; print the results saved in this file")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            return print_results(json.load(f))
    if not torch.cuda.is_available():
        raise SystemExit("upfirdn2d_sweep.py times the CUDA kernels: it needs a CUDA device")
    jitops.load_all(["upfirdn2d"])
    torch.manual_seed(0)
    results = {
        "environment": f"{torch.cuda.get_device_name()}, torch {torch.__version__}",
        "call_overhead_us": call_overhead_us(),
    }
    for name in args.dtype:
        dtype = getattr(torch, name)
        results[name] = {"issue_12": peer_table(dtype), "sweep": sweep(dtype)}
    print_results(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
