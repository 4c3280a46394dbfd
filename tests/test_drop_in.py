# SPDX-License-Identifier: MIT
"""Unmodified programs through jitops (`python -m jitops run`, JITOPS_DROP_IN=1, `from jitops
import cpp_extension`), and what real programs rely on beyond load()'s signature: the module in
sys.modules (StyleGAN's get_plugin), never another build's module when both loaders share a process
(either order, two threads), and the namespace guard before any dlopen. Real builds, real processes."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import children
import pytest
from checkout import copy_of_checkout
from test_loader import TIMEOUT_S, tiny_env

pytestmark = pytest.mark.slow  # the slow tier (CONTRIBUTING): unmodified programs and both loaders, each in processes of its own

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
import importlib, json, os, sys
import torch.utils.cpp_extension

def get_plugin(module_name, sources, build_dir):
    lock = os.path.join(torch.utils.cpp_extension._get_build_directory(module_name, False), "lock")  # as renderers do
    assert not os.path.exists(lock)
    torch.utils.cpp_extension.load(name=module_name, build_directory=build_dir, sources=sources, verbose=False)
    return importlib.import_module(module_name)

plugin = get_plugin("value_plugin", [sys.argv[1]], sys.argv[2])
print(json.dumps({"value": plugin.value(), "file": plugin.__file__, "setuptools": "setuptools" in sys.modules,
                  "torch_code": "_find_cuda_home" in vars(torch.utils.cpp_extension)}))
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
            '"setuptools": "setuptools" in sys.modules, "rest": callable(torch.utils.cpp_extension.CppExtension), '
            '"load_is_jitops": torch.utils.cpp_extension.load.__module__',
        )
    )
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    module = run(["-m", "jitops", "run", "-m", "uses_torch", str(source), str(source.parent / "build")], env)
    assert (module["value"], module["file"], module["rest"]) == (1, cold["file"], True)
    assert module["torch_code"] and module["load_is_jitops"] == "jitops.compat._torch_load", "torch's module, jitops' load"


# Every helper _torch_helpers answers, asked as programs ask them (the survey in docs/extensions.md).
HELPERS = """
import json, sys
import torch.utils.cpp_extension as ce

def ask(question):
    try:
        return ["value", question()]
    except Exception as err:
        return ["error", type(err).__name__, str(err)]

names = ["CUDA_HOME", "CUDNN_HOME", "ROCM_HOME", "HIP_HOME", "IS_HIP_EXTENSION", "IS_WINDOWS", "IS_MACOS", "IS_LINUX",
         "LIB_EXT", "EXEC_EXT", "CLIB_PREFIX", "CLIB_EXT", "SHARED_FLAG", "SUBPROCESS_DECODE_ARGS", "TORCH_LIB_PATH", "_TORCH_PATH"]
found = {name: ask(lambda: getattr(ce, name)) for name in names}
found |= {
    "_get_build_directory": ask(lambda: ce._get_build_directory("helpers_probe", False)),
    "_get_build_directory(verbose)": ask(lambda: ce._get_build_directory("helpers_probe", True)),
    "get_default_build_root": ask(ce.get_default_build_root),
    "include_paths()": ask(ce.include_paths),
    "include_paths(cuda)": ask(lambda: ce.include_paths("cuda")),
    "include_paths(device_type=cuda)": ask(lambda: ce.include_paths(device_type="cuda")),
    "library_paths()": ask(ce.library_paths),
    "library_paths(cuda)": ask(lambda: ce.library_paths("cuda")),
    "_join_cuda_home": ask(lambda: ce._join_cuda_home("bin", "nvcc")),
    "is_ninja_available": ask(ce.is_ninja_available),
    "verify_ninja_availability": ask(ce.verify_ninja_availability),
}
print(json.dumps({"found": found, "setuptools": "setuptools" in sys.modules, "torch_code": "_find_cuda_home" in vars(ce)}))
"""


@pytest.mark.parametrize("setting", ["as-is", "cuda-home-and-friends", "no-nvcc-on-path"])
def test_the_helpers_run_answers_without_torchs_code_equal_torchs_own(tmp_path, setting):
    env = tiny_env(tmp_path / "cache", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    if setting == "cuda-home-and-friends":
        (tmp_path / "toolkit" / "lib").mkdir(parents=True)  # lib/ without lib64/: library_paths picks lib
        env |= {"CUDA_HOME": str(tmp_path / "toolkit"), "CUDNN_HOME": "/opt/cudnn", "CUDA_INC_PATH": "/opt/inc"}
        env.pop("TORCH_EXTENSIONS_DIR")  # the default root, under XDG_CACHE_HOME
    elif setting == "no-nvcc-on-path":
        for name in ("CUDA_HOME", "CUDA_PATH"):
            env.pop(name, None)
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(p, "nvcc")))
    script = tmp_path / "helpers.py"
    script.write_text(HELPERS)
    served = run(["-m", "jitops", "run", str(script)], env)
    torchs = run([str(script)], env)
    assert not served["setuptools"] and not served["torch_code"], "answered without torch's cpp_extension code"
    assert torchs["torch_code"]
    assert served["found"] == torchs["found"]


def test_a_helper_case_jitops_does_not_answer_and_a_value_the_program_set_survive_torchs_code(tmp_path):
    code = """
