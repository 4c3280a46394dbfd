# SPDX-License-Identifier: MIT
"""Unmodified programs under `python -m jitops run`, against the same programs with torch's own
loader, each run a fresh process:

    python examples/unmodified_program.py [--repeats 11] [--edits 3] [--phases N] [--programs stylegan,raster]
                                          [--installed] [--json results.json]

Two programs, written to a temporary folder:

  stylegan   loads two plugins as StyleGAN2-ADA/StyleGAN3's custom_ops.get_plugin does: `import
             torch.utils.cpp_extension`, a build folder under `_get_build_directory(name)` named after
             the sources' digest, the sources copied there, `load(name=..., build_directory=that
             folder, sources=...)`, then `importlib.import_module(name)`. The plugins are the
             extension tutorial's add2 under two names (add2_kernel.cu with a GPU, else add2_cpu.cpp).
             Warm only.
  15 sources a rasterizer-style extension of 15 sources: 10 .cpp (5 with torch/extension.h, the
             bindings among them; 5 plain C++) and 5 CUDA kernels (.cu with a GPU, else plain .cpp),
             loaded under a lock file of the program's own in `_get_build_directory(name)`, as
             renderers' plugin loaders do. Cold (one build each), warm, and edit one kernel (a new
             edit each time).

torch >= 2's load() no longer puts the module in sys.modules, so under torch the stylegan program's
last step would fail: its torch run takes load()'s return value instead (the one line a user must
change); under jitops it runs as written. Each program times its loading part itself, from before
`import torch.utils.cpp_extension` to its modules ready, after `import torch` and CUDA
initialisation; the harness times each whole process, and a floor process that only imports torch
(and initialises CUDA), taken beside each sample: "above floor" is a whole program's start, to its
modules ready, as its user waits for it, `python -m jitops run`'s own start included, each process's
own `import torch` (and CUDA initialisation, timed in it) taken out of both (it varies from one
process to the next by more than the loaders differ). What follows (the program's first CUDA work,
torch's teardown at exit: the same for both loaders) is reported apart. Warm and edit figures are
medians, the loaders taking turns; "sample by sample" is the median of each turn's difference
(jitops' sample less torch's beside it).

--phases N then runs jitops' 15-source edit and warm start N more times each, with the loader's
steps timed (its functions wrapped): where its time outside ninja goes.

--installed runs the jitops installed in this Python (`pip install .`), from a folder outside the
checkout; without it the checkout's jitops (PYTHONPATH).
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

from edit_loop import NINJA_CLOCK

HERE = Path(__file__).resolve().parent

PRELUDE = (
    """
import os, time
before_torch = time.perf_counter()
import torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
torch_s = time.perf_counter() - before_torch  # taken out of the whole process's time
"""
    + NINJA_CLOCK
    + """started = time.perf_counter()
import hashlib, importlib, json, shutil, sys
import torch.utils.cpp_extension
"""
)

STYLEGAN = (
    PRELUDE
    + """
def get_plugin(module_name, sources):
    # As StyleGAN3's custom_ops.get_plugin: the sources copied into a folder named after their digest.
    digest = hashlib.md5(b"".join(open(source, "rb").read() for source in sources)).hexdigest()
    build_dir = os.path.join(torch.utils.cpp_extension._get_build_directory(module_name, verbose=False), digest)
    if not os.path.isdir(build_dir):
        staging = f"{build_dir}.tmp{os.getpid()}"
        os.makedirs(staging)
        for source in sources:
            shutil.copyfile(source, os.path.join(staging, os.path.basename(source)))
        os.replace(staging, build_dir)
    copied = [os.path.join(build_dir, os.path.basename(source)) for source in sources]
    module = torch.utils.cpp_extension.load(name=module_name, build_directory=build_dir, verbose=False, sources=copied)
    if USE_RETURN_VALUE:  # torch >= 2: the module is not in sys.modules
        return module
    return importlib.import_module(module_name)

