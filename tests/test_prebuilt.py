# SPDX-License-Identifier: MIT
"""The loader's step 4 (docs/ARCHITECTURE.md): prebuilt libraries (`jitops-cache build --out DIR`, then
JITOPS_PREBUILT_DIR) on a machine that cannot compile; refused when built for another setup."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import children
import pytest

import jitops._files
import jitops.warm
from jitops import _files, _layout

TIMEOUT_S = 300
REPO = Path(__file__).resolve().parent.parent

# Runs add2 in a fresh process and checks it against torch; prints how the op was loaded.
RUN_ADD2 = """
import torch, jitops
import jitops._files
import jitops.warm
a, b = torch.randn(1000), torch.randn(1000)
torch.testing.assert_close(jitops.add2(a, b), a + b, rtol=0, atol=0)
print(jitops.warm.loaded["jitops.add2"].how)
"""


def no_tools_path(tmp_path: Path) -> str:
    """A PATH with neither a compiler nor ninja on it."""
    bin_dir = tmp_path / "empty_bin"
    bin_dir.mkdir(exist_ok=True)
    return str(bin_dir)


def run(code_or_args: list[str], cwd: Path, python: str = sys.executable, **env_extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return children.run([python, *code_or_args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def prebuilt_dir(tmp_path_factory) -> Path:
    """`jitops-cache build add2 --out DIR`, using the session's cache (where add2 is built)."""
    out = tmp_path_factory.mktemp("prebuilt")
    result = children.run(
        [sys.executable, "-m", "cache_tools", "build", "add2", "--out", str(out), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    (built,) = json.loads(result.stdout)["built"]
    assert Path(built["prebuilt"]).parent == out
    return out


def test_build_out_writes_library_and_manifest(prebuilt_dir):
    (entry,) = prebuilt_dir.glob("jitops.add2-*")
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    assert _files.sha256_file(entry / manifest["library"]) == manifest["library_sha256"]
    assert not list(prebuilt_dir.glob(".*")), "no staging directory left behind"


def run_add2_without_tools(
    tmp_path: Path, prebuilt: Path, cache: Path | None = None, python_without_ninja=None
) -> subprocess.CompletedProcess:
    """add2 in a new process that finds no compiler (nor ninja, given python_without_ninja), with
    this prebuilt folder and the cache (default: tmp_path/cache)."""
    python, env = python_without_ninja or (sys.executable, {})
    return run(
        ["-c", RUN_ADD2],
        REPO,
        python,
        **env,
        PATH=no_tools_path(tmp_path),
        CXX="c++",
        JITOPS_CACHE_DIR=str(cache or tmp_path / "cache"),
        JITOPS_PREBUILT_DIR=str(prebuilt),
    )


@pytest.mark.slow
def test_loads_prebuilt_without_compiler_or_ninja(tmp_path, prebuilt_dir, python_without_ninja):
    result = run_add2_without_tools(tmp_path, prebuilt_dir, tmp_path / "empty_cache", python_without_ninja)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "prebuilt"
    assert "loading the prebuilt jitops.add2" in result.stderr and "no ninja on PATH" in result.stderr
    assert not (tmp_path / "empty_cache").exists() or not list((tmp_path / "empty_cache").glob("jitops.add2-*"))


def fake_compiler(path: Path, calls: Path, how: str) -> Path:
    """A C++ compiler that answers --version as c++ does and fails every compile (how="fails"), or
    is killed by SIGKILL as by the OOM killer (how="killed"), logging each call to calls."""
    path.write_text(
        "#!/bin/sh\n"
        '[ "$1" = --version ] && exec c++ --version\n'
        f"echo call >> {calls}\n"
        + ("echo 'fake-c++: error: this compiler is broken' >&2; exit 1\n" if how == "fails" else "kill -9 $$\n")
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("how, remembered", [("fails", True), ("killed", False)])
def test_a_failed_build_is_remembered_and_the_prebuilt_taken_at_once_until_the_toolchain_changes(
    tmp_path, prebuilt_dir, how, remembered
):
    calls = tmp_path / "calls"
    cxx = fake_compiler(tmp_path / "fake-c++", calls, how)
    env = {"CXX": str(cxx), "JITOPS_CACHE_DIR": str(tmp_path / "cache"), "JITOPS_PREBUILT_DIR": str(prebuilt_dir)}

    def add2() -> tuple[subprocess.CompletedProcess, int]:
        result = run(["-c", RUN_ADD2], REPO, **env)
        assert result.returncode == 0 and result.stdout.strip() == "prebuilt", result.stderr
        return result, len(calls.read_text().splitlines()) if calls.exists() else 0

    first, compiled = add2()
    assert compiled > 0 and "loading the prebuilt jitops.add2" in first.stderr
    second, compiled_again = add2()
    if remembered:
        assert compiled_again == compiled, "the same failed build is not tried again"
        assert "failed 0 min ago with these same sources, headers and toolchain" in second.stderr, second.stderr
        assert "this compiler is broken" in second.stderr, "the remembered failure is shown"
        fake_compiler(cxx, calls, how).write_text(cxx.read_text() + "# another toolchain\n")
        third, compiled_third = add2()
        assert compiled_third > compiled, "another toolchain tries again"
    else:
        assert compiled_again > compiled, "a killed compiler (OOM) may pass next time: tried again"


def test_mismatched_prebuilt_is_refused_naming_tools_and_difference(tmp_path, prebuilt_dir, python_without_ninja):
    mismatched = tmp_path / "mismatched"
    shutil.copytree(prebuilt_dir, mismatched)
    (entry,) = mismatched.glob("jitops.add2-*")
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    manifest["components"]["torch"] = "1.13.0"
    jitops._files.write_json_atomic(entry / _layout.MANIFEST_NAME, manifest)
    result = run_add2_without_tools(tmp_path, mismatched, python_without_ninja=python_without_ninja)
    assert result.returncode != 0
    assert "no ninja on PATH" in result.stderr and "no C++ compiler" in result.stderr
    assert "was built for another setup: torch '1.13.0', here " in result.stderr, result.stderr


def test_tampered_prebuilt_is_never_loaded(tmp_path, prebuilt_dir):
    tampered = tmp_path / "tampered"
    shutil.copytree(prebuilt_dir, tampered)
    (library,) = tampered.glob("jitops.add2-*/*.so")
    library.write_bytes(library.read_bytes() + b"planted")
    result = run_add2_without_tools(tmp_path, tampered)
    assert result.returncode != 0
    assert "does not match the sha256 in its manifest" in result.stderr, result.stderr


def build_wheel(out: Path, **env_extra: str) -> Path:
    env = {**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", "2"), **env_extra}
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-build-isolation", "--no-deps", "-q", "-w", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("jitops-*.whl")
    return wheel


def test_plain_wheel_is_source_only(tmp_path):
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    assert "jitops/kernels/cuda/add2.cu" in names and "jitops/bindings/add2.cpp" in names
    assert not [n for n in names if n.endswith(".so") or "/prebuilt/" in n]


@pytest.mark.slow
def test_an_unknown_op_for_an_ahead_of_time_wheel_is_named(tmp_path):
    env = {**os.environ, "JITOPS_AOT": "1", "JITOPS_AOT_OPS": "add2,nosuchop"}
    command = [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-build-isolation", "--no-deps", "-q", "-w", str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and not list(tmp_path.glob("*.whl"))
    assert "JITOPS_AOT_OPS: unknown op(s) ['nosuchop']" in result.stdout + result.stderr


@pytest.mark.slow
def test_ahead_of_time_wheel_loads_without_a_toolchain(tmp_path):
    # add2 alone (JITOPS_AOT_OPS): every op takes the same road through setup.py, and compiling all
    # five with setuptools is a minute of the suite.
    wheel = build_wheel(tmp_path / "wheel", JITOPS_AOT="1", JITOPS_AOT_OPS="add2")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifests = sorted(site.glob("jitops/prebuilt/*/manifest.json"))
    assert [_layout.parse_entry_name(m.parent.name)[0] for m in manifests] == ["jitops.add2"]
    # The installed package (on PYTHONPATH; run outside the checkout) with an empty cache: the
    # shipped library is loaded before building, with a toolchain or without one, and nothing compiles.
    for path in (no_tools_path(tmp_path), os.environ["PATH"]):
        result = run(
            ["-c", RUN_ADD2 + "print(jitops.warm.loaded['jitops.add2'].library)"],
            tmp_path,
            PYTHONPATH=str(site),
            PATH=path,
            CXX="c++",
            JITOPS_CACHE_DIR=str(tmp_path / "cache"),
        )
        assert result.returncode == 0, result.stderr
        how, library = result.stdout.split()
        assert how == "prebuilt" and Path(library).is_relative_to(site / "jitops" / "prebuilt")
        assert "building" not in result.stderr and not list((tmp_path / "cache").glob("jitops.*")), "nothing compiled"


def chmod_entry_folder(entry: Path) -> None:
    entry.chmod(0o777)


def chmod_library(entry: Path) -> None:
    next(entry.glob("*.so")).chmod(0o666)


def chmod_manifest(entry: Path) -> None:
    (entry / _layout.MANIFEST_NAME).chmod(0o664)


def chown_entry_folder(entry: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    os.chown(entry, 4242, 4242)


@pytest.mark.parametrize(
    "loosen,message",
    [
        (chmod_entry_folder, "prebuilt entry {entry} is writable by group or others"),
        (chmod_library, "prebuilt library {entry}/{library} is writable by group or others"),
        (chmod_manifest, "prebuilt manifest {entry}/manifest.json is writable by group or others"),
        (chown_entry_folder, "prebuilt entry {entry} is owned by uid 4242"),
    ],
    ids=["entry-folder-0777", "library-0666", "manifest-0664", "entry-folder-of-another-user"],
)
def test_a_prebuilt_entry_anyone_else_may_write_is_refused(tmp_path, prebuilt_dir, loosen, message):
    # Whoever may write into a prebuilt entry could put any library there with a manifest that
    # vouches for it: refused like a cache root (only this user or root, no group/other write).
    copy = tmp_path / "pb"
    shutil.copytree(prebuilt_dir, copy)
    (entry,) = copy.glob("jitops.add2-*")
    assert run_add2_without_tools(tmp_path, copy).stdout.strip() == "prebuilt", "the control: the copy as made is loaded"
    loosen(entry)
    result = run_add2_without_tools(tmp_path, copy)
    assert result.returncode != 0
    library = json.loads((entry / _layout.MANIFEST_NAME).read_text())["library"]
    assert message.format(entry=entry, library=library) in result.stderr, result.stderr


def test_a_prebuilt_entry_whose_manifest_names_another_op_is_refused(tmp_path, prebuilt_dir):
    copy = tmp_path / "pb"
    shutil.copytree(prebuilt_dir, copy)
    (entry,) = copy.glob("jitops.add2-*")
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    jitops._files.write_json_atomic(entry / _layout.MANIFEST_NAME, {**manifest, "name": "jitops.lltm"})
    (entry / _layout.MANIFEST_NAME).chmod(0o644)
    result = run_add2_without_tools(tmp_path, copy)
    assert result.returncode != 0 and "describes another build" in result.stderr, result.stderr


def test_a_prebuilt_whose_manifest_names_no_backends_is_judged_not_crashed_on(tmp_path, prebuilt_dir):
    """A fetched entry's manifest holds backends: null where its remote record named none; exported
    as a prebuilt, it is read as a library without CUDA kernels (it raised TypeError): loaded on a
    CPU-only torch, refused with the loader's error under a CUDA torch (which needs its CUDA major)."""
    copy = tmp_path / "pb"
    shutil.copytree(prebuilt_dir, copy)
    (entry,) = copy.glob("jitops.add2-*")
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    manifest["components"]["backends"] = None
    jitops._files.write_json_atomic(entry / _layout.MANIFEST_NAME, manifest)
    (entry / _layout.MANIFEST_NAME).chmod(0o644)
    result = run_add2_without_tools(tmp_path, copy)
    assert "TypeError" not in result.stderr, result.stderr
    assert result.returncode == 0 or "no prebuilt library matches" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "arch_list, gpus, missing",
    [
        ("8.0;9.0", [(9, 0)], []),
        ("8.0;9.0", [(8, 6), (8, 9)], []),  # SASS runs on its major with a minor up to the GPU's
        ("8.0;9.0", [(12, 0)], ["12.0"]),  # a newer major: no SASS runs, no PTX to compile
        ("8.6", [(8, 0)], ["8.0"]),  # a higher minor does not run on a lower one
        ("8.0 9.0+PTX", [(10, 0), (12, 0), (8, 6)], []),  # PTX up to the GPU's arch is compiled by the driver
        ("9.0+PTX", [(8, 9)], ["8.9"]),
        ("9.0a", [(9, 0)], []),
        ("9.0a", [(9, 1)], ["9.1"]),  # an arch-specific target runs on exactly its GPU
        ("", [(9, 0)], ["9.0"]),
        (None, [], []),  # no GPU visible: nothing to cover
    ],
)
def test_a_prebuilt_covers_a_gpu_only_with_code_it_can_run(arch_list, gpus, missing):
    from jitops.store import _prebuilt

    assert _prebuilt.missing_archs(arch_list, gpus) == missing


RUN_ADD2_ON_THE_GPU = """
import torch, jitops
import jitops._files
import jitops.warm
a, b = torch.randn(1 << 22, device="cuda"), torch.randn(1 << 22, device="cuda")
torch.testing.assert_close(jitops.add2(a, b), a + b, rtol=0, atol=0)
print(jitops.warm.loaded["jitops.add2"].how, jitops.warm.loaded["jitops.add2"].with_cuda)
"""


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_a_prebuilt_without_its_arch_is_refused_and_one_with_ptx_runs(tmp_path):
    # The rule above on a real GPU: add2 prebuilt for an older arch only (SASS this GPU cannot run)
    # is refused, naming the GPU's capability; the same arch with PTX is loaded and runs correctly.
    import torch

    major, minor = torch.cuda.get_device_capability()
    older = "8.0" if major != 8 else "7.5"
    outcomes = {}
    for arch_list in (older, f"{older}+PTX"):
        out = tmp_path / arch_list.replace("+", "-")
        built = run(
            ["-m", "cache_tools", "build", "add2", "--out", str(out)],
            REPO,
            TORCH_CUDA_ARCH_LIST=arch_list,
            JITOPS_CACHE_DIR=str(tmp_path / f"build-cache-{out.name}"),
        )
        assert built.returncode == 0, built.stderr
        outcomes[arch_list] = run(
            ["-c", RUN_ADD2_ON_THE_GPU],
            REPO,
            TORCH_CUDA_ARCH_LIST=f"{major}.{minor}",
            JITOPS_DISABLE_BUILD="1",
            JITOPS_PREBUILT_DIR=str(out),
            JITOPS_CACHE_DIR=str(tmp_path / "cache"),
        )
    refused, accepted = outcomes[older], outcomes[f"{older}+PTX"]
    assert refused.returncode != 0
    assert f"has no code for the visible GPU(s) of compute capability {major}.{minor} (built for {older})" in refused.stderr, (
        refused.stderr
    )
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.split() == ["prebuilt", "True"]
