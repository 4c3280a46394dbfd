# SPDX-License-Identifier: MIT
"""Unmodified programs through jitops (`python -m jitops run`, JITOPS_TORCH_LOAD=1, `from jitops
import cpp_extension`), and what real programs rely on beyond load()'s signature: the module in
sys.modules (StyleGAN's get_plugin), never another build's module when both loaders share a process
(either order, two threads), and the namespace guard before any dlopen. Real builds, real processes."""

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import children
import pytest
from test_loader import TIMEOUT_S, tiny_env

REPO = Path(__file__).resolve().parent.parent

# A pybind11 module (pybind11's header alone: quick to compile) returning VALUE.
VALUE_SOURCE = """#include <pybind11/pybind11.h>
#ifndef VALUE
#define VALUE 1
#endif
static int value() { return VALUE; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value); }
"""

# StyleGAN2-ADA/StyleGAN3's custom_ops.get_plugin, reduced to what it does with torch's loader:
# load() into a build directory, then the module by name from sys.modules.
GET_PLUGIN = """
import importlib, json, sys
import torch.utils.cpp_extension

def get_plugin(module_name, sources, build_dir):
    torch.utils.cpp_extension.load(name=module_name, build_directory=build_dir, sources=sources, verbose=False)
    return importlib.import_module(module_name)

plugin = get_plugin("value_plugin", [sys.argv[1]], sys.argv[2])
print(json.dumps({"value": plugin.value(), "file": plugin.__file__, "setuptools": "setuptools" in sys.modules,
                  "torch_code": "include_paths" in vars(torch.utils.cpp_extension)}))
"""


def write_value_source(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "value.cpp").write_text(VALUE_SOURCE)
    (folder / "build").mkdir(exist_ok=True)
    return folder / "value.cpp"


def run(args: list[str], env: dict, cwd: Path | None = None) -> dict:
    proc = children.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_unmodified_get_plugin_program_runs_through_jitops_and_its_warm_start_skips_setuptools(tmp_path):
    source = write_value_source(tmp_path / "plugin")
    script = tmp_path / "train.py"
    script.write_text(GET_PLUGIN)
    env = tiny_env(tmp_path / "cache")
    args = ["-m", "jitops", "run", str(script), str(source), str(source.parent / "build")]
    cold = run(args, env)
    assert cold["value"] == 1
    assert Path(cold["file"]).is_relative_to(source.parent / "build" / "jitops"), "jitops' entry, not torch's build"
    warm = run(args, env)
    assert (warm["value"], warm["file"]) == (cold["value"], cold["file"])
    assert not warm["setuptools"] and not warm["torch_code"], "a warm start reads none of torch's cpp_extension"
    # The same program as a module (-m), with the rest of torch's cpp_extension in use.
    (tmp_path / "uses_torch.py").write_text(
        GET_PLUGIN.replace(
            '"setuptools": "setuptools" in sys.modules',
            '"setuptools": "setuptools" in sys.modules, "includes": bool(torch.utils.cpp_extension.include_paths()), '
            '"load_is_jitops": torch.utils.cpp_extension.load.__module__',
        )
    )
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    module = run(["-m", "jitops", "run", "-m", "uses_torch", str(source), str(source.parent / "build")], env)
    assert (module["value"], module["file"], module["includes"]) == (1, cold["file"], True)
    assert module["torch_code"] and module["load_is_jitops"] == "jitops._torch_load", "torch's module, jitops' load"


def test_the_one_line_swap_gives_jitops_load_and_torchs_other_names(tmp_path):
    code = """
import json, sys
from jitops import cpp_extension
before = "setuptools" in sys.modules
print(json.dumps({"load": cpp_extension.load.__module__, "inline": cpp_extension.load_inline.__module__,
                  "before": before, "build_extension": cpp_extension.BuildExtension.__module__}))
"""
    found = run(["-c", code], tiny_env(tmp_path / "cache"))
    assert found == {
        "load": "jitops._torch_load",
        "inline": "jitops._torch_load_inline",
        "before": False,
        "build_extension": "torch.utils.cpp_extension",
    }


@pytest.mark.parametrize("first", ["torch", "jitops"])
def test_two_loaders_in_one_process_never_return_each_others_module(tmp_path, first):
    source = write_value_source(tmp_path / "src")
    code = """
import json, sys
import jitops
from torch.utils.cpp_extension import load as torch_load
loaders = {"torch": torch_load, "jitops": jitops.load}
order = [sys.argv[2], "jitops" if sys.argv[2] == "torch" else "torch"]
found = []
for which, value in zip(order, (7, 9)):
    module = loaders[which]("mixed", [sys.argv[1]], extra_cflags=[f"-DVALUE={value}"], build_directory=sys.argv[3] + "/" + which)
    found.append([which, module.value(), module.__name__])
print(json.dumps(found))
"""
    for which in ("torch", "jitops"):
        (tmp_path / "build" / which).mkdir(parents=True)
    found = run(["-c", code, str(source), first, str(tmp_path / "build")], tiny_env(tmp_path / "cache"))
    second = "jitops" if first == "torch" else "torch"
    assert found == [[first, 7, "mixed"], [second, 9, "mixed_v1"]]


