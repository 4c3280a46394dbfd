# SPDX-License-Identifier: MIT
"""An unmodified program's warm start under `python -m jitops run`, against the same program with
torch's own loader, each run a fresh process:

    python examples/unmodified_program.py [--repeats 11] [--installed] [--json results.json]

The program (written to a temporary folder) loads two plugins the way StyleGAN2-ADA/StyleGAN3's
custom_ops.get_plugin does: `import torch.utils.cpp_extension`, each plugin's sources copied into a
build folder named after their digest, `torch.utils.cpp_extension.load(name=..., build_directory=
that folder, sources=...)`, then `importlib.import_module(name)`. The plugins are the extension
tutorial's add2 under two names (add2_kernel.cu where there is a GPU, else add2_cpu.cpp).

torch >= 2's load() no longer puts the module in sys.modules, so under torch the program's last
step fails: its torch run takes load()'s return value instead (the one line a user must change);
under jitops it runs as written. Each program times its loading part itself, from before
`import torch.utils.cpp_extension` to both plugins imported, after `import torch` and CUDA
initialisation (what any program pays first); the harness also times each whole process, whose
difference includes `python -m jitops run`'s own start. Both are built once first (cold, not
timed here: examples/edit_loop.py and drop_in_time.py time builds); then --repeats warm runs of
each, alternating, medians reported.

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

HERE = Path(__file__).resolve().parent

PROGRAM = """
import time
import torch
if torch.cuda.is_available():
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock starts
started = time.perf_counter()
import hashlib, importlib, json, os, shutil, sys
import torch.utils.cpp_extension

def get_plugin(module_name, sources, build_root):
    # As StyleGAN3's custom_ops.get_plugin: the sources copied into a folder named after their digest.
    digest = hashlib.md5(b"".join(open(source, "rb").read() for source in sources)).hexdigest()
    build_dir = os.path.join(build_root, f"{module_name}-{digest}")
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
sources, build_root = json.loads(sys.argv[2]), sys.argv[3]
plugins = [get_plugin(name, sources, build_root) for name in ("add2_plugin", "add2_second_plugin")]
loading = time.perf_counter() - started
device = "cuda" if torch.cuda.is_available() else "cpu"
x, y = torch.rand(1 << 16, device=device), torch.rand(1 << 16, device=device)
ok = True
for plugin in plugins:
    out = torch.empty_like(x)
    plugin.add2(out, x, y)
    ok = ok and bool(torch.equal(out, x + y))
print(json.dumps({"loading_s": loading, "ok": ok, "files": [p.__file__ for p in plugins],
                  "setuptools": "setuptools" in sys.modules}))
"""


def run(command: list[str], env: dict, cwd: Path) -> dict:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{result.stderr[-4000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if not report["ok"]:
        raise SystemExit(f"{' '.join(command[:4])}: a plugin gave a wrong result")
    return {**report, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="warm runs of each (median)")
    parser.add_argument("--installed", action="store_true", help="the installed jitops, not the checkout's")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    import torch

    cuda = torch.cuda.is_available()
    tutorial = HERE / "baseline_add2"
    sources = [str(tutorial / "add2.cpp"), str(tutorial / ("add2_kernel.cu" if cuda else "add2_cpu.cpp"))]
    with tempfile.TemporaryDirectory(prefix="jitops-unmodified-") as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(PROGRAM)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JITOPS_") and k != "PYTHONDONTWRITEBYTECODE"}
        env["JITOPS_CACHE_DIR"] = str(work / "jitops-cache")
        if not args.installed:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p)
        runs = {
            "torch": [sys.executable, "train.py", "return-value", json.dumps(sources), str(work / "torch-builds")],
            "jitops": [
                sys.executable,
                "-m",
                "jitops",
                "run",
                "train.py",
                "import",
                json.dumps(sources),
                str(work / "jitops-builds"),
            ],
        }
        # A process that only imports torch (and initialises CUDA): what both pay before loading.
        floor = [sys.executable, "-c", "import torch; torch.cuda.is_available() and torch.zeros(1, device='cuda')"]
        for which, command in runs.items():
            cold = run(command, env, work)
            print(f"  {which}: built in {cold['wall_s']:.1f} s (the process)", file=sys.stderr, flush=True)
        if args.installed:
            where = subprocess.check_output(
                [sys.executable, "-c", "import jitops; print(jitops.__file__)"], env=env, cwd=work, text=True
            )
            if Path(where.strip()).resolve().is_relative_to(HERE.parent):
                raise SystemExit(f"jitops came from the checkout ({where.strip()}): `pip install .` it first")
        samples = {"torch": [], "jitops": [], "floor": []}
        for _ in range(args.repeats):
            for which, command in runs.items():
                samples[which].append(run(command, env, work))
            started = time.perf_counter()
            subprocess.run(floor, env=env, cwd=work, check=True, capture_output=True, timeout=600)
            samples["floor"].append(time.perf_counter() - started)
    floor_s = statistics.median(samples["floor"])
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else None, "repeats": args.repeats}
    for which in ("torch", "jitops"):
        runs_of = samples[which]
        result[which] = {
            "loading_ms": statistics.median(r["loading_s"] for r in runs_of) * 1e3,
            "loading_range_ms": [min(r["loading_s"] for r in runs_of) * 1e3, max(r["loading_s"] for r in runs_of) * 1e3],
            "process_above_floor_ms": (statistics.median(r["wall_s"] for r in runs_of) - floor_s) * 1e3,
            "setuptools_imported": any(r["setuptools"] for r in runs_of),
        }
    result["floor_process_ms"] = floor_s * 1e3
    t, j = result["torch"], result["jitops"]
    print(f"an unmodified get_plugin program, two plugins, warm: median of {args.repeats} new processes each")
    print(f"{'':<34}{'torch load()':>14}{'jitops run':>14}{'speed-up':>10}")
    print(f"{'loading part (ms)':<34}{t['loading_ms']:>14.1f}{j['loading_ms']:>14.1f}{t['loading_ms'] / j['loading_ms']:>9.1f}x")
    print(
        f"{'whole process above floor (ms)':<34}{t['process_above_floor_ms']:>14.1f}{j['process_above_floor_ms']:>14.1f}"
        f"{t['process_above_floor_ms'] / j['process_above_floor_ms']:>9.1f}x"
    )
    print(
        f"(floor: a process that imports torch{' and initialises CUDA' if cuda else ''}: {floor_s * 1e3:.0f} ms; "
        f"setuptools imported: torch {t['setuptools_imported']}, jitops {j['setuptools_imported']})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
