# SPDX-License-Identifier: MIT
"""One build for every torch: extensions on torch's stable ABI are keyed without torch's or Python's
version, audited after the build, and refused where they cannot run. (Across real torches:
.ci/cross_torch.py, which CI runs under each torch of its matrix.)"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path

import children
import pytest
import torch
from test_loader import TIMEOUT_S, tiny_env

import jitops
import jitops.warm
from jitops.compat import _torch_load
from jitops.ops._framework import available_ops, op_libraries
from jitops.store import _key, _stable

REPO = Path(__file__).resolve().parent.parent
EXACT_FIELDS = ("torch", "torch_git", "torch_cuda", "python_soabi")

# A library on the stable headers; CALLS_ATEN adds one call into torch's C++ API (at::globalContext,
# declared by hand as torch's headers would, which a stable build may not include).
STABLE_SOURCE = """
#include <torch/csrc/stable/library.h>
extern "C" int stable_value() { return 7; }
"""
STABLE_OP = """
#include <torch/csrc/stable/library.h>
STABLE_TORCH_LIBRARY(stable_probe, m) { m.def("nothing(Tensor x) -> Tensor"); }
"""
CALLS_ATEN = """
namespace at { class Context; Context& globalContext(); }
extern "C" void* stable_context() { return &at::globalContext(); }
"""
# A child that loads the extension in `root` and prints how, its key's fields and the entry.
LOAD = """
import json, sys
from jitops import Extension
from jitops import _resolution
extension = Extension("probe", ["probe.cpp"], namespace="jitops_stable_test", root=sys.argv[1], stable_abi=True)
loaded = _resolution.resolve(extension)
manifest = json.load(open(loaded.library.parent / "manifest.json"))
print(json.dumps({"how": loaded.how, "entry": loaded.library.parent.name, "components": manifest["components"],
                  "built_under": manifest.get("built_under")}))
"""


def load_probe(tmp_path: Path, source: str, **env: str) -> tuple[dict, str]:
    root = tmp_path / "src"
    root.mkdir(exist_ok=True)
    if not (root / "probe.cpp").exists() or (root / "probe.cpp").read_text() != source:
        (root / "probe.cpp").write_text(source)
    proc = children.run(
        [sys.executable, "-c", LOAD, str(root)],
        env=tiny_env(tmp_path / "cache", **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_the_floor_is_the_oldest_torch_jitops_supports():
    """FLOOR targets the torch that setup.cfg's torch>= names: a newer floor would refuse a supported torch."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    requirement = next(
        line.strip() for line in config["options"]["install_requires"].splitlines() if line.strip().startswith("torch")
    )
    assert requirement == f"torch>={_stable.floor_text()}", requirement
    assert _stable.target_flags()[0] == "-DTORCH_TARGET_VERSION=0x020b000000000000"


def test_stable_keys_hold_no_torch_or_python_version():
    """jitops' five ops are keyed by the floor, not by torch's version or git hash nor Python's SOABI;
    upfirdn2d's C++ autograd, which uses torch's C++ API, keeps the exact key."""
    for op in available_ops():
        main, *parts = op_libraries(op)
        components = _key.PlannedEntry(main).components
        assert components["abi"] == "stable" and components["torch_floor"] == "2.11", op
        assert not set(EXACT_FIELDS) & set(components), f"{op}: {sorted(set(EXACT_FIELDS) & set(components))}"
        assert "-DTORCH_TARGET_VERSION=0x020b000000000000" in components["cflags"]
        for part in parts:
            assert _key.PlannedEntry(part).components["torch"] == torch.__version__


def test_the_ops_libraries_pass_the_audit_and_torch_abi_audit():
    """Each op's built library: jitops' audit finds nothing off the stable ABI, it needs no Python,
    and torch-abi-audit (independently) calls it stable with a minimum torch at the floor."""
    jitops.load_all()
    audit_tool = shutil.which("torch-abi-audit", path=str(Path(sys.executable).parent))
    assert audit_tool, "torch-abi-audit (the test extra) is not installed"
    for op in available_ops():
        library = jitops.warm.loaded[f"jitops.{op}"].library
        manifest = json.loads((library.parent / "manifest.json").read_text())
        assert manifest["built_under"]["audit"]["offending"] == [], op
        assert manifest["built_under"]["torch"] == torch.__version__
        needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
        assert "libtorch_python" not in needed and "libpython" not in needed, needed
        report = json.loads(subprocess.run([audit_tool, "--json", str(library)], capture_output=True, text=True).stdout)
        (verdict,) = [lib["torch"] for lib in report["bundled_libs"]]
        assert verdict["stable"] and verdict["unstable_symbols"] == [] and verdict["unknown_shim_symbols"] == [], verdict
        assert tuple(map(int, verdict["min_torch_version"].split(".")[:2])) <= _stable.FLOOR, verdict


