# SPDX-License-Identifier: MIT
"""The loader with real processes and the real toolchain, on a tiny test extension (tiny_ext/)."""

import contextlib
import io
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
from tiny_extension import tiny_extension

import jitops._files
import jitops.ops._framework
import jitops.warm
from jitops import _layout, _resolution
from jitops.builder import _buildfile
from jitops.store import _key, _root

TINY_SOURCES = Path(__file__).parent / "tiny_ext"
TIMEOUT_S = 300  # a hang fails the test instead of stalling CI

# Loads the tiny extension in a fresh process and reports how, as JSON on stdout's last line.
LOAD_TINY = (
    f"TESTS = {str(Path(__file__).parent)!r}\n"
    + """
import ctypes, json, sys, time
import os
import fcntl
def count_spawn_and_locks(event, args):
    if event.startswith(("subprocess.", "os.posix_spawn", "os.fork", "os.exec", "os.system")):
        # subprocess.Popen's first argument is the program: "subprocess.Popen ninja".
        SPAWNED.append(f"{event} {os.path.basename(str(args[0]))}" if event == "subprocess.Popen" else event)
    elif event == "fcntl.flock" and args[1] & fcntl.LOCK_EX:  # a build's lock, taken directly or by filelock
        path = os.readlink(f"/proc/self/fd/{args[0]}")
        if path.endswith(".lock"):
            LOCKS.append(path)
sys.addaudithook(count_spawn_and_locks)
SPAWNED, LOCKS = [], []
from jitops import _resolution
sys.path.insert(0, TESTS)
from tiny_extension import tiny_extension
started = time.perf_counter()
loaded = _resolution.resolve(tiny_extension(sys.argv[1]))
seconds = time.perf_counter() - started
library = ctypes.CDLL(str(loaded.library))
print(json.dumps({"value": library.jitops_tiny_value(), "units": library.jitops_tiny_units(), "how": loaded.how,
                  "library": str(loaded.library),
                  "seconds": seconds, "spawned": SPAWNED, "locks": LOCKS, "build_code": sorted(m for m in sys.modules if m.split(".")[:2] == ["jitops", "builder"])}))
"""
)


def slow_compiler(directory: Path, seconds: float) -> str:
    """A C++ compiler that waits before each compile: tiny builds in well under a second, too fast
    to be caught mid-compile otherwise. It answers --version (the loader's probe for the key) at
    once, so that only the build is slow."""
    wrapper = directory / f"slow-c++-{seconds:g}"
    compiler = shutil.which("c++")
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *--version*) exec {compiler} "$@";; esac\nsleep {seconds:g}\nexec {compiler} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def tiny_env(cache: Path, **extra: str) -> dict:
    env = {**os.environ, "JITOPS_CACHE_DIR": str(cache), "TORCH_EXTENSIONS_DIR": str(cache.parent / "torch_ext")}
    # A temp dir of the test's own (beside the cache, or as the caller passes it): a refused cache
    # root falls back to a per-user directory there.
    if "TMPDIR" not in extra:
        tmp = cache.parent / "tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(tmp)
        except OSError:
            pass  # a cache under /proc, say: the caller passes TMPDIR
    env.pop("JITOPS_VERBOSE", None)
    env.update(extra)
    return env


def start_tiny(
    cache: Path, sources: Path = TINY_SOURCES, prelude: str = "", umask: int = -1, python: str = sys.executable, **extra_env: str
) -> children.Process:
    """A new process loading tiny; prelude: code it runs first (to reach into the loader)."""
    return children.popen(
        [python, "-c", prelude + LOAD_TINY, str(sources)],
        env=tiny_env(cache, **extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        umask=umask,
    )


def finish(proc: children.Process) -> dict:
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return {**json.loads(stdout.strip().splitlines()[-1]), "stderr": stderr}


def load_tiny(cache: Path, sources: Path = TINY_SOURCES, **extra_env: str) -> dict:
    return finish(start_tiny(cache, sources, **extra_env))


def load_tiny_failing(cache: Path, sources: Path = TINY_SOURCES, python: str = sys.executable, **extra_env: str) -> str:
    proc = start_tiny(cache, sources, python=python, **extra_env)
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode != 0, f"expected a failure, got:\n{stdout}"
    return stderr


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("jitops_test.tiny-*") if p.is_dir())


@pytest.fixture(scope="module")
def cold_build(tmp_path_factory) -> dict:
    """One cold build of tiny in a cache of its own; its time is the yardstick for the others."""
    cache = tmp_path_factory.mktemp("cold") / "cache"
    return {**load_tiny(cache), "cache": cache}


@pytest.fixture
def tiny_copy(tmp_path) -> Path:
    copy = tmp_path / "tiny_src"
    shutil.copytree(TINY_SOURCES, copy)
    return copy


