# SPDX-License-Identifier: MIT
"""Trust nothing on disk: hostile or unlucky states of the sources, the cache and the settings,
each reproduced with real files, real processes and real builds of the tiny test extension, and
the behaviour the loader promises for it (RELIABILITY.md lists them all)."""

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_loader import (  # noqa: F401 (cold_build and tiny_copy are fixtures)
    cold_build,
    entries,
    finish,
    load_tiny,
    load_tiny_failing,
    slow_compiler,
    start_tiny,
    tiny_copy,
)
from tiny_extension import tiny_extension

import jitops
import jitops._files
import jitops.warm
from jitops import _files, _layout, _settings
from jitops.store import _key, _root


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Write data over path's bytes in place (same inode), then put its mtime back, as rsync -t,
    tar and some editors do: size, mtime, inode and device all as before."""
    before = path.stat()
    with open(path, "r+b") as file:
        file.write(data)
        file.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def warm_records(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"{_layout.RECORD_PREFIX}jitops_test.tiny-*.json"))


def only_library(cache: Path) -> Path:
    (entry,) = entries(cache)
    (library,) = entry.glob("*.so")
    return library


# ---------------------------------------------------------------------------------------------
# 1-4: a wrong library loaded, or a load that never heals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["in-place", "source-in-place", "in-place-no-warm-records", "removed-and-recreated"])
def test_an_edit_that_keeps_size_mtime_and_inode_is_noticed(tmp_path, tiny_copy, how):
    cache = tmp_path / "cache"
    assert load_tiny(cache, tiny_copy)["value"] == 42
    if how == "source-in-place":  # the kernel source itself, as `cat new.cpp > kernels/cpu/add2.cpp`
        header = tiny_copy / "kernels" / "cpu" / "tiny.cpp"
        edited = header.read_bytes().replace(b"return TINY_VALUE;", b"return 43+0*00000;")
    else:  # a header every unit includes
        header = tiny_copy / "kernels" / "tiny.h"
        edited = header.read_bytes().replace(b"TINY_VALUE 42", b"TINY_VALUE 43")
    if how == "removed-and-recreated":
        before = header.stat()
        header.unlink()
        header.write_bytes(edited)
        os.utime(header, ns=(before.st_atime_ns, before.st_mtime_ns))
    else:
        rewrite_in_place(header, edited)
    if how == "in-place-no-warm-records":
        for record in warm_records(cache):
            record.unlink()  # the long way, through file-hashes.json
    result = load_tiny(cache, tiny_copy)
    assert result["how"] == "built" and result["value"] == 43


def test_a_library_changed_in_place_with_its_identity_kept_is_rehashed(tmp_path):
    cache = tmp_path / "cache"
    load_tiny(cache)
    library = only_library(cache)
    data = bytearray(library.read_bytes())
    comment = data.index(b"GCC: (")  # the .comment section: the library still loads without it
    data[comment] = ord("g")
    rewrite_in_place(library, bytes(data))
    result = load_tiny(cache)
    assert result["how"] == "built" and result["value"] == 42
    assert "does not match the sha256 in its manifest" in result["stderr"]


def forge_manifest(entry: Path, **fields) -> None:
    """The manifest rewritten to vouch for the library as it is now (what a disk that changes
    bytes under an unchanged identity, or a forger, leaves)."""
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    library = entry / manifest["library"]
    manifest.update({"library_identity": jitops._files.file_identity(library), **fields})
    jitops._files.write_json_atomic(entry / _layout.MANIFEST_NAME, manifest)


def test_a_corrupt_library_is_discarded_and_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    load_tiny(cache)
    library = only_library(cache)
    rewrite_in_place(library, random.Random(3).randbytes(library.stat().st_size))
    result = load_tiny(cache)
    assert result["how"] == "built" and result["value"] == 42
    assert "discarding the corrupt cache entry" in result["stderr"]


def test_a_library_that_fails_to_open_is_rehashed_then_rebuilt_or_named(tmp_path):
    # Bytes changed under an identity the manifest vouches for: only the failed dlopen tells.
    cache = tmp_path / "cache"
    load_tiny(cache)
    library = only_library(cache)
    library.write_bytes(random.Random(4).randbytes(library.stat().st_size))
    forge_manifest(library.parent)
    result = load_tiny(cache)
    assert result["how"] == "built" and result["value"] == 42
    assert "discarding the corrupt cache entry" in result["stderr"] and "does not match the sha256" in result["stderr"]

    # Bytes that match their sha256 and still do not open: an error naming the library, the entry
    # and the way out, every time (rebuilding the same sources would give the same library).
    library = only_library(cache)
    garbage = random.Random(5).randbytes(1000)
    library.write_bytes(garbage)
    forge_manifest(library.parent, library_sha256=_files.sha256_bytes(garbage))
    for _ in range(2):
        stderr = load_tiny_failing(cache)
        assert f"the library {library} of the cache entry {library.parent} matches its sha256 but does not open" in stderr
        assert "`jitops-cache clear jitops_test.tiny`" in stderr


# Removes tiny's cache entry (the real `jitops-cache clear`, in a process of its own) just before
# the loader opens the library it has checked: the window the race falls into.
CLEAR_BEFORE_OPEN = """
import os, subprocess, sys, torch
import jitops._files
import jitops.warm
def clear_first(original):
    def opened(*args, **kwargs):
        if not CLEARED:
            CLEARED.append(subprocess.run([sys.executable, "-m", "cache_tools", "clear", "tiny"], check=True))
        return original(*args, **kwargs)
    return opened
