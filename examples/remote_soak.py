# SPDX-License-Identifier: MIT
"""The remote tier under faults, as a fleet lives them: pods that load while the server misbehaves.

    python examples/remote_soak.py [--workers 4] [--loads 10] [--timeout 2] [--json out.json]

A writer (signing key) builds tests/tiny_ext (no torch headers: it compiles in under a second) and
pushes it to a real redis-server and to a shared folder (file://). Then --workers pods load it
--loads times each, every load a new process with an empty cache root (a new pod), read-only,
trusting only the writer's key, JITOPS_REMOTE_TIMEOUT=--timeout. Meanwhile the driver cycles the
server through its faults, one phase after another, and each new load is pointed at what the
phase offers:
  ok        the server
  trickle   a loopback proxy in front of it that passes one byte per 100 ms
  flood     a server that answers every request with a 1 GB reply
  restart   the server killed, started again (empty), and seeded again by the writer's push
  folder    (the last worker, always) the shared folder, where a FIFO, a link to /dev/zero and
            a stranger's record sit beside the writer's
and planted on the server throughout: a record of 100,000 nested brackets and one signed by a
key nobody trusts, both under the key every pod looks up, listed before the writer's.

Every load must return the writer's value (42) and exit 0 in time; the pods' own instrument
(jitops.store._remote.Remote.seconds) gives the time spent inside remote calls per load, and
/proc its memory's growth. Printed: loads, remote hits, local builds, faults survived, wrong
values, hangs, crashes, and the remote seconds per load (median, max).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests")]

from servers import HostileServer, Proxy, RedisServer  # noqa: E402
from tiny_extension import MEASURED_LOAD as CHILD  # noqa: E402

TINY = HERE.parent / "tests" / "tiny_ext"
VALUE = 42  # tiny_value() of tests/tiny_ext
PHASES = ("ok", "trickle", "ok", "flood", "restart", "ok")


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jitops", *args], env=env, capture_output=True, text=True, timeout=120)


def load(work: Path, env: dict, timeout: float) -> dict:
    """One pod: a new process, an empty cache root (env's JITOPS_CACHE_DIR, else one removed after);
    its JSON line, or what went wrong."""
    root = Path(tempfile.mkdtemp(dir=work, prefix="pod-"))
    run_env = {"JITOPS_CACHE_DIR": str(root / "cache"), "TORCH_EXTENSIONS_DIR": str(root / "ext"), **env}
    started = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(work / "src"), str(HERE.parent / "tests")],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "wall": time.monotonic() - started}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if out.returncode != 0:
        return {"outcome": "crash", "stderr": out.stderr[-2000:]}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    faults = [line for line in out.stderr.splitlines() if "RuntimeWarning" in line]
    outcome = "wrong" if result["value"] != VALUE else result["how"]
    return {**result, "outcome": outcome, "warnings": faults, "wall": time.monotonic() - started}


def plant(server: RedisServer, key: str, stranger_record: bytes) -> None:
    """Under the pods' lookup key, listed first: a deeply nested record and a stranger's."""
    server.command("SET", f"jitops:entries/{key}/0deep", "[" * 100_000 + "]" * 100_000)
    server.command("SET", f"jitops:entries/{key}/0stranger", stranger_record)
    server.command("SADD", f"jitops:ls:entries/{key}", "0deep", "0stranger")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--loads", type=int, default=10, help="loads per worker, each a new process")
    parser.add_argument("--timeout", type=float, default=2.0, help="JITOPS_REMOTE_TIMEOUT of the pods")
    parser.add_argument("--phase-seconds", type=float, default=4.0)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="jitops-soak-") as tmp:
        work = Path(tmp)
        shutil.copytree(TINY, work / "src")
        base = {k: v for k, v in os.environ.items() if not k.startswith("JITOPS_")}
        base["JITOPS_PCH"] = "0"
        keys = {}
        for who in ("writer", "stranger"):
            made = cli(base, "remote", "keygen", str(work / f"{who}.key"), "--json")
            keys[who] = json.loads(made.stdout)["public_key"]
        server = RedisServer(work / "redis")
        folder = work / "shared"
        folder.mkdir()
        writer = {**base, "JITOPS_REMOTE_SIGNING_KEY": str(work / "writer.key"), "JITOPS_REMOTE_TRUSTED_KEYS": keys["writer"]}
        writer |= {"JITOPS_CACHE_DIR": str(work / "writer-cache"), "TORCH_EXTENSIONS_DIR": str(work / "writer-ext")}
        pod = {**base, "JITOPS_REMOTE_MODE": "read-only", "JITOPS_REMOTE_TRUSTED_KEYS": keys["writer"]}
        pod["JITOPS_REMOTE_TIMEOUT"] = f"{args.timeout:g}"

        def seed() -> None:
            for url in (server.url, f"file://{folder}"):
                pushed = cli({**writer, "JITOPS_REMOTE_CACHE": url}, "remote", "push", "--json")
                assert pushed.returncode == 0, pushed.stdout + pushed.stderr

        built = load(work, {**writer, "JITOPS_REMOTE_CACHE": server.url}, 120)
        assert built["outcome"] == "built", built
        seed()
        record_name = json.loads(cli({**writer, "JITOPS_REMOTE_CACHE": server.url}, "list", "--remote", "--json").stdout)
        key = record_name["entries"][0]["record"].split("/")[1]
        # A stranger's record: the writer's body signed by a key nobody trusts.
        from jitops.store import _remote_records, _signing

        body = json.loads((folder / "entries" / key / os.listdir(folder / "entries" / key)[0]).read_bytes().split(b"\n", 3)[3])
        stranger = _remote_records.seal(body, _signing.Signer(str(work / "stranger.key")))
        plant(server, key, stranger)
        (folder / "entries" / key / "0stranger").write_bytes(stranger)
        os.mkfifo(folder / "entries" / key / "0fifo")
        (folder / "entries" / key / "0zero").symlink_to("/dev/zero")

        trickle = Proxy(server.port, rate=10)  # one byte per 100 ms
        flood = HostileServer("huge")
        urls = {"ok": server.url, "trickle": trickle.url, "flood": flood.url, "restart": server.url}
        phase = {"name": "ok", "loads": 0}  # loads: started in this phase
        results: list[dict] = []
        done = threading.Event()

        def driver() -> None:
            for name in itertools.cycle(PHASES):
                phase.update(name=name, loads=0)
                if name == "restart":
                    server.stop()
                    time.sleep(args.phase_seconds / 2)
                    server.start()
                    seed()
                    plant(server, key, stranger)
                # Each phase lasts --phase-seconds, and until two loads started in it (a slow machine).
                if done.wait(args.phase_seconds):
                    return
                while phase["loads"] < 2:
                    if done.wait(0.1):
                        return

        def worker(index: int) -> None:
            for _ in range(args.loads):
                shared = index == args.workers - 1
                name = "folder" if shared else phase["name"]
                phase["loads"] += not shared
                url = f"file://{folder}" if shared else urls[name]
                result = load(work, {**pod, "JITOPS_REMOTE_CACHE": url}, 120)
                results.append({**result, "phase": name})

        threading.Thread(target=driver, daemon=True).start()
        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        wall = time.monotonic() - started
        trickle.close()
        flood.close()
        server.stop()

    outcomes = [r["outcome"] for r in results]
    seconds = [r["remote_seconds"] for r in results if "remote_seconds" in r]
    summary = {
        "loads": len(results),
        "remote_hits": outcomes.count("remote"),
        "built_locally": outcomes.count("built"),
        "remote_off": sum(1 for r in results if any("the remote cache is off" in w for w in r.get("warnings", []))),
        "records_skipped": sum(sum("ignoring the remote cache's record" in w for w in r.get("warnings", [])) for r in results),
        "wrong_values": outcomes.count("wrong"),
        "hangs": outcomes.count("hang"),
        "crashes": outcomes.count("crash"),
        "remote_seconds_median": statistics.median(seconds) if seconds else None,
        "remote_seconds_max": max(seconds) if seconds else None,
        "memory_growth_max_mib": max((r["grew"] for r in results if "grew" in r), default=0) / 2**20,
        "timeout_s": args.timeout,
        "wall_s": wall,
        "by_phase": {p: [r["outcome"] for r in results if r["phase"] == p] for p in dict.fromkeys(r["phase"] for r in results)},
        "crash_logs": [r["stderr"] for r in results if r["outcome"] == "crash"],
    }
    print(
        f"{summary['loads']} loads in {wall:.0f} s: {summary['remote_hits']} remote hits, {summary['built_locally']} built locally"
    )
    print(
        f"faults survived: {summary['remote_off']} loads with the remote off (a server fault), "
        f"{summary['records_skipped']} bad records skipped"
    )
    print(f"wrong values {summary['wrong_values']}, hangs {summary['hangs']}, crashes {summary['crashes']}")
    print(
        f"time inside remote calls per load: median {summary['remote_seconds_median']:.3f} s, "
        f"max {summary['remote_seconds_max']:.3f} s (JITOPS_REMOTE_TIMEOUT {args.timeout:g} s)"
    )
    print(f"a pod's memory grew by at most {summary['memory_growth_max_mib']:.1f} MiB during its load")
    for name, hows in summary["by_phase"].items():
        print(f"  {name:8} {len(hows):3} loads: " + ", ".join(f"{h} {hows.count(h)}" for h in dict.fromkeys(hows)))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