USE_RETURN_VALUE = sys.argv[1] == "return-value"
sources = json.loads(sys.argv[2])
plugins = [get_plugin(name, sources) for name in ("add2_plugin", "add2_second_plugin")]
loading, ready_at = time.perf_counter() - started, time.time()  # its modules ready
device = "cuda" if torch.cuda.is_available() else "cpu"
x, y = torch.rand(1 << 16, device=device), torch.rand(1 << 16, device=device)
ok = True
for plugin in plugins:
    out = torch.empty_like(x)
    plugin.add2(out, x, y)
    ok = ok and bool(torch.equal(out, x + y))
print(json.dumps({"loading_s": loading, "ninja_s": sum(ninja_s), "ok": ok, "setuptools": "setuptools" in sys.modules, "torch_s": torch_s, "ready_at": ready_at}))
"""
)

RASTER = (
    PRELUDE
    + """
import fcntl
sources, expected = json.loads(sys.argv[1]), json.loads(sys.argv[2])
# As renderers' plugin loaders: a lock file of its own in torch's build folder for the name (not
# torch's `lock`, the FileBaton its load() waits on while that file exists).
lock_path = os.path.join(torch.utils.cpp_extension._get_build_directory("raster_plugin", False), "program.lock")
with open(lock_path, "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    plugin = torch.utils.cpp_extension.load(name="raster_plugin", sources=sources, verbose=False)
loading, ready_at = time.perf_counter() - started, time.time()  # its modules ready
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.rand(1 << 16, device=device)
ok = bool(torch.allclose(plugin.run(x), x * expected["scale"] + expected["offset"]))
print(json.dumps({"loading_s": loading, "ninja_s": sum(ninja_s), "ok": ok, "setuptools": "setuptools" in sys.modules, "torch_s": torch_s, "ready_at": ready_at}))
"""
)

# --phases: the program run with the loader's steps timed, each function wrapped where it is called
# from (module attributes), the build path's modules imported first (their import is a phase).
PHASES = """
import atexit, functools, importlib, json, sys, time
seconds = {}
started = time.perf_counter()
for module in ("jitops._resolution", "jitops.builder._builder", "jitops.store._object_store", "jitops.builder._ninja", "jitops.store._lock"):
    importlib.import_module(module)
seconds["imports of the build path"] = time.perf_counter() - started

def timed(where, name, label):
    module = importlib.import_module(where)
    function = getattr(module, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - began

    setattr(module, name, wrapper)

for where, name, label in [
    ("jitops._resolution", "resolve", "loader, in all"),
    ("jitops.builder._builder", "_build", "build, in all"),
    ("jitops.store._lock", "HeldLock", "entry lock"),
    ("jitops.builder._buildfile", "plan_units", "plan units"),
    ("jitops.store._object_store", "reuse", "reuse stored objects"),
    ("jitops.store._entries", "newest_other_manifest", "last entry's manifest"),
    ("jitops.builder._buildfile", "write_build_file", "build file"),
    ("jitops.builder._ninja", "run_ninja", "ninja"),
    ("jitops.builder._builder", "_check_inputs", "inputs unchanged"),
    ("jitops.store._object_store", "keep", "store objects"),
    ("jitops.warm._namespaces", "defined_in", "namespaces"),
    ("jitops.builder._builder", "_load_check", "load check"),
    ("jitops.store._entries", "make_manifest", "manifest"),
    ("jitops.store._entries", "publish", "publish"),
]:
    timed(where, name, label)
atexit.register(lambda: print("phases: " + json.dumps(seconds), file=sys.stderr))
sys.argv = sys.argv[1:]
program = open(sys.argv[0]).read()
exec(compile(program, sys.argv[0], "exec"), {"__name__": "__main__", "__file__": sys.argv[0]})
"""

TORCH_UNIT = """#include <torch/extension.h>
#include "raster.h"
torch::Tensor op{i}(torch::Tensor x) {{ return x * helper{i}(); }}
"""
BIND = """#include <torch/extension.h>
#include "raster.h"
{declarations}
torch::Tensor run(torch::Tensor x) {{
  auto y = x * 0.0f;
  {kernel_calls}
  return y{ops};
}}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("run", &run); }}
"""
HELPER = """#include "raster.h"
float helper{i}() {{ return {value}f; }}
"""
KERNEL_CU = """#include "raster.h"
__global__ void kernel{i}_impl(const float* x, float* y, long n) {{
  long j = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (j < n) y[j] += x[j] * {scale}f;{edit}
}}
void kernel{i}(const float* x, float* y, long n) {{ kernel{i}_impl<<<(n + 255) / 256, 256>>>(x, y, n); }}
"""
KERNEL_CPP = """#include "raster.h"
void kernel{i}(const float* x, float* y, long n) {{
  for (long j = 0; j < n; ++j) y[j] += x[j] * {scale}f;{edit}
}}
"""


class Raster:
    """The 15-source tree: the scale each kernel adds, and edits of kernel 0 (a new line each)."""

    def __init__(self, folder: Path, cuda: bool):
        self.folder, self.cuda, self.edits = folder, cuda, 0
        folder.mkdir(parents=True)
        self.write()

    @property
    def sources(self) -> list[str]:
        suffix = ".cu" if self.cuda else ".cpp"
        names = ["bind.cpp"] + [f"op{i}.cpp" for i in range(1, 5)] + [f"helper{i}.cpp" for i in range(5)]
        return [str(self.folder / n) for n in names + [f"kernel{i}{suffix}" for i in range(5)]]

    def write(self) -> None:
        suffix = ".cu" if self.cuda else ".cpp"
        header = "#pragma once\n" + "".join(
            f"float helper{i}();\nvoid kernel{i}(const float* x, float* y, long n);\n" for i in range(5)
        )
        files = {"raster.h": header}
        declarations = "\n".join(f"torch::Tensor op{i}(torch::Tensor x);" for i in range(1, 5))
        calls = "\n  ".join(f"kernel{i}(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());" for i in range(5))
        ops = "".join(f" + op{i}(x) * 0.0f" for i in range(1, 5)) + " + helper0()"
        files["bind.cpp"] = BIND.format(declarations=declarations, kernel_calls=calls, ops=ops)
        for i in range(1, 5):
            files[f"op{i}.cpp"] = TORCH_UNIT.format(i=i)
        for i in range(5):
            files[f"helper{i}.cpp"] = HELPER.format(i=i, value=0.5 if i == 0 else float(i))
            edit = f"\n  if (n < -{self.edits}) y[0] = 1.0f;" if i == 0 and self.edits else ""
            files[f"kernel{i}{suffix}"] = (KERNEL_CU if self.cuda else KERNEL_CPP).format(
                i=i, scale=round(0.1 * (i + 1), 1), edit=edit
            )
        for name, text in files.items():
            path = self.folder / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)

    def expected(self) -> str:
        return json.dumps({"scale": sum(0.1 * (i + 1) for i in range(5)), "offset": 0.5})


def run(command: list[str], env: dict, cwd: Path) -> dict:
    """The program's report, with its process's wall time, the seconds from its start to its modules
    ready (the machine's clock, time.time(), in both processes) and from then to its exit."""
    started, started_at = time.perf_counter(), time.time()
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    wall, exited_at = time.perf_counter() - started, time.time()
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{result.stderr[-4000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if not report["ok"]:
        raise SystemExit(f"{' '.join(command[:4])}: a plugin gave a wrong result")
    phases = [json.loads(line[len("phases: ") :]) for line in result.stderr.splitlines() if line.startswith("phases: ")]
    timing = {"wall_s": wall, "to_ready_s": report["ready_at"] - started_at, "after_ready_s": exited_at - report["ready_at"]}
    return {**report, **timing, **({"phases": phases[0]} if phases else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="warm runs of each (median)")
    parser.add_argument("--edits", type=int, default=3, help="edit-one-kernel runs of each (median)")
    parser.add_argument("--installed", action="store_true", help="the installed jitops, not the checkout's")
    parser.add_argument("--phases", type=int, default=0, help="then N more jitops edits and warm starts, step by step")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--programs", default="stylegan,raster", help="which programs (comma-separated): raster alone leaves more time for edits"
    )
    args = parser.parse_args()
    programs = [name for name in ("stylegan", "raster") if name in args.programs.split(",")]

    import torch

    cuda = torch.cuda.is_available()
    tutorial = HERE / "baseline_add2"
    add2 = [str(tutorial / "add2.cpp"), str(tutorial / ("add2_kernel.cu" if cuda else "add2_cpu.cpp"))]
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else None, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="jitops-unmodified-") as tmp:
        work = Path(tmp)
        (work / "stylegan.py").write_text(STYLEGAN)
        (work / "raster.py").write_text(RASTER)
        raster = {which: Raster(work / f"raster-{which}", cuda) for which in ("torch", "jitops")}
        env = {k: v for k, v in os.environ.items() if not k.startswith("JITOPS_") and k != "PYTHONDONTWRITEBYTECODE"}
        env["JITOPS_CACHE_DIR"] = str(work / "jitops-cache")
        if not args.installed:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p)
        launch = {"torch": [sys.executable], "jitops": [sys.executable, "-m", "jitops", "run"]}
        # Each loader's builds in a torch extensions root of its own (the programs ask
        # _get_build_directory for theirs).
        envs = {which: {**env, "TORCH_EXTENSIONS_DIR": str(work / f"torch-extensions-{which}")} for which in launch}

        def program(which: str, case: str) -> list[str]:
            if case == "stylegan":
                return [*launch[which], "stylegan.py", "return-value" if which == "torch" else "import", json.dumps(add2)]
            return [*launch[which], "raster.py", json.dumps(raster[which].sources), raster[which].expected()]

        floor_command = [
            sys.executable,
            "-c",
            "import time; started = time.perf_counter(); import torch; torch.cuda.is_available() and "
            "torch.zeros(1, device='cuda'); print(time.perf_counter() - started, time.time())",
        ]

        def sample(which: str, case: str) -> dict:
            """One run of the program, and a floor process beside it: the program's start to its modules
            ready above the floor's start to torch ready, each less its own `import torch` (and CUDA
            initialisation), which varies from one process to the next by more than the loaders
            differ. The rest (the program's own CUDA work and torch's teardown at exit, the same
            for both loaders) is reported apart."""
            report = run(program(which, case), envs[which], work)
            started_at = time.time()
            floor = subprocess.run(floor_command, env=env, cwd=work, check=True, capture_output=True, text=True, timeout=600)
            floor_torch_s, ready_at = map(float, floor.stdout.split()[-2:])
            above = (report["to_ready_s"] - report["torch_s"]) - (ready_at - started_at - floor_torch_s)
            return {**report, "above_floor_s": above}

        samples: dict = {}
        for case in programs:
            for which in ("torch", "jitops"):  # cold: one build each
                samples.setdefault((case, "cold", which), []).append(sample(which, case))
                print(
                    f"  {case} {which}: built in {samples[(case, 'cold', which)][0]['wall_s']:.1f} s", file=sys.stderr, flush=True
                )
        if args.installed:
            where = subprocess.check_output(
                [sys.executable, "-c", "import jitops; print(jitops.__file__)"], env=env, cwd=work, text=True
            )
            if Path(where.strip()).resolve().is_relative_to(HERE.parent):
                raise SystemExit(f"jitops came from the checkout ({where.strip()}): `pip install .` it first")
        for repeat in range(args.repeats):
            for case in programs:
                for which in ("torch", "jitops") if repeat % 2 == 0 else ("jitops", "torch"):
                    samples.setdefault((case, "warm", which), []).append(sample(which, case))
        for repeat in range(args.edits):
            for which in ("torch", "jitops") if repeat % 2 == 0 else ("jitops", "torch"):
                raster[which].edits += 1
                raster[which].write()
                samples.setdefault(("raster", "edit one kernel", which), []).append(sample(which, "raster"))
        profiled: dict = {"edit one kernel": [], "warm": []}
        (work / "phases.py").write_text(PHASES)
        for _ in range(args.phases):  # jitops' 15-source edit, then warm start, step by step
            for step in profiled:
                if step == "edit one kernel":
                    raster["jitops"].edits += 1
                    raster["jitops"].write()
                command = program("jitops", "raster")
                command.insert(command.index("raster.py"), "phases.py")
                profiled[step].append(run(command, envs["jitops"], work))

    print(
        f"unmodified programs: torch load() against `python -m jitops run`, new processes ({result['gpu'] or 'CPU'}, torch {torch.__version__})"
    )
    print(
        "| program | step | torch: loading, outside ninja, above floor (ms) | jitops: loading, outside ninja, above floor (ms) "
        "| speed-up (above floor) | jitops - torch, sample by sample: median (ms) "
        "| after ready, to exit: torch, jitops (ms) | setuptools: torch, jitops |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    rows = []
    for case, step in [("stylegan", "warm"), ("raster", "cold"), ("raster", "warm"), ("raster", "edit one kernel")]:
        if not samples.get((case, step, "torch")):
            continue
        row = {"program": "StyleGAN3-style get_plugin, 2 plugins" if case == "stylegan" else "15 sources", "step": step}
        for which in ("torch", "jitops"):
            runs_of = samples[(case, step, which)]
            row[which] = {
                "loading_ms": statistics.median(r["loading_s"] for r in runs_of) * 1e3,
                "above_floor_ms": statistics.median(r["above_floor_s"] for r in runs_of) * 1e3,
                "samples_above_floor_ms": [round(r["above_floor_s"] * 1e3, 1) for r in runs_of],
                "after_ready_ms": statistics.median(r["after_ready_s"] for r in runs_of) * 1e3,
                "loading_outside_ninja_ms": statistics.median(r["loading_s"] - r["ninja_s"] for r in runs_of) * 1e3,
                "setuptools_imported": any(r["setuptools"] for r in runs_of),
            }
        t, j = row["torch"], row["jitops"]
        row["speedup"] = t["above_floor_ms"] / j["above_floor_ms"]
        # The loaders' samples taken side by side (their turns alternate): the difference of each
        # pair, where the machine's drift from one pair to the next cancels.
        pairs = zip(t["samples_above_floor_ms"], j["samples_above_floor_ms"])
        row["paired_difference_ms"] = statistics.median(jitops - torch for torch, jitops in pairs)
        rows.append(row)
        print(
            f"| {row['program']} | {step} ({len(samples[(case, step, 'torch')])} runs) "
            f"| {t['loading_ms']:.1f}, {t['loading_outside_ninja_ms']:.1f}, {t['above_floor_ms']:.1f} "
            f"| {j['loading_ms']:.1f}, {j['loading_outside_ninja_ms']:.1f}, {j['above_floor_ms']:.1f} "
            f"| {row['speedup']:.2f}x | {row['paired_difference_ms']:+.1f} | {t['after_ready_ms']:.0f}, {j['after_ready_ms']:.0f} | {t['setuptools_imported']}, {j['setuptools_imported']} |"
        )
    result["rows"] = rows
    if args.phases:
        print(f"\njitops' 15-source program step by step (median of {args.phases} runs each, ms; functions nest)")
        print("| phase | edit one kernel | warm |")
        print("| --- | ---: | ---: |")
        labels = dict.fromkeys(label for runs_of in profiled.values() for r in runs_of for label in r["phases"])
        result["phases_ms"] = {}
        for label in ["loading (the program's clock)", "outside ninja", *labels]:
            cells = []
            for step, runs_of in profiled.items():
                if label == "loading (the program's clock)":
                    values = [r["loading_s"] for r in runs_of]
                elif label == "outside ninja":
                    values = [r["loading_s"] - r["ninja_s"] for r in runs_of]
                else:
                    values = [r["phases"].get(label, 0.0) for r in runs_of]
                cells.append(statistics.median(values) * 1e3)
                result["phases_ms"].setdefault(label, {})[step] = cells[-1]
            print(f"| {label} | {cells[0]:.1f} | {cells[1]:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
