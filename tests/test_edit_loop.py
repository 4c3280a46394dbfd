# SPDX-License-Identifier: MIT
"""The edit loop: a rebuild compiles exactly the units whose inputs changed (the object store), a
shared precompiled header, entries keyed by content, a compiler launcher, inputs changed while a
build runs, in-process edits and the line that says why. Real compiler, real processes, the tiny
extension; a compiler wrapper logs every invocation."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import children
import pytest
import torch
from test_loader import TIMEOUT_S, entries, tiny_env

from jitops import _files, _layout
from jitops._layout import INCLUDE_DIR
from jitops.builder import _ninja, _torch_flags
from jitops.store import _key

TINY_SOURCES = Path(__file__).parent / "tiny_ext"
UNITS = ("kernels_cpu_tiny", "kernels_cpu_tiny_second", "bindings_tiny")

# Loads an Extension of the tiny sources (name, root and flags from argv) in a fresh process.
LOAD = """
import ctypes, json, sys
from jitops import Extension
from jitops import _resolution
name, root, cflags, ldflags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
sources = [f"kernels/cpu/{name}.cpp", "kernels/cpu/tiny_second.cpp", f"bindings/{name}.cpp"]
loaded = _resolution.resolve(Extension(name, sources, namespace="jitops_test", root=root, cflags=cflags, ldflags=ldflags))
library = ctypes.CDLL(str(loaded.library))
print(json.dumps({"value": library.jitops_tiny_value(), "units": library.jitops_tiny_units(), "how": loaded.how,
                  "library": str(loaded.library)}))
"""


def logging_compiler(folder: Path, before_compile: str = "", real: str = "c++") -> tuple[str, Path]:
    """A compiler (c++, or real) that logs each invocation but --version (one line: its arguments),
    running before_compile (shell) before each compile. Returns (its path, its log)."""
    log = folder / f"{real}.log"
    wrapper = folder / f"logging-{real}"
    real = shutil.which(real)
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in --version) exec {real} "$@";; esac\necho "$*" >> {log}\n'
        f'case "$*" in *" -c "*) {before_compile or ":"};; esac\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), log


def compiled_units(log: Path, since: int = 0) -> list[str]:
    """The units compiled (each line with -c) from line `since` of the log, by object name."""
    lines = log.read_text().splitlines()[since:] if log.exists() else []
    return sorted(next(w for w in line.split() if w.endswith(".o")).removesuffix(".o") for line in lines if " -c " in line)


def log_lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def load(cache: Path, root: Path, name: str = "tiny", cflags=(), ldflags=(), **env) -> dict:
    proc = children.run(
        [sys.executable, "-c", LOAD, name, str(root), json.dumps(list(cflags)), json.dumps(list(ldflags))],
        env=tiny_env(cache, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of tiny whose second unit also includes a header of its own (only_second.h)."""
    copy = tmp_path / "tiny_src"
    shutil.copytree(TINY_SOURCES, copy)
    (copy / "kernels" / "cpu" / "only_second.h").write_text("#define SECOND_UNITS 2\n")
    second = copy / "kernels" / "cpu" / "tiny_second.cpp"
    second.write_text('#include "only_second.h"\n' + second.read_text().replace("return 2;", "return SECOND_UNITS;"))
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("change", ["source", "header", "shared header", "cflags", "ldflags"])
def test_a_rebuild_compiles_exactly_the_units_whose_inputs_changed(tmp_path, tree, change):
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    first = load(cache, tree, CXX=compiler)
    assert (first["value"], first["units"], first["how"]) == (42, 2, "built")
    assert compiled_units(log) == sorted(UNITS)
    since = log_lines(log)
    cflags, ldflags, value, units = [], [], 42, 2
    if change == "source":
        edit(tree / "kernels" / "cpu" / "tiny.cpp", "return TINY_VALUE;", "return TINY_VALUE + 1;")
        expected, value, why = ["kernels_cpu_tiny"], 43, "tiny.cpp changed"
    elif change == "header":
        edit(tree / "kernels" / "cpu" / "only_second.h", "SECOND_UNITS 2", "SECOND_UNITS 5")
        expected, units, why = ["kernels_cpu_tiny_second"], 5, "only_second.h changed"
    elif change == "shared header":
        edit(tree / "kernels" / "tiny.h", "TINY_VALUE 42", "TINY_VALUE 44")
        expected, value, why = sorted(UNITS), 44, "tiny.h changed"
    elif change == "cflags":
        cflags, expected, why = ["-DUNUSED_FLAG=1"], sorted(UNITS), "flags changed"
    else:
        ldflags, expected, why = ["-Wl,-O1"], [], "link flags changed"
    again = load(cache, tree, cflags=cflags, ldflags=ldflags, CXX=compiler)
    assert (again["value"], again["units"], again["how"]) == (value, units, "built")
    assert compiled_units(log, since) == expected, log.read_text()
    links = [line for line in log.read_text().splitlines()[since:] if " -c " not in line]
    assert len(links) == 1, "every rebuild links once"
    assert f"({why})" in again["stderr"], again["stderr"]
    # Back to the first inputs: every object is in the store, so only the link runs.
    if change in ("source", "header", "shared header"):
        return
    since = log_lines(log)
    back = load(cache, tree, cflags=(), ldflags=(), CXX=compiler)
    assert back["how"] == "cache" and compiled_units(log, since) == []


