# SPDX-License-Identifier: MIT
"""jitops.load and jitops.load_inline as drop-ins for torch.utils.cpp_extension's: the same
parameters, the same results, real builds in new processes, warm loads without a spawn or a lock,
and clear errors for what jitops does not do."""

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import children
import pytest
import torch
from test_loader import TINY_SOURCES, finish, slow_compiler, tiny_env
from torch.utils import cpp_extension

import jitops

REPO = Path(__file__).resolve().parent.parent
TUTORIAL = REPO / "examples" / "baseline_add2"
TIMEOUT_S = 600

# Counts what a warm load must not do (as examples/load_time.py does).
PRELUDE = """
import fcntl, json, os, sys, torch
SPAWNED, LOCKS = [], []
def count(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.fork"):
        SPAWNED.append(event)
    elif event == "fcntl.flock" and args[1] & fcntl.LOCK_EX and os.readlink(f"/proc/self/fd/{args[0]}").endswith(".lock"):
        LOCKS.append(1)  # a build's lock file, taken directly or by filelock
sys.addaudithook(count)
import jitops
"""

# torch's tutorial add2 (torch/extension.h, PYBIND11_MODULE), called with exactly the arguments
# torch's load() takes, positionally, building into a build_directory as StyleGAN's get_plugin does.
TUTORIAL_CHILD = (
    PRELUDE
    + """
module = jitops.load("tutorial_add2", [sys.argv[1] + "/add2.cpp", sys.argv[1] + "/add2_cpu.cpp"], ["-O2"], None, None,
                     None, None, sys.argv[2], False, False)
x, y, out = torch.rand(1000), torch.rand(1000), torch.empty(1000)
module.add2(out, x, y)
ok = bool(torch.equal(out, x + y))
warm_path = ("jitops", "jitops.warm", "jitops.compat", "jitops._files", "jitops._layout", "jitops._settings", "jitops.extension", "jitops.compat._torch_load", "jitops.compat._module_names", "jitops._torch_private")
loader = sorted(m for m in sys.modules if m.startswith("jitops") and m not in warm_path)
print(json.dumps({"ok": ok, "name": module.__name__, "spawned": len(SPAWNED), "locks": len(LOCKS), "loader": loader}))
"""
)

INLINE_CHILD = (
    PRELUDE
    + """
module = jitops.load_inline("twice", "torch::Tensor twice(torch::Tensor x) { return x * 2; }", functions=["twice"])
path = jitops.load_inline("thrice", '#include <ATen/ATen.h>\\n#include <torch/library.h>\\n'
                          'TORCH_LIBRARY(jitops_test_inline, m) { m.def("thrice(Tensor x) -> Tensor", '
                          '[](const at::Tensor& x) { return x * 3; }); }', is_python_module=False, no_implicit_headers=True)
free = jitops.load_inline("gil_free", "#include <pybind11/pybind11.h>\\nint f() { return 4; }", functions=["f"],
                         no_implicit_headers=True, with_pytorch_error_handling=False, gil_not_used=True)
x = torch.rand(100)
print(json.dumps({"twice": bool(torch.equal(module.twice(x), x * 2)), "path": path, "gil_free": free.f(),
                  "thrice": bool(torch.equal(torch.ops.jitops_test_inline.thrice(x), x * 3)),
                  "spawned": len(SPAWNED), "locks": len(LOCKS)}))
"""
)


