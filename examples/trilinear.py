# SPDX-License-Identifier: MIT
"""Fit a 3-D feature grid by gradient descent with trilinear_interpolation, and time it.

    python examples/trilinear.py [--device cuda|cpu] [--steps 200]

The grid (R^3 cells, F features per vertex) learns a known function of (x, y, z): each step
samples random points, gathers the 8 vertices of each point's cell, interpolates them with
jitops.trilinear_interpolation (gradients flow to the grid) and takes an Adam step on the squared
error. The same training then runs with the pure-torch trilinear_interpolation_ref, and the step
times are compared, together with the interpolation's own share of a step: the rest of the step
(gathering each point's corners from the grid, that gather's backward, the target function, Adam)
is the same for both and, at small batches on a CPU, most of it.
"""

import argparse
import math
import time

import torch
from timing import median_ms, noise_note, ratio, train_and_time

import jitops
from jitops.ops.trilinear_interpolation import trilinear_interpolation_ref

# Corner k of a cell = 4 * (x side) + 2 * (y side) + (z side): the order trilinear_interpolation expects.
CORNER_OFFSETS = torch.tensor([[(k >> 2) & 1, (k >> 1) & 1, k & 1] for k in range(8)])


def target_function(xyz: torch.Tensor) -> torch.Tensor:
    """What the grid must learn: 4 smooth features of a point in [-1, 1]^3. [N, 3] -> [N, 4]"""
    x, y, z = xyz.unbind(dim=1)
    return torch.stack(
        [torch.sin(math.pi * x) * torch.cos(math.pi * y), x * y * z, torch.exp(-(x**2 + y**2 + z**2)), torch.cos(2 * z)], dim=1
    )


def cell_inputs(grid: torch.Tensor, xyz: torch.Tensor):
    """Each point's 8 corner features [N, 8, F] and its position in its cell [N, 3] in [-1, 1]."""
    resolution = grid.shape[0] - 1
    scaled = (xyz + 1) / 2 * resolution  # vertex units
    cell = scaled.floor().clamp(0, resolution - 1).long()  # [N, 3]
    local = (scaled - cell) * 2 - 1
    corners = cell[:, None, :] + CORNER_OFFSETS.to(xyz.device)  # [N, 8, 3]
    feats = grid[corners[..., 0], corners[..., 1], corners[..., 2]]  # [N, 8, F]
    return feats, local


def train(interpolate, device: str, steps: int, batch: int, resolution: int, log_every: int):
    torch.manual_seed(0)
    grid = torch.zeros(resolution + 1, resolution + 1, resolution + 1, 4, device=device).normal_(0, 0.01).requires_grad_()
    optimizer = torch.optim.Adam([grid], lr=0.05)

    def batch_loss():
        xyz = torch.rand(batch, 3, device=device) * 2 - 1
        feats, local = cell_inputs(grid, xyz)
        return (interpolate(feats, local) - target_function(xyz)).square().mean()

    return train_and_time(batch_loss, optimizer, device, steps, log_every)


def interpolation_ms(interpolate, device: str, batch: int) -> float:
    """Forward and backward of the interpolation alone, on one step's shapes."""
    feats = torch.randn(batch, 8, 4, device=device, requires_grad=True)
    local = (torch.rand(batch, 3, device=device) * 2 - 1).requires_grad_()
    grad = torch.randn(batch, 4, device=device)
    return median_ms(lambda: torch.autograd.grad(interpolate(feats, local), (feats, local), grad), device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=None, help="points per step")
    parser.add_argument("--resolution", type=int, default=16, help="cells per axis")
    args = parser.parse_args()
    batch = args.batch or (1 << 18 if args.device == "cuda" else 1 << 14)

    started = time.perf_counter()
    jitops.trilinear_interpolation(torch.zeros(1, 8, 1, device=args.device), torch.zeros(1, 3, device=args.device))
    print(f"trilinear_interpolation ready in {time.perf_counter() - started:.2f}s (build or cache load)")

    print(f"jitops.trilinear_interpolation, {batch} points per step:")
    jitops_ms, jitops_loss = train(
        jitops.trilinear_interpolation, args.device, args.steps, batch, args.resolution, args.steps // 10
    )
    print("trilinear_interpolation_ref (pure torch), same steps:")
    ref_ms, ref_loss = train(trilinear_interpolation_ref, args.device, args.steps, batch, args.resolution, 0)
    print(f"final loss: jitops {jitops_loss:.6f}, pure torch {ref_loss:.6f}")
    print(f"step time: jitops {jitops_ms:.3f} ms, pure torch {ref_ms:.3f} ms ({ratio(ref_ms, jitops_ms)})")
    op_ms = interpolation_ms(jitops.trilinear_interpolation, args.device, batch)
    op_ref_ms = interpolation_ms(trilinear_interpolation_ref, args.device, batch)
    print(
        f"of which the interpolation (forward+backward): jitops {op_ms:.3f} ms, pure torch {op_ref_ms:.3f} ms "
        f"({ratio(op_ref_ms, op_ms)}); the rest of the step is about {jitops_ms - op_ms:.3f} ms either way"
    )
    if noise_note():
        print(noise_note())
    if not jitops_loss < 0.01:
        raise SystemExit(f"the fit did not converge: final loss {jitops_loss:.6f}")


if __name__ == "__main__":
    main()