def stored_record(cache: Path, source: str) -> Path:
    """The record.json of the one stored object compiled from source."""
    (record,) = [
        p for p in (cache / _layout.OBJECTS_DIR).glob("*/*/record.json") if source in json.loads(p.read_text())["source"]
    ]
    return record


def test_a_corrupt_stored_object_is_found_by_its_sha256_and_never_linked(tmp_path, tree):
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    load(cache, tree, CXX=compiler)
    stored = stored_record(cache, "tiny_second.cpp")
    obj = stored.parent / _layout.OBJECT_NAME
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the hash can tell
    obj.write_bytes(bytes(data))
    edit(tree / "kernels" / "cpu" / "tiny.cpp", "return TINY_VALUE;", "return TINY_VALUE + 1;")
    since = log_lines(log)
    again = load(cache, tree, CXX=compiler)
    assert (again["value"], again["units"]) == (43, 2)
    assert "does not match its sha256" in again["stderr"], again["stderr"]
    assert compiled_units(log, since) == ["kernels_cpu_tiny", "kernels_cpu_tiny_second"]
    record = json.loads(stored.read_text())  # removed, compiled again, stored again: sound
    assert _files.sha256_file(obj) == record["object_sha256"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user takes root")
def test_a_stored_object_another_user_owns_is_never_reused(tmp_path, tree):
    """A14: a unit folder of objects/ and its variant, owned by uid 1234 (0755), in an objects/
    folder that is yours: refused, as a foreign-owned entry folder is, and compiled here instead."""
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    load(cache, tree, CXX=compiler)
    record = stored_record(cache, "tiny_second.cpp")
    for path in (record.parent.parent, record.parent):
        os.chown(path, 1234, 1234)
    edit(tree / "kernels" / "cpu" / "tiny.cpp", "return TINY_VALUE;", "return TINY_VALUE + 1;")
    since = log_lines(log)
    again = load(cache, tree, CXX=compiler)
    assert (again["value"], again["units"]) == (43, 2)
    assert f"not reusing the stored object {record.parent}" in again["stderr"] and "uid 1234" in again["stderr"]
    assert compiled_units(log, since) == ["kernels_cpu_tiny", "kernels_cpu_tiny_second"]


@pytest.mark.parametrize("edited", ["source", "header"])
def test_an_input_edited_while_the_build_runs_never_lands_under_the_old_key(tmp_path, tree, edited):
    """The compiler wrapper edits the input on the build's first compile (before the compiler
    reads it): the build is planned again under the new content's key. Edited back, the old
    content's key must load the old code, never the edited build."""
    path = tree / "kernels" / ("cpu/tiny.cpp" if edited == "source" else "tiny.h")
    old, new = ("return TINY_VALUE;", "return TINY_VALUE + 7;") if edited == "source" else ("TINY_VALUE 42", "TINY_VALUE 49")
    marker = tmp_path / "edited"
    script = f"[ -e {marker} ] || {{ touch {marker}; sed -i 's/{old}/{new}/' {path}; }}"
    compiler, log = logging_compiler(tmp_path, before_compile=script)
    cache = tmp_path / "cache"
    during = load(cache, tree, CXX=compiler)
    assert marker.exists() and during["value"] == 49, "the build that returns is the one of the edited input"
    # The first attempt compiled: its status line says it stopped, not that it failed (N47).
    assert "an input changed while it compiled" in during["stderr"] and "FAILED" not in during["stderr"], during["stderr"]
    edit(path, new, old)
    back = load(cache, tree, CXX=compiler)
    assert back["value"] == 42, "the old content's key holds a library built from the edit"


def test_a_killed_store_leaves_nothing_a_later_build_trusts(tmp_path, tree):
    cache = tmp_path / "cache"
    load(cache, tree)
    # What a store killed mid-write leaves: a staging folder of a dead process, with a partial object.
    dead = subprocess.Popen(["sleep", "60"])
    dead.kill()
    dead.wait()
    staging = cache / _layout.OBJECTS_DIR / f".tmp-{dead.pid}-x"
    staging.mkdir()
    (staging / _layout.OBJECT_NAME).write_bytes(b"\x7fELF partial")
    edit(tree / "kernels" / "cpu" / "tiny.cpp", "return TINY_VALUE;", "return TINY_VALUE + 1;")
    assert load(cache, tree)["value"] == 43
    assert not staging.exists()


def test_two_clones_share_one_entry_and_list_shows_both(tmp_path, tree):
    clone = tmp_path / "clone"
    shutil.copytree(tree, clone)
    cache = tmp_path / "cache"
    assert load(cache, tree)["how"] == "built"
    other = load(cache, clone)
    assert other["how"] == "cache" and other["value"] == 42
    assert len(entries(cache)) == 1
    listed = subprocess.run(
        [sys.executable, "-m", "jitops", "list", "--json"], env=tiny_env(cache), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    (row,) = json.loads(listed.stdout)["entries"]
    assert row["seen_in"] == [str(tree), str(clone)]
    assert any(r["kind"] == "object" for r in json.loads(listed.stdout)["store"])


def test_a_compiler_launcher_is_used_and_stays_out_of_the_key(tmp_path, tree):
    launcher, log = logging_compiler(tmp_path)  # a launcher is run with the compiler as its first argument
    Path(launcher).write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec "$@"\n')
    cache = tmp_path / "cache"
    first = load(cache, tree, CMAKE_CXX_COMPILER_LAUNCHER=launcher)
    assert first["how"] == "built" and len(compiled_units(log)) == 3
    assert load(cache, tree)["how"] == "cache", "the launcher is not in the key"


def test_the_build_line_and_the_cli_know_the_store(tmp_path, tree):
    cache = tmp_path / "cache"
    load(cache, tree)
    env = tiny_env(cache)
    verify = subprocess.run([sys.executable, "-m", "jitops", "verify", "--json"], env=env, capture_output=True, text=True)
    results = json.loads(verify.stdout)["entries"]
    assert verify.returncode == 0 and sum(r["name"].startswith("object ") for r in results) == 3
    cleared = subprocess.run(
        [sys.executable, "-m", "jitops", "clear", "--all", "--json"], env=env, capture_output=True, text=True
    )
    assert cleared.returncode == 0, cleared.stderr
    assert not list((cache / _layout.OBJECTS_DIR).glob("*/*")), "clear --all removes the stored objects"


PCH_FIRST_LINE = "#include <c10/macros/Macros.h>\n"  # a torch header: precompiled in a second


def pch_tree(tmp_path: Path, names=("tiny",)) -> Path:
    """tiny (and copies under other names) whose binding starts with a torch header."""
    copy = tmp_path / "pch_src"
    shutil.copytree(TINY_SOURCES, copy)
    for name in names:
        for folder in ("kernels/cpu", "bindings"):
            shutil.copy(TINY_SOURCES / folder / "tiny.cpp", copy / folder / f"{name}.cpp")
        binding = copy / "bindings" / f"{name}.cpp"
        binding.write_text(PCH_FIRST_LINE + binding.read_text())
    return copy


def test_a_precompiled_header_is_built_once_for_eight_processes_and_used(tmp_path):
    names = [f"tiny{i}" for i in range(8)]
    root = pch_tree(tmp_path, names)
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    env = tiny_env(cache, CXX=compiler, JITOPS_PCH="wait")
    procs = [
        children.popen(
            [sys.executable, "-c", LOAD, name, str(root), "[]", "[]"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout.strip().splitlines()[-1])["value"] == 42
    lines = log.read_text().splitlines()
    assert sum("-x c++-header" in line for line in lines) == 1, "one PCH build for all eight"
    assert sum(" -include " in line and "bindings_tiny" in line for line in lines) == 8, "every binding uses it"
    (pch,) = (cache / _layout.PCH_DIR).glob("*/record.json")
    assert "Macros.h" in (pch.parent / _layout.PCH_HEADER_NAME).read_text()


def test_one_precompiled_header_serves_the_defines_torchs_headers_ignore_and_a_corrupt_one_is_never_trusted(tmp_path):
    """An extension's own -D flags are left out of its PCH: a sweep over -DSOME_DEFINE=... shares one,
    each unit compiled with its own define; gcc refuses it where a define changes what the headers
    mean (FBCODE_CAFFE2, which c10's Macros.h tests), and the unit is compiled from the text."""
    root = pch_tree(tmp_path)
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    load(cache, root, cflags=["-DSOME_DEFINE=1"], CXX=compiler, JITOPS_PCH="wait")
    second = load(cache, root, cflags=["-DSOME_DEFINE=2", "-DINIT={0}"], CXX=compiler, JITOPS_PCH="wait")  # braces too
    (folder,) = [p.parent for p in (cache / _layout.PCH_DIR).glob("*/record.json")]
    used = [line for line in log.read_text().splitlines() if " -include " in line]
    assert [line.split(" -include ")[1].split()[0] for line in used] == [str(folder / "pch.h")] * 2
    assert "-DSOME_DEFINE=1" in used[0] and "-DSOME_DEFINE=2" in used[1] and "-DINIT={0}" in used[1]
    assert "1 with a PCH)" in second["stderr"], "not refused: gcc found the PCH valid under the other define"
    refused = load(cache, root, cflags=["-DFBCODE_CAFFE2"], CXX=compiler, JITOPS_PCH="wait")
    assert refused["value"] == 42 and "1 refused by the compiler" in refused["stderr"], refused["stderr"]
    # A corrupt .gch (same size) is found by its sha256, discarded and built again.
    gch = folder / "pch.h.gch"
    data = bytearray(gch.read_bytes())
    data[len(data) // 2] ^= 0xFF
    gch.write_bytes(bytes(data))
    edit(root / "bindings" / "tiny.cpp", "jitops_tiny_units() {", "jitops_tiny_units() { /* edited */")
    again = load(cache, root, cflags=["-DSOME_DEFINE=1"], CXX=compiler, JITOPS_PCH="wait")
    assert again["value"] == 42 and "discarding the corrupt precompiled header" in again["stderr"], again["stderr"]


def test_the_time_a_build_waits_for_its_precompiled_header_is_in_its_status_line(tmp_path):
    # C4: JITOPS_PCH=wait builds the PCH before the units compile; `built ... in N s` counts it.
    root = pch_tree(tmp_path)
    compiler, _ = logging_compiler(tmp_path)
    slow = tmp_path / "slow-pch-c++"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *c++-header*) sleep 3;; esac\nexec {compiler} "$@"\n')
    slow.chmod(0o755)
    built = load(tmp_path / "cache", root, CXX=str(slow), JITOPS_PCH="wait")
    assert "1 with a PCH" in built["stderr"], built["stderr"]
    assert float(re.search(r"built jitops_test\.tiny(?: \(.*?\))? in ([\d.]+)s", built["stderr"]).group(1)) >= 3, built["stderr"]


def test_a_pch_build_killed_midway_leaves_nothing_a_later_build_trusts(tmp_path):
    root = pch_tree(tmp_path)
    started = tmp_path / "pch-started"
    compiler, _ = logging_compiler(tmp_path)
    slow = tmp_path / "slow-header-c++"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *c++-header*) touch {started}; sleep 30;; esac\nexec {compiler} "$@"\n')
    slow.chmod(0o755)
    cache = tmp_path / "cache"
    proc = children.popen(
        [sys.executable, "-c", LOAD, "tiny", str(root), "[]", "[]"],
        env=tiny_env(cache, CXX=str(slow), JITOPS_PCH="wait"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + TIMEOUT_S
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=TIMEOUT_S)
    assert not list((cache / _layout.PCH_DIR).glob("*/record.json")), "no PCH is published by a killed build"
    again = load(cache, root, CXX=compiler, JITOPS_PCH="wait")
    assert again["value"] == 42
    assert len(list((cache / _layout.PCH_DIR).glob("*/record.json"))) == 1
    assert not list((cache / _layout.PCH_DIR).glob(".tmp-*")), "the killed build's staging folder is removed"


def test_an_in_process_edit_loads_the_new_code(tmp_path):
    source = tmp_path / "edited.cpp"
    source.write_text('extern "C" int edited_value() { return 1; }\n')
    code = f"""
import ctypes, jitops, pathlib
path = pathlib.Path({str(source)!r})
first = jitops.load("edited", [str(path)], is_python_module=False)
print(ctypes.CDLL(first).edited_value())
path.write_text(path.read_text().replace("return 1", "return 2"))
second = jitops.load("edited", [str(path)], is_python_module=False)
print(ctypes.CDLL(second).edited_value(), second != first)
"""
    proc = children.run(
        [sys.executable, "-c", code], env=tiny_env(tmp_path / "cache"), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "2", "True"], proc.stdout


# Units for the in-process edit: bind.cpp names the module (as PYBIND11_MODULE(TORCH_EXTENSION_NAME)
# does), via_header.cpp through a header, the others never.
NAMED_UNITS = {
    "bind.cpp": '#define STR2(x) #x\n#define STR(x) STR2(x)\nextern "C" const char* ext_name() { return STR(TORCH_EXTENSION_NAME); }\n',
    "p1.cpp": 'extern "C" int p1() { return 1; }\n',
    "p2.cpp": 'extern "C" int p2() { return 2; }\n',
    "named.h": "#define STR2(x) #x\n#define STR(x) STR2(x)\n#define NAME_OF_MODULE STR(TORCH_EXTENSION_NAME)\n",
    "via_header.cpp": '#include "named.h"\nextern "C" const char* via_header() { return NAME_OF_MODULE; }\n',
}

IN_PROCESS_EDITS = """
import ctypes, json, pathlib, sys, jitops
folder, sources, edits = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
def load():
    library = ctypes.CDLL(jitops.load("inproc", [str(folder / s) for s in sources], is_python_module=False))
    library.ext_name.restype = ctypes.c_char_p
    return library
print(json.dumps([load().ext_name().decode(), load().p1()]), flush=True)
for source, old, new in edits:
    path = folder / source
    path.write_text(path.read_text().replace(old, new))
    library = load()
    print(json.dumps([library.ext_name().decode(), library.p1()]), flush=True)
"""


def in_process_edits(tmp_path: Path, units: dict, script: str, *args: str) -> tuple[list, Path, subprocess.CompletedProcess]:
    """Write the units into tmp_path/src and run script (one process that loads, edits, loads again)
    with a logging compiler: each line it printed (JSON), the compiler's log, the process."""
    folder = tmp_path / "src"
    folder.mkdir()
    for name, text in units.items():
        (folder / name).write_text(text)
    compiler, log = logging_compiler(tmp_path)
    proc = children.run(
        [sys.executable, "-c", script, str(folder), *args],
        env=tiny_env(tmp_path / "cache", CXX=compiler),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], log, proc


@pytest.mark.parametrize(
    "sources, edits, compiled",
    [
        # The notebook's loop: each load after an edit is <name>_v1, _v2: only the edited unit and
        # the one that names the module are compiled again.
        (
            ["bind.cpp", "p1.cpp", "p2.cpp"],
            [["bind.cpp", "extern", "/* edited */ extern"], ["p1.cpp", "return 1", "return 11"]],
            [["bind", "p1", "p2"], ["bind"], ["bind", "p1"]],
        ),
        # A unit whose header names the module is compiled under each name too.
        (
            ["bind.cpp", "p1.cpp", "via_header.cpp"],
            [["p1.cpp", "return 1", "return 11"]],
            [["bind", "p1", "via_header"], ["bind", "p1", "via_header"]],
        ),
    ],
    ids=["edit-the-bindings-then-a-kernel", "a-header-names-the-module"],
)
def test_an_in_process_edit_compiles_only_the_edited_units_and_those_that_name_the_module(tmp_path, sources, edits, compiled):
    loads, log, _ = in_process_edits(tmp_path, NAMED_UNITS, IN_PROCESS_EDITS, json.dumps(sources), json.dumps(edits))
    names = [name for name, _ in loads]  # the library's name: jitops_load_inproc, then _v1, _v2 (each load a new module)
    assert names == [names[0]] + [f"{names[0]}_v{n}" for n in range(1, len(edits) + 1)]
    assert [p1 for _, p1 in loads] == [1] + [
        11 if any(e[0] == "p1.cpp" for e in edits[: n + 1]) else 1 for n in range(len(edits))
    ]
    builds = []  # (the module each compile was for, the unit)
    for line in log.read_text().splitlines():
        if " -c " in line and "-DTORCH_EXTENSION_NAME=" in line:
            name = next(w for w in line.split() if w.startswith("-DTORCH_EXTENSION_NAME=")).split("=", 1)[1]
            unit = next(w for w in line.split() if w.endswith(".o")).removesuffix(".o")
            builds.append((name, unit))
    assert [sorted(unit for n, unit in builds if n == name) for name in names] == compiled


CUDA_LOAD = """
import ctypes, json, sys, jitops
folder, cuda_cflags = sys.argv[1], json.loads(sys.argv[2])
path = jitops.load("mixed", [f"{folder}/host.cpp", f"{folder}/device.cu"], extra_cuda_cflags=cuda_cflags,
                   is_python_module=False, build_directory=f"{folder}/build")
print(ctypes.CDLL(path).cuda_part())
"""


# JITOPS_TEST_NVCC=1 (`make cuda-build`): never skipped, so a missing nvcc fails there.
@pytest.mark.skipif(
    os.environ.get("JITOPS_TEST_NVCC") != "1" and (torch.version.cuda is None or shutil.which("nvcc") is None),
    reason="needs a CUDA build of torch and nvcc",
)
def test_a_cuda_flag_change_recompiles_only_the_cuda_units(tmp_path):
    """extra_cuda_cflags reach nvcc's units alone: the C++ unit's object is reused. Compiles only
    (no GPU needed): `make cuda-build` runs it on CI."""
    folder = tmp_path / "mixed"
    (folder / "build").mkdir(parents=True)
    (folder / "host.cpp").write_text('extern "C" int host_part() { return 1; }\n')
    (folder / "device.cu").write_text(
        "#ifndef SCALE\n#define SCALE 3\n#endif\n__global__ void never_launched(int* y) { *y = SCALE; }\n"
        'extern "C" int cuda_part() { return SCALE; }\n'
    )
    cxx, cxx_log = logging_compiler(tmp_path)
    nvcc, nvcc_log = logging_compiler(tmp_path, real="nvcc")
    env = tiny_env(tmp_path / "cache", CXX=cxx, PYTORCH_NVCC=nvcc, TORCH_CUDA_ARCH_LIST="9.0")

    def run(cuda_cflags: list[str]) -> str:
        command = [sys.executable, "-c", CUDA_LOAD, str(folder), json.dumps(cuda_cflags)]
        proc = children.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()[-1]

    assert run([]) == "3"
    assert (compiled_units(cxx_log), compiled_units(nvcc_log)) == (["host"], ["device.cuda"])
    since_cxx, since_nvcc = log_lines(cxx_log), log_lines(nvcc_log)
    assert run(["-DSCALE=5"]) == "5"
    assert compiled_units(cxx_log, since_cxx) == [], "the C++ unit is reused"
    assert compiled_units(nvcc_log, since_nvcc) == ["device.cuda"]


def test_compile_commands_are_torchs(tmp_path, tree):
    """jitops compiles each unit with the flags torch's load() writes for the same extension."""
    from torch.utils.cpp_extension import load as torch_load

    cache = tmp_path / "cache"
    load(cache, tree)
    build = tmp_path / "torch_build"
    build.mkdir()
    sources = [str(tree / s) for s in ("kernels/cpu/tiny.cpp", "kernels/cpu/tiny_second.cpp")]  # torch: one tiny.o
    torch_load("jitops_test_tiny", sources, build_directory=str(build), is_python_module=False)
    torch_flags = {}
    for line in (build / "build.ninja").read_text().splitlines():
        name, _, value = line.partition(" = ")
        if name in ("cflags", "post_cflags"):
            torch_flags[name] = value.split()
    (record,) = [
        json.loads(p.read_text()) for p in (cache / _layout.OBJECTS_DIR).glob("*/*/record.json") if "bindings" in p.read_text()
    ]
    compiler, flags, post_flags = record["command"]
    assert post_flags.split() == torch_flags["post_cflags"]
    ours = flags.split()
    assert [f for f in ours if f in torch_flags["cflags"]] == torch_flags["cflags"], "torch's flags, in torch's order"
    added = {f for f in ours if f not in torch_flags["cflags"]}
    assert added == {"-fvisibility-inlines-hidden", "-DJITOPS_NAMESPACE=jitops_test", f"-I{INCLUDE_DIR}"}, added


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "cuda"])
def test_flags_are_torchs(tmp_path, monkeypatch, cuda):
    """The flags jitops makes from its own table (jitops/builder/_torch_flags.py) are, word for word,
    those torch's private build-file writer gives the same extension under the torch that runs
    this: defines, include folders, the C++ standard, nvcc's flags, the libraries and their order."""
    from torch.utils import cpp_extension

    cuda_home = _key.find_cuda_home() if cuda else None
    if cuda and (torch.version.cuda is None or cuda_home is None):
        pytest.skip("needs a CUDA build of torch and nvcc")
    if cuda:
        monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(cuda_home))  # torch's, as jitops' plan finds it
    include = tmp_path / "my include"
    include.mkdir()
    cflags, cuda_cflags, ldflags = ["-O2", "-DVALUE=1"], ["-gencode=arch=compute_90,code=sm_90", "-O3"], ["-Wl,--as-needed"]
    written = tmp_path / "build.ninja"
    cpp_extension._write_ninja_file_to_build_library(
        path=str(written),
        name="flags_lib",
        sources=[str(tmp_path / ("unit.cu" if cuda else "unit.cpp"))],
        extra_cflags=cflags,
        extra_cuda_cflags=cuda_cflags,
        extra_sycl_cflags=[],
        extra_ldflags=cpp_extension._prepare_ldflags(list(ldflags), cuda, False, False, False),
        extra_include_paths=[str(include)],
        with_cuda=cuda,
        with_sycl=False,
        is_standalone=False,
    )
    torchs = dict(re.findall(r"^(\w+) = (.*)$", written.read_text(), flags=re.M))
    ours, ours_cuda = _torch_flags.compile_flags("flags_lib", cflags, cuda_cflags, [str(include)], cuda_home)
    assert ours == torchs["cflags"] and torchs.get("post_cflags", "") == ""
    assert ours_cuda == torchs.get("cuda_cflags", "") and torchs.get("cuda_post_cflags", "") == ""
    assert _torch_flags.link_flags(ldflags, cuda_home) == torchs["ldflags"]


def test_a_package_extensions_first_build_starts_no_precompiled_header_and_its_rebuild_does(tmp_path):
    """The policy (_pch.worth_building): a package's extension (here tiny) built for the first time
    gets no PCH; rebuilt (an edit), one is built in the background, said on the status line, and
    the next edit uses it."""
    root = pch_tree(tmp_path)
    compiler, log = logging_compiler(tmp_path)
    cache = tmp_path / "cache"
    first = load(cache, root, CXX=compiler, JITOPS_PCH="1")
    assert first["value"] == 42 and "precompiled header" not in first["stderr"], first["stderr"]
    edit(root / "bindings" / "tiny.cpp", "jitops_tiny_units() {", "jitops_tiny_units() { /* edit 1 */")
    rebuilt = load(cache, root, CXX=compiler, JITOPS_PCH="1")
    assert rebuilt["stderr"].count("building a precompiled header of c10/macros/Macros.h in the background") == 1
    assert " -include " not in log.read_text(), "a build does not wait for a PCH"
    deadline = time.time() + TIMEOUT_S
    while not list((cache / _layout.PCH_DIR).glob("*/record.json")) and time.time() < deadline:
        time.sleep(0.1)
    edit(root / "bindings" / "tiny.cpp", "/* edit 1 */", "/* edit 2 */")
    since = log_lines(log)
    again = load(cache, root, CXX=compiler, JITOPS_PCH="1")
    assert again["value"] == 42 and "1 with a PCH" in again["stderr"], again["stderr"]
    assert [line for line in log.read_text().splitlines()[since:] if " -include " in line]
    assert sum("-x c++-header" in line for line in log.read_text().splitlines()) == 1


def test_no_precompiled_header_for_a_rebuild_an_upgrade_caused_or_one_the_budget_cannot_hold(tmp_path):
    """A new compiler (as a torch upgrade would) rebuilds an extension without a PCH: nobody edited it;
    the edit after it starts one. A budget below one PCH's size starts none, in the background or
    with JITOPS_PCH=wait: none is compiled to be evicted at once."""
    root = pch_tree(tmp_path)
    cache = tmp_path / "cache"
    old_compiler, _ = logging_compiler(tmp_path, real="g++")
    compiler, log = logging_compiler(tmp_path)
    load(cache, root, CXX=old_compiler, JITOPS_PCH="1")
    edit(root / "bindings" / "tiny.cpp", "jitops_tiny_units() {", "jitops_tiny_units() { /* edit 1 */")
    upgraded = load(cache, root, CXX=compiler, JITOPS_PCH="1")
    assert "C++ compiler changed" in upgraded["stderr"] and "precompiled header" not in upgraded["stderr"], upgraded["stderr"]
    for budget, mode in [("1M", "1"), ("1M", "wait")]:
        edit(root / "bindings" / "tiny.cpp", "/* edit 1", f"/* edit 1 {mode}")
        tight = load(cache, root, CXX=compiler, JITOPS_PCH=mode, JITOPS_CACHE_MAX_SIZE=budget)
        assert "precompiled header" not in tight["stderr"] and "with a PCH" not in tight["stderr"], tight["stderr"]
    assert not any("c++-header" in line for line in log.read_text().splitlines())
    edit(root / "bindings" / "tiny.cpp", "/* edit 1", "/* edit 2")
    edited = load(cache, root, CXX=compiler, JITOPS_PCH="1")
    assert "building a precompiled header of c10/macros/Macros.h in the background" in edited["stderr"], edited["stderr"]


def pch_compiles() -> list[str]:
    """The processes compiling a precompiled header now (not python -m jitops.builder._pch, whose argument
    holds the command with @header@)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"c++-header" in words and b"@header@" not in words:
            found.append(cmdline.parent.name)
    return found


def test_a_background_precompiled_header_is_paused_while_a_foreground_build_compiles(tmp_path):
    """jitops.load's first build starts a PCH in the background (a notebook's code: edits and other
    extensions follow); while another build of the root compiles, every process of that PCH's
    compile is stopped (state T), and it finishes after."""
    compiler, log = logging_compiler(tmp_path)
    states = tmp_path / "states"
    # The PCH's compile is slow (5 s); the second extension's compile looks at it first (its
    # processes: not python -m jitops.builder._pch, whose argument holds the command with @header@).
    wrapper = tmp_path / "pausing-c++"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *c++-header*) sleep 5;; *" -c "*second.cpp*) sleep 1; '
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null | grep -q 'c[+][+]-header [^@]' "
        f"&& cut -d' ' -f3 ${{f%/cmdline}}/stat; done >> {states};; esac\n"
        f'exec {compiler} "$@"\n'
    )
    wrapper.chmod(0o755)
    code = """