def run_child(code: str, cache: Path, *args: str) -> dict:
    env = {**os.environ, "JITOPS_CACHE_DIR": str(cache)}
    env.pop("JITOPS_VERBOSE", None)
    proc = children.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Parameters a newer supported torch added at the end (jitops takes the newest torch's), by release.
ADDED_LATER = {"gil_not_used": (2, 15)}


@pytest.mark.parametrize(
    "ours, torchs",
    [(jitops.load, cpp_extension.load), (jitops.load_inline, cpp_extension.load_inline)],
    ids=["load", "load_inline"],
)
def test_parameters_are_torchs_in_order_with_its_defaults(ours, torchs):
    """torch's parameters, in order, with its defaults; under an older torch, jitops' extra ones are
    those the newest supported torch added after them."""
    mine = [(p.name, p.default, p.kind) for p in inspect.signature(ours).parameters.values()]
    theirs = [(p.name, p.default, p.kind) for p in inspect.signature(torchs).parameters.values()]
    assert mine[: len(theirs)] == theirs
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert all(ADDED_LATER.get(name, (0, 0)) > release for name, _, _ in mine[len(theirs) :]), mine[len(theirs) :]


@pytest.mark.slow
def test_tutorial_add2_builds_once_into_its_build_directory_then_loads_warm(tmp_path):
    plugin = tmp_path / "plugin-0123abcd"  # get_plugin's folder: the sources copied in, built there
    shutil.copytree(TUTORIAL, plugin)
    cold = run_child(TUTORIAL_CHILD, tmp_path / "cache", str(plugin), str(plugin))
    assert cold["ok"] and cold["name"] == "tutorial_add2" and cold["spawned"] > 0
    warm = run_child(TUTORIAL_CHILD, tmp_path / "cache", str(plugin), str(plugin))
    assert warm["ok"] and (warm["spawned"], warm["locks"]) == (0, 0), "a warm load spawns nothing and takes no lock"
    assert warm["loader"] == [], "a warm load imports only the warm path (no loader module, no op)"
    assert len([p for p in (plugin / "jitops").glob("jitops_load.tutorial_add2-*") if p.is_dir()]) == 1, (
        "one entry, in build_directory/jitops"
    )
    assert not list((tmp_path / "cache").glob("jitops_load.*")), "nothing in the cache root"
    assert list((plugin / "jitops").glob("warm-jitops_load.tutorial_add2-*.json")), "its warm record beside its entries"


@pytest.mark.slow
def test_load_inline_gives_a_module_or_the_library_path(tmp_path):
    cold = run_child(INLINE_CHILD, tmp_path / "cache")
    assert cold["twice"] and cold["thrice"] and cold["gil_free"] == 4  # gil_not_used=True (torch 2.15's)
    (main,) = (tmp_path / "cache").glob("inline/gil_free-*/main.cpp")
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m, pybind11::mod_gil_not_used())" in main.read_text()
    assert Path(cold["path"]).is_file() and Path(cold["path"]).is_relative_to(tmp_path / "cache")
    warm = run_child(INLINE_CHILD, tmp_path / "cache")
    assert warm["twice"] and warm["thrice"] and warm["path"] == cold["path"]
    assert (warm["spawned"], warm["locks"]) == (0, 0)


# A notebook cell run, edited, run again: as torch's load() does, the new code loads beside the old
# as <name>_v1 (plain C functions: a build takes a second).
EDITED_CHILD = (
    PRELUDE
    + """
import ctypes
def value(code):
    path = jitops.load_inline("plain", 'extern "C" int value() { return %d; }' % code, is_python_module=False,
                              no_implicit_headers=True)
    return path, ctypes.CDLL(path).value()
print(json.dumps([value(1), value(2), value(1), value(2)]))
"""
)


def test_a_name_loaded_again_from_other_sources_gets_the_next_version_as_in_torch(tmp_path):
    results = run_child(EDITED_CHILD, tmp_path / "cache")
    assert [value for _, value in results] == [1, 2, 1, 2]
    (first, _), (second, _), (first_again, _), (second_again, _) = results
    assert (first_again, second_again) == (first, second) and first != second
    assert Path(first).name == "jitops_load_plain.so" and Path(second).name == "jitops_load_plain_v1.so"


# tiny_ext (plain C functions, built in a second) through jitops.load into a build_directory, as a
# third-party wrapper calls it: the crowd and kill -9 cases of test_reliability/test_loader on this path.
TINY_DROP_IN_CHILD = (
    PRELUDE
    + """
import ctypes
tiny = sys.argv[1]
path = jitops.load("tiny", [tiny + "/kernels/cpu/tiny.cpp", tiny + "/kernels/cpu/tiny_second.cpp", tiny + "/bindings/tiny.cpp"],
                   build_directory=sys.argv[2], is_python_module=False)
print(json.dumps({"value": ctypes.CDLL(path).jitops_tiny_value(), "path": path}))
"""
)


