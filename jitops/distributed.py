# SPDX-License-Identifier: MIT
"""Build each op (and any package's Extension) once for a whole torch.distributed job, not once per node.

    dist.init_process_group(...)
    jitops.distributed.load_all()   # every rank calls it once; then the ops load from the local cache
    jitops.distributed.load_all(extensions=[mypkg.EXTENSION])   # a package's, without jitops' ops

A "node" is a cache: the ranks on one host that share a cache root. The ranks all-gather their keys
and derive one plan (`plan`): one rank provides each entry and sends it to one rank of every node
that lacks it, which publishes it as a local build would. docs/distributed.md says what a user sees.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ._errors import BuildError, in_threads
from ._resolution import resolve
from .extension import Extension
from .store import PlannedEntry, Store

if TYPE_CHECKING:
    from ._records import Manifest

__all__ = ["load_all"]


class Transfer:
    """One (extension, key): the rank that provides its entry, whether it builds it, who receives it.
    name: the extension's qualified name."""

    def __init__(self, name: str, key: str, source: int, build: bool, receivers: list[int]):
        self.name, self.key, self.source, self.build, self.receivers = name, key, source, build, receivers


def _local_state(entries: dict, cached: list[str]) -> dict:
    """What this rank tells the others: the extensions it loads in its order, its key for each and
    the node it builds into (host and that extension's cache root), and those its cache has."""
    host = socket.gethostname()
    return {
        "names": list(entries),
        "keys": {name: entry.key for name, entry in entries.items()},
        "nodes": {name: f"{host}:{os.path.realpath(entry.root)}" for name, entry in entries.items()},
        "cached": cached,
    }


def _disagreement(states: dict[int, dict]) -> str:
    """Why the ranks' lists of extensions differ ('' where they agree): the same text on every rank,
    which raises it, since each sees every rank's state after the one all_gather."""
    lists: dict[tuple, list[int]] = {}
    for rank in sorted(states):
        lists.setdefault(tuple(states[rank]["names"]), []).append(rank)
    if len(lists) == 1:
        return ""
    return "the ranks must load the same extensions, in the same order; they asked for:\n" + "\n".join(
        f"  ranks {', '.join(map(str, ranks))}: {', '.join(names) or '(none)'}" for names, ranks in lists.items()
    )


def plan(names: list[str], states: dict[int, dict]) -> list[Transfer]:
    """The same list on every rank, from every rank's _local_state (rank -> state). A "node" of an
    extension: the ranks that share its cache root."""
    transfers = []
    builds_per_node: dict[str, int] = {}
    builds_per_rank: dict[int, int] = {}
    for name in names:
        for key in sorted({state["keys"][name] for state in states.values()}):
            nodes: dict[str, list[int]] = {}
            for rank in sorted(states):
                if states[rank]["keys"][name] == key:
                    nodes.setdefault(states[rank]["nodes"][name], []).append(rank)
            have = [node for node, ranks in nodes.items() if any(name in states[r]["cached"] for r in ranks)]
            if have:
                source_node, build = have[0], False
                source = next(r for r in nodes[source_node] if name in states[r]["cached"])
            else:
                source_node = min(nodes, key=lambda n: (builds_per_node.get(n, 0), nodes[n][0]))
                source = min(nodes[source_node], key=lambda r: (builds_per_rank.get(r, 0), r))
                build = True
                builds_per_node[source_node] = builds_per_node.get(source_node, 0) + 1
                builds_per_rank[source] = builds_per_rank.get(source, 0) + 1
            receivers = [ranks[0] for node, ranks in nodes.items() if node not in have and node != source_node]
            transfers.append(Transfer(name, key, source, build, receivers))
    return transfers


def load_all(ops: Sequence[str] | None = None, extensions: Sequence[Extension] | None = None, *, group: Any = None) -> None:
    """jitops.load_all across a job: jitops' ops (all, or those named; none where only extensions are
    given) and `extensions`, each compiled once in the job. A collective: every rank of `group` passes
    the same lists, after init_process_group."""
    import torch.distributed as dist  # imported by the call, not by `import jitops.distributed`

    if not dist.is_initialized():
        raise RuntimeError("jitops.distributed.load_all: call torch.distributed.init_process_group first")
    rank = dist.get_rank()
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    op_names, declared, planned, state = _planned_here(ops, extensions)
    gathered: list = [None] * len(ranks)
    dist.all_gather_object(gathered, state, group=group)
    states = dict(zip(ranks, gathered))
    if unplanned := [f"rank {r}: {states[r]['error']}" for r in sorted(states) if "error" in states[r]]:
        raise BuildError("jitops.distributed.load_all: planning failed on\n  " + "\n  ".join(unplanned))
    if disagreement := _disagreement(states):
        raise ValueError(f"jitops.distributed.load_all: {disagreement}")
    transfers = plan(list(declared), states)
    # This rank's builds, in parallel; a failure is broadcast with the extension's outcome below.
    mine = [t for t in transfers if t.build and t.source == rank]
    raised = in_threads({t.name: partial(resolve, declared[t.name]) for t in mine}) if mine else {}
    errors = {name: str(err) for name, err in raised.items() if err is not None}
    not_published = _exchange(dist, group, rank, transfers, planned, errors)
    # Every node's cache now has its entries (or some rank says why not); each rank loads from there.
    gathered = [None] * len(ranks)
    dist.all_gather_object(gathered, not_published, group=group)
    problems = [problem for of_rank in gathered for problem in of_rank]
    if problems:
        raise BuildError("jitops.distributed.load_all:\n  " + "\n  ".join(problems))
    from .ops._framework import load_all as load_here  # jitops.ops imports torch (as the call has)

    load_here(op_names, extensions or [])  # from the cache now, with each one's Python-side registrations


