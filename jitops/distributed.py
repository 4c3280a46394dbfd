# SPDX-License-Identifier: MIT
"""Build each op once for a whole torch.distributed job, not once per node.

    dist.init_process_group(...)
    jitops.distributed.load_all()   # every rank calls it once; then the ops load from the local cache

A "node" here is a cache: the ranks on one host that share a cache root (JITOPS_CACHE_DIR or its
default). Every rank computes its key for each op and whether its cache has the entry already;
the keys are all-gathered, and every rank derives the same plan from them:

- ranks that disagree on an op's key (another GPU arch, another torch, another compiler) are
  separate groups for that op, each with its own build: no rank ever loads a library built for
  another key;
- for each (op, key), one rank provides the entry: one from a node whose cache has it already,
  else a building rank, chosen so that the builds spread over the nodes (and over the ranks of a
  node) first;
- the provider sends the entry (its manifest and .so, a few MB) to one rank of every other node
  that lacks it, point to point over the process group (gloo or NCCL); the receiver checks its
  sha256 and publishes it into its node's cache under the entry's lock, exactly as a local build
  would (jitops._build.publish_received);
- then every rank loads the ops from its node's cache.

Each outcome is broadcast from the providing rank, so a failed build raises the same error on
every rank, and a collective that fails (a rank killed, the process group's timeout) names the op
it was exchanging and the ranks that were building which ops. Ops used without this call still load lazily, per node.
"""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor

from . import _build, _cache, _loader, _op_names
from . import load_all as _load_all_locally
from ._errors import BuildError
from ._key import PlannedEntry

__all__ = ["load_all"]


class Transfer:
    """One (op, key): the rank that provides its entry, whether it builds it, who receives it."""

    def __init__(self, op: str, key: str, source: int, build: bool, receivers: list[int]):
        self.op, self.key, self.source, self.build, self.receivers = op, key, source, build, receivers


def _node() -> str:
    """This rank's node: its host and the cache root it shares with the other ranks there."""
    return f"{socket.gethostname()}:{os.path.realpath(_cache.cache_root())}"


def _local_state(entries: dict) -> dict:
    """What this rank tells the others: its node, its key for each op, the ops its cache has."""
    cached = [op for op, entry in entries.items() if _cache.verified_or_discarded(entry) is not None]
    return {"node": _node(), "keys": {op: entry.key for op, entry in entries.items()}, "cached": cached}


def plan(names: list[str], states: dict[int, dict]) -> list[Transfer]:
    """The same list on every rank, from every rank's _local_state (rank -> state)."""
    transfers = []
    builds_per_node: dict[str, int] = {}
    builds_per_rank: dict[int, int] = {}
    for op in names:
        for key in sorted({state["keys"][op] for state in states.values()}):
            nodes: dict[str, list[int]] = {}
            for rank in sorted(states):
                if states[rank]["keys"][op] == key:
                    nodes.setdefault(states[rank]["node"], []).append(rank)
            have = [node for node, ranks in nodes.items() if any(op in states[r]["cached"] for r in ranks)]
            if have:
                source_node, build = have[0], False
                source = next(r for r in nodes[source_node] if op in states[r]["cached"])
            else:
                source_node = min(nodes, key=lambda n: (builds_per_node.get(n, 0), nodes[n][0]))
                source = min(nodes[source_node], key=lambda r: (builds_per_rank.get(r, 0), r))
                build = True
                builds_per_node[source_node] = builds_per_node.get(source_node, 0) + 1
                builds_per_rank[source] = builds_per_rank.get(source, 0) + 1
            receivers = [ranks[0] for node, ranks in nodes.items() if node not in have and node != source_node]
            transfers.append(Transfer(op, key, source, build, receivers))
    return transfers