def test_cold_build_then_cache_hit_spawns_nothing_and_takes_no_lock(cold_build):
    assert cold_build["how"] == "built" and cold_build["value"] == 42
    assert cold_build["units"] == 2, "every declared source is compiled and linked"
    # Besides the machine's job slots (builder/_jobs.py), which its ninja holds while it compiles.
    assert len([path for path in cold_build["locks"] if "/jobs/" not in path]) == 1, "a build takes its entry's lock"
    assert cold_build["stderr"].count("jitops: building jitops_test.tiny") == 1, cold_build["stderr"]
    assert " -MMD " not in cold_build["stderr"], "compiler output must stay out of stderr unless JITOPS_VERBOSE=1"
    (entry,) = entries(cold_build["cache"])
    assert oct(entry.stat().st_mode & 0o777) == "0o700"
    manifest = json.loads((entry / "manifest.json").read_text())
    assert {"components", "library_sha256", "built_at", "build_seconds"} <= manifest.keys()
    assert set(manifest["unit_seconds"]) == {
        "kernels_cpu_tiny.o",
        "kernels_cpu_tiny_second.o",
        "bindings_tiny.o",
        "jitops_test_tiny.so",
    }
    # The build runs ninja from this process: no second Python (importing torch again) is started.
    python = os.path.basename(sys.executable)
    assert not [s for s in cold_build["spawned"] if s.endswith(f" {python}")], cold_build["spawned"]
    assert "subprocess.Popen ninja" in cold_build["spawned"], cold_build["spawned"]

    warm = load_tiny(cold_build["cache"])
    assert warm["how"] == "cache" and warm["value"] == 42
    assert warm["spawned"] == [], f"a warm load spawned {warm['spawned']}"
    assert warm["locks"] == [], f"a warm load took the locks {warm['locks']}"
    assert not warm["build_code"], "a warm load imports no build code (jitops.builder._builder)"
    assert "jitops" not in warm["stderr"], "a cache hit must print nothing"


def test_source_edit_builds_a_new_entry_and_header_edit_a_new_variant_beside_it(tmp_path, tiny_copy):
    cache = tmp_path / "cache"
    assert load_tiny(cache, tiny_copy)["value"] == 42
    # A declared source is part of the key: another entry.
    source = tiny_copy / "kernels" / "cpu" / "tiny.cpp"
    source.write_text(source.read_text().replace("return TINY_VALUE;", "return TINY_VALUE + 1;"))
    edited = load_tiny(cache, tiny_copy, JITOPS_VERBOSE="1")
    assert edited["how"] == "built" and edited["value"] == 43
    assert re.search(r"^\[\d+/\d+\] \S+ -MMD ", edited["stderr"], re.M), "JITOPS_VERBOSE=1 streams compiler commands"
    assert len(entries(cache)) == 2
    # An included header is checked by the entry its build recorded it in: the same key gets a new
    # variant (the headers it was built from), and the published one is left as it was.
    header = tiny_copy / "kernels" / "tiny.h"
    before = Path(edited["library"]).read_bytes()
    header.write_text(header.read_text().replace("TINY_VALUE 42", "TINY_VALUE 50"))
    rebuilt = load_tiny(cache, tiny_copy)
    assert rebuilt["how"] == "built" and rebuilt["value"] == 51 and rebuilt["library"] != edited["library"]
    old, new = (_layout.parse_entry_name(Path(e["library"]).parent.name) for e in (edited, rebuilt))
    assert old[:2] == new[:2] and old[2] != new[2], "one key, two variants"
    assert Path(edited["library"]).read_bytes() == before, "a published entry never changes"
    assert len(entries(cache)) == 3 and "discarding" not in rebuilt["stderr"], rebuilt["stderr"]
    # Back to the first header: its variant is found again, nothing is built.
    header.write_text(header.read_text().replace("TINY_VALUE 50", "TINY_VALUE 42"))
    back = load_tiny(cache, tiny_copy)
    assert (back["how"], back["value"], back["library"]) == ("cache", 43, edited["library"])


def test_cuda_arch_list_is_part_of_the_key():
    # On CI's CPU-only torch no CUDA build happens, so compare the keys two arch lists give.
    cuda_home = _key.find_cuda_home()
    if cuda_home is None:
        pytest.skip("no CUDA toolkit")
    sources = tiny_extension(TINY_SOURCES)
    keys = {
        _root.compute_key(_key.key_components(sources, _key.find_cxx(), _key.CudaPlan(True, arch, cuda_home, "")))
        for arch in ("8.0", "9.0", "8.0;9.0")
    }
    assert len(keys) == 3


def test_leftover_lock_files_do_not_block(tmp_path, cold_build):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (entry,) = entries(cold_build["cache"])
    # What killed builds leave: our own lock file, a torch FileBaton `lock` in torch's default
    # build directory for the extension, and one inside an orphaned private build directory.
    Path(_layout.lock_path(cache, *_layout.parse_entry_name(entry.name)[:2])).write_text("")
    torch_build_dir = tmp_path / "torch_ext" / "jitops_test_tiny"
    torch_build_dir.mkdir(parents=True)
    (torch_build_dir / "lock").write_text("")
    orphan = cache / f".tmp-{entry.name}-orphan" / "build"
    orphan.mkdir(parents=True)
    (orphan / "lock").write_text("")
    result = load_tiny(cache, JITOPS_LOCK_TIMEOUT="60")
    assert result["how"] == "built" and result["value"] == 42


