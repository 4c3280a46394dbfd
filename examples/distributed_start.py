# SPDX-License-Identifier: MIT
"""Job start with jitops on two simulated nodes: each node building for itself, or one collective.

    python examples/distributed_start.py [--ops add2,bias_act,...] [--ranks-per-node 2]

Runs the same job twice, from empty caches: two `torchrun --nnodes 2` invocations on this machine
(static rendezvous on localhost, gloo), each a "node" with its own JITOPS_CACHE_DIR. "per node":
every rank calls jitops.load_all(), so each node builds every op (its ranks share the node's
cache and its lock). "collective": every rank calls jitops.distributed.load_all(), so each op is
built once in the job and its entry sent to the other node. Prints, for each, the job's start
time (the slowest rank's seconds until its ops are ready), the builds in the whole job, and the
bytes moved between the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rank_main(mode: str, ops: list[str], out: Path) -> None:
    import torch.distributed as dist

    import jitops
    import jitops.distributed

    dist.init_process_group("gloo")
    started = time.perf_counter()
    if mode == "collective":
        jitops.distributed.load_all(ops)
    else:
        jitops.load_all(ops)
    seconds = time.perf_counter() - started
    (out / f"rank-{dist.get_rank()}.json").write_text(json.dumps({"seconds": seconds}))
    dist.barrier()
    dist.destroy_process_group()


def run_job(mode: str, ops: list[str], ranks_per_node: int, work: Path) -> dict:
    out = work / mode
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes = []
    for node in range(2):
        env = {**os.environ, "JITOPS_CACHE_DIR": str(out / f"cache-node{node}"), "OMP_NUM_THREADS": "1"}
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
            "--nproc-per-node", str(ranks_per_node), "--master-addr", "127.0.0.1", "--master-port", str(port),
            __file__, "--rank-of", mode, "--ops", ",".join(ops), "--out", str(out),
        ]  # fmt: skip
        nodes.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))
    logs = [node.communicate()[1] for node in nodes]
    if any(node.returncode for node in nodes):
        raise SystemExit(f"the {mode} job failed:\n" + "\n".join(log[-3000:] for log in logs))
    seconds = [json.loads(p.read_text())["seconds"] for p in out.glob("rank-*.json")]
    builds = sum(len(re.findall(r"jitops: built [\w.]+ [(i]", log)) for log in logs)  # "(notes)" or "in N s"
    moved = 0
    if mode == "collective":  # each op's entry went to the node that did not build it
        from jitops.store import Store

        for node, log in enumerate(logs):
            for entry, manifest in Store(out / f"cache-node{node}").entries():
                if not re.search(rf"jitops: built {re.escape(entry.name)} [(i]", log):
                    moved += (entry.path / manifest["library"]).stat().st_size + len(json.dumps(manifest))
    return {"start_s": max(seconds), "builds": builds, "bytes_moved": moved}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="", help="comma-separated; default: every op")
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--rank-of", choices=["per-node", "collective"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import jitops

    ops = args.ops.split(",") if args.ops else jitops.available_ops()
    if args.rank_of:
        return rank_main(args.rank_of, ops, Path(args.out))
    import torch

    print(
        f"2 nodes x {args.ranks_per_node} ranks on this machine ({os.cpu_count()} cores), torch {torch.__version__}, ops: {', '.join(ops)}"
    )
    with tempfile.TemporaryDirectory(prefix="jitops-distributed-start-") as work:
        results = {mode: run_job(mode, ops, args.ranks_per_node, Path(work)) for mode in ("per-node", "collective")}
    print(f"{'':<12}{'job start s':>12}{'builds':>8}{'bytes moved':>13}")
    for mode, r in results.items():
        print(f"{mode:<12}{r['start_s']:>12.1f}{r['builds']:>8}{r['bytes_moved']:>13,}")
    print(f"collective / per node: {results['collective']['start_s'] / results['per-node']['start_s']:.2f}x the start time")


if __name__ == "__main__":
    main()
