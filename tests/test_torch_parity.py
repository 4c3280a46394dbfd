# SPDX-License-Identifier: MIT
"""What torch's own JIT-extension tests expect of load() and load_inline(), checked against both
loaders: torch.utils.cpp_extension's and jitops'. Each test runs in a new process per loader (a
process holds one module per name), with the same arguments, and asserts the same outcome of both,
so that a difference is a failure here rather than a surprise in a user's program. Sources are
kept to pybind11's header where the behaviour does not need torch's (each compile of
torch/extension.h costs half a minute on a 2-core machine). CUDA cases run where torch has CUDA."""

import json
import sys
from pathlib import Path

import children
import pytest
import torch
from test_loader import TIMEOUT_S, tiny_env

pytestmark = pytest.mark.slow  # the slow tier (CONTRIBUTING): torch's own loader beside jitops, case by case

LOADERS = ["torch", "jitops"]
HAS_CUDA = torch.cuda.is_available()

# The child: `load`/`load_inline` are the loader's, `build` a fresh build_directory; the test's code
# (argv[3]) runs and sets `result`, printed as JSON.
CHILD = """
import json, os, sys, traceback
import torch
which, build, code = sys.argv[1], sys.argv[2], sys.argv[3]
if which == "jitops":
    from jitops import load, load_inline
else:
    from torch.utils.cpp_extension import load, load_inline
scope = {"load": load, "load_inline": load_inline, "build": build, "torch": torch, "os": os}
try:
    exec(code, scope)
except Exception as err:
    scope["result"] = {"raised": type(err).__name__, "message": str(err)}
print(json.dumps(scope["result"]))
"""

VALUE = """#include <pybind11/pybind11.h>
#include "value.h"
static int value() { return VALUE; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value, "the value"); }
"""


