# SPDX-License-Identifier: MIT
"""A fresh machine with a warm remote cache against building, side by side in one run:

    python examples/remote_cache.py [--tier redis|file] [--repeats 5] [--json results.json]

Every run is a fresh process with an empty local cache (a new container, CI runner or node). For
each case, the first run builds it (with JITOPS_REMOTE_CACHE set: it builds and pushes, as a CI
writer does, the push inside its time); then --repeats runs download it, straight from the server
and through a proxy that adds 20 ms to every reply and caps the rate at 100 MB/s (a server across
a data centre). Records are signed and readers trust only the writer's key. JITOPS_PCH=0
throughout: no background precompiled header competes with the timed runs.

Each run times its own loading part (after `import torch` and CUDA's initialisation); the harness
times the whole process too, beside a floor (a process that only imports torch), and counts the
disk the run left (its cache, and the plugins' build folders). The cases:
  add2, bias_act   jitops' ops: jitops.load_all([op])
  3-unit load      a user's 3-unit extension (bind.cpp with torch/extension.h, k1, k2) through
                   jitops.load (examples/edit_loop.py's tree)
  2 plugins (run)  a program loading two plugins as StyleGAN3's get_plugin does (each into its own
                   build_directory), under `python -m jitops run` (examples/unmodified_program.py)
  edit k1          k1 edited after the writer pushed the 3-unit extension: a fresh machine (a
                   reader: it pushes nothing) downloads the other two units' objects and compiles
                   k1 alone (objects travel between identical paths); its baseline is a fresh
                   machine without the remote, which compiles all three

--tier redis starts Debian's redis-server on a free port (tests/servers.py); --tier file uses a
shared folder (file://), for a host without a Redis server.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from edit_loop import CHILD as LOAD_CHILD  # noqa: E402
from edit_loop import Tree  # noqa: E402
from unmodified_program import STYLEGAN as PROGRAM  # noqa: E402

OP_CHILD = """
import json, sys, time, torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")
started = time.perf_counter()
import jitops
jitops.load_all([sys.argv[1]])
seconds = time.perf_counter() - started
device = "cuda" if torch.cuda.is_available() else "cpu"
x, y = torch.randn(1 << 16, device=device), torch.randn(1 << 16, device=device)
if sys.argv[1] == "add2":
    ok = torch.equal(jitops.add2(x, y), x + y)
else:
    from jitops.ops.bias_act import bias_act_ref
    x, b = x.view(-1, 256), torch.randn(256, device=device)
    ok = torch.allclose(jitops.bias_act(x, b, act="lrelu"), bias_act_ref(x, b, act="lrelu"))
print(json.dumps({"seconds": seconds, "ok": bool(ok)}))
"""


CASES = ("add2", "bias_act", "3-unit load", "2 plugins (run)", "edit k1")


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under folder (0 where it does not exist): the disk a run left."""
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(folder) for f in files)