def test_build_killed_mid_compile_does_not_block_the_next(tmp_path, cold_build):
    cache = tmp_path / "cache"
    victim = start_tiny(cache, CXX=slow_compiler(tmp_path, 5))
    deadline = time.monotonic() + TIMEOUT_S
    # Wait until ninja is compiling (its build file exists and a compiler has been started).
    while not list(cache.glob(".tmp-jitops_test.tiny-*/build/build.ninja")):
        assert victim.poll() is None and time.monotonic() < deadline, "the build finished or failed too early"
        time.sleep(0.05)
    time.sleep(1.0)
    assert victim.poll() is None, "the build finished before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=TIMEOUT_S)
    assert entries(cache) == [], "a killed build must not publish an entry"

    started = time.monotonic()
    result = load_tiny(cache)
    elapsed = time.monotonic() - started
    assert result["how"] == "built" and result["value"] == 42
    assert elapsed < 3 * cold_build["seconds"] + 10, f"took {elapsed:.1f}s, a cold build takes {cold_build['seconds']:.1f}s"


def test_library_changed_in_place_is_hashed_again(tmp_path):
    # Same size, same inode, but a new mtime: the recorded hash is no longer trusted.
    cache = tmp_path / "cache"
    load_tiny(cache)
    (entry,) = entries(cache)
    (library,) = entry.glob("*.so")
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(library, "r+b") as file:
        file.write(data)
    result = load_tiny(cache)
    assert result["how"] == "built" and "does not match the sha256 in its manifest" in result["stderr"]


def test_verify_rehashes_even_when_the_identity_was_kept(tmp_path):
    # `jitops-cache verify` hashes every library in full, whatever its identity says (a load trusts
    # an unchanged identity; test_untrusted_disk.py shows that restoring the mtime changes it).
    cache = tmp_path / "cache"
    load_tiny(cache)
    (entry,) = entries(cache)
    (library,) = entry.glob("*.so")
    before = library.stat()
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(library, "r+b") as file:
        file.write(data)
    os.utime(library, ns=(before.st_atime_ns, before.st_mtime_ns))
    verify = children.run([sys.executable, "-m", "cache_tools", "verify"], env=tiny_env(cache), capture_output=True, text=True)
    assert verify.returncode == 1 and "does not match the sha256" in verify.stdout, verify.stdout + verify.stderr


def test_source_touched_without_change_keeps_its_entry(tmp_path, tiny_copy):
    # A new mtime forces a full hash of the file; the same bytes give the same key.
    cache = tmp_path / "cache"
    assert load_tiny(cache, tiny_copy)["how"] == "built"
    os.utime(tiny_copy / "kernels" / "tiny.h")
    assert load_tiny(cache, tiny_copy)["how"] == "cache"
    assert len(entries(cache)) == 1


