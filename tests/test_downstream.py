# SPDX-License-Identifier: MIT
"""A downstream package (tests/downstream_pkg: a torch.library op and a pybind11 module with a CUDA
kernel, declared as jitops Extensions and registered through the jitops.extensions entry point),
built as a wheel, installed into a fresh venv and used from outside the repository: first use
builds, a new process loads warm, jitops-cache shows and acts on it by owner, a header edit
rebuilds the library that includes it, its shipped prebuilts load without compiling."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_torch_load import PRELUDE  # counts what a warm load must not do

TESTS = Path(__file__).resolve().parent
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


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv that sees this jitops and torch (the test environment's site-packages, added
    by a .pth) and has the downstream package's wheel installed."""
    work = tmp_path_factory.mktemp("downstream")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work),
            str(TESTS / "downstream_pkg"),
        ],
        check=True,
        timeout=TIMEOUT_S,
    )
    (wheel,) = work.glob("jitops_demo_pkg-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True, timeout=TIMEOUT_S)
    python = work / "venv" / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "parent_environment.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=TIMEOUT_S,
    )
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
    assert sorted((row["namespace"], row["op"], row["status"]) for row in rows) == [
        ("demo_pkg", "fused", "ok"),
        ("demo_pkg", "scale", "ok"),
    ]
    assert len(cli(venv, "list", "--package", OWNER)["entries"]) == 2
    assert cli(venv, "verify", "--package", OWNER)["problems"] == 0

    # An edit to a header scale includes rebuilds scale (in its entry: the key holds the declared
    # inputs, the manifest the headers the compiler read), and not fused, which does not include it;
    # the old library is never loaded.
    header = Path(cold["package"]).parent / "csrc" / "include" / "demo" / "scale_factor.h"
    header.write_text(header.read_text().replace("2.0f", "3.0f"))
    edited = use(venv)
    assert edited["factors"] == [3.0, 2.0] and edited["scale_ok"] and edited["add_ok"] and edited["how"] == ["built", "cache"]

    # Prebuilts shipped inside the package (`jitops-cache build --package ... --out`) load before
    # any build: with the cache cleared, nothing compiles.
    prebuilt = Path(cold["package"]).parent / "prebuilt"
    built = cli(venv, "build", "--package", OWNER, "--out", str(prebuilt))["built"]
    assert sorted(b["op"] for b in built) == ["demo_pkg.fused", "demo_pkg.scale"]
    cleared = cli(venv, "clear", "--package", OWNER)
    assert len(cleared["removed"]) == 2 and not [row for row in cli(venv, "list")["entries"] if row["owner"] == OWNER]
    shipped = use(venv)
    assert shipped["how"] == ["prebuilt", "prebuilt"] and shipped["factors"] == [3.0, 2.0] and shipped["spawned"] == 0
    assert not [p for p in (venv / "cache").glob("demo_pkg.*") if p.is_dir()], "nothing built"