def counters(env: dict, cwd: Path) -> dict:
    """The server's counters (cwd outside the checkout: `python -m` would put its jitops first)."""
    out = subprocess.run(
        [sys.executable, "-m", "jitops", "remote", "status", "--json"], env=env, cwd=cwd, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"remote status failed:\n{out.stdout}{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=["redis", "file"], default="redis")
    parser.add_argument("--repeats", type=int, default=5, help="downloads of each case per path (median)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--installed", action="store_true", help="run the jitops installed in this Python, not the checkout's")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()

    import torch

    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="jitops-remote-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JITOPS_")}
        if not args.installed:  # the checkout's jitops; --installed: the one this Python has (pip install .)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p)
        env["JITOPS_PCH"] = "0"
        keygen = subprocess.run(
            [sys.executable, "-m", "jitops", "remote", "keygen", str(work / "writer.key"), "--json"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
        )
        if keygen.returncode != 0:
            raise SystemExit(f"remote keygen failed:\n{keygen.stdout}{keygen.stderr}")
        public = json.loads(keygen.stdout)["public_key"]
        env["JITOPS_REMOTE_TRUSTED_KEYS"] = public
        paths = {}
        if args.tier == "redis":
            from servers import Proxy, RedisServer

            server = RedisServer(work / "redis")
            proxy = Proxy(server.port, delay_s=0.020, rate=100e6)
            paths = {"remote": server.url, "remote +20ms 100MB/s": proxy.url}
        else:
            (work / "shared").mkdir()
            paths = {"remote (file://)": f"file://{work / 'shared'}"}
        writer_env = {
            **env,
            "JITOPS_REMOTE_CACHE": next(iter(paths.values())),
            "JITOPS_REMOTE_SIGNING_KEY": str(work / "writer.key"),
        }

        tree = Tree(work / "tree", cuda)
        tutorial = HERE / "baseline_add2"
        plugin_sources = [str(tutorial / "add2.cpp"), str(tutorial / ("add2_kernel.cu" if cuda else "add2_cpu.cpp"))]
        (work / "train.py").write_text(PROGRAM)
        runs = 0

        def command(case: str) -> list[str]:
            nonlocal runs
            runs += 1
            if case in ("add2", "bias_act"):
                return [sys.executable, "-c", OP_CHILD, case]
            if case in ("3-unit load", "edit k1"):
                return [sys.executable, "-c", LOAD_CHILD, "jitops", "remote_three", json.dumps(tree.sources), "", "[]", "[]"]
            return [sys.executable, "-m", "jitops", "run", "train.py", "import", json.dumps(plugin_sources)]

        def run(case: str, run_env: dict) -> dict:
            argv = command(case)
            cache = work / f"cache-{runs}"  # empty: a fresh machine, its plugins' build folders new too
            started = time.perf_counter()
            out = subprocess.run(
                argv,
                env={**run_env, "JITOPS_CACHE_DIR": str(cache), "TORCH_EXTENSIONS_DIR": str(work / f"plugins-{runs}")},
                cwd=work,
                capture_output=True,
                text=True,
                timeout=3600,
            )
            wall = time.perf_counter() - started
            disk = folder_bytes(cache) + folder_bytes(work / f"plugins-{runs}")  # the plugins' build folders too
            if out.returncode != 0:
                raise SystemExit(f"{case} failed:\n{out.stderr[-4000:]}")
            report = json.loads(out.stdout.strip().splitlines()[-1])
            if "k1" in report and abs(report["k1"] - tree.expected_k1(report["x0"])) > 1e-4:
                raise SystemExit(f"{case}: k1 gave {report['k1']} (the old code?)")
            if report.get("ok") is False:
                raise SystemExit(f"{case}: a wrong result")
            seconds = report.get("seconds", report.get("loading_s"))
            status = [line for line in out.stderr.splitlines() if line.startswith("jitops: built")]
            return {
                "seconds": seconds,
                "wall_s": wall,
                "disk": disk,
                "status": status,
                "warnings": out.stderr.count("RuntimeWarning"),
            }

        # A process that only imports torch (and initialises CUDA): what every run pays first. Taken
        # before each download, alternating, so that both see the machine in the same state.
        floor_command = [sys.executable, "-c", "import torch; torch.cuda.is_available() and torch.zeros(1, device='cuda')"]
        floor: list[float] = []

        def floor_then(case: str, run_env: dict) -> dict:
            started = time.perf_counter()
            subprocess.run(floor_command, env=env, check=True)
            floor.append(time.perf_counter() - started)
            return run(case, run_env)

        results = {}
        for case in [c for c in CASES if c in args.cases.split(",")]:
            if case == "edit k1":
                tree.k1_edits += 1
                tree.write()
            row = {}
            # The edit's baseline is a fresh machine without the remote: it compiles all three units.
            built = run(case, env if case == "edit k1" else writer_env)
            row["build"] = {k: built[k] for k in ("seconds", "wall_s", "disk", "status")}
            print(
                f"{case:<16} build {built['seconds']:7.2f} s (process {built['wall_s']:.2f} s, "
                f"{built['disk'] / 1e6:.1f} MB on disk)   {'; '.join(built['status'])}",
                flush=True,
            )
            for label, url in paths.items():
                reader_env = {**env, "JITOPS_REMOTE_CACHE": url, "JITOPS_REMOTE_MODE": "read-only"}
                before = counters(reader_env, work) if args.tier == "redis" else None
                samples = [floor_then(case, reader_env) for _ in range(args.repeats if case != "edit k1" else 1)]
                after = counters(reader_env, work) if args.tier == "redis" else None
                seconds = statistics.median(s["seconds"] for s in samples)
                # Read-only readers leave the server's counters alone (a jitops before issue 60's did not)
                moved = (after["bytes_down"] - before["bytes_down"]) / len(samples) if before else None
                moved = moved or None
                row[label] = {
                    "seconds": seconds,
                    "wall_s": statistics.median(s["wall_s"] for s in samples),
                    "disk": samples[-1]["disk"],
                    "samples": [round(s["seconds"], 4) for s in samples],
                    "bytes_per_load": moved,
                    "status": samples[-1]["status"],
                    "warnings": sum(s["warnings"] for s in samples),
                }
                extra = f"  {moved / 1e6:.2f} MB moved per load" if moved is not None else ""
                wall = row[label]["wall_s"]
                print(
                    f"{'':<16} {label:<22} {seconds:7.3f} s  ({built['seconds'] / seconds:5.1f}x faster than building)"
                    f"  process {wall:.2f} s ({built['wall_s'] / wall:.1f}x), {row[label]['disk'] / 1e6:.1f} MB on disk"
                    f"{extra}  {'; '.join(samples[-1]['status'])}",
                    flush=True,
                )
            results[case] = row
        if args.tier == "redis":
            proxy.close()
            server.stop()
    floor_s = statistics.median(floor)
    print(f"floor (a process that only imports torch), median of {len(floor)}: {floor_s:.3f} s", flush=True)
    summary = {"tier": args.tier, "cuda": cuda, "torch": torch.__version__, "floor_s": floor_s, "results": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