import ctypes, sys, jitops
path = sys.argv[1]
open(path, "w").write('#include <c10/macros/Macros.h>\\nextern "C" int value() { return %d; }\\n' % len(path))
print(ctypes.CDLL(jitops.load(sys.argv[2], [path], is_python_module=False)).value())
"""
    env = tiny_env(tmp_path / "cache", CXX=str(wrapper), JITOPS_PCH="1")

    def load_one(name: str, cpus: list[str] = ()) -> subprocess.CompletedProcess:
        return children.run(
            [*cpus, sys.executable, "-c", code, str(tmp_path / f"{name}.cpp"), name],
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )

    first = load_one("first")
    assert first.returncode == 0 and "building a precompiled header" in first.stderr, first.stderr
    deadline = time.time() + 30
    while not pch_compiles() and time.time() < deadline:
        time.sleep(0.05)
    # On one CPU (its affinity), the build leaves none idle: the PCH pauses for it.
    second = load_one("second", ["taskset", "-c", "0"])
    assert second.returncode == 0, second.stderr
    seen = states.read_text().split()
    assert seen and set(seen) == {"T"}, f"the PCH's processes during the foreground compile: {seen}"
    deadline = time.time() + TIMEOUT_S
    while not list((tmp_path / "cache" / _layout.PCH_DIR).glob("*/record.json")) and time.time() < deadline:
        time.sleep(0.1)
    assert list((tmp_path / "cache" / _layout.PCH_DIR).glob("*/record.json")), "it finished after the foreground build"


def test_extensions_with_build_directories_of_their_own_share_the_cache_roots_pch(tmp_path):
    compiler, log = logging_compiler(tmp_path)
    code = """
