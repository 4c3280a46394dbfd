# SPDX-License-Identifier: MIT
"""jitops.distributed.load_all in a real multi-node job on one machine: two `torchrun --nnodes 2`
invocations (static rendezvous on localhost, gloo), each a "node" with its own JITOPS_CACHE_DIR
and two ranks, starting from empty caches (tests/jobs/distributed_load_all.py is one rank)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from servers import free_port
from test_loader import TIMEOUT_S, entries, load_tiny
from test_reliability import hung_compiler, kill_processes_with, processes_with

import jitops
from jitops import _layout
from jitops.store import Store, _entries

pytestmark = pytest.mark.slow  # the slow tier (CONTRIBUTING): crowds of ranks and nodes

JOB = Path(__file__).resolve().parent / "jobs" / "distributed_load_all.py"
RANKS_PER_NODE = 2


def start_job(tmp_path: Path, node_env: list[dict], ops: list[str]) -> tuple[Path, list[subprocess.Popen]]:
    """One torchrun per node, its ranks loading jitops' ops `ops`; node_env[i] adds to node i's
    environment (JOB_EXTENSIONS=tiny: tests' tiny extension too)."""
    out, port = tmp_path / "ranks", free_port()
    out.mkdir()
    nodes = []
    for node_rank, extra in enumerate(node_env):
        env = {**os.environ, "JITOPS_CACHE_DIR": str(tmp_path / f"node{node_rank}"), "OMP_NUM_THREADS": "1", **extra}
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(node_env)), "--node-rank", str(node_rank),
            "--nproc-per-node", str(RANKS_PER_NODE), "--master-addr", "127.0.0.1", "--master-port", str(port),
            str(JOB), str(out), ",".join(ops),
        ]  # fmt: skip
        nodes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return out, nodes


def finish_job(nodes: list[subprocess.Popen]) -> list[str]:
    """Each node's stderr (its ranks' jitops status lines among it), once every node has ended."""
    logs = []
    for node in nodes:
        try:
            logs.append(node.communicate(timeout=TIMEOUT_S)[1])
        except subprocess.TimeoutExpired:
            for other in nodes:
                other.kill()
            pytest.fail("the distributed job hung")
    return logs


def rank_results(out: Path) -> dict[int, dict]:
    return {r["rank"]: r for r in (json.loads(p.read_text()) for p in out.glob("rank-*.json"))}


def builds_in(logs: list[str]) -> dict[str, int]:
    """How many times each extension (<namespace>.<name>) was compiled in logs (the loader's 'built' status lines)."""
    return Counter(re.findall(r"jitops: built (\w+\.\w+) [(i]", "".join(logs)))  # "(notes)" or "in N s"


def verified_entries(cache: Path) -> dict[str, dict]:
    """op -> manifest of every entry in cache, each re-hashed in full."""
    found = {}
    for entry, manifest in _entries.list_entries(cache):
        assert entry.verified_library(touch=False, full_hash=True) is not None, entry
        found[entry.name.partition(".")[2]] = manifest
    return found


def test_two_nodes_build_each_extension_once_and_share_it(tmp_path):
    # One of jitops' ops (add2) and a package's Extension (tests' tiny) in one load_all: each built
    # once in the job, the two builds spread over the nodes, each node's cache given the other's.
    out, nodes = start_job(tmp_path, [{"JOB_EXTENSIONS": "tiny"}] * 2, ops=["add2"])
    logs = finish_job(nodes)
    assert [node.returncode for node in nodes] == [0, 0], logs
    results = rank_results(out)
    assert sorted(results) == [0, 1, 2, 3] and all(r["ok"] for r in results.values()), results
    assert builds_in(logs) == {"jitops.add2": 1, "jitops_test.tiny": 1}, logs
    assert [sum(builds_in([log]).values()) for log in logs] == [1, 1], "one build on each node"
    node0, node1 = verified_entries(tmp_path / "node0"), verified_entries(tmp_path / "node1")
    assert sorted(node0) == sorted(node1) == ["add2", "tiny"]
    for name in node0:  # the same build in both caches: one key, one library, one build time
        assert [node0[name][k] for k in ("key", "library_sha256", "built_at")] == [
            node1[name][k] for k in ("key", "library_sha256", "built_at")
        ]


