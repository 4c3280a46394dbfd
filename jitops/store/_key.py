# SPDX-License-Identifier: MIT
"""What identifies a build: the toolchain found here, the key of an Extension, and the cache entry
it names (PlannedEntry). Nothing here compiles; a compiler's `--version` is probed once per binary."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import _settings
from .._errors import BuildError, CacheError
from .._files import identity_or_none, private_dir_problem
from .._layout import COMPILER_ENVIRONMENT, CUDA_BUILD_ENVIRONMENT, DROP_IN_NAMESPACE
from ..warm import cuda_arch_list, cxx_runtime, process_abi
from ..warm import settings as process_settings
from . import _entries, _root, _stable

if TYPE_CHECKING:
    from .._records import KeyComponents
    from ..extension import Extension

# Flags every extension is linked with. --as-needed: the library names only the libraries it takes
# symbols from, so its dlopen does not walk all of torch's (some toolchains pass it by default).
LDFLAGS = ["-Wl,--as-needed"]
# Flags every unit is compiled with, before the extension's own (which may override them).
# -fvisibility-inlines-hidden: the inline member functions of torch's and pybind11's headers stay
# private to the library, so its dlopen binds those references itself instead of looking each up
# in every loaded library (exported functions and static locals are unaffected).
CFLAGS = ["-fvisibility-inlines-hidden"]
CUDA_CFLAGS = ["-Xcompiler=-fvisibility-inlines-hidden"]  # for the host code nvcc compiles


def link_flags(extension: Extension) -> list[str]:
    """The extension's link flags, LDFLAGS, and the C++ runtime this process loaded (named by its
    soname: a compiler's static copy would sit whole in every library, slowing each dlopen)."""
    runtime = cxx_runtime()
    return list(extension.ldflags) + LDFLAGS + ([runtime] if runtime else [])


# The toolchain
class CudaPlan:
    """Whether this build compiles the CUDA units, for which archs, and if not, why not."""

    def __init__(self, enabled: bool, arch_list: str | None, cuda_home: Path | None, reason: str, searched: bool = True):
        # reason: why CUDA is off; empty when enabled. searched: whether the plan looked for a
        # toolkit (a toolkit that appears later changes it only then)
        self.enabled, self.arch_list, self.cuda_home, self.reason = enabled, arch_list, cuda_home, reason
        self.searched = searched

    @property
    def nvcc(self) -> Path | None:
        return self.cuda_home / "bin" / "nvcc" if self.cuda_home else None

    @property
    def backends(self) -> list[str]:
        return ["cpu", "cuda"] if self.enabled else ["cpu"]

    def environment_tools(self) -> list[Path]:
        """The programs this plan's build environment names ($CC, $PYTORCH_NVCC), as found on PATH."""
        return environment_tools(self)


def find_cxx() -> Path | None:
    """The C++ compiler torch's build file runs: $CXX, else c++."""
    found = shutil.which(os.environ.get("CXX", "c++"))
    return Path(found) if found else None


def find_cuda_home() -> Path | None:
    """The CUDA toolkit: the first of torch's guesses ($CUDA_HOME/$CUDA_PATH, nvcc on PATH, its
    resolved path, /usr/local/cuda) holding bin/nvcc and include/cuda_runtime.h."""
    for home in _cuda_home_candidates():
        if all(os.path.isfile(os.path.join(home, *part)) for part in _TOOLKIT_FILES):
            return home
    return None


_TOOLKIT_FILES = (("bin", "nvcc"), ("include", "cuda_runtime.h"))  # what makes a folder a toolkit


def _cuda_home_candidates():
    """find_cuda_home's guesses, in its order (a generator: PATH is searched only when needed)."""
    configured = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if configured:
        yield Path(configured)
    on_path = shutil.which("nvcc")
    if on_path:
        yield Path(on_path).parent.parent
        yield Path(on_path).resolve().parent.parent
    yield Path("/usr/local/cuda")