def run(which: str, tmp_path: Path, code: str, **env) -> dict:
    build = tmp_path / which / "build"
    build.mkdir(parents=True, exist_ok=True)
    environment = tiny_env(tmp_path / which / "cache", TORCH_EXTENSIONS_DIR=str(tmp_path / which / "torch_ext"), **env)
    proc = children.run(
        [sys.executable, "-c", CHILD, which, str(build), code], env=environment, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def value_tree(folder: Path, value: int = 3) -> Path:
    """value.cpp, and value.h in include/ beside it."""
    (folder / "include").mkdir(parents=True, exist_ok=True)
    (folder / "include" / "value.h").write_text(f"#define VALUE {value}\n")
    (folder / "value.cpp").write_text(VALUE)
    return folder


@pytest.mark.parametrize("which", LOADERS)
def test_flags_and_include_paths_are_taken_with_whitespace_around_them(tmp_path, which):
    tree = value_tree(tmp_path / "src")
    code = f"""
module = load("lenient", [{str(tree / "value.cpp")!r}], extra_cflags=[" -DUNUSED=1 ", "\\t-O2"],
              extra_include_paths=[" {tree / "include"}\\n"], build_directory=build)
result = {{"value": module.value(), "doc": module.value.__doc__.splitlines()[-1]}}
"""
    assert run(which, tmp_path, code) == {"value": 3, "doc": "the value"}


# load_inline's functions: a name, a list (each docstring its name) or a dict (name -> docstring).
FUNCTIONS = """
result = {}
for case, functions in (("str", "twice"), ("list", ["twice", "half"]), ("dict", {"twice": "doubles", "half": "halves"})):
    module = load_inline(f"inline_{case}", "#include <pybind11/pybind11.h>\\nint twice(int x) { return 2 * x; }\\n"
                         "int half(int x) { return x / 2; }", functions=functions, no_implicit_headers=True,
                         with_pytorch_error_handling=False, build_directory=build)
    result[case] = [module.twice(21), module.twice.__doc__.splitlines()[-1]]
    result[case] += [module.half(8)] if case != "str" else []
"""


@pytest.mark.parametrize("which", LOADERS)
def test_load_inline_binds_functions_given_as_a_name_a_list_or_a_dict(tmp_path, which):
    assert run(which, tmp_path, FUNCTIONS) == {
        "str": [42, "twice"],
        "list": [42, "twice", 4],
        "dict": [42, "doubles", 4],
    }


@pytest.mark.parametrize("functions", ["5", "('twice',)"])
@pytest.mark.parametrize("which", LOADERS)
def test_load_inline_refuses_functions_of_another_type_before_building(tmp_path, which, functions):
    code = f"""
load_inline("bad_functions", "int twice(int x) {{ return 2 * x; }}", functions={functions}, build_directory=build)
result = "built"
"""
    found = run(which, tmp_path, code)
    assert found["raised"] == "ValueError" and "functions" in found["message"].lower(), found
    assert not list((tmp_path / which / "build").rglob("*.so")), "nothing built"


@pytest.mark.parametrize("which", LOADERS)
def test_a_library_that_is_no_python_module_returns_its_path_and_lies_in_the_build_directory(tmp_path, which):
    source = tmp_path / "lib.cpp"
    source.write_text('extern "C" int library_value() { return 11; }\n')
    code = f"""
import ctypes
path = load("plain_library", [{str(source)!r}], is_python_module=False, build_directory=build)
result = {{"value": ctypes.CDLL(path).library_value(), "in_build_directory": os.path.exists(os.path.join(build, "plain_library.so")),
          "returned": type(path).__name__}}
"""
    assert run(which, tmp_path, code) == {"value": 11, "in_build_directory": True, "returned": "str"}


@pytest.mark.parametrize("which", LOADERS)
def test_a_name_loaded_again_with_other_code_gets_the_next_version(tmp_path, which):
    tree = value_tree(tmp_path / "src")
    code = f"""
first = load("reloaded", [{str(tree / "value.cpp")!r}], extra_include_paths=[{str(tree / "include")!r}])
open({str(tree / "include" / "value.h")!r}, "w").write("#define VALUE 4\\n")
open({str(tree / "value.cpp")!r}, "a").write("// edited\\n")
second = load("reloaded", [{str(tree / "value.cpp")!r}], extra_include_paths=[{str(tree / "include")!r}])
same = load("reloaded", [{str(tree / "value.cpp")!r}], extra_include_paths=[{str(tree / "include")!r}])
result = [first.__name__, first.value(), second.__name__, second.value(), same is second]
"""
    assert run(which, tmp_path, code) == ["reloaded", 3, "reloaded_v1", 4, True]


@pytest.mark.parametrize("which", LOADERS)
def test_a_compile_error_raises_a_runtime_error_naming_the_extension(tmp_path, which):
    source = tmp_path / "broken.cpp"
    source.write_text("int broken() { return undeclared_name; }\n")
    code = f"""
load("broken_ext", [{str(source)!r}], build_directory=build)
result = "built"
"""
    found = run(which, tmp_path, code)
    assert found["raised"] in ("RuntimeError", "BuildError"), found
    assert issubclass(__import__("jitops").BuildError, RuntimeError)
    assert "broken_ext" in found["message"] and "undeclared_name" in found["message"], found["message"]


@pytest.mark.parametrize("folder", ["semi;colon", "back`tick", "less<than", "st*r", "car^et", "sp ace"])
@pytest.mark.parametrize("which", LOADERS)
def test_sources_in_a_folder_with_an_odd_name_load(tmp_path, which, folder):
    tree = value_tree(tmp_path / folder)
    code = f"""
module = load("odd_folder", [{str(tree / "value.cpp")!r}], extra_include_paths=[{str(tree / "include")!r}])
result = module.value()
"""
    assert run(which, tmp_path, code) == 3


needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("arch_list", ["Hopper", "9.0", "Ampere;Hopper"])
@pytest.mark.parametrize("which", LOADERS)
def test_cuda_sources_build_for_the_arch_list_named_or_numbered(tmp_path, which, arch_list):
    code = """
import torch
module = load_inline("archs", "torch::Tensor scaled(torch::Tensor x);",
                     cuda_sources="__global__ void k(float* y, const float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 3 * x[i]; }\\n"
                     "torch::Tensor scaled(torch::Tensor x) { auto y = torch::empty_like(x); k<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), x.numel()); return y; }",
                     functions=["scaled"], build_directory=build)
x = torch.rand(1000, device="cuda")
result = bool(torch.equal(module.scaled(x), 3 * x))
"""
    assert run(which, tmp_path, code, TORCH_CUDA_ARCH_LIST=arch_list) is True


@needs_cuda
@pytest.mark.parametrize("which", LOADERS)
def test_with_cuda_builds_cpp_sources_against_cuda(tmp_path, which):
    """with_cuda=True and C++ sources alone (cuDNN or an allocator extension): CUDA's headers on
    the include path and its runtime linked."""
    code = """
module = load_inline("cpp_with_cuda", "#include <cuda_runtime.h>\\nint devices() { int n = 0; cudaGetDeviceCount(&n); return n; }",
                     functions=["devices"], with_cuda=True, build_directory=build)
result = module.devices()
"""
    assert run(which, tmp_path, code) == torch.cuda.device_count()
