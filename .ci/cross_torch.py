# SPDX-License-Identifier: MIT
"""One build for every torch, shown: jitops' five ops built once under one torch, then loaded from
that same cache under another torch with 0 compiles and bitwise-equal outputs.

    python .ci/cross_torch.py build DIR   # under the building torch: DIR/cache, DIR/outputs.pt
    python .ci/cross_torch.py check DIR   # under another torch: compiles counted, outputs compared

`check` runs the C++ compiler and nvcc through a wrapper that logs every compile, and prints the
pair it tried (or why it could not: another CUDA major). With TORCH_CUDA_ARCH_LIST set, the
libraries have CUDA kernels (built by `make cuda-build` on a machine without a GPU); on a GPU,
`check` then runs the CUDA kernels too. Exits 1 when a pair compiles more than upfirdn2d's autograd
unit or gives other bits.
"""

import json
import os
import stat
import sys
from pathlib import Path

ALLOWED_COMPILES = 1  # upfirdn2d's C++ autograd formula: torch's C++ API, built for each torch


def inputs(device: str) -> dict:
    """Fixed, non-trivial inputs per op (a fixed seed: the same draws under every torch)."""
    import torch

    generator = torch.Generator().manual_seed(1234)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float32).to(device)

    return {
        "add2": (draw(4096), draw(4096)),
        "bias_act": (draw(8, 64, 16, 16), draw(64)),
        "lltm": (draw(16, 32), draw(3 * 32, 32 + 32) * 0.1, draw(3 * 32) * 0.1, draw(16, 32), draw(16, 32)),
        "trilinear_interpolation": (draw(64, 8, 4), draw(64, 3).clamp(-1, 1)),
        "upfirdn2d": (draw(2, 8, 32, 32), draw(4)),
    }


def outputs(device: str) -> dict:
    import jitops

    x = inputs(device)
    found = {
        "add2": jitops.add2(*x["add2"]),
        "bias_act": jitops.bias_act(*x["bias_act"], act="lrelu"),
        "lltm": jitops.lltm(x["lltm"][0], x["lltm"][1], x["lltm"][2], x["lltm"][3], x["lltm"][4])[0],
        "trilinear_interpolation": jitops.trilinear_interpolation(*x["trilinear_interpolation"]),
        "upfirdn2d": jitops.upfirdn2d(*x["upfirdn2d"], up=2, padding=[2, 1, 2, 1], gain=4),
    }
    return {op: value.detach().cpu() for op, value in found.items()}