def plan_cuda(extension: Extension | None = None) -> CudaPlan:
    """Whether the extension's CUDA units are built here (extension None: any extension's)."""
    import torch  # loaded by the caller already: this module imports without it

    if extension is not None and not extension.has_cuda_sources() and extension.cuda != "always":
        return CudaPlan(False, None, None, f"{extension.qualified_name} has no CUDA source", searched=False)
    if extension is not None and extension.cuda == "never":
        return CudaPlan(False, None, None, f"{extension.qualified_name} is declared with cuda='never'", searched=False)
    if torch.version.cuda is None:
        return CudaPlan(False, None, None, f"torch {torch.__version__} is a CPU-only build", searched=False)
    cuda_home = find_cuda_home()
    if cuda_home is None:
        return CudaPlan(False, None, None, "no CUDA toolkit (nvcc) was found: set CUDA_HOME")
    arch_list = (extension.cuda_archs if extension is not None else None) or cuda_arch_list()
    if not arch_list:
        return CudaPlan(False, None, cuda_home, "no CUDA device is visible and TORCH_CUDA_ARCH_LIST is not set")
    return CudaPlan(True, arch_list, cuda_home, "")


PROBE_TIMEOUT_S = 60.0  # or JITOPS_BUILD_TIMEOUT where that is shorter


