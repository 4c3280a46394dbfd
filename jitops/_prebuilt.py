# SPDX-License-Identifier: MIT
"""Prebuilt libraries, laid out as cache entries: what the loader takes when it cannot compile."""

from __future__ import annotations

import os
from pathlib import Path

from . import _cache
from ._core import PACKAGE_DIR, Extension, unsafe_path_problem, warn
from ._errors import BuildError, CacheError

# What a prebuilt .so must share with the running process (the entry itself checks the headers).
MATCH_FIELDS = ("recipe", "torch", "torch_git", "torch_cuda", "python_soabi", "cxx11_abi", "version", "sources_sha256")
PACKAGE_PREBUILT_DIR = Path(PACKAGE_DIR) / "prebuilt"


def prebuilt_dirs() -> list[Path]:
    """Where prebuilt libraries are looked for: JITOPS_PREBUILT_DIR (os.pathsep-separated), then
    the ones shipped inside the installed package."""
    configured = [Path(p) for p in os.environ.get("JITOPS_PREBUILT_DIR", "").split(os.pathsep) if p]
    return configured + [PACKAGE_PREBUILT_DIR]


def mismatch(components: dict, wanted: dict) -> list[str]:
    """How a prebuilt's key components differ from the running ones, one 'field X, here Y' each."""
    return [
        f"{field} {components.get(field)!r}, here {wanted.get(field)!r}"
        for field in MATCH_FIELDS
        if components.get(field) != wanted.get(field)
    ]


def find_prebuilt(extension: Extension, wanted: dict) -> tuple[Path | None, dict | None, list[str]]:
    """A verified prebuilt .so of the extension matching `wanted` (the running key components), its
    manifest, and why each other candidate was refused. With CUDA kernels first, where torch has CUDA."""
    refused, matches = [], []
    candidates = [e for d in prebuilt_dirs() for e, _ in _cache.list_entries(d, extension.qualified_name, extension.root)]
    for entry in candidates:
        try:
            library = entry.verified_library(touch=False, private=False)
            problem = untrusted_prebuilt(entry, library) if library else "removed while being read"
            manifest = entry.read_manifest()
        except (CacheError, OSError) as err:
            problem = str(err)
        if problem is not None:
            refused.append(f"{entry.path}: {problem}; not loaded")
            continue
        differences = mismatch(manifest.get("components", {}), wanted)
        if differences:
            refused.append(f"{entry.path} was built for another setup: " + ", ".join(differences))
        else:
            matches.append((library, manifest))
    if not matches:
        return None, None, refused
    with_cuda = [m for m in matches if "cuda" in m[1]["components"].get("backends", [])]
    library, manifest = (with_cuda or matches)[0] if wanted.get("torch_cuda") else matches[0]
    return library, manifest, refused


def untrusted_prebuilt(entry: _cache.Entry, library: Path) -> str | None:
    """Why someone other than this user or root could have put code into a prebuilt entry, or None.
    The package's own prebuilt folder is as trusted as the package's code beside it."""
    if entry.root == PACKAGE_PREBUILT_DIR:
        return None
    owners = (os.getuid(), 0)
    for path, what, directory in (
        (entry.root, "prebuilt directory", True),
        (entry.path, "prebuilt entry", True),
        (entry.manifest_path, "prebuilt manifest", False),
        (library, "prebuilt library", False),
    ):
        problem = unsafe_path_problem(str(path), what, owners, directory)
        if problem:
            return problem
    return None


_warned: set[str] = set()


def prebuilt_or_error(extension: Extension, components: dict, why: str, required: bool,
                      advice: str = "") -> tuple[Path, list[str]] | None:
    """A prebuilt .so matching the running process, and its backends. why: why building is not an
    option. No match: None, or (required) an error naming why, each refusal and advice."""
    library, manifest, refused = find_prebuilt(extension, components)
    if library is None:
        if not required:
            return None
        refusals = "".join(f"\n  - {reason}" for reason in refused) or (
            "\n  - none found in " + ", ".join(str(d) for d in prebuilt_dirs())
        )
        raise BuildError(
            f"jitops: cannot build {extension.qualified_name!r}: {why}\nand no prebuilt library matches this "
            f"torch/CUDA/Python:{refusals}" + (f"\n{advice}" if advice else "")
        )
    backends = list(manifest["components"].get("backends", []))
    if extension.qualified_name not in _warned:
        _warned.add(extension.qualified_name)
        warn(f"loading the prebuilt {extension.qualified_name} ({'+'.join(backends)}) from {library.parent}, "
             f"since building is not possible: {why}")
    return library, backends
