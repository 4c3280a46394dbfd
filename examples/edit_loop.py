# SPDX-License-Identifier: MIT
"""The kernel author's edit loop, torch's load() against jitops.load, each step in a fresh process:

    python examples/edit_loop.py [--json results.json] [--keep DIR] [--repeats N]
    python examples/edit_loop.py --pace SECONDS [--sequences N] [--skip-in-process] [--json results.json]

A 3-unit extension: bind.cpp (`#include <torch/extension.h>`, a pybind11 module) and two kernels,
k1 and k2 (`.cu` where torch has CUDA and a GPU is visible, else plain `.cpp`), all three including
shared.h. The steps, in order, on one copy of the tree per loader (torch's with its own
build_directory, jitops' with an empty cache of its own):

  cold          the first build
  warm          a new process, nothing changed
  edit k1       one line of k1 changed (a new line each repeat)
  edit bind     one line of bind.cpp (the unit that includes torch/extension.h) changed (each repeat anew)
  edit header   shared.h changed (every unit includes it)
  flag          -DSCALE1=4 added (extra_cuda_cflags with CUDA, extra_cflags without)
  2nd ext cold  a second extension (another name, another tree) built for the first time
  -DSCALE1=<v>  with --flag-variants N, N more flag values (jitops alone), each with its PCH, and
                the cache's size after each against its budget (JITOPS_CACHE_MAX_SIZE)

--pace SECONDS runs another sequence instead, as a user at that pace lives it: cold, edit k1, edit
bind, 2nd ext cold, and in-process edits of bind and of k1 (one process loads, a unit is edited, it
loads again: the notebook's loop; --skip-in-process leaves them out), each step starting SECONDS
after that loader's last load returned and waiting for nothing (a background precompiled header is
ready or not); torch's steps run first. Then the floor: jitops' edit of bind once more, after
waiting for every background precompiled header (what a PCH can give at best). --sequences N runs
that sequence N times, each as a new user (new trees, build folders and caches), the loaders taking
turns at going first, and reports each step's median: each paced step is otherwise one sample.

The cold, warm, edit-k1 and edit-bind steps run --repeats times (default 3), the loaders taking
turns, and report the median (each sample is printed): noise decides a single run of a short
compile, and a busy machine a single cold build. Every step checks the module's result. A compiler
wrapper (CXX, PYTORCH_NVCC) counts the compiler invocations of each step. jitops builds a missing precompiled header in a background process after
its cold build: before the next step this script waits for it and prints how long that took (the
user's think time between a first build and an edit). No step of either loader runs beside a
background PCH build (a flag change starts one too).
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

HERE = Path(__file__).resolve().parent

SHARED_H = """#pragma once
#include <cstdint>
#define SHARED_OFFSET {offset}f
void k1_launch(const float* x, float* y, int64_t n);
void k2_launch(const float* x, float* y, int64_t n);
"""
KERNEL_CPP = """#include "shared.h"
#ifndef SCALE{i}
#define SCALE{i} {scale}
#endif
void k{i}_launch(const float* x, float* y, int64_t n) {{
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * SCALE{i} + SHARED_OFFSET;{edit}
}}
"""
KERNEL_CU = """#include "shared.h"
#ifndef SCALE{i}
#define SCALE{i} {scale}
#endif
__global__ void k{i}_kernel(const float* x, float* y, int64_t n) {{
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) y[j] = x[j] * SCALE{i} + SHARED_OFFSET;{edit}
}}
void k{i}_launch(const float* x, float* y, int64_t n) {{
  k{i}_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
}}
"""
BIND_CPP = """#include <torch/extension.h>
#include "shared.h"
torch::Tensor k1(torch::Tensor x) {{
  auto y = torch::empty_like(x);
  k1_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y{edit};
}}
torch::Tensor k2(torch::Tensor x) {{
  auto y = torch::empty_like(x);
  k2_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  m.def("k1", &k1);
  m.def("k2", &k2);
}}
"""

# The time a child spends waiting for ninja's builds (not `ninja -t ...` queries), summed in
# ninja_s: each loader's own work told from the compilers'.
NINJA_CLOCK = """
import subprocess
ninja_s = []
_popen_init, _popen_wait = subprocess.Popen.__init__, subprocess.Popen.wait
def _init(self, args, *rest, **kwargs):
    argv = list(args) if isinstance(args, (list, tuple)) else [args]
    self._clock = (time.perf_counter(), os.path.basename(str(argv[0])) == "ninja" and not {"-t", "--version"} & set(argv))
    _popen_init(self, args, *rest, **kwargs)
