# SPDX-License-Identifier: MIT
"""A copy of this checkout for a test that pip-installs it: pip builds in the tree it is given
(setuptools' build/ at its top), so two test workers installing this one tree at once would
remove each other's files."""

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIPPED = shutil.ignore_patterns(".git", ".venv*", "*.egg-info", "__pycache__", ".remote", "bench_*", "build")


def copy_of_checkout(tree: Path) -> Path:
    """This checkout's sources copied to tree (made here), without venvs, caches or build output."""
    shutil.copytree(REPO, tree, ignore=SKIPPED, symlinks=True)
    return tree