import json, sys
import torch.utils.cpp_extension as ce
before = ce.include_paths()
ce.CUDA_HOME = "/set/by/the/program"
try:
    xpu = ce.include_paths("xpu")  # torch's own answer (its code runs)
except Exception as err:
    xpu = type(err).__name__
print(json.dumps({"before": before, "after": ce.include_paths(), "cuda_home": ce.CUDA_HOME, "xpu": xpu,
                  "torch_code": "_find_cuda_home" in vars(ce), "load": ce.load.__module__,
                  "torch_reads_it": ce._join_cuda_home("x")}))
"""
    script = tmp_path / "xpu.py"
    script.write_text(code)
    env = tiny_env(tmp_path / "cache")
    found = run(["-m", "jitops", "run", str(script)], env)
    torchs = run([str(script)], env)
    assert found["torch_code"] and found["load"] == "jitops.compat._torch_load"
    assert found["cuda_home"] == "/set/by/the/program" == found["torch_reads_it"].removesuffix("/x")
    assert {k: found[k] for k in ("before", "after", "xpu")} == {k: torchs[k] for k in ("before", "after", "xpu")}


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
        "load": "jitops.compat._torch_load",
        "inline": "jitops.compat._torch_load_inline",
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
    proc = children.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    # It compiled, and the guard kept it out: the status line says so, not "FAILED to build" (N14).
    assert "built second in " in proc.stderr and "but did not load it" in proc.stderr, proc.stderr
    assert "FAILED" not in proc.stderr, proc.stderr
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


# What a program sees of how it was started, and an uncaught error: under `python -m jitops run` all
# of it must be what `python` gives (E1, E3, E7 of the reliability review).
AS_STARTED = """
import json, os, sys
main = sys.modules["__main__"]
seen = {"argv": sys.argv, "path0": sys.path[0], "path1": sys.path[1], "file": __file__, "name": __name__,
        "main": sorted((k, type(v).__name__) for k, v in vars(main).items() if k.startswith("__"))}
here = os.path.dirname(__file__)
os.chdir("/")
seen["reads_itself"] = open(os.path.join(here, os.path.basename(__file__))).readline()
print(json.dumps(seen))
def fail():
    raise ValueError("from the program")
if "fail" in sys.argv:
    fail()
if "interrupt" in sys.argv:
    raise KeyboardInterrupt
if "exit" in sys.argv:
    sys.exit(3)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["sub/prog.py", "a", "b c"],
        ["link.py"],  # a link to sub/prog.py: sys.path[0] is the folder of the file it names
        ["sub/prog.py", "fail"],
        ["sub/prog.py", "interrupt"],
        ["sub/prog.py", "exit"],
        ["sub/broken.py"],  # a SyntaxError
        ["-m", "no_such_module_anywhere"],
        ["no_such_script.py"],
        ["-m", "sub.prog", "x"],
    ],
    ids=["argv", "symlink", "traceback", "ctrl-c", "exit-status", "syntax-error", "no-such-module", "no-such-script", "module"],
)
def test_run_gives_the_program_what_python_gives_it(tmp_path, args):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "prog.py").write_text(AS_STARTED)
    (tmp_path / "sub" / "broken.py").write_text("x = (\n")
    (tmp_path / "link.py").symlink_to("sub/prog.py")
    env = tiny_env(tmp_path / "cache")
    both = [  # real interpreters (not test children forked from one): python's own start is compared
        subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
        for command in ([sys.executable, *args], [sys.executable, "-m", "jitops", "run", *args])
    ]
    python, through_jitops = ((proc.returncode, proc.stdout, proc.stderr) for proc in both)
    assert through_jitops == python
    assert python[0] != 0 or json.loads(python[1])["reads_itself"], "the program ran"


WHERE_STARTED = """
import sys
print(sys.argv, sys.path[0], sys.path[1], __file__)
"""


