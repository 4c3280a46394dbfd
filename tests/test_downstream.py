# SPDX-License-Identifier: MIT
"""A downstream package (tests/downstream_pkg: a torch.library op and a pybind11 module with a CUDA
kernel, declared as jitops Extensions and registered through the jitops.extensions entry point),
built as a wheel, installed into a fresh venv and used from outside the repository: first use
builds, a new process loads warm, jitops-cache shows and acts on it by owner, a header edit
rebuilds the library that includes it, its shipped prebuilts load without compiling. And the
README's package-author recipe, run as written: its wheel carries sources, headers and prebuilt
libraries, and its op passes opcheck and runs under torch.compile(fullgraph=True)."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from test_torch_load import PRELUDE  # counts what a warm load must not do

pytestmark = pytest.mark.slow  # the slow tier (CONTRIBUTING): fresh venvs and wheels

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS / "downstream_pkg"
OWNER = "jitops-demo-pkg"
TIMEOUT_S = 600

USE = (
    PRELUDE
    + """
import demo_pkg
x, y = torch.randn(1000), torch.randn(1000)
scaled, added = demo_pkg.scale_by(x, 3.0), demo_pkg.add_scaled(x, y)
scale_factor, add_factor = float(scaled.div(x * 1.5).median()), float((added - x).div(y).median())  # each header's
cuda_ok = bool(torch.allclose(demo_pkg.add_scaled(x.cuda(), y.cuda()).cpu(), added)) if torch.cuda.is_available() else None
print(json.dumps({"scale_ok": bool(torch.allclose(scaled, x * 1.5 * scale_factor)), "factors": [round(scale_factor, 3), round(add_factor, 3)],
                  "add_ok": bool(torch.allclose(added, x + add_factor * y)), "cuda_ok": cuda_ok,
                  "how": [demo_pkg.scale.load().how, demo_pkg.fused.load().how], "module": demo_pkg.fused.load().module.__name__,
                  "package": demo_pkg.__file__, "spawned": len(SPAWNED), "locks": len(LOCKS)}))
"""
)


def fresh_venv(work: Path) -> Path:
    """A venv at work/venv that sees this jitops and torch (the test environment's site-packages,
    added by a .pth), with `pip` and `jitops-cache` commands as an installed jitops would give it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True, timeout=TIMEOUT_S)
    python = work / "venv" / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "parent_environment.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    for command, module in (("pip", "pip"), ("jitops-cache", "jitops.cache_tools")):
        shim = work / "venv" / "bin" / command
        shim.write_text(f'#!/bin/sh\nexec {python} -m {module} "$@"\n')
        shim.chmod(0o755)
    return python


def pip(python: Path, *args: str, cwd: Path | None = None) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True, timeout=TIMEOUT_S, cwd=cwd, env=PIP_ENV)


