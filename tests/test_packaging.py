# SPDX-License-Identifier: MIT
"""What the wheel and the sdist carry: the licence, the type marker, metadata fit for an index,
and (the sdist) everything a distribution's recipe needs to run the tests."""

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import children
import pytest

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600


def build(kind: str, out: Path) -> Path:
    """setuptools' build backend, as pip calls it (with this environment's setuptools)."""
    code = f"from setuptools import build_meta; print(build_meta.build_{kind}({str(out)!r}))"
    result = children.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return out / result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    return zipfile.ZipFile(build("wheel", tmp_path_factory.mktemp("wheel")))


def test_the_wheel_carries_the_licence_and_the_type_marker(wheel):
    names = wheel.namelist()
    assert any(re.fullmatch(r"jitops-[^/]+\.dist-info/licenses/LICENSE", n) for n in names), names
    assert "jitops/py.typed" in names and "jitops/include/jitops/library.h" in names
    # site-packages gains the package, JITOPS_DROP_IN's .pth and the one module it imports.
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"jitops", "jitops-drop-in.pth", "_jitops_drop_in.py"}, top
    metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for line in (
        "License-Expression: MIT",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: C++",
        "Classifier: Environment :: GPU :: NVIDIA CUDA",
    ):
        assert line in metadata.splitlines(), line
    description = metadata.split("\n\n", 1)[1]
    assert not re.search(r"\]\((?!https?://)", description), "a relative link breaks off the repository"
    assert not re.search(r"/(work|tmp|root|home)/", description), "a machine's path in the description"


def test_the_sdist_carries_the_tests_examples_and_makefile(tmp_path):
    with tarfile.open(build("sdist", tmp_path)) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    tracked = subprocess.run(
        ["git", "ls-files", "tests", "examples"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked, "a git checkout lists its files"
    expected = [
        "LICENSE",
        "Makefile",
        "README.md",
        "pyproject.toml",
        "setup.cfg",
        "setup.py",
        "jitops-drop-in.pth",
        "_jitops_drop_in.py",
    ]
    missing = sorted(set(tracked + expected) - names)
    assert not missing, missing
    assert not [n for n in names if "__pycache__" in n or n.endswith(".so")]
