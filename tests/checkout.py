# SPDX-License-Identifier: MIT
"""A copy of this checkout for a test that pip-installs it: pip builds in the tree it is given
(setuptools' build/ at its top), so two test workers installing this one tree at once would
remove each other's files."""

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SKIP = shutil.ignore_patterns(".git", ".venv*", "*.egg-info", "__pycache__", ".remote", "bench_*")


def copy_of_checkout(tree: Path) -> Path:
    """This checkout's sources copied to tree (made here), without venvs, caches or build output."""

    def skip(folder: str, names: list[str]) -> set[str]:  # setuptools' build/ at the top, not jitops/build/
        return set(_SKIP(folder, names)) | ({"build"} if Path(folder) == REPO else set())

    shutil.copytree(REPO, tree, ignore=skip, symlinks=True)
    return tree