def load_all(ops: list[str] | None = None, group=None) -> None:
    """Build or load every op (or those named) on every rank of `group` (default: the whole job),
    compiling each op once in the job rather than once per node. A collective: every rank of the
    group calls it, after torch.distributed.init_process_group."""
    import torch.distributed as dist

    names = _op_names(ops)
    if not dist.is_initialized():
        raise RuntimeError("jitops.distributed.load_all: call torch.distributed.init_process_group first")
    rank = dist.get_rank()
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    from .ops import extension

    entries = {op: PlannedEntry(extension(op)).entry for op in names}  # this rank's key for each op
    gathered: list = [None] * len(ranks)
    dist.all_gather_object(gathered, _local_state(entries), group=group)
    transfers = plan(names, dict(zip(ranks, gathered)))

    # This rank's builds, in parallel (each waits on its own ninja); a failure is kept, to be
    # broadcast with the op's outcome below.
    mine = [t for t in transfers if t.build and t.source == rank]
    errors: dict[str, str] = {}
    if mine:
        with ThreadPoolExecutor(max_workers=len(mine)) as pool:
            futures = {t.op: pool.submit(_loader.load, extension(t.op)) for t in mine}
        errors = {op: str(f.exception()) for op, f in futures.items() if f.exception() is not None}

    builders: dict[int, list[str]] = {}  # the other ranks' builds, named when an exchange fails
    for t in transfers:
        if t.build and t.source != rank:
            builders.setdefault(t.source, []).append(t.op)
    failures, not_published = [], []
    for t in transfers:
        outcome, payload = [None], b""
        if rank == t.source:
            outcome[0] = errors.get(t.op, "")
            if not outcome[0] and t.receivers:
                try:
                    payload = _entry_payload(t, entries[t.op])
                except Exception as err:  # broadcast, so that no receiver waits for bytes
                    outcome[0] = f"could not read its cache entry: {err}"
        _collective(t, builders, lambda: dist.broadcast_object_list(outcome, src=t.source, group=group))
        if outcome[0]:
            failures.append(f"rank {t.source} failed to {'build' if t.build else 'provide'} op {t.op!r}: {outcome[0]}")
        elif rank == t.source:
            for receiver in t.receivers:
                _collective(t, builders, lambda receiver=receiver: _send_bytes(payload, receiver, group))
        elif rank in t.receivers:
            payload = _collective(t, builders, lambda: _receive_bytes(t.source, group))
            try:
                _build.publish_received(entries[t.op], *_unpack(payload))
            except Exception as err:  # reported to every rank below, so that none waits for this one
                not_published.append(f"rank {rank} could not publish op {t.op!r} received from rank {t.source}: {err}")
    if failures:  # every rank has the same list, so every rank raises here
        raise BuildError("jitops.distributed.load_all:\n  " + "\n  ".join(failures))

    # Every node's cache now has its entries (or some rank says why not); each rank loads from there.
    gathered = [None] * len(ranks)
    dist.all_gather_object(gathered, not_published, group=group)
    problems = [problem for of_rank in gathered for problem in of_rank]
    if problems:
        raise BuildError("jitops.distributed.load_all:\n  " + "\n  ".join(problems))
    _load_all_locally(names)


def _collective(t: Transfer, builders: dict[int, list[str]], call):
    """call(), its failure re-raised naming the op being exchanged and the other ranks that were to
    build: every rank takes part in every exchange, so a rank still building (or killed while
    building, or hung in a compiler) stalls the first exchange after the builds, whichever op that
    exchange is for."""
    try:
        return call()
    except Exception as err:
        building = ", ".join(f"rank {r} (building {', '.join(ops)})" for r, ops in sorted(builders.items())) or "none"
        raise BuildError(
            f"jitops.distributed.load_all: exchanging op {t.op!r} (provided by rank {t.source}) failed: "
            f"{type(err).__name__}: {err}\nthe other ranks that were building: {building}"
        ) from err


# The entry on the wire: an 8-byte length of the manifest's JSON, the JSON, then the .so's bytes.


def _entry_payload(t: Transfer, entry: _cache.Entry) -> bytes:
    library = entry.verified_library(touch=False)
    if library is None:
        raise BuildError(f"jitops.distributed.load_all: op {t.op!r} is missing from rank {t.source}'s cache")
    manifest = json.dumps(entry.read_manifest()).encode()
    return len(manifest).to_bytes(8, "little") + manifest + library.read_bytes()


def _unpack(payload: bytes) -> tuple[dict, bytes]:
    """(manifest, library bytes) of an _entry_payload."""
    length = int.from_bytes(payload[:8], "little")
    return json.loads(payload[8 : 8 + length]), payload[8 + length :]


def _device(group):
    """Where the process group's tensors must live: CUDA for NCCL, else the CPU."""
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")


def _send_bytes(data: bytes, dst: int, group) -> None:
    import torch
    import torch.distributed as dist

    device = _device(group)
    dist.send(torch.tensor([len(data)], dtype=torch.int64, device=device), dst, group=group)
    dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device), dst, group=group)


def _receive_bytes(src: int, group) -> bytes:
    import torch
    import torch.distributed as dist

    device = _device(group)
    size = torch.empty(1, dtype=torch.int64, device=device)
    dist.recv(size, src, group=group)
    received = bytearray(int(size.item()))
    data = torch.frombuffer(received, dtype=torch.uint8)  # shares `received`'s memory
    if device.type == "cpu":
        dist.recv(data, src, group=group)
    else:
        on_device = torch.empty(len(received), dtype=torch.uint8, device=device)
        dist.recv(on_device, src, group=group)
        data.copy_(on_device)
    return bytes(received)