def start_tiny_drop_in(plugin: Path, **extra_env: str) -> children.Process:
    return children.popen(
        [sys.executable, "-c", TINY_DROP_IN_CHILD, str(TINY_SOURCES), str(plugin)],
        env=tiny_env(plugin.parent / "cache", **extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def drop_in_entries(plugin: Path) -> list[Path]:
    return sorted(p for p in (plugin / "jitops").glob("jitops_load.tiny-*") if p.is_dir())


def test_a_crowd_of_eight_drop_in_loads_builds_once(tmp_path):
    plugin = tmp_path / "plugin"
    results = [finish(p) for p in [start_tiny_drop_in(plugin) for _ in range(8)]]
    assert all(r["value"] == 42 for r in results)
    assert sum(r["stderr"].count("jitops: built tiny in ") for r in results) == 1, [r["stderr"] for r in results]
    assert len({r["path"] for r in results}) == 1 and len(drop_in_entries(plugin)) == 1


def test_a_drop_in_build_killed_mid_compile_does_not_block_the_next(tmp_path):
    plugin = tmp_path / "plugin"
    victim = start_tiny_drop_in(plugin, CXX=slow_compiler(tmp_path, 5))
    deadline = time.monotonic() + TIMEOUT_S
    while not list((plugin / "jitops").glob(".tmp-jitops_load.tiny-*/build/build.ninja")):  # ninja is compiling
        assert victim.poll() is None and time.monotonic() < deadline, "the build finished or failed too early"
        time.sleep(0.05)
    time.sleep(1.0)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=TIMEOUT_S)
    assert drop_in_entries(plugin) == [], "a killed build publishes nothing"
    started = time.monotonic()
    result = finish(start_tiny_drop_in(plugin))
    assert result["value"] == 42 and "jitops: built tiny in " in result["stderr"]
    assert time.monotonic() - started < 60, "the next load waited on the killed build's lock"
    assert len(drop_in_entries(plugin)) == 1


@pytest.mark.parametrize(
    "arguments, named",
    [
        ({"is_standalone": True}, "is_standalone"),
        ({"with_sycl": True}, "with_sycl"),
        ({"extra_sycl_cflags": ["-O2"]}, "extra_sycl_cflags"),
        ({"extra_cflags": "-O2"}, "extra_cflags"),
        ({"extra_cflags": ["-O2", 3]}, "extra_cflags"),
        ({"name": "x" * 189}, "at most 188"),
    ],
)
def test_what_jitops_does_not_do_is_refused_naming_the_argument(tmp_path, monkeypatch, arguments, named):
    monkeypatch.setenv("JITOPS_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises((ValueError, TypeError), match=named):
        jitops.load(**{"name": "refused", "sources": [str(TUTORIAL / "add2.cpp")], **arguments})
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("jitops_load.*")), "nothing built"


def test_load_inline_refuses_sycl_and_a_name_that_is_no_identifier(tmp_path, monkeypatch):
    monkeypatch.setenv("JITOPS_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="sycl_sources"):
        jitops.load_inline("x", "", sycl_sources=["int x;"])
    with pytest.raises(ValueError, match="name must be a C identifier"):
        jitops.load_inline("../escape", "int x;")
    assert not (tmp_path / "cache").exists(), "nothing written"


CUDA_INLINE_CHILD = (
    PRELUDE
    + """
cuda = '''
__global__ void sin_add_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = sinf(a[i]) + b[i];
}
torch::Tensor sin_add(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  int64_t n = a.numel();
  sin_add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}'''
module = jitops.load_inline("sin_add", "torch::Tensor sin_add(torch::Tensor a, torch::Tensor b);", cuda_sources=cuda,
                            functions=["sin_add"], with_cuda=True)
a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
print(json.dumps({"ok": bool(torch.allclose(module.sin_add(a, b), torch.sin(a) + b, atol=1e-5)),
                  "spawned": len(SPAWNED), "locks": len(LOCKS)}))
"""
)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_load_inline_with_cuda_sources_builds_and_runs_on_the_gpu(tmp_path):
    cold = run_child(CUDA_INLINE_CHILD, tmp_path / "cache")
    assert cold["ok"] and cold["spawned"] > 0
    warm = run_child(CUDA_INLINE_CHILD, tmp_path / "cache")
    assert warm["ok"] and (warm["spawned"], warm["locks"]) == (0, 0)


INLINE_VALUE = """
import json, jitops
module = jitops.load_inline("inline_value", "#include <pybind11/pybind11.h>\\nint f() { return 3; }", functions=["f"],
                            no_implicit_headers=True, with_pytorch_error_handling=False)
print(json.dumps(module.f()))
"""


@pytest.mark.parametrize("damage", ["deleted", "truncated", "folder replaced by a file"])
@pytest.mark.slow
def test_load_inline_sources_damaged_on_disk_are_written_again(tmp_path, damage):
    cache = tmp_path / "cache"
    env = tiny_env(cache)

    def value() -> int:
        proc = children.run([sys.executable, "-c", INLINE_VALUE], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert value() == 3
    (folder,) = (cache / "inline").glob("inline_value-*")
    written = (folder / "main.cpp").read_bytes()
    if damage == "deleted":
        (folder / "main.cpp").unlink()
    elif damage == "truncated":  # what a crash before the data reached the disk can leave
        (folder / "main.cpp").write_bytes(b"")
    else:
        shutil.rmtree(folder)
        folder.write_text("not a folder")
    damaged = sorted((p.name, p.is_dir()) for p in folder.parent.iterdir())
    assert value() == 3
    # Never rewritten in place (a build may be reading it): a fresh copy beside it.
    (copy,) = [p for p in (cache / "inline").glob("inline_value-*") if p != folder]
    assert copy.name == folder.name + "-1" and (copy / "main.cpp").read_bytes() == written
    assert sorted((p.name, p.is_dir()) for p in folder.parent.iterdir() if p != copy) == damaged
    assert value() == 3 and len(list((cache / "inline").glob("inline_value-*"))) == 2, "the copy is used from now on"


def test_load_inline_that_cannot_write_its_sources_says_so_and_leaves_nothing(tmp_path):
    """A write that fails (here: a file size limit, as a full disk fails it) is a BuildError naming
    the folder, with no half-written folder left behind."""
    code = """
import resource, signal, jitops
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    jitops.load_inline("too_big", "int f() { return 3; }" + " " * 50000, functions=["f"])
except jitops.BuildError as err:
    print(err)
"""
    cache = tmp_path / "cache"
    proc = children.run([sys.executable, "-c", code], env=tiny_env(cache), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert "cannot write load_inline's sources of too_big" in proc.stdout, proc.stdout + proc.stderr
    assert [p.name for p in (cache / "inline").iterdir()] == [], "no staging folder left"


PLAIN_LOAD = """
import ctypes, json, os, sys, jitops
path = jitops.load(sys.argv[1], [sys.argv[2]], is_python_module=False, build_directory=sys.argv[3] or None)
print(json.dumps([ctypes.CDLL(path).plain_value(), path]))
"""


def plain_source(tmp_path: Path) -> Path:
    source = tmp_path / "plain.cpp"
    source.write_text('extern "C" int plain_value() { return 5; }\n')
    return source


def plain_load(
    tmp_path: Path, name: str, build: str = "", code: str = PLAIN_LOAD, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess:
    """code (PLAIN_LOAD, or a variant) on plain.cpp in a new process, its cache in tmp_path (env:
    variables to set)."""
    return children.run(
        [sys.executable, "-c", code, name, str(plain_source(tmp_path)), build],
        env=tiny_env(tmp_path / "cache", **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
    )


def test_the_longest_name_builds_and_its_entry_can_be_discarded_and_cleared(tmp_path):
    name, cache = "n" * 188, tmp_path / "cache"

    def load() -> list:
        proc = plain_load(tmp_path, name)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    value, library = load()
    with open(library, "r+b") as file:  # corrupted: the next load discards the entry and builds again
        file.seek(100)
        file.write(b"X")
    assert load()[0] == value == 5
    cleared = children.run(
        [sys.executable, "-m", "jitops.cache_tools", "clear", "--all", "--yes"],
        env=tiny_env(cache),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert cleared.returncode == 0, cleared.stderr
    assert not [p for p in cache.iterdir() if p.name.startswith("jitops_load.n") and p.is_dir()]


def test_a_compiler_whose_version_probe_hangs_is_a_build_error_naming_cxx_and_is_stopped(tmp_path):
    pid_file = tmp_path / "probe.pid"
    hanging = tmp_path / "hanging-c++"
    hanging.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nwait\n")
    hanging.chmod(0o755)
    started = time.monotonic()
    proc = plain_load(tmp_path, "hangs", CXX=str(hanging), JITOPS_BUILD_TIMEOUT="3")
    assert proc.returncode != 0 and time.monotonic() - started < 60
    assert "BuildError" in proc.stderr and "--version" in proc.stderr and "CXX" in proc.stderr, proc.stderr
    assert "TimeoutExpired" not in proc.stderr, proc.stderr
    pid = int(pid_file.read_text())
    for _ in range(50):  # the probe's own child, ended with it
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the probe's child {pid} still runs")


def test_a_huge_build_timeout_is_taken_as_a_year_without_a_thread_traceback(tmp_path):
    proc = plain_load(tmp_path, "patient", JITOPS_BUILD_TIMEOUT="1e12")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "OverflowError" not in proc.stderr, proc.stderr


def test_a_build_directory_keeps_the_records_and_an_unusable_cache_dir_is_not_mentioned(tmp_path):
    (tmp_path / "not_a_folder").write_text("")
    build = tmp_path / "build"
    build.mkdir()
    proc = plain_load(tmp_path, "own_folder", str(build), JITOPS_CACHE_DIR=str(tmp_path / "not_a_folder"))
    assert proc.returncode == 0, proc.stderr
    assert "JITOPS_CACHE_DIR" not in proc.stderr and "fallback" not in proc.stderr, proc.stderr
    assert (build / "jitops" / "file-hashes.json").exists() and (build / "jitops" / "toolchain.json").exists()
    assert (build / "own_folder.so").resolve() == Path(json.loads(proc.stdout.strip().splitlines()[-1])[1]).resolve()


def test_the_cli_lists_entries_built_into_a_build_directory_and_names_it_for_other_commands(tmp_path):
    """N37: `jitops-cache list m7` finds m7 built with build_directory=; clear m7 says where it is."""
    build = tmp_path / "build"
    build.mkdir()
    assert plain_load(tmp_path, "m7", str(build)).returncode == 0

    def cli(*args: str) -> subprocess.CompletedProcess:
        return children.run(
            [sys.executable, "-m", "jitops.cache_tools", *args], env=tiny_env(tmp_path / "cache"), capture_output=True, text=True
        )

    listed = cli("--json", "list", "m7")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (row,) = json.loads(listed.stdout)["entries"]
    assert row["name"] == "m7" and Path(row["path"]).parent == build / "jitops"
    cleared = cli("clear", "m7")
    assert cleared.returncode == 2 and f"m7's entries are in {build / 'jitops'}" in cleared.stderr, cleared.stderr
    assert Path(row["path"]).is_dir(), "nothing removed"


def test_a_build_error_traceback_shows_the_public_name_and_the_callers_line_not_the_loaders_frames(tmp_path):
    source = tmp_path / "broken.cpp"
    source.write_text("int broken( { }\n")
    code = f"import jitops\njitops.load('broken', [{str(source)!r}], is_python_module=False)\n"
    proc = children.run([sys.executable, "-c", code], env=tiny_env(tmp_path / "cache"), capture_output=True, text=True)
    assert proc.returncode == 1 and "\njitops.BuildError: jitops: building jitops_load.broken" in proc.stderr, proc.stderr
    frames = [line for line in proc.stderr.splitlines() if line.startswith('  File "')]
    own = [line for line in frames if f"{os.sep}jitops{os.sep}" in line]
    assert len(own) == 1 and own[0].endswith("in load") and '"<string>", line 2' in frames[-2], frames


def test_advice_names_the_setting_that_moves_the_folder(tmp_path, monkeypatch):
    from jitops.store import _lock

    monkeypatch.setenv("JITOPS_CACHE_DIR", str(tmp_path / "configured"))
    assert _lock.setting_for(tmp_path / "configured" / "x.lock") == "JITOPS_CACHE_DIR"
    assert _lock.setting_for(tmp_path / "build" / "jitops") == "build_directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder: needs another user")
def test_a_read_only_build_directory_holding_the_entry_loads_it(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    first = plain_load(tmp_path, "read_only", str(build))
    assert first.returncode == 0, first.stderr
    for folder in (build / "jitops", build):
        folder.chmod(0o500)
    try:
        again = plain_load(tmp_path, "read_only", str(build))
    finally:
        for folder in (build, build / "jitops"):
            folder.chmod(0o700)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])[0] == 5


def test_a_build_leaves_no_file_unclosed(tmp_path):
    code = "import warnings; warnings.simplefilter('default')\n" + PLAIN_LOAD + "import gc; gc.collect()\n"
    proc = plain_load(tmp_path, "closed", code=code)
    assert proc.returncode == 0 and "ResourceWarning" not in proc.stderr, proc.stderr


def test_a_source_listed_twice_is_built_once(tmp_path):
    code = PLAIN_LOAD.replace("[sys.argv[2]]", "[sys.argv[2], sys.argv[2], os.path.relpath(sys.argv[2])]")
    proc = plain_load(tmp_path, "twice_listed", code=code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])[0] == 5


def test_a_compile_error_prints_one_traceback_with_the_users_line_and_caret_and_no_prebuilt_paragraph(tmp_path):
    source = tmp_path / "typo.cpp"
    source.write_text('constexpr int kScale = 2;\nextern "C" int scaled(int x) {\n  return x * kScal;\n}\n')
    code = f"import jitops\njitops.load('typo', [{str(source)!r}], is_python_module=False)\n"
    proc = children.run(
        [sys.executable, "-c", code], env=tiny_env(tmp_path / "cache"), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert err.count("Traceback") == 1 and "During handling" not in err and "The above exception" not in err, err
    assert f"{source}:3:" in err and "kScal" in err, "the user's file and line, not a staging copy"
    assert "  return x * kScal;" in err and "^" in err.split("kScal;", 1)[1].splitlines()[1], "the source line, then the caret"
    assert "prebuilt" not in err.lower(), "no prebuilt could stand in for a jitops.load build"
    assert err.count("was not declared") == 1, "the message once"
    assert len(err.splitlines()) < 30, err


def test_a_cuda_source_left_out_names_itself_and_the_demangled_symbol_it_defines(tmp_path):
    (tmp_path / "main.cpp").write_text(
        'int twice_launch(int x, long n);\nextern "C" int entry(int x) { return twice_launch(x, 1); }\n'
    )
    (tmp_path / "twice_kernel.cu").write_text("int twice_launch(int x, long n) { return 2 * x * n; }\n")
    import torch

    with_cuda = None if torch.version.cuda is None else False  # a CPU-only torch leaves it out by itself
    code = (
        "import jitops\n"
        f"jitops.load('twice_ext', [{str(tmp_path / 'main.cpp')!r}, {str(tmp_path / 'twice_kernel.cu')!r}], "
        f"is_python_module=False, with_cuda={with_cuda})\n"
    )
    proc = children.run(
        [sys.executable, "-c", code], env=tiny_env(tmp_path / "cache"), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 1, proc.stderr
    assert "undefined symbol twice_launch(int, long)" in proc.stderr, proc.stderr
    assert "twice_kernel.cu may define it, and was left out of this build" in proc.stderr, proc.stderr
    assert "twice_kernel.cu left out) ..." in proc.stderr, "the status line says so before the build"
    assert "jitops: built " not in proc.stderr and "FAILED to build" in proc.stderr, (
        "never 'built' for a library that does not load"
    )
    assert not list((tmp_path / "cache").glob("jitops_load.twice_ext-*/")), "no entry"