def _planned_here(ops, extensions) -> tuple[list[str], dict[str, Extension], dict[str, PlannedEntry], dict]:
    """What load_all loads, this rank's key for each, and the state it tells the others: what its
    cache has, else the remote cache's (a node that hits has nothing to build; a remote that fails
    is off for this process within its timeouts). An error goes in the state, so that every rank
    raises it instead of waiting."""
    try:
        op_names, declared = _declared(ops, extensions)
        planned = {name: PlannedEntry(e) for name, e in declared.items()}
        cached = [name for name, p in planned.items() if (store := Store(p.entry.root)).local(p) or store.fetch(p)]
        return op_names, declared, planned, _local_state({name: p.entry for name, p in planned.items()}, cached)
    except Exception as err:
        return [], {}, {}, {"error": f"{type(err).__name__}: {err}"}


def _exchange(
    dist, group, rank: int, transfers: list[Transfer], planned: dict[str, PlannedEntry], errors: dict[str, str]
) -> list[str]:
    """Each extension's outcome broadcast by its source, and its entry sent to each receiver, which
    publishes it. Raises where a source failed (every rank has the same list); returns what this rank
    could not publish."""
    builders: dict[int, list[str]] = {}  # the other ranks' builds, named when an exchange fails
    for t in transfers:
        if t.build and t.source != rank:
            builders.setdefault(t.source, []).append(t.name)
    failures: list[str] = []
    not_published: list[str] = []
    for t in transfers:
        outcome: list[str | None] = [None]
        payload: list[tuple[Manifest, bytes] | None] = [None]
        if rank == t.source:
            outcome[0] = errors.get(t.name, "")
            if not outcome[0] and t.receivers:
                try:
                    payload[0] = _entry_payload(t, planned[t.name])
                except Exception as err:  # broadcast, so that no receiver waits for bytes
                    outcome[0] = f"could not read its cache entry: {err}"
        _collective(t, builders, lambda: dist.broadcast_object_list(outcome, src=t.source, group=group))
        if outcome[0]:
            failures.append(f"rank {t.source} failed to {'build' if t.build else 'provide'} {t.name}: {outcome[0]}")
        elif rank == t.source:
            for receiver in t.receivers:
                _collective(t, builders, lambda receiver=receiver: dist.send_object_list(payload, receiver, group=group))
        elif rank in t.receivers:
            _collective(t, builders, lambda: dist.recv_object_list(payload, t.source, group=group))
            try:
                entry, received = planned[t.name].entry, payload[0]
                if received is None:
                    raise ValueError("nothing arrived")
                Store(entry.root).receive(entry, *received)
            except Exception as err:  # reported to every rank below, so that none waits for this one
                not_published.append(f"rank {rank} could not publish {t.name} received from rank {t.source}: {err}")
    if failures:  # every rank has the same list, so every rank raises here
        raise BuildError("jitops.distributed.load_all:\n  " + "\n  ".join(failures))
    return not_published


def _declared(ops: Sequence[str] | None, extensions: Sequence[Extension] | None) -> tuple[list[str], dict[str, Extension]]:
    """What load_all(ops, extensions) loads (jitops.ops._framework.chosen), every Extension by qualified name,
    the ops' then the extensions."""
    from .ops._framework import chosen, op_libraries  # jitops.ops imports torch (as the call has)

    op_names, others = chosen(ops, extensions)
    declared = {e.qualified_name: e for op in op_names for e in op_libraries(op)}
    declared.update((e.qualified_name, e) for e in others)
    return op_names, declared


def _collective(t: Transfer, builders: dict[int, list[str]], call):
    """call(), its failure re-raised naming the extension and the ranks that were building: a rank
    killed or hung while building stalls the first exchange after the builds, whichever that is for."""
    try:
        return call()
    except Exception as err:
        building = ", ".join(f"rank {r} (building {', '.join(names)})" for r, names in sorted(builders.items())) or "none"
        raise BuildError(
            f"jitops.distributed.load_all: exchanging {t.name} (provided by rank {t.source}) failed: "
            f"{type(err).__name__}: {err}\nthe other ranks that were building: {building}"
        ) from err


def _entry_payload(t: Transfer, planned: PlannedEntry) -> tuple[Manifest, bytes]:
    """What the provider sends each receiver (pickled by torch.distributed, as all_gather_object
    does): the entry's manifest and its library's bytes."""
    found = Store(planned.entry.root).entry_bytes(planned)  # the variant this rank built or found
    if found is None:
        raise BuildError(f"jitops.distributed.load_all: {t.name} is missing from rank {t.source}'s cache")
    return found