# No index is reached: jitops and torch are the test environment's, setuptools too (no isolation).
PIP_ENV = {**os.environ, "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_INDEX": "1", "PIP_QUIET": "1"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the downstream package's (source-only) wheel installed."""
    work = tmp_path_factory.mktemp("downstream")
    pip(Path(sys.executable), "wheel", "--no-deps", "-w", str(work), str(PACKAGE))
    (wheel,) = work.glob("jitops_demo_pkg-*.whl")
    pip(fresh_venv(work), "install", "--no-deps", str(wheel))
    return work


def run(venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JITOPS_CACHE_DIR": str(venv / "cache")}
    env.pop("JITOPS_VERBOSE", None)
    return subprocess.run(
        [str(venv / "venv" / "bin" / "python"), *args], cwd=venv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def use(venv: Path) -> dict:
    result = run(venv, "-c", USE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def cli(venv: Path, *args: str) -> dict:
    result = run(venv, "-m", "jitops.cache_tools", *args, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_a_downstream_package_builds_loads_warm_and_is_managed_by_owner(venv):
    cold = use(venv)
    assert cold["scale_ok"] and cold["add_ok"] and cold["factors"] == [2.0, 2.0]
    assert cold["how"] == ["built", "built"] and cold["module"] == "fused"
    assert cold["cuda_ok"] in (None, True), "the CUDA kernel, where there is a GPU"
    assert Path(cold["package"]).is_relative_to(venv / "venv"), "the installed wheel, not the checkout"
    warm = use(venv)
    assert warm["how"] == ["cache", "cache"] and (warm["spawned"], warm["locks"]) == (0, 0)

    rows = [row for row in cli(venv, "list")["entries"] if row["owner"] == OWNER]
    assert sorted((row["namespace"], row["name"], row["status"]) for row in rows) == [
        ("demo_pkg", "fused", "ok"),
        ("demo_pkg", "scale", "ok"),
    ]
    assert len(cli(venv, "list", "--package", OWNER)["entries"]) == 2
    assert cli(venv, "verify", "--package", OWNER)["problems"] == 0

    # An edit to a header scale includes rebuilds scale (a new variant of its key: the key holds the
    # declared inputs, the variant the headers the compiler read), and not fused, which does not
    # include it; the old library is never loaded, and is listed as stale.
    header = Path(cold["package"]).parent / "csrc" / "include" / "demo" / "scale_factor.h"
    header.write_text(header.read_text().replace("2.0f", "3.0f"))
    edited = use(venv)
    assert edited["factors"] == [3.0, 2.0] and edited["scale_ok"] and edited["add_ok"] and edited["how"] == ["built", "cache"]
    statuses = sorted((row["name"], row["status"]) for row in cli(venv, "list", "--package", OWNER)["entries"])
    assert statuses == [("fused", "ok"), ("scale", "ok"), ("scale", "stale")], statuses

    # Prebuilts shipped inside the package (`jitops-cache build --package ... --out`) load before
    # any build: with the cache cleared, nothing compiles.
    prebuilt = Path(cold["package"]).parent / "prebuilt"
    built = cli(venv, "build", "--package", OWNER, "--out", str(prebuilt))["built"]
    assert sorted(b["name"] for b in built) == ["demo_pkg.fused", "demo_pkg.scale"]
    cleared = cli(venv, "clear", "--package", OWNER)
    assert len(cleared["removed"]) == 3 and not [row for row in cli(venv, "list")["entries"] if row["owner"] == OWNER]
    shipped = use(venv)
    assert shipped["how"] == ["prebuilt", "prebuilt"] and shipped["factors"] == [3.0, 2.0] and shipped["spawned"] == 0
    assert not [p for p in (venv / "cache").glob("demo_pkg.*") if p.is_dir()], "nothing built"

    # A shipped prebuilt of other sources is refused, and the load says why, once, before it builds.
    source = Path(cold["package"]).parent / "csrc" / "scale.cpp"
    source.write_text(source.read_text() + "// edited after its prebuilt was made\n")
    stale = run(venv, "-c", USE)
    assert stale.returncode == 0, stale.stderr
    assert json.loads(stale.stdout.strip().splitlines()[-1])["how"] == ["built", "prebuilt"]
    assert stale.stderr.count("not loading the prebuilt demo_pkg.scale shipped in") == 1, stale.stderr
    assert "other sources than these" in stale.stderr, stale.stderr


def readme_blocks() -> list[str]:
    return re.findall(r"```\w*\n(.*?)```", (TESTS.parent / "README.md").read_text(), re.S)


# README's blocks of the package's files are checked against them in tests/test_readme.py (whole
# files, or marked excerpts); the recipe below builds these very files.


def test_the_readme_recipe_gives_a_wheel_with_sources_headers_and_prebuilts_that_compiles_and_passes_opcheck(tmp_path):
    (recipe,) = [b for b in readme_blocks() if "jitops-cache build --package jitops-demo-pkg" in b]
    tree = tmp_path / "demo"
    shutil.copytree(PACKAGE, tree, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "prebuilt", "__pycache__"))
    author = fresh_venv(tmp_path / "author")
    env = {
        **PIP_ENV,
        "PATH": f"{author.parent}{os.pathsep}{os.environ['PATH']}",
        "JITOPS_CACHE_DIR": str(tmp_path / "author" / "cache"),
    }
    done = subprocess.run(["bash", "-e", "-c", recipe], cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"from the sources in {tree / 'src' / 'demo_pkg'}" in done.stdout, "built from the checkout, not the installed copy"

    (wheel,) = (tree / "dist").glob("jitops_demo_pkg-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for expected in ("demo_pkg/csrc/scale.cpp", "demo_pkg/csrc/fused_cuda.cu", "demo_pkg/csrc/include/demo/scale_factor.h"):
        assert expected in names, names
    for library in ("scale", "fused"):
        shipped = [n for n in names if n.startswith(f"demo_pkg/prebuilt/demo_pkg.{library}-")]
        assert any(n.endswith("/manifest.json") for n in shipped) and any(n.endswith(".so") for n in shipped), names

    # Tagged for the one Python and platform its libraries fit (README's `wheel tags` line).
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    retag = ["tags", "--python-tag", tag, "--abi-tag", tag, "--platform-tag", "linux_x86_64", "--remove", str(wheel)]
    subprocess.run([sys.executable, "-m", "wheel", *retag], check=True, timeout=TIMEOUT_S, capture_output=True)
    (wheel,) = (tree / "dist").glob(f"jitops_demo_pkg-1.0.0-{tag}-{tag}-linux_x86_64.whl")
    user = tmp_path / "user"
    pip(fresh_venv(user), "install", "--no-deps", str(wheel))
    shipped = use(user)
    assert shipped["how"] == ["prebuilt", "prebuilt"], "the wheel's libraries"
    assert not [p for p in (user / "cache").glob("demo_pkg.*") if p.is_dir()], "nothing built"
    compiled = run(user, "-c", COMPILED)
    assert compiled.returncode == 0 and compiled.stdout.strip().endswith("ok"), compiled.stderr

    # A broken package beside it (it prints at import and lacks a source) costs only its own row.
    broken = tmp_path / "broken"
    (broken / "broken_pkg").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (broken / "broken_pkg" / "__init__.py").write_text(BROKEN_MODULE)
    pip(user / "venv" / "bin" / "python", "install", "--no-deps", str(broken))
    doctor = run(user, "-m", "jitops.cache_tools", "doctor", "--json")
    ops = json.loads(doctor.stdout)["extensions"]
    rows = {row["owner"]: row for row in ops}
    assert doctor.returncode == 1, "an op that cannot be had: exit 1, as documented"
    assert rows["jitops-broken-pkg"]["how"] == "broken" and rows[OWNER]["available"], rows
    assert "package data" in rows["jitops-broken-pkg"]["detail"], "the likely cause of a missing source is named"
    # As the loader: the wheel's prebuilt libraries before a build, though a compiler is here.
    assert [row["how"] for row in ops if row["owner"] == OWNER] == ["prebuilt", "prebuilt"], ops
    listed = run(user, "-m", "jitops.cache_tools", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["schema"] == 2, listed.stdout + listed.stderr


# The README's calling pattern, compiled: the first call loads the (prebuilt) library while dynamo
# traces, the fake kernel makes the op traceable, and the registered autograd gives the gradient.
COMPILED = """
import torch, demo_pkg
x = torch.randn(100, requires_grad=True)
f = torch.compile(lambda x: demo_pkg.scale_by(x, 3.0).sin(), fullgraph=True)
y = f(x)
torch.testing.assert_close(y, (x * 3.0).sin())
y.sum().backward()
torch.testing.assert_close(x.grad, 3.0 * (x * 3.0).cos())
torch.library.opcheck(torch.ops.demo_pkg.scale.default, (torch.randn(8, requires_grad=True), 2.5))
print("ok")
"""

BROKEN_PYPROJECT = """
[project]
name = "jitops-broken-pkg"
version = "1.0"
[project.entry-points."jitops.extensions"]
broken_pkg = "broken_pkg:EXTENSIONS"
"""
BROKEN_MODULE = """
from jitops import Extension
print("broken_pkg imported")  # on stdout: must not break --json
EXTENSIONS = [Extension("gone", ["missing.cpp"], namespace="broken_pkg", root=__file__ + "/..")]
"""
