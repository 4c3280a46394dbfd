# SPDX-License-Identifier: MIT
"""Build each op once for a whole torch.distributed job, not once per node.

    dist.init_process_group(...)
    jitops.distributed.load_all()   # every rank calls it once; then the ops load from the local cache

A "node" is a cache: the ranks on one host that share a cache root. The ranks all-gather their
keys and derive one plan (`plan`): for each (op, key), one rank provides the entry (from its cache,
or by building it: the builds spread over the nodes) and sends it to one rank of every other node
that lacks it, which publishes it under the entry's lock as a local build would
(`_build.publish_received`). Each outcome is broadcast, so a failure raises on every rank. README
("Across nodes") says what a user sees.
"""

from __future__ import annotations

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


def _local_state(entries: dict) -> dict:
    """What this rank tells the others: its node (host and cache root), its key for each op, and
    the ops its cache has."""
    node = f"{socket.gethostname()}:{os.path.realpath(_cache.cache_root())}"
    cached = [op for op, entry in entries.items() if _cache.verified_or_discarded(entry) is not None]
    return {"node": node, "keys": {op: entry.key for op, entry in entries.items()}, "cached": cached}


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
    each compiled once in the job. A collective, after torch.distributed.init_process_group."""
    import torch.distributed as dist  # imported by the call, not by `import jitops.distributed`

    names = _op_names(ops)
    if not dist.is_initialized():
        raise RuntimeError("jitops.distributed.load_all: call torch.distributed.init_process_group first")
    rank = dist.get_rank()
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    from .ops import extension  # as jitops.load_all does: the op modules import torch

    entries = {op: PlannedEntry(extension(op)).entry for op in names}  # this rank's key for each op
    gathered: list = [None] * len(ranks)
    dist.all_gather_object(gathered, _local_state(entries), group=group)
    transfers = plan(names, dict(zip(ranks, gathered)))

    # This rank's builds, in parallel; a failure is broadcast with the op's outcome below.
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
        outcome, payload = [None], [None]
        if rank == t.source:
            outcome[0] = errors.get(t.op, "")
            if not outcome[0] and t.receivers:
                try:
                    payload[0] = _entry_payload(t, entries[t.op])
                except Exception as err:  # broadcast, so that no receiver waits for bytes
                    outcome[0] = f"could not read its cache entry: {err}"
        _collective(t, builders, lambda: dist.broadcast_object_list(outcome, src=t.source, group=group))
        if outcome[0]:
            failures.append(f"rank {t.source} failed to {'build' if t.build else 'provide'} op {t.op!r}: {outcome[0]}")
        elif rank == t.source:
            for receiver in t.receivers:
                _collective(t, builders, lambda receiver=receiver: dist.send_object_list(payload, receiver, group=group))
        elif rank in t.receivers:
            _collective(t, builders, lambda: dist.recv_object_list(payload, t.source, group=group))
            try:
                _build.publish_received(entries[t.op], *payload[0])
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
    """call(), its failure re-raised naming the op and the ranks that were building: a rank killed or
    hung while building stalls the first exchange after the builds, whichever op that is for."""
    try:
        return call()
    except Exception as err:
        building = ", ".join(f"rank {r} (building {', '.join(ops)})" for r, ops in sorted(builders.items())) or "none"
        raise BuildError(
            f"jitops.distributed.load_all: exchanging op {t.op!r} (provided by rank {t.source}) failed: "
            f"{type(err).__name__}: {err}\nthe other ranks that were building: {building}"
        ) from err


def _entry_payload(t: Transfer, entry: _cache.Entry) -> tuple[dict, bytes]:
    """What the provider sends each receiver (pickled by torch.distributed, as all_gather_object
    does): the entry's manifest and its library's bytes."""
    library = entry.verified_library(touch=False)
    if library is None:
        raise BuildError(f"jitops.distributed.load_all: op {t.op!r} is missing from rank {t.source}'s cache")
    return entry.read_manifest(), library.read_bytes()