def _compiler_reporting(path: Path, version: str) -> str:
    """A C++ compiler (the real one, behind a script) whose --version says `version`."""
    path.write_text(f'#!/bin/sh\ncase "$*" in *--version*) echo {version}; exit 0;; esac\nexec {shutil.which("c++")} "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_warm_record_is_trusted_only_while_nothing_the_key_depends_on_changed(tmp_path, tiny_copy, monkeypatch, request):
    """A new process loads an op it loaded before through its warm record (stat calls, no key
    computed). Every change a key reflects misses the record, and the load that follows computes
    the key in full, gets another entry and records that; a record that is wrong or lost costs
    only the long way."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("JITOPS_CACHE_DIR", str(cache))
    monkeypatch.setenv("CXX", _compiler_reporting(tmp_path / "c++", "c++ 1.0"))
    saved = dict(jitops.warm.loaded)  # this process's libraries: each load() below starts afresh
    request.addfinalizer(lambda: (jitops.warm.loaded.clear(), jitops.warm.loaded.update(saved)))

    def recorded() -> Path | None:
        found = jitops.warm.recorded_library(tiny_extension(), jitops.warm.settings(tiny_extension(tiny_copy)))
        return Path(found[0]) if found else None

    def load() -> Path:
        jitops.warm.loaded.clear()
        with contextlib.redirect_stderr(io.StringIO()):  # build progress
            return _resolution.resolve(tiny_extension(tiny_copy)).library

    first = load()
    assert recorded() == first, "a load records its library"
    loaded = [first]

    def changed(description: str) -> None:
        assert recorded() is None, f"{description}: the warm record must miss"
        library = load()
        assert library not in loaded, f"{description}: the key must be computed anew, and differ"
        assert recorded() == library, f"{description}: the new library is recorded"
        loaded.append(library)

    # A header the build included is checked by its entry: the key gets a new variant beside it,
    # which is recorded; one that no unit includes changes nothing.
    header = tiny_copy / "kernels" / "tiny.h"
    header.write_text(header.read_text() + "// edited\n")
    assert recorded() is None, "a header edited: the warm record must miss"
    before = jitops._files.file_identity(first)
    first = load()
    assert first != loaded[0] and jitops._files.file_identity(loaded[0]) == before, "a header edited: a new variant"
    assert _layout.parse_entry_name(first.parent.name)[:2] == _layout.parse_entry_name(loaded[0].parent.name)[:2]
    assert recorded() == first
    loaded.append(first)
    (tiny_copy / "kernels" / "extra.h").write_text("// a new header\n")
    assert recorded() == first, "a header no unit includes changes nothing"
    _compiler_reporting(tmp_path / "c++", "c++ 2.0")  # the compiler replaced in place
    changed("the compiler replaced")
    monkeypatch.setenv("CXX", _compiler_reporting(tmp_path / "other-c++", "c++ 3.0"))
    changed("another compiler")
    # A compiler put on an unchanged PATH ahead of the one found: c++ by name, as when CXX is unset.
    monkeypatch.setenv("CXX", "c++")
    early = tmp_path / "early-bin"
    early.mkdir()
    monkeypatch.setenv("PATH", f"{early}{os.pathsep}{os.environ['PATH']}")
    changed("CXX unset")
    _compiler_reporting(early / "c++", "c++ 4.0")
    changed("a compiler put earlier on the same PATH")
    if jitops.warm.cxx_runtime():  # the libraries link against it (_key.link_flags)
        other_runtime = tmp_path / "other-runtime" / "libstdc++.so.6"
        other_runtime.parent.mkdir()
        shutil.copy(jitops.warm.cxx_runtime(), other_runtime)
        monkeypatch.setattr(jitops.warm, "cxx_runtime", lambda: str(other_runtime))
        monkeypatch.setattr(_key, "cxx_runtime", lambda: str(other_runtime))
        changed("another C++ runtime in the process")
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    changed("another torch")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert recorded() is None, "another arch list misses (the key names it where CUDA is built)"
    load()
    # The loader's own flags live in _key.py, whose identity every record checks.
    record_file = Path(jitops.warm.record_path(str(cache), "jitops_test.tiny", jitops.warm.settings(tiny_extension(tiny_copy))))
    assert _key.__file__ in dict(json.loads(record_file.read_text())["checked"])

    library = recorded()
    record = json.loads(record_file.read_text())
    os.utime(library.parent, (0, 0))
    jitops.warm.loaded.clear()
    assert jitops.warm.recall(tiny_extension(tiny_copy)).library == library
    assert time.time() - library.parent.stat().st_mtime < 60, "a warm start marks its entry as used (for pruning)"
    library.touch()  # the library's identity changed: the long way, which hashes it again
    assert recorded() is None and load() == library and recorded() == library
    for wrong in ({**record, "entry": "../elsewhere"}, {**record, "settings": "other"}, {**record, "checked": 7}):
        record_file.write_text(json.dumps(wrong))
        assert recorded() is None, wrong
    record_file.write_text("{ not json")
    assert recorded() is None and load() == library, "an unreadable record costs the long way, nothing else"
    assert recorded() == library
    cache.chmod(0o777)
    try:
        assert recorded() is None, "a cache root that others may write into is not trusted"
    finally:
        cache.chmod(0o700)


# Every jitops module a warm add2 imports: each costs a warm start about 0.1 ms, so one more is a
# decision (BENCHMARKS.md, "Warm start"), never an accident.
WARM_OPS_PATH = [
    "jitops",
    "jitops._files",
    "jitops._layout",
    "jitops._settings",
    "jitops._torch_private",
    "jitops.extension",
    "jitops.ops",
    "jitops.ops._framework",
    "jitops.ops.add2",
    "jitops.warm",
]


def test_warm_start_imports_only_the_warm_path():
    """jitops.ops._framework.require on a warm start reads the warm record (jitops.warm) and nothing else of the
    loader: the rest of it costs more to import than a warm start takes."""
    code = (
        "import json, sys, jitops.ops._framework; jitops.ops._framework.require('add2'); jitops.ops._framework.require('add2');"
        "print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] == 'jitops')))"
    )
    for _ in ("first, maybe building", "warm"):
        proc = children.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == WARM_OPS_PATH


def test_warm_open_records_the_library_as_torch_does_and_says_why_one_fails(tmp_path):
    jitops.ops._framework.require("add2")
    library = jitops.warm.loaded["jitops.add2"].library
    link = tmp_path / "link.so"
    link.symlink_to(library)
    jitops.warm.open_library(str(link), verified=True)  # loaded already: dlopen finds it by its inode
    assert str(library.resolve()) in torch.ops.loaded_libraries
    not_elf = tmp_path / "not_elf.so"
    not_elf.write_bytes(b"not a shared library")
    with pytest.raises(OSError, match=r"Could not load this library: .*not_elf\.so: .*(ELF|too short)"):
        jitops.warm.open_library(str(not_elf), verified=True)
    assert str(not_elf) not in torch.ops.loaded_libraries


def needed_libraries(library: Path) -> list[str]:
    """The libraries an ELF shared object names among its dependencies (DT_NEEDED), by readelf."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")
def test_op_libraries_name_only_the_torch_libraries_they_use():
    # Every dlopen walks the dependencies of each library the new one names, loaded or not
    # (jitops/store/_key.py: LDFLAGS); the ops take symbols from c10 and torch_cpu (and cudart) only.
    # torch_cuda in particular (with its two dozen CUDA libraries) would double a warm dlopen.
    jitops.ops._framework.require("add2")
    needed = needed_libraries(jitops.warm.loaded["jitops.add2"].library)
    assert "libtorch_cpu.so" in needed
    assert not {"libtorch.so", "libtorch_python.so", "libc10_cuda.so", "libtorch_cuda.so"} & set(needed), needed


def exported_symbols(library: Path) -> list[str]:
    """The symbols an ELF shared object defines for others (nm -D --defined-only)."""
    return subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.splitlines()