def logging_compilers(folder: Path) -> dict:
    """CXX and PYTORCH_NVCC wrappers that log each compile (-c) to $CROSS_TORCH_LOG and then run the
    real compiler. Both modes compile through them: a key names its compilers' paths."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    environment = {}
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None)
    for variable, real in (("CXX", shutil.which(os.environ.get("CXX", "c++"))), ("PYTORCH_NVCC", nvcc)):
        if real is None:
            continue
        wrapper = folder / variable.lower()
        text = f'#!/bin/sh\ncase " $* " in *" -c "*) echo "{variable} $*" >> "$CROSS_TORCH_LOG";; esac\nexec {real} "$@"\n'
        if not wrapper.exists() or wrapper.read_text() != text:  # rewritten, it would be probed again
            wrapper.write_text(text)
            wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        environment[variable] = str(wrapper)
    return environment


REPO = Path(__file__).resolve().parent.parent
# Under the other torch: the stable op of tests/downstream_pkg from its wheel's prebuilt library.
USE_WHEEL = """
import json, torch
from demo_pkg.stable import negate, negate_extension
x = torch.randn(64, 33)
assert torch.equal(negate(x), -x)
torch.library.opcheck(torch.ops.demo_pkg_stable.negate.default, (torch.randn(8, 5),))
print(json.dumps({"how": negate_extension.load().how, "torch": torch.__version__}))
"""


def build_wheel(folder: Path) -> Path:
    """tests/downstream_pkg's wheel with the prebuilt library of its stable op (demo_pkg.stable),
    built under this torch and tagged py3-none-<platform>: one wheel for every torch and Python."""
    import shutil
    import subprocess

    from jitops.cache_tools.building import export_prebuilt

    tree = folder / "downstream_pkg"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(
        REPO / "tests" / "downstream_pkg",
        tree,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "prebuilt", "__pycache__"),
    )
    sys.path.insert(0, str(tree / "src"))
    from demo_pkg.stable import negate_extension

    export_prebuilt(negate_extension.load().library.parent, tree / "src" / "demo_pkg" / "prebuilt")
    dist = folder / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(tree)]
    subprocess.run(pip, check=True)
    (wheel,) = dist.glob("*.whl")
    retag = [sys.executable, "-m", "wheel", "tags", "--platform-tag", f"linux_{os.uname().machine}", "--remove", str(wheel)]
    subprocess.run(retag, check=True, capture_output=True)
    (wheel,) = dist.glob("*.whl")
    return wheel


def check_wheel(folder: Path, built: str) -> bool:
    """The stable op's wheel installed here, loaded with no compiler (CXX=/bin/false, builds
    disabled): its prebuilt library, and opcheck passes."""
    import subprocess

    (wheel,) = (folder / "dist").glob("*-py3-none-linux_*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    try:
        env = {**os.environ, "CXX": "/bin/false", "JITOPS_DISABLE_BUILD": "1", "JITOPS_CACHE_DIR": str(folder / "wheel-cache")}
        used = subprocess.run([sys.executable, "-c", USE_WHEEL], capture_output=True, text=True, env=env, cwd=folder)
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "jitops-demo-pkg"], check=True)
    ok = used.returncode == 0 and json.loads(used.stdout.splitlines()[-1])["how"] == "prebuilt"
    print(
        f"cross-torch: {wheel.name} (built under {built}) under {used.stdout.strip() or used.stderr[-2000:]}: {'ok' if ok else 'FAILED'}"
    )
    return ok


# A pod of a mixed fleet: another torch, an empty cache, no compiler, reading the remote folder the
# building torch pushed to. The five ops' libraries (not upfirdn2d's autograd: built for each torch).
FLEET_READER = """
import json
from jitops.ops._framework import available_ops, extension
print(json.dumps({op: extension(op).load().how for op in available_ops()}))
"""


def fleet_settings(folder: Path) -> dict:
    """The remote tier the build pushes to: a folder of records signed by a key made here."""
    return {"JITOPS_REMOTE_CACHE": f"file://{folder / 'remote'}", "JITOPS_REMOTE_SIGNING_KEY": str(folder / "signing.key")}


def check_fleet(folder: Path, built: str) -> bool:
    import subprocess

    import torch

    settings = fleet_settings(folder)
    env = {**os.environ, "JITOPS_REMOTE_CACHE": settings["JITOPS_REMOTE_CACHE"], "JITOPS_REMOTE_MODE": "read-only"}
    env.update(
        JITOPS_REMOTE_TRUSTED_KEYS=f"{settings['JITOPS_REMOTE_SIGNING_KEY']}.pub", JITOPS_DISABLE_BUILD="1", CXX="/bin/false"
    )
    env["JITOPS_CACHE_DIR"] = str(folder / f"fleet-cache-{os.getpid()}")
    used = subprocess.run([sys.executable, "-c", FLEET_READER], capture_output=True, text=True, env=env, cwd=folder)
    how = json.loads(used.stdout.splitlines()[-1]) if used.returncode == 0 else {}
    ok = bool(how) and set(how.values()) == {"remote"}
    print(
        f"cross-torch: a writer on {built} pushed, a reader on {torch.__version__} (empty cache, no compiler) loaded {how or used.stderr[-2000:]}: {'ok' if ok else 'FAILED'}"
    )
    return ok


def main() -> int:
    mode, folder = sys.argv[1], Path(sys.argv[2]).resolve()
    os.environ["JITOPS_CACHE_DIR"] = str(folder / "cache")
    os.environ.setdefault("JITOPS_PCH", "0")  # a PCH would be a compile this check does not count
    log = folder / f"compiles-{os.getpid()}.log"
    os.environ["CROSS_TORCH_LOG"] = str(log)
    os.environ.update(logging_compilers(folder / "wrappers"))
    import torch

    import jitops

    device = "cuda" if torch.cuda.is_available() and os.environ.get("TORCH_CUDA_ARCH_LIST") else "cpu"
    if mode == "build":
        folder.mkdir(parents=True, exist_ok=True)
        from jitops.store import keygen

        (folder / "remote").mkdir(exist_ok=True)
        if not (folder / "signing.key").exists():
            keygen(folder / "signing.key")
        os.environ.update(fleet_settings(folder))  # every build is pushed there too
        jitops.load_all()
        torch.save(
            {"torch": str(torch.__version__), "cuda": torch.version.cuda, "outputs": outputs("cpu")}, folder / "outputs.pt"
        )
        print(f"cross-torch: the ops built under torch {torch.__version__} in {folder / 'cache'}")
        if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            print(f"cross-torch: {build_wheel(folder).name}")
        return 0
    reference = torch.load(folder / "outputs.pt")
    built, here = reference["torch"], torch.__version__
    with_cuda = bool(os.environ.get("TORCH_CUDA_ARCH_LIST"))
    if with_cuda and (reference["cuda"] or "").split(".")[0] != (torch.version.cuda or "").split(".")[0]:
        print(
            f"cross-torch: not tried: {built} -> {here}: CUDA libraries built for CUDA {reference['cuda']}, this torch has {torch.version.cuda}"
        )
        return 0
    jitops.load_all()
    from jitops.warm import loaded

    compiles = log.read_text().splitlines() if log.exists() else []
    how = {name: library.how for name, library in loaded.items()}
    found = outputs("cpu")
    differ = [op for op, value in found.items() if not torch.equal(value, reference["outputs"][op])]
    line = f"{built} -> {here}: {len(compiles)} compiles, loaded {json.dumps(how)}; outputs "
    line += f"differ for {differ}" if differ else "bitwise equal"
    if device == "cuda":  # each CUDA kernel against the same op's CPU kernel, from this cache
        on_gpu = outputs("cuda")
        line += "; CUDA kernels ran, largest |CUDA - CPU| " + json.dumps(
            {op: float((on_gpu[op] - found[op]).abs().max()) for op in found}
        )
    print(f"cross-torch: {line}")
    for command in compiles:
        print(f"  compiled: {command[:200]}")
    if differ or len(compiles) > ALLOWED_COMPILES:
        return 1
    if list(folder.glob("dist/*.whl")) and not check_wheel(folder, built):
        return 1
    if not check_fleet(folder, built):
        return 1
    # The ops' quick tests (opcheck among them), from the same cache, in this environment.
    import subprocess

    tests = [f"tests/test_{op}.py" for op in jitops.available_ops()]
    passed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests])
    more = (log.read_text().splitlines() if log.exists() else [])[len(compiles) :]
    print(
        f"cross-torch: {built} -> {here}: the ops' quick tests {'passed' if passed.returncode == 0 else 'FAILED'}, {len(more)} compiles more"
    )
    return 1 if passed.returncode != 0 or more else 0


if __name__ == "__main__":
    sys.exit(main())
