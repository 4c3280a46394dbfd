# SPDX-License-Identifier: MIT
"""A user's script type-checks under `mypy --strict` against jitops' annotations: load and
load_inline return a module (or, with is_python_module=False, a path), Extension takes a Path
root, register_fake is a typed decorator, load_all takes ops and extensions. And a wrong use is
caught, so the annotations are not Any in disguise."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

USER_SCRIPT = """
from pathlib import Path

import torch

import jitops
from jitops import Extension, LoadedLibrary

module = jitops.load("my_ext", ["my_ext.cpp"], extra_cflags=["-O3"])
print(module.__name__)
path: str = jitops.load("my_lib", [Path("my_lib.cpp")], is_python_module=False)
inline = jitops.load_inline("sin_add", cpp_sources="...", functions=["sin_add"])
print(inline.__name__, path.upper())

fused = Extension("fused", ["csrc/fused.cpp"], namespace="mypkg", root=Path(__file__).parent, include_dirs=["csrc/include"])
library: LoadedLibrary = fused.load()


@fused.register_fake("fused_gelu")
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = fused.load().ops.fused_gelu(x)
    return out


y: torch.Tensor = jitops.add2(torch.ones(2), torch.ones(2))
jitops.load_all(ops=["add2"], extensions=[fused])
"""

WRONG = """
import jitops

path: int = jitops.load("my_lib", ["my_lib.cpp"], is_python_module=False)
jitops.Extension("x", ["x.cpp"], namespace="n", root=3)
"""


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None and not os.environ.get("CI"),
    reason="mypy is not installed (the test extra: pip install -e '.[test]'); CI must run it",
)
def test_a_user_script_passes_mypy_strict_and_a_wrong_one_does_not(tmp_path):
    (tmp_path / "user_script.py").write_text(USER_SCRIPT)
    (tmp_path / "wrong.py").write_text(WRONG)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            "user_script.py",
            "wrong.py",
        ],
        cwd=tmp_path,
        env={"MYPYPATH": str(REPO), "PATH": "/usr/bin:/bin"},  # jitops from this checkout, as a user's editor sees it
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if e.startswith("user_script.py")], done.stdout
    assert any(e.startswith("wrong.py:4:") and '"str"' in e for e in errors), done.stdout  # load(...False) is a str
    assert any(e.startswith("wrong.py:5:") and '"root"' in e for e in errors), done.stdout  # root must be a path