def _wait(self, *rest, **kwargs):
    code = _popen_wait(self, *rest, **kwargs)
    if self._clock and self._clock[1]:
        ninja_s.append(time.perf_counter() - self._clock[0])
        self._clock = None
    return code
subprocess.Popen.__init__, subprocess.Popen.wait = _init, _wait
"""

CHILD = (
    """
import json, os, sys, time, torch
cuda = torch.cuda.is_available()
if cuda:
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
which, name, sources, build, cflags, cuda_cflags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], *map(json.loads, sys.argv[5:7])
"""
    + NINJA_CLOCK
    + """started = time.perf_counter()
if which == "jitops":
    from jitops import load
else:
    from torch.utils.cpp_extension import load
module = load(name, sources, extra_cflags=cflags, extra_cuda_cflags=cuda_cflags, build_directory=build or None)
if len(sys.argv) > 7:  # an in-process edit: these files rewritten, then the same load again, timed alone
    for path, text in json.loads(sys.argv[7]).items():
        open(path, "w").write(text)
    started, ninja_s[:] = time.perf_counter(), []
    module = load(name, sources, extra_cflags=cflags, extra_cuda_cflags=cuda_cflags, build_directory=build or None)
seconds = time.perf_counter() - started
x = torch.rand(1000, device="cuda" if cuda else "cpu") + 1.0
k1 = module.k1(x)
module.k2(x)
print(json.dumps({"seconds": seconds, "ninja_s": sum(ninja_s), "k1": float(k1[0]), "x0": float(x[0])}))
"""
)

WRAPPER = """#!/bin/sh
case "$*" in --version|-V|-v|--help) ;; *) echo "$*" >> {log} ;; esac
exec {real} "$@"
"""


class Tree:
    """One copy of the extension's sources, with its state (constants, flags) to compute expectations."""

    def __init__(self, folder: Path, cuda: bool):
        self.folder, self.cuda = folder, cuda
        self.offset, self.k1_edits, self.bind_edits, self.scale1 = 0.5, 0, 0, 2
        folder.mkdir(parents=True)
        self.write()

    @property
    def sources(self) -> list[str]:
        suffix = ".cu" if self.cuda else ".cpp"
        return [str(self.folder / "bind.cpp"), str(self.folder / f"k1{suffix}"), str(self.folder / f"k2{suffix}")]

    def write(self) -> None:
        for path, text in self.changed().items():
            Path(path).write_text(text)

    def changed(self) -> dict[str, str]:
        """The files whose text on disk is not what the tree's state makes, with that text."""
        kernel = KERNEL_CU if self.cuda else KERNEL_CPP
        suffix = ".cu" if self.cuda else ".cpp"
        files = {
            "shared.h": SHARED_H.format(offset=self.offset),
            f"k1{suffix}": kernel.format(
                i=1, scale=2, edit=f"\n  if (n < -{self.k1_edits}) y[0] = 1.0f;" if self.k1_edits else ""
            ),
            f"k2{suffix}": kernel.format(i=2, scale=3, edit=""),
            "bind.cpp": BIND_CPP.format(edit=f" * 1.0 /* edit {self.bind_edits} */" if self.bind_edits else ""),
        }
        paths = {str(self.folder / name): text for name, text in files.items()}
        return {path: text for path, text in paths.items() if not os.path.exists(path) or Path(path).read_text() != text}

    def expected_k1(self, x0: float) -> float:
        return x0 * self.scale1 + self.offset


def wait_for_background_pch(cache: Path, timeout: float = 900.0, settle: float = 0.0) -> float:
    """Seconds until no precompiled header of this cache is being built: no PCH lock is held (a
    background build holds its lock from start to publish). settle: seconds to give a process just
    started to take its lock."""
    import fcntl

    started = time.time()
    time.sleep(settle)
    for lock in (cache / "pch").glob("*.lock"):
        with open(lock) as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # waits while a build holds it
    if time.time() - started > timeout:
        raise SystemExit(f"a background PCH build of {cache} ran for more than {timeout:.0f} s")
    return time.time() - started