def tool_probe(binary: Path, root: str | None = None) -> tuple[str, str]:
    """binary's resolved path and the first informative line of its `--version` (the key names both),
    probed only for a binary not seen before (in this cache root) with its current identity."""
    resolved, identity = _root.binary_identity(binary)
    probes = _root.toolchain_probes(root)
    if not isinstance(probes.records.get(identity), str):
        import subprocess  # only for a binary not probed before

        timeout = min(PROBE_TIMEOUT_S, _settings.get("JITOPS_BUILD_TIMEOUT"))

        # A session of its own: a compiler (or wrapper) that hangs is ended with all it started.
        with subprocess.Popen(
            [str(binary), "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
        ) as probe:
            try:
                stdout, _ = probe.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(probe.pid, signal.SIGKILL)
                probe.communicate()
                raise BuildError(
                    f"jitops: `{binary} --version` did not answer within {timeout:g} s (stopped); the compiler "
                    "(CXX, PYTORCH_NVCC, CC or CUDA_HOME's nvcc) must run: is it a wrapper that waits for something?"
                ) from None
        result = subprocess.CompletedProcess(probe.args, probe.returncode, stdout)
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        release = [line for line in lines if "release" in line]  # nvcc's: its first lines are a banner
        probes.put(identity, (release or lines or [f"unknown (exit {result.returncode})"])[0])
        probes.save()
    return resolved, probes.records[identity]


# The key
def sources_sha256(extension: Extension, record_hashes: bool = True, each: dict | None = None) -> str:
    """sha256 over every declared source, compiled here or not. record_hashes=False: without the
    root's hash record. each: filled with each source's sha256, by its relative name."""
    known = _root.known_file_hashes(extension.cache_dir) if record_hashes else None
    return _root.hash_files(extension.paths(), Path(extension.root), known, each)


def is_stable(extension: Extension) -> bool:
    """Whether the extension is built for every torch from the floor up (its stable_abi, under a torch
    at least the floor): keyed by _stable.components() instead of torch's and Python's identity.
    stable_abi="auto" (jitops.load's): where its sources include only the stable API's torch headers."""
    wanted = extension.stable_abi
    if wanted == "auto":
        wanted = not extension.python_module and _stable.uses_stable_headers_only(extension.paths())
    return bool(wanted) and _stable.torch_supports_floor()


def abi_components(
    extension: Extension, record_hashes: bool = True, each: dict | None = None, exact: bool = False, with_cuda: bool = False
) -> dict:
    """The key components a built .so must share with this process (_prebuilt.MATCH_FIELDS).
    exact: torch's and Python's identity even for a stable extension; with_cuda: its CUDA code is built."""
    digest = sources_sha256(extension, record_hashes, each)
    abi = _stable.components(with_cuda) if is_stable(extension) and not exact else process_abi()
    return {**abi, "version": extension.version, "sources_sha256": digest}


def build_environment(cuda: CudaPlan) -> dict:
    """The environment variables set here that change what a build produces, with their values."""
    names = COMPILER_ENVIRONMENT + (CUDA_BUILD_ENVIRONMENT if cuda.enabled else ())
    return {name: os.environ[name] for name in names if name in os.environ}


def environment_tools(cuda: CudaPlan) -> list[Path]:
    """The programs build_environment() names ($CC, $PYTORCH_NVCC), as found on PATH."""
    environment = build_environment(cuda)
    commands = [environment.get("CC", ""), *environment.get("PYTORCH_NVCC", "").split()[:1]]
    return [Path(found) for found in map(shutil.which, filter(None, commands)) if found]


def key_components(
    extension: Extension, cxx: Path | None, cuda: CudaPlan, each: dict | None = None, exact: bool = False
) -> KeyComponents:
    """Everything that can change the built .so, but where the sources sit: one entry serves every
    copy of the same content (each copy's headers are checked at load). each: see sources_sha256.
    A stable extension's (unless exact) targets the floor's stable API and holds no torch or Python version."""
    namespace = [f"-DJITOPS_NAMESPACE={extension.namespace}"]  # for <jitops/library.h>
    # The target flags stay in an exact build that stands in for a stable one: its objects are the same.
    namespace += _stable.target_flags() if is_stable(extension) else []
    root = extension.cache_dir  # its record files there, where it has a root of its own
    described = lambda tool: ": ".join(tool_probe(tool, root))  # its path and version, as the key names them
    return {
        "name": extension.qualified_name,
        **abi_components(extension, each=each, exact=exact, with_cuda=cuda.enabled),
        "cuda_arch_list": cuda.arch_list if cuda.enabled else None,
        "backends": cuda.backends,
        "sources": [s for s in extension.sources if cuda.enabled or not s.endswith(".cu")],
        "include_dirs": list(extension.include_dirs),
        "cflags": CFLAGS + list(extension.cflags) + namespace + (["-DWITH_CUDA"] if cuda.enabled else []),
        "cuda_cflags": CUDA_CFLAGS + list(extension.cuda_cflags) + namespace if cuda.enabled else [],
        "ldflags": link_flags(extension),
        "cxx": described(cxx) if cxx else None,
        "nvcc": described(cuda.nvcc) if cuda.enabled and cuda.nvcc else None,
        "environment": build_environment(cuda),
        "environment_tools": [described(tool) for tool in environment_tools(cuda)],
        **({"python_module": True} if extension.python_module else {}),  # only where set: other keys stay as they were
    }


# What identifies the machine's compilers rather than what they make: left out of the remote's key,
# so that a pod with another compiler of the same ABI, or none, shares what a CI writer built.
COMPILER_COMPONENTS = ("cxx", "nvcc", "environment_tools")
COMPILER_VARIABLES = ("CC", "PYTORCH_NVCC")


def portable_components(components: KeyComponents) -> KeyComponents:
    """The key components that decide whether a library runs on a machine, wherever it was built:
    torch, Python and C++ ABI, CUDA, sources and flags; not the compilers, nor the archs (per record)."""
    portable = cast("KeyComponents", {k: v for k, v in components.items() if k not in COMPILER_COMPONENTS + ("cuda_arch_list",)})
    portable["environment"] = {k: v for k, v in components.get("environment", {}).items() if k not in COMPILER_VARIABLES}
    portable["ldflags"] = [os.path.basename(f) if os.path.isabs(f) else f for f in components.get("ldflags", [])]
    return portable


def _key_folders(extension: Extension) -> list[str]:
    """The folders whose contents decide which files the key reads: the sources', the include
    directories, every folder on PATH."""
    folders = {os.path.dirname(path) for path in extension.paths()} | set(extension.include_paths())
    return sorted(folders) + [folder for folder in os.environ.get("PATH", "").split(os.pathsep) if folder]


def _key_files(extension: Extension, cxx: Path | None, cuda: CudaPlan) -> list[str]:
    """The files key_components reads (sources, compilers), those that make a folder a CUDA toolkit
    for find_cuda_home (where the plan looked for one), and this module (CFLAGS, LDFLAGS)."""
    compilers = [str(cxx) if cxx else ""] + ([str(cuda.nvcc)] if cuda.enabled and cuda.nvcc else [])
    compilers += [str(tool) for tool in environment_tools(cuda)]
    homes = _cuda_home_candidates() if cuda.searched else ()
    toolkits = [os.path.join(home, *part) for home in homes for part in _TOOLKIT_FILES]
    return extension.paths() + compilers + toolkits + [__file__]


def missing_sources(extension: Extension) -> str | None:
    """Why the extension's sources cannot be read, or None. A package's are package data, which a
    wheel leaves out unless its packaging lists them: the likeliest cause, named."""
    missing = [path for path in extension.paths() if not os.path.isfile(path)]
    if not missing:
        return None
    problem = f"extension {extension.qualified_name!r} is missing sources: {', '.join(missing)}"
    if extension.namespace != DROP_IN_NAMESPACE:
        problem += (
            f". If {extension.root} is an installed package, it was packaged without them: list its C++/CUDA "
            "sources and headers as package data (setuptools' package_data, or MANIFEST.in with "
            "include_package_data), and build the wheel again"
        )
    return problem


class PlannedEntry:
    """One extension's build for this process: its cache entry, what keyed it, and what the key
    depends on (for the warm record: the settings, and the files and folders with their identities)."""

    def __init__(self, extension: Extension, exact_because: str = ""):
        problem = missing_sources(extension)
        if problem:
            raise BuildError(f"jitops: {problem}")
        self.extension = extension
        # The cache root first: creating it must not change a folder whose identity is read below.
        try:
            root = _root.cache_root(extension.cache_dir)
            self.read_only = None
        except CacheError as err:  # a read-only build_directory: what it holds still loads
            if extension.cache_dir is None or not os.path.isdir(extension.cache_dir) or private_dir_problem(extension.cache_dir):
                raise
            root, self.read_only = Path(extension.cache_dir), err
        # Everything the key depends on is read before the key, folders before the files in them:
        # a change meanwhile misses the warm record next time rather than matching a stale key.
        self.settings = process_settings(extension)
        self.dependencies = [(folder, identity_or_none(folder)) for folder in _key_folders(extension)]
        self.cxx, self.cuda = find_cxx(), plan_cuda(extension)
        self.dependencies += [(path, identity_or_none(path)) for path in _key_files(extension, self.cxx, self.cuda)]
        self.dependencies = list(dict(self.dependencies).items())  # each path once (PATH may repeat one)
        self.source_hashes: dict[str, str] = {}  # each source's sha256, as the key read it
        self.components = key_components(extension, self.cxx, self.cuda, self.source_hashes, exact=bool(exact_because))
        key = _root.compute_key(self.components)
        # A stable key whose library failed the audit here before: its exact key at once.
        refused = _stable_refused(root, key) if self.stable and not exact_because else ""
        if refused:
            exact_because = refused
            self.components = key_components(extension, self.cxx, self.cuda, self.source_hashes, exact=True)
            key = _root.compute_key(self.components)
        self.exact_because = exact_because  # why a stable extension is built for this torch alone, or ""
        self.entry = _entries.Entry(root, extension.qualified_name, key, source_root=extension.root)

    @property
    def stable(self) -> bool:
        """Whether this entry's key is the stable one (no torch or Python version)."""
        return self.components.get("abi") == "stable"

    @property
    def toolchain_components(self) -> KeyComponents:
        """The components with torch's and Python's exact identity, for the keys of objects and PCHs:
        compiled with one torch's headers, they are never reused under another."""
        return cast("KeyComponents", {**self.components, **process_abi()}) if self.stable else self.components


def _stable_refused(root: Path, key: str) -> str:
    refused = _root.stable_refused(root).records.get(key)
    return refused if isinstance(refused, str) else ""
