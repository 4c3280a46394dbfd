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
from checkout import copy_of_checkout

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


PACKAGE = REPO / "tests" / "downstream_pkg"


def package_snippets() -> list[tuple[str, str, bool, list[str]]]:
    """README's and docs/' blocks whose first line names a file of the package (`# src/...`,
    `// src/...`, `# pyproject.toml`): (doc, path, excerpt?, the block's other lines)."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```\w*\n(.*?)```", doc.read_text(), re.S):
            first, *lines = block.splitlines()
            named = re.fullmatch(r"(?:#|//) (src/\S+|pyproject\.toml)( \(excerpt.*\))?", first)
            if named:
                found.append((doc.name, named.group(1), bool(named.group(2)), lines))
    return found


@pytest.mark.parametrize("doc, path, excerpt, lines", package_snippets(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_package_snippet_is_its_whole_file_or_a_marked_excerpt_of_it(doc, path, excerpt, lines):
    """A whole file as tests/downstream_pkg has it (its license line aside), or, marked `(excerpt)`,
    lines of it in the same order: a reader who copies a snippet gets code that builds."""
    file = [line for line in (PACKAGE / path).read_text().splitlines() if "SPDX-License-Identifier" not in line]
    if not excerpt:
        assert lines == file, f"{doc}: the block for {path} is not the whole file; mark it (excerpt) or make it whole"
        return
    remaining = iter(line for line in file if line.strip())
    for line in filter(str.strip, lines):
        assert line in remaining, f"{doc}: {line!r} is not in {path} (in this order)"


def test_the_readme_shows_the_package_whole():
    assert {path for doc, path, _, _ in package_snippets() if doc == "README.md"} >= {
        "src/demo_pkg/_ext.py",
        "src/demo_pkg/csrc/scale.cpp",
        "src/demo_pkg/__init__.py",
        "pyproject.toml",
    }


def shell_lines() -> list[tuple[str, str]]:
    """(doc, command) for each command line of the docs' sh blocks, its comment left out."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
            for line in block.splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command and not command.startswith(("#", "$")):
                    found.append((doc.name, command))
    return found


def test_every_documented_jitops_cache_command_parses_and_every_pip_wheel_keeps_its_torch():
    """The docs' shell commands, checked without running them: each jitops-cache line is accepted
    by the CLI's own parser, and each `pip wheel` builds against the torch here (no build
    isolation for an ahead-of-time build) without downloading dependencies (--no-deps)."""
    import shlex

    from cache_tools.__main__ import build_parser

    commands = shell_lines()
    without_variables = [(doc, re.sub(r"^(\w+=\S*\s+)+", "", c)) for doc, c in commands]  # VAR=value prefixes
    cli = [(doc, c) for doc, c in without_variables if c.startswith("jitops-cache ")]
    wheels = [(doc, c) for doc, c in commands if "pip wheel" in c]
    assert len(cli) >= 8 and len(wheels) >= 2, commands
    for doc, command in cli:
        try:
            build_parser().parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"{doc}: `{command}` is refused by jitops-cache's parser")
    for doc, command in wheels:
        assert "--no-deps" in command, f"{doc}: `{command}` would download every dependency, a torch among them"
        if "JITOPS_AOT=1" in command:
            assert "--no-build-isolation" in command, f"{doc}: `{command}` would build against another torch"


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
    tree = copy_of_checkout(tmp_path / "tree")  # pip builds in the tree: a worker installing it at once would collide
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-build-isolation", "--no-deps", str(tree)],
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