def test_jitops_load_takes_stable_only_sources_as_stable(tmp_path):
    """jitops.load: sources on the stable headers alone, with no pybind11 module, get the stable key;
    one including torch/extension.h (or Python.h, or pybind11) keeps the exact key."""
    (tmp_path / "stable.cpp").write_text(STABLE_OP)
    (tmp_path / "local.h").write_text("#include <torch/extension.h>\n")
    (tmp_path / "unstable.cpp").write_text('#include "local.h"\n' + STABLE_SOURCE)
    (tmp_path / "jitops_library.cpp").write_text("#include <jitops/library.h>\nJITOPS_LIBRARY(m) {}\n")

    def declare(name: str, source: str, python_module: bool):
        return _torch_load.declare(name, str(tmp_path), [source], [], [], [], [], None, python_module, str(tmp_path / "cache"))

    stable, unstable, module = (
        declare("s1", "stable.cpp", False),
        declare("s2", "unstable.cpp", False),
        declare("s3", "stable.cpp", True),
    )
    assert (_key.is_stable(stable), _key.is_stable(unstable), _key.is_stable(module)) == (True, False, False)
    assert not _key.is_stable(declare("s4", "jitops_library.cpp", False)), "<jitops/library.h> is torch/library.h"
    with pytest.raises(ValueError, match="stable_abi=True is for a library loaded with torch.ops"):
        jitops.Extension("x", ["stable.cpp"], namespace="x", root=tmp_path, stable_abi=True, python_module=True)


def test_a_stable_declared_extension_using_torch_cpp_api_is_kept_for_this_torch(tmp_path):
    """A stable_abi extension whose library calls an at:: function: one warning naming it, the
    library published under the exact key (its objects reused: only the link again), and the next
    process goes to that key at once, compiling nothing."""
    first, stderr = load_probe(tmp_path, STABLE_SOURCE + CALLS_ATEN)
    assert "at::globalContext()" in stderr and "stable ABI (stable_abi)" in stderr, stderr
    assert first["how"] == "built" and first["components"]["torch"] == torch.__version__
    assert "at::globalContext()" in first["built_under"]["exact_because"]
    refused = json.loads((tmp_path / "cache" / "stable-refused.json").read_text())
    assert len(refused) == 1 and "at::globalContext()" in next(iter(refused.values()))
    again, stderr = load_probe(tmp_path, STABLE_SOURCE + CALLS_ATEN)
    assert again["how"] == "cache" and again["entry"] == first["entry"], stderr
    for record in (tmp_path / "cache").glob("warm-*.json"):
        record.unlink()
    cold, stderr = load_probe(tmp_path, STABLE_SOURCE + CALLS_ATEN)
    assert cold["how"] == "cache" and cold["entry"] == first["entry"] and "building" not in stderr, stderr


def test_an_entry_needing_a_newer_torch_or_runtime_is_a_miss(tmp_path):
    """A stable entry whose build says it needs a newer torch than this one (or a newer C++ runtime)
    is not opened: the extension is built for this torch instead, with a note saying why."""
    first, _ = load_probe(tmp_path, STABLE_SOURCE)
    assert first["how"] == "built" and first["components"]["abi"] == "stable"
    assert first["built_under"]["audit"]["offending"] == [] and first["built_under"]["torch_floor"] == "2.11"
    manifest_path = tmp_path / "cache" / first["entry"] / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["built_under"]["torch_floor"] = "2.99"
    manifest_path.write_text(json.dumps(manifest))
    for record in (tmp_path / "cache").glob("warm-*.json"):
        record.unlink()
    newer, stderr = load_probe(tmp_path, STABLE_SOURCE)
    assert "it needs torch >= 2.99" in stderr, stderr
    assert newer["how"] == "built" and newer["entry"] != first["entry"] and newer["components"]["torch"] == torch.__version__
    assert _stable.unfit_here({"glibcxx": "9.9.99"}).startswith("it needs the C++ runtime's GLIBCXX_9.9.99")
    assert _stable.unfit_here({"torch_floor": "2.11", "glibcxx": "3.4.9"}) == ""


def test_an_op_built_under_another_torch_and_python_is_ok_for_list_and_clear_stale(tmp_path):
    """An entry of a stable op built under another torch and Python (its manifest's built_under) is
    `ok` for `list`, shown as "≥ 2.11, any Python", and `clear --stale` leaves it."""
    jitops.ops._framework.require("add2")
    built = jitops.warm.loaded["jitops.add2"].library.parent
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    shutil.copytree(built, cache / built.name)
    manifest_path = cache / built.name / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["built_under"].update(torch="2.15.0+cu130", torch_git="0" * 40, python_soabi="cpython-313-x86_64-linux-gnu")
    manifest_path.write_text(json.dumps(manifest))

    def cli(*args: str) -> dict:
        command = [sys.executable, "-m", "jitops.cache_tools", *args, "--json"]
        proc = children.run(command, env=tiny_env(cache), capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    (row,) = cli("list")["entries"]
    assert (row["status"], row["torch"]) == ("ok", "≥ 2.11, any Python"), row
    assert cli("clear", "--stale")["removed"] == [] and (cache / built.name).is_dir()