@pytest.mark.parametrize("args", [["pk"], ["pk.zip"], ["../prog/train.py"], ["-m", "mod", "x"]])
def test_run_starts_a_folder_a_zip_and_a_script_from_a_folder_holding_a_json_py_as_python_does(tmp_path, args):
    """A folder or a zip with a __main__.py gets sys.argv[0] as typed; a json.py in the working
    folder (a module jitops imports) never runs where python would not run it; -m still finds a
    module of the working folder, as python's -m does."""
    import zipfile

    work, prog, package = tmp_path / "work", tmp_path / "prog", tmp_path / "work" / "pk"
    for folder in (work, prog, package):
        folder.mkdir()
    (work / "json.py").write_text("print('the working folder json.py ran')\n")
    for program in (prog / "train.py", package / "__main__.py", work / "mod.py"):
        program.write_text(WHERE_STARTED)
    with zipfile.ZipFile(work / "pk.zip", "w") as archive:
        archive.write(package / "__main__.py", "__main__.py")
    env = tiny_env(tmp_path / "cache")
    both = [
        subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=work)
        for command in ([sys.executable, *args], [sys.executable, "-m", "jitops", "run", *args])
    ]
    python, through_jitops = ((proc.returncode, proc.stdout, proc.stderr) for proc in both)
    assert python[0] == 0 and "json.py ran" not in python[1], python
    assert through_jitops == python


SWITCHED = """
import json, sys
started_with = sorted(name for name in sys.modules if name.split(".")[0] in ("jitops", "_jitops_drop_in"))
import torch.utils.cpp_extension as cpp_extension
print(json.dumps([cpp_extension.load.__module__, started_with]))
"""


def installed_jitops(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """A venv (with a lib64 link, as Linux makes them: site reads its .pth files twice) holding a copy
    of this checkout installed as a wheel or editable, torch and the rest from this environment.
    Returns (its python, the installed jitops package)."""
    tree = copy_of_checkout(tmp_path / "tree")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    python = venv / "bin" / "python"
    site = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True)
    parent = sysconfig.get_paths()["purelib"]  # after the venv's own site-packages
    (Path(site.strip()) / "zz_parent_environment.pth").write_text(f"import sys; sys.path.append({parent!r})\n")
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "-q",
    ]
    if how == "wheel":
        subprocess.run([*pip, str(tree)], check=True, timeout=TIMEOUT_S, cwd=tmp_path)
        package = Path(site.strip()) / "jitops"
    else:
        subprocess.run([*pip, "-e", str(tree)], check=True, timeout=TIMEOUT_S, cwd=tmp_path)
        package = tree / "jitops"
    return python, package


@pytest.mark.parametrize("how", ["wheel", "editable"])
def test_the_environment_switch_serves_every_process_costs_nothing_until_used_and_survives_a_broken_jitops(tmp_path, how):
    """JITOPS_DROP_IN=1 (and its older name, JITOPS_TORCH_LOAD) in a regular and an editable install: torch.utils.cpp_extension.load is
    jitops' in a Python started by anyone; a start imports nothing of jitops until the program
    imports that module (E9); a broken or removed jitops says so in one line, once (E10)."""
    python, package = installed_jitops(tmp_path, how)
    env = tiny_env(tmp_path / "cache")
    env.pop("PYTHONPATH", None)

    def start(switch: str, variable: str = "JITOPS_DROP_IN") -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), "-c", SWITCHED], env={**env, variable: switch}, capture_output=True, text=True, cwd=tmp_path
        )

    on, off, old_name = start("1"), start("0"), start("1", "JITOPS_TORCH_LOAD")
    assert on.returncode == 0 and off.returncode == 0 and not on.stderr, on.stderr + off.stderr
    assert json.loads(on.stdout) == json.loads(old_name.stdout) == ["jitops.compat._torch_load", ["_jitops_drop_in"]]
    assert json.loads(off.stdout) == ["torch.utils.cpp_extension", []]
    for breaking in ("syntax error", "package removed"):
        if breaking == "syntax error":
            with open(package / "compat" / "_drop_in.py", "a") as drop_in:
                drop_in.write("x = (\n")
        else:
            shutil.rmtree(package)
        broken = start("1")
        assert broken.returncode == 0 and json.loads(broken.stdout)[0] == "torch.utils.cpp_extension", broken.stderr
        (line,) = broken.stderr.splitlines()
        assert line.startswith("jitops: JITOPS_DROP_IN=1 is ignored: jitops does not import"), broken.stderr