import ctypes, jitops, sys
for i, folder in enumerate(sys.argv[1:]):
    path = f"{folder}/unit.cpp"
    open(path, "w").write('#include <c10/macros/Macros.h>\\nextern "C" int unit_value() { return %d; }\\n' % i)
    print(ctypes.CDLL(jitops.load(f"unit{i}", [path], is_python_module=False, build_directory=folder)).unit_value())
"""
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        folder.mkdir()
    env = tiny_env(tmp_path / "cache", CXX=compiler, JITOPS_PCH="wait")
    proc = children.run(
        [sys.executable, "-c", code, *map(str, folders)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["0", "1"], proc.stderr
    lines = log.read_text().splitlines()
    assert sum("-x c++-header" in line for line in lines) == 1 and sum(" -include " in line for line in lines) == 2
    assert len(list((tmp_path / "cache" / _layout.PCH_DIR).glob("*/record.json"))) == 1


def test_a_depfile_names_each_header_by_its_resolved_path_as_realpath_does(tmp_path):
    # The headers a unit read are resolved folder by folder (thousands of torch headers share a few
    # hundred folders): the same paths as os.path.realpath of each, links and escapes included.
    real = tmp_path / "real include"
    (real / "sub").mkdir(parents=True)
    for name in ("a.h", "sub/b.h", "target.h"):
        (real / name).write_text("")
    (tmp_path / "linked").symlink_to(real)  # a linked folder
    (real / "alias.h").symlink_to(real / "sub" / "b.h")  # a linked header
    build = tmp_path / "build"
    build.mkdir()
    listed = [
        "../real\\ include/a.h",
        str(tmp_path / "linked" / "sub" / "b.h"),
        str(tmp_path / "linked") + "//alias.h",
        "../linked/../real\\ include/target.h",
        "/no/such/folder/c.h",
    ]
    (tmp_path / "real_include").symlink_to(real)
    for escapes in ("none", "a space", "a dollar"):  # the first read as plain words, the others unescaped
        words = listed if escapes == "a space" else [w.replace("\\ ", "_") for w in listed]
        words += ["$$x.h"] if escapes == "a dollar" else []
        (build / "unit.o.d").write_text("unit.o: \\\n  " + " \\\n  ".join(words) + "\n")
        found = _ninja.deps(build, ["unit.o"])["unit.o"]
        plain = [w.replace("\\ ", " ").replace("$$", "$") for w in words]
        assert found == [os.path.realpath(os.path.join(build, w)) for w in plain], escapes
        assert found[2] == str(real / "sub" / "b.h")


# A pybind11 module (a tiny one: pybind11 without torch's headers) whose kernels the notebook edits.
MODULE_UNITS = {
    "bind.cpp": "#include <pybind11/pybind11.h>\nint k1();\nint k2();\n"
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("k1", &k1); m.def("k2", &k2); }\n',
    "k1.cpp": "int k1() { return 1; }\n",
    "k2.cpp": "int k2() { return 2; }\n",
}

MODULE_EDITS = """
import json, pathlib, sys, jitops
folder, edits = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
def load():
    module = jitops.load("nb", [str(folder / s) for s in ("bind.cpp", "k1.cpp", "k2.cpp")])
    return [module.__name__, pathlib.Path(module.__file__).name, module.k1(), module.k2()]