def test_two_threads_loading_one_name_with_other_flags_get_two_versions(tmp_path):
    source = write_value_source(tmp_path / "src")
    code = """
import json, sys, threading, jitops
found = {}
def go(value):
    module = jitops.load("threads", [sys.argv[1]], extra_cflags=[f"-DVALUE={value}"])
    found[value] = [module.value(), module.__name__]
threads = [threading.Thread(target=go, args=(value,)) for value in (5, 6)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(found))
"""
    found = run(["-c", code, str(source)], tiny_env(tmp_path / "cache"))
    assert sorted(v[0] for v in found.values()) == [5, 6] and all(int(k) == v[0] for k, v in found.items())
    assert sorted(v[1] for v in found.values()) == ["threads", "threads_v1"]


LIBRARY_SOURCE = """#include <torch/library.h>
TORCH_LIBRARY(jitops_test_twice_defined, m) { m.def("noop(Tensor x) -> Tensor"); }
"""


def test_a_namespace_defined_twice_is_a_namespace_conflict_and_the_process_lives(tmp_path):
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "lib.cpp").write_text(LIBRARY_SOURCE)
    code = """
import json, sys, torch, jitops
first = jitops.load("first", [sys.argv[1] + "/one/lib.cpp"], is_python_module=False)
outcomes = []
for name, folder in (("second", "two"), ("second_again", "two")):
    try:
        jitops.load(name, [sys.argv[1] + "/" + folder + "/lib.cpp"], is_python_module=False)
        outcomes.append("loaded")
    except jitops.NamespaceConflict as err:
        outcomes.append(str(err))
# torch.library's own definition of a namespace is guarded as well.
held = torch.library.Library("jitops_test_python_defined", "DEF")
open(sys.argv[1] + "/three.cpp", "w").write(open(sys.argv[1] + "/one/lib.cpp").read().replace(
    "jitops_test_twice_defined", "jitops_test_python_defined"))
try:
    jitops.load("third", [sys.argv[1] + "/three.cpp"], is_python_module=False)
    outcomes.append("loaded")
except jitops.NamespaceConflict as err:
    outcomes.append(str(err))
print(json.dumps({"outcomes": outcomes, "op": hasattr(torch.ops.jitops_test_twice_defined, "noop")}))
"""
    env = tiny_env(tmp_path / "cache")
    found = run(["-c", code, str(tmp_path)], env)
    first, again, python_defined = found["outcomes"]
    for message, name in ((first, "second"), (again, "second_again")):
        assert f"cannot load jitops_load.{name}:" in message and "'jitops_test_twice_defined'" in message, message
        assert "jitops_load.first-" in message and ".tmp-" not in message, "names the published library that holds it"
    assert "'jitops_test_python_defined'" in python_defined and "torch's dispatcher" in python_defined, python_defined
    assert found["op"]
    # A warm start of the first checks it too (its warm record lists the namespace).
    warm = run(["-c", code, str(tmp_path)], env)
    assert warm["outcomes"] == found["outcomes"]


def test_verbose_puts_jitops_verbose_back_as_it_was(tmp_path):
    source = write_value_source(tmp_path / "src")
    code = """
import json, os, sys, jitops
jitops.load("quiet", [sys.argv[1]], verbose=True)
print(json.dumps(os.environ.get("JITOPS_VERBOSE")))
"""
    assert run(["-c", code, str(source)], tiny_env(tmp_path / "cache", JITOPS_VERBOSE="0")) == "0"


def test_the_environment_switch_of_an_installed_jitops_serves_every_process(tmp_path):
    """JITOPS_TORCH_LOAD=1 with jitops installed from its wheel (the .pth file only a regular
    install has): torch.utils.cpp_extension.load is jitops' in a Python started by anyone."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        timeout=TIMEOUT_S,
    )
    (wheel,) = tmp_path.glob("jitops-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    python = venv / "bin" / "python"
    site = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True)
    # torch and the rest from this environment, after the venv's own site-packages (jitops from the wheel).
    parent = sysconfig.get_paths()["purelib"]
    (Path(site.strip()) / "zz_parent_environment.pth").write_text(f"import sys; sys.path.append({parent!r})\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=TIMEOUT_S,
    )
    code = textwrap.dedent("""
        import json, jitops, torch.utils.cpp_extension as cpp_extension
        print(json.dumps([cpp_extension.load.__module__, jitops.__file__]))
    """)
    env = tiny_env(tmp_path / "cache")
    env.pop("PYTHONPATH", None)
    on = subprocess.run(
        [str(python), "-c", code], env={**env, "JITOPS_TORCH_LOAD": "1"}, capture_output=True, text=True, cwd=tmp_path
    )
    off = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    (on_load, on_file), (off_load, _) = json.loads(on.stdout), json.loads(off.stdout)
    assert Path(on_file).is_relative_to(venv), "the installed jitops"
    assert (on_load, off_load) == ("jitops._torch_load", "torch.utils.cpp_extension")
