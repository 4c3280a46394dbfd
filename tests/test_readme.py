# SPDX-License-Identifier: MIT
"""README is the front door: short, its Python runs as written, its install line installs, its
links lead somewhere, and its sample output is what the commands print now. (Its package-author
recipe: tests/test_downstream.py; its CLI commands: tests/test_cache_cli.py; `make demo` and
`make test`: CI.)"""

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import children
import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
TIMEOUT_S = 900
DOCS = [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]


def python_blocks() -> list[str]:
    """README's Python blocks meant to be run (not the package files, whose first line names their path)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return [b for b in blocks if not b.startswith("# src/")]


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 210, f"README has {len(lines)} lines: the reference belongs in docs/"
    headings = [line for line in lines if line.startswith("## ")]
    for needed in ("## Install", "## Quickstart", "## Your own C++/CUDA", "## For package authors", "## Set up"):
        assert any(h.startswith(needed) for h in headings), needed
    assert "make demo" in README.read_text() and "make test" in README.read_text()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_local_link_leads_to_a_file(path):
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text()):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


@pytest.mark.parametrize("index", range(len(python_blocks())))
@pytest.mark.slow
def test_readme_python_runs_as_written(index, tmp_path):
    code = python_blocks()[index]
    done = children.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{code}\n{done.stderr}"


def test_the_install_line_installs_jitops_and_its_command(tmp_path):
    # `pip install .` into a fresh venv that sees this environment's torch (a .pth): no index needed.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=TIMEOUT_S)
    python = tmp_path / "venv" / "bin" / "python"
    site = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True)
    (Path(site.strip()) / "parent.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    assert "pip install .    #" in README.read_text()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-build-isolation", "--no-deps", str(REPO)],
        check=True,
        timeout=TIMEOUT_S,
    )
    where = subprocess.check_output([str(python), "-c", "import jitops; print(jitops.__file__)"], cwd=tmp_path, text=True)
    assert Path(where.strip()).is_relative_to(tmp_path / "venv"), where
    version = subprocess.run([str(tmp_path / "venv" / "bin" / "jitops-cache"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("jitops-cache "), version


@pytest.mark.slow
def test_the_sample_output_is_what_the_commands_print():
    done = children.run(
        [sys.executable, str(REPO / "scripts" / "samples.py"), "--check"], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
