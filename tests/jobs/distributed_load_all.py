# SPDX-License-Identifier: MIT
"""One rank of a job of two simulated nodes (tests/test_distributed.py): `torchrun --nnodes 2
... tests/jobs/distributed_load_all.py OUT_DIR OPS`. Each rank calls jitops.distributed.load_all
for OPS (comma-separated; with JOB_EXTENSIONS=tiny, tests/tiny_extension.py's extension too, and
an empty OPS then loads that alone), runs each on example data against its reference, and writes
OUT_DIR/rank-<rank>.json: {"rank", "ok", "error", "seconds"}. A rank that fails exits 1 once its
node's other ranks have written theirs (or after 10 s), without tearing the process group down
(its peers may be gone)."""

import ctypes
import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import jitops
import jitops.distributed
from jitops.ops.trilinear_interpolation import trilinear_interpolation_ref

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tiny_extension import SOURCES, tiny_extension  # noqa: E402  (tests/, where this job's extension is declared)


def check(op: str, rank: int) -> None:
    generator = torch.Generator().manual_seed(1234 + rank)
    if op == "add2":
        a, b = torch.randn(4096, generator=generator), torch.randn(4096, generator=generator)
        torch.testing.assert_close(jitops.add2(a, b), a + b)
    elif op == "trilinear_interpolation":
        feats = torch.randn(64, 8, 16, generator=generator)
        points = torch.rand(64, 3, generator=generator) * 2 - 1
        torch.testing.assert_close(jitops.trilinear_interpolation(feats, points), trilinear_interpolation_ref(feats, points))
    elif op == "tiny":  # a package's Extension, loaded by load_all: its .load() is this process's
        assert (
            ctypes.CDLL(str(tiny_extension(os.environ.get("JOB_TINY_ROOT") or SOURCES).load().library)).jitops_tiny_value() == 42
        )
    else:
        raise ValueError(f"no example for op {op!r}")


def wait_for_node_peers(out_dir: Path, rank: int, timeout_s: float = 10.0) -> None:
    """Once one rank exits, torchrun stops the others of its node: a failing rank waits (bounded;
    a peer may be lost) until its node's other ranks have written their results too."""
    first = rank - int(os.environ["LOCAL_RANK"])
    peers = [out_dir / f"rank-{r}.json" for r in range(first, first + int(os.environ["LOCAL_WORLD_SIZE"]))]
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in peers) and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    out_dir, ops = Path(sys.argv[1]), [op for op in sys.argv[2].split(",") if op]
    tiny_root = os.environ.get("JOB_TINY_ROOT")  # another copy of its sources (or none)
    extensions = [tiny_extension(*[tiny_root] if tiny_root else [])] if os.environ.get("JOB_EXTENSIONS") == "tiny" else []
    timeout = datetime.timedelta(seconds=float(os.environ.get("JOB_COLLECTIVE_TIMEOUT_S", "300")))
    backend = os.environ.get("JOB_BACKEND", "gloo")  # nccl: scripts/gpu.sh nccl-two-nodes
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=timeout)
    rank = dist.get_rank()
    started = time.perf_counter()
    result = {"rank": rank, "ok": False, "error": ""}
    try:
        jitops.distributed.load_all(ops or None, extensions=extensions or None)
        result["seconds"] = time.perf_counter() - started
        for op in ops + [e.name for e in extensions]:
            check(op, rank)
        result["ok"] = True
    except Exception as err:
        result["error"] = f"{type(err).__name__}: {err}"
    (out_dir / f"rank-{rank}.json").write_text(json.dumps(result))
    if not result["ok"]:
        wait_for_node_peers(out_dir, rank)
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