def test_a_node_with_another_key_builds_its_own(tmp_path):
    # Node 1's compiler is another binary (a wrapper around the same c++): another key. Node 0
    # builds its key once, node 1 its own; nothing built for one key reaches the other. (The tiny
    # extension: the rule is the same for every extension, and an op built twice is slow.)
    wrapper = tmp_path / "c++-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("c++")} "$@"\n')
    wrapper.chmod(0o755)
    out, nodes = start_job(tmp_path, [{"JOB_EXTENSIONS": "tiny"}, {"JOB_EXTENSIONS": "tiny", "CXX": str(wrapper)}], ops=[])
    logs = finish_job(nodes)
    assert [node.returncode for node in nodes] == [0, 0], logs
    assert all(r["ok"] for r in rank_results(out).values()) and len(rank_results(out)) == 4
    assert [builds_in([log]) for log in logs] == [{"jitops_test.tiny": 1}] * 2, logs
    node0, node1 = verified_entries(tmp_path / "node0"), verified_entries(tmp_path / "node1")
    assert node0["tiny"]["key"] != node1["tiny"]["key"]
    assert node1["tiny"]["components"]["cxx"].startswith(str(wrapper))


def test_ranks_that_ask_for_different_extensions_all_fail_at_once(tmp_path):
    # Node 0's ranks ask for add2 and the package's extension, node 1's for add2 alone: every rank
    # raises the same error naming both lists, before anything is built, instead of a hang.
    out, nodes = start_job(tmp_path, [{"JOB_EXTENSIONS": "tiny"}, {}], ops=["add2"])
    logs = finish_job(nodes)
    assert all(node.returncode != 0 for node in nodes), logs
    errors = {rank: r["error"] for rank, r in rank_results(out).items()}
    assert sorted(errors) == [0, 1, 2, 3], logs
    for error in errors.values():
        assert "the ranks must load the same extensions" in error, errors
        assert "ranks 0, 1: jitops.add2, jitops_test.tiny" in error and "ranks 2, 3: jitops.add2" in error, errors
    assert "jitops: built" not in "".join(logs), "nothing was built"


def test_a_rank_that_cannot_plan_fails_every_rank(tmp_path):
    # Node 1's copy of the package lacks its sources: its ranks cannot compute a key. They tell the
    # others through the one all_gather, so every rank raises naming them instead of waiting.
    out, nodes = start_job(
        tmp_path, [{"JOB_EXTENSIONS": "tiny"}, {"JOB_EXTENSIONS": "tiny", "JOB_TINY_ROOT": str(tmp_path)}], ops=[]
    )
    logs = finish_job(nodes)
    errors = {rank: r["error"] for rank, r in rank_results(out).items()}
    assert sorted(errors) == [0, 1, 2, 3] and all(node.returncode != 0 for node in nodes), logs
    for error in errors.values():
        assert "planning failed on" in error and "rank 2: BuildError" in error and "is missing sources" in error, errors
        assert "rank 0:" not in error
    assert "jitops: built" not in "".join(logs)


@pytest.mark.parametrize("how", ["killed", "timeout"])
def test_a_lost_building_rank_fails_the_others_clearly(tmp_path, how):
    # Node 1's compiler never returns, so node 1's rank building the extension (tests' tiny: the rule
    # is the same for every extension) waits in ninja. "killed": that rank is killed (SIGKILL);
    # "timeout": node 0's collectives time out after 10 s. Node 0's ranks, which cannot finish an
    # exchange without node 1's, must fail with an error that names the extension and the rank that
    # was building, and node 0's job must end. (The first rank of node 0 to fail ends the node:
    # torchrun then stops the other; every rank that reports gives the clear error.)
    with hung_compiler(tmp_path) as (compiler, token):
        node0_env = {"JOB_EXTENSIONS": "tiny", **({"JOB_COLLECTIVE_TIMEOUT_S": "10"} if how == "timeout" else {})}
        out, nodes = start_job(tmp_path, [node0_env, {"JOB_EXTENSIONS": "tiny", "CXX": compiler}], ops=[])
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not processes_with(token) and time.monotonic() < deadline:
                time.sleep(0.2)
            sleepers = processes_with(token)
            assert sleepers, "no build reached the hung compiler"
            lost_at = time.monotonic()
            if how == "killed":
                os.kill(_python_ancestor(sleepers[0]), signal.SIGKILL)
            try:
                nodes[0].wait(timeout=120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"node 0 still runs 120 s after node 1's building rank was {how}")
            waited = time.monotonic() - lost_at
        finally:
            kill_processes_with(token)  # first: a node's ranks wait for their ninja, which waits for it
            for node in nodes:
                node.kill()
                node.communicate()
        # Every rank of node 0 that reported names the extension it was exchanging and node 1's building
        # rank (2 or 3: node 1 builds the extension of its own key).
        reported = {rank: r["error"] for rank, r in rank_results(out).items() if rank < RANKS_PER_NODE}
        assert reported, "no rank of node 0 reported"
        for error in reported.values():
            assert re.search(r"exchanging jitops_test\.tiny \(provided by rank \d\) failed", error), reported
            assert re.search(r"the other ranks that were building: .*rank [23] \(building jitops_test\.tiny", error), reported
        assert nodes[0].returncode != 0
        assert waited < 60, f"node 0 took {waited:.0f} s to end"


