# SPDX-License-Identifier: MIT
"""A first build, torch's load() against jitops.load, each step a new process on a new copy of
examples/edit_loop.py's 3-unit extension (bind.cpp with torch/extension.h, kernels k1 and k2):

    python examples/first_build.py [--remote URL] [--repeats 3] [--json results.json]

  torch cold, torch bind edit       torch's first build (its own build_directory), then one line of bind.cpp
  cold, bind edit (no wait)         jitops' first build in an empty cache (MAX_JOBS as set), then the
                                    same edit at once: a PCH started beside the first build is used
                                    where it was ready
  fleet cold                        an empty cache with the fleet's remote (read-only, the writer's key
                                    trusted): the writer ran `jitops-cache pch` in the same image and
                                    pushed its PCH; the remote has no entry for this extension
  image cold                        a cache where `jitops-cache pch` ran ahead of time (the image's),
                                    a new extension
  edit k1 in process / new process  the notebook's loop: one process loads, k1 is edited, it loads
                                    again (timed alone); against the same edit loaded by a new process.
                                    Units compiled counted by a logging compiler

Each ratio is jitops' median over torch's cold median (or torch's bind edit, or the new process's
edit) in the same run. --remote: the fleet's remote (redis://...; default a file:// folder).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edit_loop import CHILD, WRAPPER, Tree, wait_for_background_pch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--remote", help="the fleet's remote cache URL (default: a file:// folder)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="jitops-first-build-"))
    remote = args.remote or f"file://{work / 'remote'}"
    (work / "remote").mkdir()
    keys = work / "keys"
    keys.mkdir()
    seconds: dict[str, list[float]] = {}
    notes: list[str] = []

    def run(which: str, tree: Tree, name: str, build: str, env: dict, edits: dict | None = None) -> dict:
        argv = [sys.executable, "-c", CHILD, which, name, json.dumps(tree.sources), build, "[]", "[]"]
        argv += [json.dumps(edits)] if edits else []
        proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{which} {name} failed:\n{proc.stderr}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if abs(result["k1"] - tree.expected_k1(result["x0"])) > 1e-4:
            raise SystemExit(f"{which} {name}: k1 is {result['k1']}, expected {tree.expected_k1(result['x0'])}")
        result["stderr"] = proc.stderr
        return result

    def jitops_cli(cache: Path, *words: str, **env: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "jitops", *words],
            env={**os.environ, "JITOPS_CACHE_DIR": str(cache), **env},
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(f"jitops-cache {' '.join(words)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def record(label: str, value: float) -> None:
        seconds.setdefault(label, []).append(value)
        print(f"  {label:<26} {value:7.2f} s", flush=True)

    # The writer of the fleet (a CI image): its key, the PCHs built ahead of time and pushed.
    jitops_cli(work / "writer", "remote", "keygen", str(keys / "writer"))
    writer = {"JITOPS_REMOTE_CACHE": remote, "JITOPS_REMOTE_SIGNING_KEY": str(keys / "writer")}
    writer["JITOPS_REMOTE_TRUSTED_KEYS"] = str(keys / "writer.pub")
    began = time.perf_counter()
    print(jitops_cli(work / "writer", "pch", **writer), end="")
    notes.append(f"jitops-cache pch (writer, pushed): {time.perf_counter() - began:.1f} s")
    reader = {
        "JITOPS_REMOTE_CACHE": remote,
        "JITOPS_REMOTE_MODE": "read-only",
        "JITOPS_REMOTE_TRUSTED_KEYS": str(keys / "writer.pub"),
    }
    image = work / "image"  # the image's cache: jitops-cache pch ran in it ahead of time
    began = time.perf_counter()
    jitops_cli(image, "pch")
    notes.append(f"jitops-cache pch (image): {time.perf_counter() - began:.1f} s")

    for n in range(args.repeats):
        print(f"sample {n + 1} of {args.repeats}", flush=True)
        folder = work / f"s{n}"
        tree = Tree(folder / "torch", cuda)
        (folder / "torch_build").mkdir()  # torch's load() needs its build_directory to exist
        record("torch cold", run("torch", tree, f"fb_torch_{n}", str(folder / "torch_build"), {})["seconds"])
        tree.bind_edits += 1
        tree.write()
        record("torch bind edit", run("torch", tree, f"fb_torch_{n}", str(folder / "torch_build"), {})["seconds"])

        cache = folder / "cache"
        tree = Tree(folder / "jitops", cuda)
        env = {"JITOPS_CACHE_DIR": str(cache), "JITOPS_PCH": "1"}
        cold = run("jitops", tree, f"fb_cold_{n}", "", env)
        record("cold (no PCH anywhere)", cold["seconds"])
        tree.bind_edits += 1
        tree.write()
        edit = run("jitops", tree, f"fb_cold_{n}", "", env)
        record("bind edit (no wait)", edit["seconds"])
        notes.append(f"sample {n + 1} bind edit: " + next((line for line in edit["stderr"].splitlines() if "built" in line), ""))
        wait_for_background_pch(cache, settle=0.5)

        fleet = Tree(folder / "fleet", cuda)
        got = run("jitops", fleet, f"fb_fleet_{n}", "", {"JITOPS_CACHE_DIR": str(folder / "pod"), "JITOPS_PCH": "1", **reader})
        record("fleet cold", got["seconds"])
        notes.append(f"sample {n + 1} fleet: " + next((line for line in got["stderr"].splitlines() if "built" in line), ""))
        fresh = Tree(folder / "image", cuda)
        got = run("jitops", fresh, f"fb_image_{n}", "", {"JITOPS_CACHE_DIR": str(image), "JITOPS_PCH": "1"})
        record("image cold", got["seconds"])

        # The notebook: a logging compiler counts the units each load compiles.
        log = folder / "compiles.log"
        wrappers = {}
        for variable, real in (("CXX", shutil.which(os.environ.get("CXX", "c++"))), ("PYTORCH_NVCC", shutil.which("nvcc"))):
            if real:
                path = folder / f"logging-{variable}"
                path.write_text(WRAPPER.format(log=log, real=real))
                path.chmod(0o755)
                wrappers[variable] = str(path)
        book = Tree(folder / "notebook", cuda)
        nb_env = {"JITOPS_CACHE_DIR": str(folder / "nb_cache"), "JITOPS_PCH": "0", **wrappers}
        run("jitops", book, f"fb_nb_{n}", "", nb_env)
        book.k1_edits += 1
        compiled_before = len(log.read_text().splitlines())
        in_process = run("jitops", book, f"fb_nb_{n}", "", nb_env, edits=book.changed())
        book.write()
        compiled = sum(" -c " in line for line in log.read_text().splitlines()[compiled_before:])
        record("edit k1 in process", in_process["seconds"])
        notes.append(f"sample {n + 1} in-process k1 edit: {compiled} unit(s) compiled (the first load's own: none, warm)")
        book.k1_edits += 1
        book.write()
        record("edit k1 new process", run("jitops", book, f"fb_nb_{n}", "", nb_env)["seconds"])

    median = {label: statistics.median(values) for label, values in seconds.items()}
    ratios = {
        "cold / torch cold": median["cold (no PCH anywhere)"] / median["torch cold"],
        "bind edit (no wait) / torch bind edit": median["bind edit (no wait)"] / median["torch bind edit"],
        "fleet cold / torch cold": median["fleet cold"] / median["torch cold"],
        "image cold / torch cold": median["image cold"] / median["torch cold"],
        "edit k1 in process / new process": median["edit k1 in process"] / median["edit k1 new process"],
    }
    print(
        f"\ntorch {torch.__version__}, {'CUDA' if cuda else 'CPU'}, {os.cpu_count()} CPUs, MAX_JOBS={os.environ.get('MAX_JOBS', 'unset')}"
    )
    for label, value in median.items():
        print(f"  {label:<26} median {value:7.2f} s  ({', '.join(f'{v:.2f}' for v in seconds[label])})")
    for label, value in ratios.items():
        print(f"  {label:<40} {value:.2f}x")
    for note in notes:
        print(f"  {note}")
    if args.json:
        args.json.write_text(json.dumps({"seconds": seconds, "median": median, "ratios": ratios, "notes": notes}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