CLEARED = []
if os.environ["WINDOW"] == "warm":
    jitops.warm.open_library = clear_first(jitops.warm.open_library)
else:
    torch.ops.load_library = clear_first(torch.ops.load_library)
"""


@pytest.mark.parametrize("window", ["warm", "long-way"])
def test_an_entry_removed_between_check_and_open_is_found_again(tmp_path, window):
    cache = tmp_path / "cache"
    load_tiny(cache)
    if window == "long-way":
        for record in warm_records(cache):
            record.unlink()
    result = finish(start_tiny(cache, prelude=CLEAR_BEFORE_OPEN, WINDOW=window))
    assert result["how"] == "built" and result["value"] == 42
    assert len(entries(cache)) == 1


# ---------------------------------------------------------------------------------------------
# 5-7: hangs and paths outside the cache
# ---------------------------------------------------------------------------------------------


def output_within_a_minute(proc: subprocess.Popen, what: str) -> tuple[str, str]:
    """stdout and stderr of a load that must not wait on what was planted (what: for the failure)."""
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{what} hung the load")


def test_a_fifo_at_a_warm_record_is_a_miss_not_a_hang(tmp_path):
    cache = tmp_path / "cache"
    load_tiny(cache)
    (record,) = warm_records(cache)
    record.unlink()
    os.mkfifo(record)
    proc = start_tiny(cache)
    stdout, stderr = output_within_a_minute(proc, "a FIFO at the warm record's path")
    assert proc.returncode == 0, stderr
    assert json.loads(stdout.splitlines()[-1])["how"] == "cache"
    assert record.is_file(), "the broken record is replaced by a regular one"


def plant(path: Path, what: str) -> None:
    """A FIFO, a link to /dev/zero or a folder where a regular file belongs."""
    path.unlink(missing_ok=True)
    {"fifo": os.mkfifo, "dev-zero": lambda p: os.symlink("/dev/zero", p), "folder": os.mkdir}[what](path)


@pytest.mark.parametrize(
    "where, what",
    [("manifest", "fifo"), ("library", "fifo"), ("library", "dev-zero"), ("library", "folder"), ("manifest", "folder")],
)
def test_a_fifo_a_device_or_a_folder_in_an_entry_is_discarded_and_rebuilt(tmp_path, where, what):
    """A non-regular file where an entry's manifest or library belongs (warm records gone, so the
    load reads the entry): the entry is discarded with a warning and rebuilt, never waited on."""
    cache = tmp_path / "cache"
    load_tiny(cache)
    for record in warm_records(cache):
        record.unlink()
    library = only_library(cache)
    plant(library.parent / _layout.MANIFEST_NAME if where == "manifest" else library, what)
    proc = start_tiny(cache)
    stdout, stderr = output_within_a_minute(proc, f"a {what} at the entry's {where}")
    assert proc.returncode == 0, stderr
    result = json.loads(stdout.splitlines()[-1])
    assert result["how"] == "built" and result["value"] == 42, stderr
    assert only_library(cache).is_file()


@pytest.mark.parametrize(
    "name", [_layout.FILE_HASHES_NAME, _layout.TOOLCHAIN_PROBES_NAME, _layout.STATS_NAME, _layout.LOCATIONS_NAME]
)
def test_a_fifo_at_a_root_record_is_ignored_not_waited_on(tmp_path, tiny_copy, name):
    """The root's records only save work: a FIFO at one costs that work, never a hang (a build
    reads and writes them all: a changed header, warm records gone)."""
    cache = tmp_path / "cache"
    load_tiny(cache, tiny_copy)
    for record in warm_records(cache):
        record.unlink()
    header = tiny_copy / "kernels" / "tiny.h"
    header.write_text(header.read_text().replace("TINY_VALUE 42", "TINY_VALUE 43"))
    plant(cache / name, "fifo")
    proc = start_tiny(cache, tiny_copy)
    stdout, stderr = output_within_a_minute(proc, f"a FIFO at {name}")
    assert proc.returncode == 0 and json.loads(stdout.splitlines()[-1])["value"] == 43, stderr


def test_a_warm_record_never_points_outside_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = load_tiny(cache)
    library = Path(first["library"])
    (record_file,) = warm_records(cache)
    record = json.loads(record_file.read_text())
    # A library planted beside the cache root, with a manifest, and a record naming them through "..".
    evil = cache.parent / "evil.so"
    evil.write_bytes(library.read_bytes())
    (cache.parent / _layout.MANIFEST_NAME).write_bytes((library.parent / _layout.MANIFEST_NAME).read_bytes())
    record.update(
        entry="..",
        library="evil.so",
        library_identity=jitops._files.file_identity(str(evil)),
        manifest_identity=jitops._files.file_identity(str(cache.parent / _layout.MANIFEST_NAME)),
    )
    record_file.write_text(json.dumps(record))
    result = load_tiny(cache)
    assert Path(result["library"]) == library and result["how"] == "cache"


def test_every_field_of_a_warm_record_is_checked_before_use(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    load_tiny(cache)
    monkeypatch.setenv("JITOPS_CACHE_DIR", str(cache))  # the child's settings, as tiny_env set them
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(cache.parent / "torch_ext"))
    settings = jitops.warm.settings(tiny_extension())
    record_file = Path(jitops.warm.record_path(str(cache), "jitops_test.tiny", settings))
    good = json.loads(record_file.read_text())
    assert jitops.warm.recorded_library(tiny_extension(), settings) is not None, "the control: the record as written is used"
    wrong_values = {
        "entry": [".", "..", "tiny", "other-" + good["entry"].rpartition("-")[2], good["entry"] + "/..", 7],
        "library": ["../x.so", "", ".so", None],
        "library_identity": [good["library_identity"][:4], [str(v) for v in good["library_identity"]], None],
        "manifest_identity": [None, [1.5] * len(good["manifest_identity"])],
        "checked": [7, [["a"]], [[1, None]], [["/x", [1, 2]]]],
        "with_cuda": ["yes", 1, None],
        "cuda_reason": [5, None],
    }
    for field, values in wrong_values.items():
        for value in values:
            record_file.write_text(json.dumps({**good, field: value}))
            assert jitops.warm.recorded_library(tiny_extension(), settings) is None, (field, value)


# 7, a prebuilt entry that anyone else may write: test_prebuilt.py, whose fixture makes prebuilt
# libraries (test_a_prebuilt_entry_anyone_else_may_write_is_refused).


# ---------------------------------------------------------------------------------------------
# 8-11: configuration and messages
# ---------------------------------------------------------------------------------------------


def test_a_cache_root_with_ninja_and_shell_characters_builds(tmp_path):
    cache = tmp_path / "dol$lar co:lon 'single' \"double\" ü日本" / "c"
    result = load_tiny(cache)
    assert result["how"] == "built" and result["value"] == 42
    assert Path(result["library"]).parent.parent == cache
    assert load_tiny(cache)["how"] == "cache"


def test_a_directory_at_the_lock_path_is_a_clear_error(tmp_path, cold_build):
    (entry,) = entries(cold_build["cache"])  # the same key in any cache root
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    lock = Path(_layout.lock_path(cache, *_layout.parse_entry_name(entry.name)[:2]))
    lock.mkdir()
    stderr = load_tiny_failing(cache)
    assert f"cannot take the lock {lock} to build jitops_test.tiny" in stderr and f"rm -r {lock}" in stderr, stderr
    assert "Traceback" in stderr and "IsADirectoryError" not in stderr
    assert entries(cache) == [lock] and list(cache.glob(".tmp-*")) == [], "nothing built, nothing left"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "abc"])
@pytest.mark.parametrize("variable", ["JITOPS_BUILD_TIMEOUT", "JITOPS_LOCK_TIMEOUT"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(jitops.BuildError, match=rf"{variable} must be a finite number of seconds above 0, got '{value}'"):
        _settings.get(variable)


@pytest.mark.parametrize(
    "variable,value", [("JITOPS_LOCK_TIMEOUT", "inf"), ("JITOPS_BUILD_TIMEOUT", "inf"), ("JITOPS_LOCK_TIMEOUT", "-1")]
)
def test_a_bad_timeout_stops_a_real_build_at_once_with_one_clear_error(tmp_path, variable, value):
    cache = tmp_path / "cache"
    proc = start_tiny(cache, **{variable: value})
    stdout, stderr = proc.communicate(timeout=60)  # -1 and inf used to wait forever with a lock held
    assert proc.returncode != 0
    assert f"{variable} must be a finite number of seconds above 0, got '{value}'" in stderr, stderr
    assert "Exception in thread" not in stderr and stderr.count("Traceback") == 1, stderr
    assert entries(cache) == []


def cuda_plan() -> _key.CudaPlan:
    cuda_home = _key.find_cuda_home()
    if cuda_home is None:
        pytest.skip("no CUDA toolkit (nvcc)")
    return _key.CudaPlan(True, "9.0", cuda_home, "")


def key(cuda: _key.CudaPlan) -> str:
    sources = tiny_extension()
    return _root.compute_key(_key.key_components(sources, _key.find_cxx(), cuda))


def host_compiler(path: Path, version: str) -> str:
    path.write_text(f'#!/bin/sh\ncase "$*" in *--version*) echo {version}; exit 0;; esac\nexec cc "$@"\n')
    path.chmod(0o755)
    return str(path)


# Read by torch's build file or nvcc for CUDA units (CC is nvcc's -ccbin, PYTORCH_NVCC replaces
# nvcc); then the C++ compiler's and linker's search paths.
CUDA_BUILD_VARIABLES = ("CC", "PYTORCH_NVCC", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
COMPILER_VARIABLES = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")


@pytest.mark.parametrize("variable", CUDA_BUILD_VARIABLES + COMPILER_VARIABLES)
def test_every_variable_that_changes_the_build_is_in_the_key_and_the_warm_settings(tmp_path, monkeypatch, variable):
    # Keys of a CUDA build are computed here without a GPU (nothing is built).
    cuda = cuda_plan()
    for name in CUDA_BUILD_VARIABLES + COMPILER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    unset_key, unset_settings = key(cuda), jitops.warm.settings(tiny_extension("root"))
    value = host_compiler(tmp_path / "host-cc", "cc 1.0") if variable in ("CC", "PYTORCH_NVCC") else "/some/where"
    monkeypatch.setenv(variable, value)
    assert key(cuda) != unset_key
    assert jitops.warm.settings(tiny_extension("root")) != unset_settings
    if variable in ("CC", "PYTORCH_NVCC"):
        # The program it names is probed like a compiler: replacing it changes the key too.
        before = key(cuda)
        host_compiler(tmp_path / "host-cc", "cc 2.0")
        assert key(cuda) != before
        assert str(tmp_path / "host-cc") in _key._key_files(tiny_extension(), None, cuda)
    if variable in CUDA_BUILD_VARIABLES:
        cpu_only = _key.CudaPlan(False, None, None, "test")
        monkeypatch.delenv(variable)
        cpu_key = key(cpu_only)
        monkeypatch.setenv(variable, value)
        assert key(cpu_only) == cpu_key, "a CPU-only build does not read it"


def test_a_toolkit_is_watched_only_where_the_plan_looked_for_one(tmp_path, monkeypatch):
    # A toolkit that appears at a folder find_cuda_home tries turns CUDA on where the plan looked
    # for one (CUDA sources, a CUDA torch), so the warm record checks those files; an extension
    # without CUDA sources (tiny) never looks, and its record skips them (fewer stat calls).
    import torch

    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-toolkit-yet"))
    watched = str(tmp_path / "no-toolkit-yet" / "bin" / "nvcc")
    with_cuda = jitops.Extension("with_cuda", ["k.cpp", "k.cu"], namespace="jitops_test", root=str(tmp_path))
    looked = _key.plan_cuda(with_cuda)
    assert looked.searched == (torch.version.cuda is not None)
    assert watched in _key._key_files(with_cuda, None, _key.CudaPlan(False, None, None, "no toolkit was found"))
    not_looked = _key.plan_cuda(tiny_extension())
    assert not not_looked.searched
    assert not any(path.startswith(str(tmp_path)) for path in _key._key_files(tiny_extension(), None, not_looked))


# ---------------------------------------------------------------------------------------------
# Also noticed
# ---------------------------------------------------------------------------------------------


def test_a_killed_builds_staging_folder_is_removed_by_the_next_build(tmp_path):
    cache = tmp_path / "cache"
    compiler = slow_compiler(tmp_path, 2)  # the same compiler for both builds: the same entry
    victim = start_tiny(cache, CXX=compiler)
    while not list(cache.glob(".tmp-jitops_test.tiny-*/build/build.ninja")):
        assert victim.poll() is None, "the build ended before it could be killed"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    (orphan,) = cache.glob(".tmp-jitops_test.tiny-*")
    assert f"-{victim.pid}-" in orphan.name, "a staging folder is named after its builder"
    live = cache / orphan.name.replace(f"-{victim.pid}-", f"-{os.getpid()}-")  # a live process's: kept
    live.mkdir()
    assert load_tiny(cache, CXX=compiler)["how"] == "built"
    assert not orphan.exists() and live.exists()


def test_under_umask_000_what_jitops_creates_stays_private(tmp_path):
    cache = tmp_path / "made" / "by" / "jitops" / "cache"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    assert finish(start_tiny(cache, umask=0, TMPDIR=str(tmp)))["how"] == "built"
    for folder in (tmp_path / "made", tmp_path / "made" / "by", tmp_path / "made" / "by" / "jitops", cache):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    (lock,) = cache.glob("jitops_test.tiny-*.lock")
    assert oct(lock.stat().st_mode & 0o777) == "0o600"


def test_a_file_at_an_entry_path_is_replaced_leaving_nothing(tmp_path, cold_build):
    (entry,) = entries(cold_build["cache"])
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / entry.name).write_text("not an entry")
    assert load_tiny(cache)["how"] == "built"
    assert (cache / entry.name).is_dir() and list(cache.glob(".tmp-*")) == []