def _python_ancestor(pid: int) -> int:
    """The nearest ancestor of pid running Python: the rank whose ninja ran the compiler."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if b"python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
            return pid
    raise AssertionError("no Python process above the compiler")


def test_plan_spreads_builds_and_keeps_keys_apart():
    from jitops.distributed import plan

    ops = ["a", "b", "c", "d", "e"]
    # Five nodes of two ranks, empty caches: five builds on five nodes, each sent to the other four.
    states = {
        rank: {"nodes": {op: f"n{rank // 2}" for op in ops}, "keys": {op: "k" for op in ops}, "cached": []} for rank in range(10)
    }
    node = {rank: f"n{rank // 2}" for rank in states}
    transfers = plan(ops, states)
    assert all(t.build for t in transfers)
    assert sorted(node[t.source] for t in transfers) == ["n0", "n1", "n2", "n3", "n4"]
    for t in transfers:
        assert sorted(node[r] for r in t.receivers) == sorted({"n0", "n1", "n2", "n3", "n4"} - {node[t.source]})
    # A node whose cache has op "c" provides it: no build, and that node receives nothing.
    for rank in (6, 7):
        states[rank]["cached"] = ["c"]
    (c,) = [t for t in plan(ops, states) if t.name == "c"]
    assert not c.build and c.source == 6 and "n3" not in [node[r] for r in c.receivers]
    # Node n4 has another key for "a": a transfer of its own, built there, sent nowhere; the
    # other key's entry never goes to n4.
    for rank in (8, 9):
        states[rank]["keys"]["a"] = "other"
    a_transfers = [t for t in plan(ops, states) if t.name == "a"]
    assert len(a_transfers) == 2
    other = next(t for t in a_transfers if t.key == "other")
    main = next(t for t in a_transfers if t.key == "k")
    assert other.build and other.source in (8, 9) and other.receivers == []
    assert not {8, 9} & {main.source, *main.receivers}


def test_a_received_entry_is_checked_before_it_is_published(tmp_path):
    # What a receiving rank does with the bytes (jitops.store.Store.receive), on the tiny
    # extension's entry: refused with nothing left behind when the library or the manifest is not
    # the one expected; published, and verified in full, when it is.
    load_tiny(tmp_path / "built")
    (built,) = entries(tmp_path / "built")
    op, key, variant = _layout.parse_entry_name(built.name)
    manifest = _entries.Entry(tmp_path / "built", op, key, variant=variant).read_manifest()
    library = (built / manifest["library"]).read_bytes()
    node = tmp_path / "node"
    node.mkdir(mode=0o700)
    entry = _entries.Entry(node, op, key)
    tampered = bytearray(library)
    tampered[len(tampered) // 2] ^= 0xFF
    for bad_manifest, bad_library, message in [
        (manifest, bytes(tampered), "does not match its manifest's sha256"),
        (manifest, library[:-1], "does not match its manifest's sha256"),
        ({**manifest, "key": "0" * len(key)}, library, "is for"),
        ({**manifest, "library": "../escape.so"}, library, "names no valid library"),
    ]:
        with pytest.raises(jitops.BuildError, match=message):
            Store(node).receive(entry, bad_manifest, bad_library)
        assert sorted(p.name for p in node.iterdir() if not p.name.endswith(".lock")) == [], (
            "nothing published or left half-written"
        )
    published = Store(node).receive(entry, manifest, library)
    assert published == entry.verified_library(touch=False, full_hash=True)
    assert published.read_bytes() == library
