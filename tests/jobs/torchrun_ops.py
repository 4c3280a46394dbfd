# SPDX-License-Identifier: MIT
"""One rank of `torchrun --nproc-per-node N tests/jobs/torchrun_ops.py OUT.json`: every rank imports
jitops with the same (empty) cache and runs add2 and trilinear_interpolation; the results are
all-reduced and checked, and rank 0 writes how many ranks built each op and how many loaded it."""

import json
import sys

import torch
import torch.distributed as dist

import jitops
import jitops.warm
from jitops.ops.trilinear_interpolation import trilinear_interpolation_ref


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(1234 + rank)
    a, b = torch.randn(4096, generator=generator), torch.randn(4096, generator=generator)
    feats = torch.randn(64, 8, 16, generator=generator)
    points = torch.rand(64, 3, generator=generator) * 2 - 1

    got = torch.cat([jitops.add2(a, b), jitops.trilinear_interpolation(feats, points).flatten()])
    want = torch.cat([a + b, trilinear_interpolation_ref(feats, points).flatten()])
    dist.all_reduce(got)
    dist.all_reduce(want)
    torch.testing.assert_close(got, want)

    # How many ranks built each op and how many loaded it from the cache, summed over ranks
    # (with tensors: all_gather_object would need numpy).
    ops = ("add2", "trilinear_interpolation")
    counts = torch.tensor(
        [[jitops.warm.loaded[f"jitops.{op}"].how == how for how in ("built", "cache")] for op in ops], dtype=torch.int64
    )
    dist.all_reduce(counts)
    if rank == 0:
        with open(sys.argv[1], "w") as out:
            json.dump({"world": world, **{op: dict(zip(("built", "cache"), row)) for op, row in zip(ops, counts.tolist())}}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