# Builds add2 (CPU) with $CXX in a fresh process, checks it computes and reports a bad argument.
BUILD_AND_RUN_ADD2 = """
import torch, jitops, jitops.ops._framework
import jitops._files
import jitops.warm
jitops.ops._framework.require("add2")
a, b = torch.randn(1000), torch.randn(1000)
assert torch.equal(jitops.add2(a, b), a + b)
try:
    jitops.add2(a, b[:10])
    raise AssertionError("a bad argument went through")
except RuntimeError as error:
    assert "b" in str(error), error
print(jitops.warm.loaded["jitops.add2"].library)
"""


@pytest.mark.skipif(not (shutil.which("readelf") and shutil.which("nm")), reason="readelf/nm (binutils) are not installed")
def test_op_libraries_take_the_cxx_runtime_of_the_process_from_a_compiler_that_links_its_own(tmp_path):
    # Some toolchains' g++ links libstdc++ statically (the H100 machine's does): a whole second
    # C++ runtime in each library, exporting thousands of symbols, which doubled its dlopen
    # (_key.link_flags). Such a compiler, and the control that it is one:
    wrapper = tmp_path / "static-runtime-c++"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("c++")} "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    probe = tmp_path / "probe.cpp"
    probe.write_text(
        '#include <sstream>\nextern "C" int probe(int x) { std::ostringstream s; s << x; return int(s.str().size()); }\n'
    )
    subprocess.run([str(wrapper), "-shared", "-fPIC", str(probe), "-o", str(tmp_path / "probe.so")], check=True)
    assert "libstdc++.so.6" not in needed_libraries(tmp_path / "probe.so")
    assert len(exported_symbols(tmp_path / "probe.so")) > 1000, "the control must carry its own runtime"

    env = {**os.environ, "CXX": str(wrapper), "JITOPS_CACHE_DIR": str(tmp_path / "cache")}
    proc = children.run([sys.executable, "-c", BUILD_AND_RUN_ADD2], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    library = Path(proc.stdout.split()[-1])
    assert "libstdc++.so.6" in needed_libraries(library)
    assert len(exported_symbols(library)) < 100, "only the op library's own symbols"
    manifest = json.loads((library.parent / _layout.MANIFEST_NAME).read_text())
    assert jitops.warm.cxx_runtime() in manifest["components"]["ldflags"], "the runtime linked is part of the key"


@pytest.mark.parametrize(
    "change",
    ["cflags", "torch", "cuda", "cxx", "soabi"],
)
def test_every_key_component_changes_the_key(change):
    sources = tiny_extension(TINY_SOURCES)
    base = _key.key_components(sources, _key.find_cxx(), _key.CudaPlan(False, None, None, "test"))
    changed = dict(base)
    if change == "cflags":
        changed["cflags"] = base["cflags"] + ["-DEXTRA"]
    elif change == "torch":
        changed["torch"] = "0.0.1"
    elif change == "cuda":
        changed["torch_cuda"] = "99.9"
    elif change == "cxx":
        changed["cxx"] = "/usr/bin/other-c++: 1.0"
    else:
        changed["python_soabi"] = "cpython-399"
    assert _root.compute_key(changed) != _root.compute_key(base)


def test_failed_build_reports_first_error_and_leaves_nothing(tmp_path, tiny_copy):
    cache = tmp_path / "cache"
    source = tiny_copy / "kernels" / "cpu" / "tiny.cpp"
    good = source.read_text()
    source.write_text(good.replace("return TINY_VALUE;", "return TINY_VALUE"))
    stderr = load_tiny_failing(cache, tiny_copy)
    message = re.search(r"BuildError: (.*?)\nfull log: (\S+)", stderr, re.S)
    assert message, stderr
    assert "building jitops_test.tiny failed" in message.group(1)
    assert re.search(r"tiny\.cpp:\d+:\d+: .*expected .;.", message.group(1)), message.group(1)
    assert Path(message.group(2)).is_file()
    assert entries(cache) == [] and list(cache.glob(".tmp-*")) == []
    # Not poisoned: the fixed source builds at once.
    source.write_text(good)
    assert load_tiny(cache, tiny_copy)["value"] == 42


def test_library_that_does_not_load_is_never_published(tmp_path, tiny_copy):
    # It compiles and links (a shared library may leave symbols undefined), but dlopen refuses it.
    binding = tiny_copy / "bindings" / "tiny.cpp"
    good = binding.read_text()
    binding.write_text(
        good.replace("{ return tiny_value(); }", "{ return jitops_tiny_missing(); }").replace(
            '#include "../kernels/tiny.h"', '#include "../kernels/tiny.h"\nextern "C" int jitops_tiny_missing();'
        )
    )
    cache = tmp_path / "cache"
    stderr = load_tiny_failing(cache, tiny_copy)
    message = re.search(r"BuildError: (.*?)\nfull log: (\S+)", stderr, re.S)
    assert message, stderr
    assert "the built library does not load" in message.group(1) and "jitops_tiny_missing" in message.group(1)
    assert "jitops_tiny_missing" in Path(message.group(2)).read_text()
    assert entries(cache) == [] and list(cache.glob(".tmp-*")) == []
    binding.write_text(good)
    assert load_tiny(cache, tiny_copy)["value"] == 42


def test_a_build_runs_no_code_of_torchs_cpp_extension(tmp_path):
    # jitops makes torch's flags itself (jitops/builder/_torch_flags.py): a cold build imports none of
    # torch's cpp_extension (setuptools with it), whose private writer may move in a future torch.
    cache = tmp_path / "cache"
    code = LOAD_TINY + "\nimport sys; print('imported:', 'torch.utils.cpp_extension' in sys.modules, file=sys.stderr)\n"
    proc = children.run(
        [sys.executable, "-c", code, str(TINY_SOURCES)], env=tiny_env(cache), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.returncode == 0 and len(entries(cache)) == 1, proc.stderr
    assert "imported: False" in proc.stderr, proc.stderr


# Builds tiny and copies of it under other names (argv[2:]) at once, in one thread each.
LOAD_MANY = (
    f"TESTS = {str(Path(__file__).parent)!r}\n"
    + """
import sys
from concurrent.futures import ThreadPoolExecutor
from jitops import _resolution
sys.path.insert(0, TESTS)
from tiny_extension import tiny_extension
names = ["tiny", *sys.argv[2:]]
with ThreadPoolExecutor(len(names)) as pool:
    list(pool.map(lambda name: _resolution.resolve(tiny_extension(sys.argv[1], name)), names))
"""
)


def copies_of_tiny(tiny_copy: Path, *names: str) -> list[str]:
    """Arguments of LOAD_MANY: the folder, then the copies of tiny made there under these names."""
    for name in names:
        for directory in ("kernels/cpu", "bindings"):
            shutil.copy(tiny_copy / directory / "tiny.cpp", tiny_copy / directory / f"{name}.cpp")
    return [str(tiny_copy), *names]


def test_parallel_builds_write_whole_lines(tmp_path, tiny_copy):
    env = tiny_env(tmp_path / "cache", CXX=slow_compiler(tmp_path, 0.5))
    proc = children.run(
        [sys.executable, "-c", LOAD_MANY, *copies_of_tiny(tiny_copy, "tiny2")],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "jitops" in line]
    # A library with no CUDA source: not a word about CUDA, only its name and the steps.
    line_forms = (
        r"jitops: building jitops_test\.(tiny2?) \.\.\.",
        r"jitops: built jitops_test\.(tiny2?) in \d+\.\ds \[\d+/\d+\]",
    )
    seen = [
        (form, re.fullmatch(pattern, line).group(1))
        for line in lines
        for form, pattern in enumerate(line_forms)
        if re.fullmatch(pattern, line)
    ]
    assert len(seen) == len(lines) == 4, proc.stderr
    assert sorted(seen) == [(0, "tiny"), (0, "tiny2"), (1, "tiny"), (1, "tiny2")], proc.stderr
    assert [form for form, _ in seen[:2]] == [0, 0], "both builds were in flight at once"


# A new process's warm load_all of two real ops, then each op on every device against its *_ref.
LOAD_ALL_AND_RUN = """
import json, sys, torch, jitops
import jitops._files
import jitops.warm
jitops.load_all(["add2", "bias_act"])
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
checked = []
for device in devices:
    a, b = torch.randn(1000, device=device), torch.randn(1000, device=device)
    torch.testing.assert_close(jitops.add2(a, b), jitops.add2_ref(a, b))
    x, bias = torch.randn(4, 8, 5, 5, device=device), torch.randn(8, device=device)
    torch.testing.assert_close(jitops.bias_act(x, bias, act="lrelu"), jitops.bias_act_ref(x, bias, act="lrelu"))
    checked.append(device)
print(json.dumps({"checked": checked, "how": [jitops.warm.loaded[f"jitops.{op}"].how for op in ("add2", "bias_act")]}))
"""


def test_warm_load_all_gives_working_ops():
    """load_all twice in new processes (the second from the cache): the ops then compute what
    their references do, on every device this machine has."""
    for _ in ("first, maybe building", "warm"):
        proc = children.run([sys.executable, "-c", LOAD_ALL_AND_RUN], capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["how"] == ["cache", "cache"]
    assert result["checked"] == ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize(
    "configure, on_stdout",
    [
        ("logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='LOG %(name)s %(message)s')", True),
        ("logging.getLogger('jitops').setLevel(logging.WARNING)", False),
    ],
    ids=["captured", "silenced"],
)
def test_status_lines_go_through_the_jitops_logger(tmp_path, configure, on_stdout):
    """A library that uses jitops captures the build lines with its logging, or silences them."""
    proc = start_tiny(tmp_path / "cache", prelude=f"import logging, sys\n{configure}\n")
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
    assert "jitops: buil" not in stderr, stderr
    logged = [line for line in stdout.splitlines() if line.startswith("LOG jitops ")]
    assert len(logged) == (2 if on_stdout else 0), stdout
    if on_stdout:  # the logger's name, once
        assert logged[0] == "LOG jitops building jitops_test.tiny ..."
        assert logged[1].startswith("LOG jitops built jitops_test.tiny in ")


def on_a_terminal(
    command: list[str],
    env: dict,
    streams: tuple[str, ...] = ("stderr",),
    columns: int = 80,
    answer: bytes = b"",
    cwd: Path | None = None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[int, str]:
    """command run with `streams` on a pty of `columns` columns (the other output streams discarded):
    its exit status and what the terminal received (the pty's \\r\\n as \\n). `answer` is typed once
    it prints "[y/N]"; no output for timeout_s is a failure, not a hang."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    chosen = {name: terminal if name in streams else subprocess.DEVNULL for name in ("stdin", "stdout", "stderr")}
    proc = subprocess.Popen(command, env=env, cwd=cwd, **chosen)
    os.close(terminal)
    output = b""
    while True:
        if not select.select([main], [], [], timeout_s)[0]:
            proc.kill()
            raise AssertionError(f"no output for {timeout_s} s; so far: {output!r}")
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if answer and output.rstrip().endswith(b"[y/N]"):
            os.write(main, answer)
            answer = b""
    os.close(main)
    return proc.wait(timeout=TIMEOUT_S), output.decode().replace("\r\n", "\n")


def test_parallel_builds_on_an_80_column_terminal_redraw_one_line_in_place(tmp_path, tiny_copy):
    """Five builds at once under a pty of 80 columns: the live line never wraps (a wrapped row would
    stay behind on every redraw), and the output's only line breaks end the five built lines."""
    env = tiny_env(tmp_path / "cache", CXX=slow_compiler(tmp_path, 0.5))
    names = ["tiny2", "tiny3", "tiny4", "tiny5"]
    rc, text = on_a_terminal([sys.executable, "-c", LOAD_MANY, *copies_of_tiny(tiny_copy, *names)], env)
    assert rc == 0, text
    redraws = [part for line in text.split("\n") for part in line.split("\r\x1b[K")[:-1] if part]
    assert len(redraws) >= 2, f"a terminal gets the live line, redrawn: {text!r}"  # every 0.25 s: 1 s on 16 cores
    assert all(len(part) < 80 for part in redraws), [part for part in redraws if len(part) >= 80]
    assert any(part.startswith("jitops: building jitops_test.tiny") and ";" in part for part in redraws), "builds at once"
    shown = [line.rsplit("\r\x1b[K", 1)[-1] for line in text.split("\n")[:-1]]  # each row as the terminal shows it
    assert len(shown) == 5, text
    for op in ["tiny", *names]:
        assert sum(bool(re.fullmatch(rf"jitops: built jitops_test.{op} in \d+\.\ds \[\d+/\d+\]", line)) for line in shown) == 1, (
            text
        )


def test_status_lines_through_logging_do_not_repeat_the_loggers_name(tmp_path, tiny_copy):
    code = "import logging, sys; logging.basicConfig(level=logging.INFO)\n" + LOAD_MANY
    proc = children.run(
        [sys.executable, "-c", code, *copies_of_tiny(tiny_copy)],
        env=tiny_env(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "INFO:jitops:building jitops_test.tiny" in proc.stderr and "INFO:jitops:jitops:" not in proc.stderr, proc.stderr


def test_a_terminal_of_0_columns_gets_the_whole_live_line(tmp_path, tiny_copy):
    """`script` and `docker run -t` report 0 columns: unknown, not a line cut to its first character."""
    env = tiny_env(tmp_path / "cache", CXX=slow_compiler(tmp_path, 1.0))
    rc, text = on_a_terminal([sys.executable, "-c", LOAD_MANY, *copies_of_tiny(tiny_copy)], env, columns=0)
    assert rc == 0, text
    redraws = [part for line in text.split("\n") for part in line.split("\r\x1b[K")[:-1] if part]
    assert redraws and all(part.startswith("jitops: building jitops_test.tiny") for part in redraws), text


def test_arch_list_becomes_gencode_flags_and_torchs_names_are_expanded():
    assert _buildfile.gencode_flags("8.6;9.0a") == [
        "-gencode=arch=compute_86,code=sm_86",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]
    assert _buildfile.gencode_flags(" 8.0  9.0+PTX ") == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    assert _buildfile.gencode_flags("Volta;Maxwell+Tegra") == [
        "-gencode=arch=compute_70,code=sm_70",
        "-gencode=arch=compute_70,code=compute_70",
        "-gencode=arch=compute_53,code=sm_53",
    ]
    with pytest.raises(jitops.BuildError, match=r"TORCH_CUDA_ARCH_LIST entry 'Hoper' is neither a compute capability"):
        _buildfile.gencode_flags("8.0;Hoper")


def test_gcc_collects_its_garbage_later_where_memory_allows_and_no_key_names_it(tmp_path, monkeypatch):
    """GCC_HEAP_FLAG: for gcc only (clang refuses it), where each of ninja's jobs can have 3 GB; in
    no key, as it makes the same objects bit for bit: a build with it and one without, compared."""
    gcc = "/usr/bin/c++: c++ (Debian 12.2.0-14+deb12u1) 12.2.0"
    monkeypatch.setenv("MAX_JOBS", "1")
    assert (
        _buildfile.gcc_heap(gcc) == _buildfile.gcc_heap("/opt/x: g++-13 (Homebrew GCC 13.2.0) 13.2.0") == _buildfile.GCC_HEAP_FLAG
    )
    assert _buildfile.gcc_heap("/usr/bin/clang++: Ubuntu clang version 14.0.0-1ubuntu1") == ""
    assert _buildfile.gcc_heap("/opt/intel/icpx: Intel(R) oneAPI DPC++/C++ Compiler 2024.0.0 (2024.0.0.20231017)") == ""
    assert _buildfile.gcc_heap("/opt/gcc/bin/g++: g++-real (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0") == _buildfile.GCC_HEAP_FLAG
    assert _buildfile.gcc_heap("/opt/nvidia/hpc_sdk/nvc++: nvc++ 23.11-0 64-bit target on x86-64 Linux") == ""
    cxx = os.environ.get("CXX", "c++")  # as the loader finds it
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    if not _buildfile.gcc_heap(f"{cxx}: {version}"):
        pytest.skip(f"this machine's {cxx} is not gcc ({version}), or it has less than 3 GB of memory")
    monkeypatch.setenv("MAX_JOBS", str(10**6))  # no machine has 3 GB for each of a million jobs
    assert _buildfile.gcc_heap(gcc) == ""
    builds = {"with": "1", "without": str(10**6)}
    caches = {how: tmp_path / how / "cache" for how in builds}
    for how, jobs in builds.items():
        assert load_tiny(caches[how], MAX_JOBS=jobs)["how"] == "built"
        (log,) = [entry / _layout.BUILD_LOG_NAME for entry in entries(caches[how])]
        assert (_buildfile.GCC_HEAP_FLAG in log.read_text()) == (how == "with"), log.read_text()
    objects = {
        how: {p.relative_to(cache): p.read_bytes() for p in (cache / "objects").rglob("object.o")}
        for how, cache in caches.items()
    }
    assert objects["with"] and objects["with"] == objects["without"]  # the same keys, the same bytes
    assert load_tiny(caches["with"], MAX_JOBS=builds["without"])["how"] == "cache"


def tool_dir(tmp_path: Path, tools: list[str]) -> str:
    """A PATH holding only the named tools (links to the real ones)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


@pytest.mark.parametrize(
    "tools,missing",
    [
        (["c++"], "no ninja on PATH, beside this Python or in the ninja package"),
        (["ninja"], "no C++ compiler: 'c++' is not on PATH"),
    ],
    ids=["no-ninja", "no-compiler"],
)
def test_missing_tool_is_a_clear_error(tmp_path, tools, missing, request):
    cache = tmp_path / "cache"
    python, env = request.getfixturevalue("python_without_ninja") if "ninja" not in tools else (sys.executable, {})
    # CXX="c++" so the compiler is looked up on PATH even where CXX names an absolute path.
    stderr = load_tiny_failing(cache, python=python, PATH=tool_dir(tmp_path, tools), CXX="c++", **env)
    assert f"cannot build 'jitops_test.tiny': {missing}" in stderr, stderr
    assert entries(cache) == []


def test_an_unactivated_venv_builds_with_the_ninja_beside_its_python(tmp_path):
    """systemd units, cron and `ENTRYPOINT ["/venv/bin/python"]` run a venv's interpreter with a PATH
    that lacks its bin/: the ninja pip installed there (or the ninja package's) is used."""
    shadow = tmp_path / "bin"  # every program on PATH but ninja (the compiler runs as, ld, ...)
    shadow.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in Path(folder).glob("*") if os.path.isdir(folder) else []:
            if program.name != "ninja" and not (shadow / program.name).exists():
                (shadow / program.name).symlink_to(program)
    result = load_tiny(tmp_path / "cache", PATH=str(shadow))
    assert result["value"] == 42 and "jitops: built jitops_test.tiny" in result["stderr"]
    assert len(entries(tmp_path / "cache")) == 1


def assert_fresh_python_prints_ok(code: str) -> None:
    """code, run in a new Python process (tests/children.py: torch imported, jitops and
    torch._dynamo not), ends by printing ok."""
    result = children.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


def test_dynamo_marker_is_the_one_torch_sets():
    # `import jitops` imports no torch._dynamo (a second of every start-up), yet marks require()
    # and the load behind Extension.load() exactly as torch.compiler.assume_constant_result would: every attribute that API sets on a
    # function is on require, with the same value. Fresh process: nothing else imported dynamo.
    code = (
        "import sys, torch, jitops, jitops.ops._framework\n"
        "assert 'torch._dynamo' not in sys.modules, 'import jitops imported torch._dynamo'\n"
        "marked = [dict(vars(f)) for f in (jitops.ops._framework.require, jitops.extension._load)]\n"
        "def probe(): pass\n"
        "torch.compiler.assume_constant_result(probe)\n"
        "expected = dict(vars(probe))\n"
        "assert expected, 'assume_constant_result set no attribute: jitops must follow what it does now'\n"
        "missing = [{k: v for k, v in expected.items() if m.get(k, object()) != v} for m in marked]\n"
        "assert not any(missing), f'require, Extension.load lack what assume_constant_result sets: {missing}'\n"
        "print('ok')\n"
    )
    assert_fresh_python_prints_ok(code)


def test_first_call_inside_torch_compile(tmp_path):
    # The loader runs eagerly while dynamo traces (assume_constant_result), so even a first call
    # from compiled code needs no graph break. Uses the session cache, where add2 is built.
    code = (
        "import torch, jitops\n"
        "f = torch.compile(lambda a, b: jitops.add2(a, b) * 2, fullgraph=True, backend='aot_eager')\n"
        "a, b = torch.randn(5), torch.randn(5)\n"
        "torch.testing.assert_close(f(a, b), (a + b) * 2)\n"
        "print('ok')\n"
    )
    assert_fresh_python_prints_ok(code)