print(json.dumps(load()), flush=True)
for source, old, new in edits:
    path = folder / source
    path.write_text(path.read_text().replace(old, new))
    print(json.dumps(load()), flush=True)
"""


def test_a_kernel_edit_in_process_compiles_the_kernel_alone_whatever_came_before(tmp_path):
    # The binding (PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) its one use of the name) is compiled as the
    # module nb once and linked as nb_v1, nb_v2: the module and file keep torch's names.
    edits = [["k1.cpp", "return 1", "return 11"], ["bind.cpp", "int k2();", "int k2(); // edited"], ["k1.cpp", "11", "111"]]
    loads, log, proc = in_process_edits(tmp_path, MODULE_UNITS, MODULE_EDITS, json.dumps(edits))
    assert loads == [
        ["nb", "nb.so", 1, 2],
        ["nb_v1", "nb_v1.so", 11, 2],
        ["nb_v2", "nb_v2.so", 11, 2],
        ["nb_v3", "nb_v3.so", 111, 2],
    ]
    compiles = [line for line in log.read_text().splitlines() if " -c " in line]
    units = [next(w for w in line.split() if w.endswith(".o")).removesuffix(".o") for line in compiles]
    assert units[3:] == ["k1", "bind", "k1"], units  # after the first build's three: the edited unit alone
    assert all("-DTORCH_EXTENSION_NAME=nb " in line + " " for line in compiles if "bind" in line)
    status = [line for line in proc.stderr.splitlines() if line.startswith("jitops: built nb_v")]
    assert ["k1.cpp changed" in status[0], "bind.cpp changed" in status[1], "k1.cpp changed" in status[2]] == [True] * 3, status
    assert "bind.cpp" not in status[2], status