def cache_size(cache: Path) -> int:
    """Bytes of the regular files in a cache, as `du --apparent-size` counts them."""
    return sum(p.lstat().st_size for p in cache.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the cold, warm and edit steps (median reported)")
    parser.add_argument(
        "--flag-variants",
        type=int,
        default=0,
        help="then load jitops' extension with N more -DSCALE1 values, each making a precompiled header, and "
        "print the cache's size after each (its budget is JITOPS_CACHE_MAX_SIZE's default)",
    )
    parser.add_argument(
        "--skip-in-process",
        action="store_true",
        help="with --pace, leave out the in-process edits (so that both loaders' sequences fit one 10-minute GPU call)",
    )
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="instead, each loader's steps (cold, edit k1, edit bind, 2nd ext cold, in-process edits of bind and k1) "
        "each start this many seconds after its last load returned, nothing waited for: a user's pace",
    )
    parser.add_argument(
        "--sequences",
        type=int,
        default=1,
        help="with --pace, run the whole sequence N times, each as a new user (new trees and caches), the loaders "
        "taking turns at going first; each step's median is reported",
    )
    args = parser.parse_args()
    if args.sequences < 1:
        parser.error(f"--sequences must be at least 1, got {args.sequences}")

    import torch

    cuda = torch.cuda.is_available() and torch.version.cuda is not None
    work = args.keep or Path(tempfile.mkdtemp(prefix="jitops-edit-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    # Children write bytecode as users' Pythons do (without it, every import compiles its source).
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITOPS_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p)
    wrappers = work / "bin"
    wrappers.mkdir(exist_ok=True)
    logs = {"c++": work / "cxx.log", "nvcc": work / "nvcc.log"}
    real_cxx = shutil.which(os.environ.get("CXX", "c++"))
    (wrappers / "c++").write_text(WRAPPER.format(log=logs["c++"], real=real_cxx))
    env["CXX"] = str(wrappers / "c++")
    if cuda:
        from torch.utils.cpp_extension import CUDA_HOME

        (wrappers / "nvcc").write_text(WRAPPER.format(log=logs["nvcc"], real=Path(CUDA_HOME) / "bin" / "nvcc"))
        env["PYTORCH_NVCC"] = str(wrappers / "nvcc")
    for wrapper in wrappers.iterdir():
        wrapper.chmod(0o755)

    def compiles() -> int:
        return sum(len(p.read_text().splitlines()) if p.exists() else 0 for p in logs.values())

    trees = {which: Tree(work / which / "ext", cuda) for which in ("torch", "jitops")}
    seconds = {which: {} for which in trees}
    counts = {which: {} for which in trees}
    outside = {which: {} for which in trees}  # each step's seconds outside ninja's builds
    flags = {which: ([], []) for which in trees}
    builds = {"torch": work / "torch" / "build", "jitops": work / "jitops" / "build"}
    for folder in builds.values():
        folder.mkdir(parents=True, exist_ok=True)
    pch_wait = None

    def step(
        which: str, label: str, tree: Tree, name: str, build: Path, cache: str = "cache", paced: bool = False, in_process=None
    ) -> None:
        # No step runs beside a background PCH build (a flag change starts one): it would slow the
        # step. Paced steps wait for nothing (--pace).
        for folder in (work / "jitops").glob("cache*") if not paced else ():
            wait_for_background_pch(folder)
        before = compiles()
        cflags, cuda_cflags = flags[which]
        child_env = {**env, "JITOPS_CACHE_DIR": str(work / which / cache)}
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                which,
                name,
                json.dumps(tree.sources),
                str(build),
                json.dumps(cflags),
                json.dumps(cuda_cflags),
                *([json.dumps(in_process)] if in_process else []),
            ],
            env=child_env,
            capture_output=True,
            text=True,
            cwd=work,
            timeout=1800,
        )
        if result.returncode != 0:
            raise SystemExit(f"{which} {label} failed:\n{result.stderr[-4000:]}")
        report = json.loads(result.stdout.strip().splitlines()[-1])
        expected = tree.expected_k1(report["x0"])
        if abs(report["k1"] - expected) > 1e-4 * abs(expected):
            raise SystemExit(f"{which} {label}: k1 gave {report['k1']}, expected {expected} (the old code?)")
        seconds[which].setdefault(label, []).append(report["seconds"])
        counts[which][label] = compiles() - before
        outside[which].setdefault(label, []).append(report["seconds"] - report["ninja_s"])
        print(
            f"  {which:<6} {label:<13} {report['seconds']:8.3f} s  {counts[which][label]} compiles"
            f"  ({report['ninja_s']:.3f} s in ninja)",
            flush=True,
        )
        for line in result.stderr.splitlines():  # jitops' status lines: what it compiled, and why
            if line.startswith("jitops:"):
                print(f"         {line}", flush=True)

    def both(label: str, change, repeats: int = 1) -> None:
        for _ in range(repeats):
            for which in ("torch", "jitops"):
                change(which, trees[which])
                step(which, label, trees[which], "edit_loop", builds[which])

    def edit(attribute, value):
        def change(which, tree):
            setattr(tree, attribute, value(getattr(tree, attribute)) if callable(value) else value)
            tree.write()

        return change

    def add_flag(which, tree):
        flags[which] = ([], ["-DSCALE1=4"]) if cuda else (["-DSCALE1=4"], [])
        tree.scale1 = 4

    if args.pace:
        paced(args, work, cuda, step, seconds, counts, outside, torch)
        return
    print(f"edit loop: {'CUDA' if cuda else 'CPU'} units, torch {torch.__version__}, in {work}", flush=True)
    # The first builds before the kept one, each in a build folder and cache of its own, the loaders
    # taking turns at going first.
    for repeat in range(args.repeats - 1):
        for which in ("jitops", "torch") if repeat % 2 == 0 else ("torch", "jitops"):
            build = work / which / f"build-cold{repeat}"
            build.mkdir()
            step(which, "cold", trees[which], "edit_loop", build, cache=f"cache-cold{repeat}")
        time.sleep(0.5)  # the background PCH build takes its lock: the next step waits for it
    both("cold", lambda which, tree: None)
    pch_wait = wait_for_background_pch(work / "jitops" / "cache", settle=0.5)
    print(f"  (jitops' background precompiled header was ready {pch_wait:.1f} s after its cold build returned)", flush=True)
    both("warm", lambda which, tree: None, args.repeats)
    both("edit k1", edit("k1_edits", lambda n: n + 1), args.repeats)
    both("edit bind", edit("bind_edits", lambda n: n + 1), args.repeats)
    both("edit header", edit("offset", 0.25))
    both("flag", add_flag)
    time.sleep(0.5)  # a flag change starts a background PCH build: the next step waits for it
    for which in ("torch", "jitops"):
        second = Tree(work / which / "ext2", cuda)
        build2 = work / which / "build2"
        build2.mkdir(exist_ok=True)
        saved, flags[which] = flags[which], ([], [])
        step(which, "2nd ext cold", second, "edit_loop_second", build2)
        flags[which] = saved

    # jitops.load's build_directory holds its entries and objects (<build_directory>/jitops/), the
    # cache root (JITOPS_CACHE_DIR) the PCHs every extension shares: each root keeps to the budget.
    roots = [work / "jitops" / "cache", builds["jitops"] / "jitops", work / "jitops" / "build2" / "jitops"]

    def sizes_now(label: str) -> tuple[str, list[int]]:
        return label, [cache_size(root) if root.is_dir() else 0 for root in roots]

    sizes = [sizes_now("after the steps")]
    for value in range(5, 5 + args.flag_variants):  # a notebook sweeping a -D value: a PCH per value
        flags["jitops"] = ([], [f"-DSCALE1={value}"]) if cuda else ([f"-DSCALE1={value}"], [])
        trees["jitops"].scale1 = value
        step("jitops", f"-DSCALE1={value}", trees["jitops"], "edit_loop", builds["jitops"])
        time.sleep(0.5)
        wait_for_background_pch(work / "jitops" / "cache")
        sizes.append(sizes_now(f"-DSCALE1={value}, its PCH built"))

    from jitops import _settings  # the parent imports jitops only here: its budget (it named _budget without importing it)

    print(
        f"\njitops' roots, MiB (each kept within {_settings.get('JITOPS_CACHE_MAX_SIZE') / 2**30:.1f} GiB, JITOPS_CACHE_MAX_SIZE's default):"
    )
    print(f"  {'':<32} {'cache root':>10} {'build_dir':>10} {'build2':>10} {'all':>10}")
    for label, each in sizes:
        print(f"  {label:<32} " + " ".join(f"{size / 2**20:10.1f}" for size in [*each, sum(each)]), flush=True)

    print()
    print("| step | torch `load()` | compiles | `jitops.load` | compiles | ratio | outside ninja: torch, jitops |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = step_rows(seconds, counts, outside)
    for row in rows:
        unit = (lambda s: f"{s * 1e3:.1f} ms") if row["step"] == "warm" else (lambda s: f"{s:.2f} s")
        away = ", ".join(f"{row[f'{w}_outside_ninja_s'] * 1e3:.0f} ms" for w in ("torch", "jitops"))
        print(
            f"| {row['step']} | {unit(row['torch_s'])} | {row['torch_compiles']} | {unit(row['jitops_s'])} "
            f"| {row['jitops_compiles']} | {row['ratio']:.2f}x | {away} |"
        )
    result = {
        "torch": torch.__version__,
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "cores": os.cpu_count(),
        "repeats": args.repeats,
        "background_pch_wait_s": pch_wait,
        "steps": rows,
        "jitops_root_bytes": {"roots": [str(root) for root in roots], **dict(sizes)},
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


def step_rows(seconds: dict, counts: dict, outside: dict) -> list[dict]:
    """Each step's median seconds for both loaders, their ratio, the samples, compiles and the
    seconds outside ninja's builds."""
    rows = []
    for label in seconds["torch"]:
        t, j = statistics.median(seconds["torch"][label]), statistics.median(seconds["jitops"][label])
        row = {"step": label, "torch_s": t, "jitops_s": j, "ratio": j / t}
        for which in ("torch", "jitops"):
            row[f"{which}_samples_s"] = seconds[which][label]
            row[f"{which}_outside_ninja_s"] = statistics.median(outside[which][label])
            row[f"{which}_compiles"] = counts[which][label]
        rows.append(row)
    return rows


def paced(args, work: Path, cuda: bool, step, seconds: dict, counts: dict, outside: dict, torch) -> None:
    """--pace: each loader's steps at a user's pace, on trees and caches of their own, each step
    starting args.pace seconds after that loader's last load returned; one loader's steps after the
    other's (so that nothing else runs during jitops' pauses, when its background work does).
    --sequences N runs the whole sequence N times, each on new trees, build folders and caches (a
    new user's first build), the loaders taking turns at going first; each step's median is reported."""
    print(f"edit loop at a pace of {args.pace:.0f} s: {'CUDA' if cuda else 'CPU'} units, torch {torch.__version__}", flush=True)
    for sequence in range(args.sequences):
        for which in ("torch", "jitops") if sequence % 2 == 0 else ("jitops", "torch"):
            if args.sequences > 1:
                print(f" sequence {sequence + 1} of {args.sequences}, {which}", flush=True)
            paced_sequence(args, work / which / f"paced{sequence}", which, cuda, step)
    print()
    many = args.sequences > 1
    print(
        f"| step, each {args.pace:.0f} s after the last load | torch `load()` | compiles | `jitops.load` | compiles | ratio |"
        + (" jitops faster in |" if many else "")
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if many else ""))
    floors = seconds["jitops"].pop("floor: edit bind, PCH ready")
    rows = step_rows(seconds, counts, outside)
    for row in rows:
        faster = sum(j < t for t, j in zip(row["torch_samples_s"], row["jitops_samples_s"]))
        print(
            f"| {row['step']} | {row['torch_s']:.2f} s | {row['torch_compiles']} | {row['jitops_s']:.2f} s "
            f"| {row['jitops_compiles']} | {row['ratio']:.2f}x |"
            + (f" {faster} of {len(row['torch_samples_s'])} |" if many else "")
        )
    if many:
        print("(medians of the sequences; each sequence's seconds, torch / jitops:)")
        for row in rows:
            pairs = ", ".join(f"{t:.2f}/{j:.2f}" for t, j in zip(row["torch_samples_s"], row["jitops_samples_s"]))
            print(f"  {row['step']:<22} {pairs}")
    edit_bind = next(row for row in rows if row["step"] == "edit bind")
    floor = statistics.median(floors)
    print(
        f"floor (jitops' edit of bind with its PCH ready, waited for): {floor:.2f} s, {floor / edit_bind['torch_s']:.2f}x "
        f"torch's edit bind" + (f" (median; each: {', '.join(f'{f:.2f}' for f in floors)} s)" if len(floors) > 1 else "")
    )
    # What the last jitops sequence leaves on disk: its cache root (the PCHs) and the build folders' entries.
    last = work / "jitops" / f"paced{args.sequences - 1}"
    left = sum(
        cache_size(root) for root in (last / "cache", last / "build" / "jitops", last / "build2" / "jitops") if root.is_dir()
    )
    print(f"jitops' roots after a sequence: {left / 2**20:.1f} MiB")
    # The in-process edit of the bindings compiles that unit alone, as a new process does; one of k1
    # also compiles the bindings, which name the module (<name>_v1 in the same process).
    in_process = {}
    for unit in ("bind", "k1") if not args.skip_in_process else ():
        new, same = seconds["jitops"][f"edit {unit}"], seconds["jitops"][f"in-process edit {unit}"]
        each = [s / n for s, n in zip(same, new)]
        in_process[unit] = {"of_medians": statistics.median(same) / statistics.median(new), "each_sequence": each}
        print(
            f"jitops' in-process edit of {unit} against its new-process edit of {unit}: "
            f"{in_process[unit]['of_medians']:.2f}x"
            + (f" (medians; each sequence: {', '.join(f'{r:.2f}x' for r in each)})" if len(each) > 1 else "")
        )
    if args.json:
        result = {"torch": torch.__version__, "cuda": cuda, "gpu": torch.cuda.get_device_name() if cuda else None}
        result |= {"cores": os.cpu_count(), "pace_s": args.pace, "sequences": args.sequences, "steps": rows}
        result |= {"in_process_over_new_process": in_process, "floor_edit_bind_s": floor, "floor_samples_s": floors}
        result["jitops_root_bytes"] = left
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


def paced_sequence(args, folder: Path, which: str, cuda: bool, step) -> None:
    """One loader's paced steps in folder (its trees, build folders and cache), then jitops' floor."""
    tree, second = Tree(folder / "ext", cuda), Tree(folder / "ext2", cuda)
    build, build2 = folder / "build", folder / "build2"
    build.mkdir(parents=True)
    build2.mkdir(parents=True)
    cache = f"{folder.name}/cache"  # step() takes it under work/<which>
    returned = None

    def go(label: str, change=None, tree=tree, name="edit_loop", build=build, in_process=None) -> None:
        nonlocal returned
        if returned is not None:
            time.sleep(max(0.0, returned + args.pace - time.time()))
        if change:
            change(tree)
            tree.write()
        step(which, label, tree, name, build, cache=cache, paced=True, in_process=in_process)
        returned = time.time()

    def edit(attribute):
        return lambda tree: setattr(tree, attribute, getattr(tree, attribute) + 1)

    go("cold")
    go("edit k1", edit("k1_edits"))
    go("edit bind", edit("bind_edits"))
    go("2nd ext cold", tree=second, name="edit_loop_second", build=build2)
    if not args.skip_in_process:
        tree.bind_edits += 1  # written by the child, between its two loads
        go("in-process edit bind", in_process=tree.changed())
        tree.k1_edits += 1
        go("in-process edit k1", in_process=tree.changed())
    if which != "jitops":
        return
    # The floor: the same edit with every precompiled header ready (waited for, not paced).
    waited = wait_for_background_pch(folder / "cache", settle=1.0)
    print(f"  (waited {waited:.1f} s for jitops' background precompiled headers)", flush=True)
    tree.bind_edits += 1
    tree.write()
    step(which, "floor: edit bind, PCH ready", tree, "edit_loop", build, cache=cache, paced=True)


if __name__ == "__main__":
    main()
