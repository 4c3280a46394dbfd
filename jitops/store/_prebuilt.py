# SPDX-License-Identifier: MIT
"""Prebuilt libraries, laid out as cache entries: those a package ships (its Extension's
prebuilt_dir, loaded before building) and those in JITOPS_PREBUILT_DIR (when it cannot compile)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _settings
from .._errors import BuildError, CacheError, warn
from .._files import unsafe_path_problem
from . import _entries
from ._stable import cuda_major, unfit_here

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._records import KeyComponents, Manifest
    from ..extension import Extension

# What a prebuilt .so must share with the running process (the entry itself checks the headers):
# torch's and Python's identity, or for a stable library (_stable.components) what replaces them.
MATCH_FIELDS: tuple[str, ...] = (
    "recipe",
    "torch",
    "torch_git",
    "torch_cuda",
    "python_soabi",
    "cxx11_abi",
    "version",
    "sources_sha256",
)
MATCH_FIELDS += ("abi", "torch_floor", "cxx_standard", "torch_cuda_major", "platform")


def prebuilt_dirs(extension: Extension | None, shipped_only: bool = False) -> list[Path]:
    """Where the extension's prebuilt libraries are looked for: the folder its package ships
    (prebuilt_dir), then JITOPS_PREBUILT_DIR (os.pathsep-separated), unless shipped_only."""
    shipped = [Path(extension.prebuilt_dir)] if extension is not None and extension.prebuilt_dir else []
    configured = [] if shipped_only else [Path(p) for p in _settings.get("JITOPS_PREBUILT_DIR")]
    return shipped + configured


_ARCH = r"(\d+)\.(\d+)([a-z]?)(\+PTX)?"  # a TORCH_CUDA_ARCH_LIST entry: 8.6, 9.0a, 9.0+PTX


def missing_archs(arch_list: str | None, capabilities: list[tuple[int, int]]) -> list[str]:
    """The visible GPUs a library built for arch_list has no code for: a GPU runs SASS of its major and a
    minor up to its own (an "a" arch only its very own), or PTX up to its own."""
    matched = [re.fullmatch(_ARCH, arch) for arch in (arch_list or "").replace(";", " ").split()]
    built = [(int(m[1]), int(m[2]), m[3], bool(m[4])) for m in matched if m]
    return [
        f"{major}.{minor}"
        for major, minor in capabilities
        if not any(
            (b_major == major and b_minor <= minor and (not suffix or b_minor == minor))
            or (ptx and (b_major, b_minor) <= (major, minor))
            for b_major, b_minor, suffix, ptx in built
        )
    ]


def visible_capabilities() -> list[tuple[int, int]]:
    import torch  # loaded by the caller already: this module imports without it

    if not torch.cuda.is_available():
        return []
    return sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})


def backends(components: KeyComponents) -> list[str]:
    """The backends a library was built with (none named: a fetched entry's record said none)."""
    return components.get("backends") or []


def mismatch(components: KeyComponents, wanted: Mapping[str, Any], fields=MATCH_FIELDS) -> list[str]:
    """How a prebuilt's key components differ from the running ones (in `fields`), one 'field X,
    here Y' each. A stable library with CUDA code needs this torch's CUDA major; a CPU-only one, none."""
    if wanted.get("abi") == "stable":
        wanted = {**wanted, "torch_cuda_major": cuda_major() if "cuda" in backends(components) else None}
    return [
        "other sources than these"
        if field == "sources_sha256"
        else f"{field} {components.get(field)!r}, here {wanted.get(field)!r}"
        for field in fields
        if components.get(field) != wanted.get(field)
    ]


def find_prebuilt(
    extension: Extension, wanted: KeyComponents, shipped_only: bool = False
) -> tuple[Path | None, Manifest | None, list[str]]:
    """A verified prebuilt .so matching `wanted` (the running key components) with code for every
    visible GPU (CUDA kernels first), its manifest, and why each other candidate was refused."""
    refused: list[str] = []
    matches: list[tuple[Path, Manifest]] = []
    capabilities = visible_capabilities()
    candidates = [
        e
        for d in prebuilt_dirs(extension, shipped_only)
        for e, _ in _entries.list_entries(d, extension.qualified_name, extension.root)
    ]
    for entry in candidates:
        try:
            library = entry.verified_library(touch=False, private=False)
            problem = untrusted_prebuilt(entry, library, extension) if library else "removed while being read"
            manifest = entry.read_manifest()
        except (CacheError, OSError) as err:
            problem = str(err)
        if problem is not None or library is None or manifest is None:
            refused.append(f"{entry.path}: {problem or 'removed while being read'}; not loaded")
            continue
        components = manifest.get("components", {})
        differences = mismatch(components, wanted)
        lacking = missing_archs(components.get("cuda_arch_list"), capabilities) if "cuda" in backends(components) else []
        unfit = unfit_here(manifest.get("built_under") or {}) if components.get("abi") == "stable" else ""
        if differences:
            refused.append(f"{entry.path} was built for another setup: " + ", ".join(differences))
        elif unfit:
            refused.append(f"{entry.path} cannot run here: {unfit}")
        elif lacking:
            refused.append(
                f"{entry.path} has no code for the visible GPU(s) of compute capability {', '.join(lacking)} "
                f"(built for {components.get('cuda_arch_list')})"
            )
        else:
            matches.append((library, manifest))
    if not matches:
        return None, None, refused
    with_cuda = [m for m in matches if "cuda" in backends(m[1]["components"])]
    library, manifest = (with_cuda or matches)[0] if wanted.get("torch_cuda") else matches[0]
    return library, manifest, refused


def untrusted_prebuilt(entry: _entries.Entry, library: Path, extension: Extension) -> str | None:
    """Why someone other than this user or root could have put code into a prebuilt entry, or None.
    A package's own prebuilt folder is as trusted as the package's code beside it."""
    if extension.prebuilt_dir and entry.root == Path(extension.prebuilt_dir):
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


def warn_refused_once(extension: Extension, refused: list[str]) -> None:
    """Say once per process why the prebuilt libraries a package ships were not loaded: without
    it, a wheel whose prebuilt went stale compiles for minutes without a word why."""
    if refused and extension.qualified_name + " refused" not in _warned:
        _warned.add(extension.qualified_name + " refused")
        warn(
            f"not loading the prebuilt {extension.qualified_name} shipped in {extension.prebuilt_dir}, so building it:"
            + "".join(f"\n  - {reason}" for reason in refused)
        )


def prebuilt_or_error(
    extension: Extension, components: KeyComponents, why: str, required: bool, advice: str = ""
) -> tuple[Path, list[str]] | None:
    """A prebuilt .so matching the running process, and its backends. why: why building is not an
    option. No match: None, or (required) an error naming why, each refusal and advice."""
    library, manifest, refused = find_prebuilt(extension, components)
    if library is None:
        if not required:
            return None
        refusals = "".join(f"\n  - {reason}" for reason in refused) or (
            "\n  - none found in "
            + (", ".join(str(d) for d in prebuilt_dirs(extension)) or "any folder: JITOPS_PREBUILT_DIR is not set")
        )
        raise BuildError(
            f"jitops: cannot build {extension.qualified_name!r}: {why}\nand no prebuilt library matches this "
            f"torch/CUDA/Python:{refusals}" + (f"\n{advice}" if advice else "")
        )
    assert manifest is not None  # found with its library
    found_backends = backends(manifest["components"])
    if extension.qualified_name not in _warned:
        _warned.add(extension.qualified_name)
        warn(
            f"loading the prebuilt {extension.qualified_name} ({'+'.join(found_backends)}) from {library.parent}, "
            f"since building is not possible: {why}"
        )
    return library, found_backends
