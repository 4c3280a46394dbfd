# SPDX-License-Identifier: MIT
"""Find or build one op's library and load it, following DESIGN.md's resolution order.

1. loaded in this process already      -> return it
2. warm record (_warm.py)               -> load the library it names: stat calls, no key computed
   verified cache entry                 -> load it (no lock, no ninja, no subprocess)
3. build under the entry's file lock    -> _build.py
4. prebuilt fallback                    -> a matching library from JITOPS_PREBUILT_DIR or the package
5. otherwise one BuildError naming the op, what is missing or the first compiler error, and
   the path of the full log.

jitops.ops.require tries step 2's warm record itself (_warm.recall), so that a warm start never
imports this module. Here is what identifies a build (the key, and what it depends on) and the
cache lookup; building is in _build.py, imported only when an op has to be built or taken
prebuilt. No step before 3 spawns a process or takes a lock, and none re-hashes a file whose
identity is unchanged.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from . import __version__
from . import _cache, _warm
from ._warm import PYTHON_SOABI, LoadedOp, process_abi

# Compiler flags are part of every cache key. -O3 because torch's load() adds no optimisation flag.
# -fno-trapping-math (clang's default) lets GCC vectorize loops with branch-free selects, such as the
# clamps in kernels/fast_math.h; no jitops kernel relies on floating-point exceptions.
CFLAGS = ["-O3", "-fno-trapping-math"]
CUDA_CFLAGS = ["-O3"]
# --as-needed: the library names only the libraries it takes symbols from (c10, torch_cpu, cudart)
# among its dependencies, not all that torch's link line lists (torch, torch_python, c10_cuda,
# torch_cuda). Every dlopen walks the dependencies of each, however long loaded, comparing names
# with every library in the process; some toolchains (Ubuntu's) pass it by default, others do not.
LDFLAGS = ["-Wl,--as-needed"]


def link_flags() -> list[str]:
    """LDFLAGS, and the C++ runtime this process has loaded (libstdc++.so.6) named as a library to
    link against. An op library then takes its C++ runtime from the process, as torch's libraries
    do, even where the compiler links its own copy statically (some toolchains' g++ is set up to):
    the linker takes every symbol it can from the first library that defines it, and leaves the
    compiler's static copy only what this runtime lacks, as Red Hat's devtoolset does by design.
    A whole static copy makes a library ten times larger and exports its four thousand symbols,
    which doubled the library's dlopen (H100 machine: 1.06 ms against 0.50 ms; BENCHMARKS.md),
    and it is a second runtime in the process. The library still names the runtime by its soname
    (libstdc++.so.6), not by this path, so it loads wherever that loads."""
    runtime = _warm.cxx_runtime()
    return LDFLAGS + ([runtime] if runtime else [])


SOURCE_ROOT = Path(_warm.SOURCE_ROOT)


class OpSources:
    """The source files of one op under a root holding kernels/ and bindings/ (DESIGN.md layout)."""

    def __init__(self, op: str, root: Path = SOURCE_ROOT):
        self.op = op
        self.root = Path(root)
        self.cpu = self.root / "kernels" / "cpu" / f"{op}.cpp"
        self.cuda = self.root / "kernels" / "cuda" / f"{op}.cu"
        self.binding = self.root / "bindings" / f"{op}.cpp"
        self.extension_name = f"jitops_{op}"

    def hashed_files(self) -> list[str]:
        # Every header, since any of them may be included; the op's sources whether or not this
        # build compiles them, so one key names one set of sources.
        headers = []
        for directory in ("kernels", "bindings"):
            with os.scandir(os.path.join(self.root, directory)) as found:
                headers += [f.path for f in found if f.name.endswith((".h", ".cuh"))]
        sources = [str(p) for p in (self.cpu, self.cuda, self.binding)]
        return sorted(headers) + [p for p in sources if os.path.exists(p)]

    def check_present(self) -> None:
        missing = [str(p) for p in (self.cpu, self.binding) if not p.is_file()]
        if missing:
            from ._build import BuildError

            raise BuildError(f"jitops: op {self.op!r} has no sources: missing {', '.join(missing)}")


# ---------------------------------------------------------------------------------------------
# The toolchain
# ---------------------------------------------------------------------------------------------


class CudaPlan:
    """Whether this build compiles the CUDA kernels, for which archs, and if not, why not."""

    def __init__(self, enabled: bool, arch_list: str | None, cuda_home: Path | None, reason: str):
        self.enabled = enabled
        self.arch_list = arch_list
        self.cuda_home = cuda_home
        self.reason = reason  # why CUDA is off; empty when enabled

    @property
    def nvcc(self) -> Path | None:
        return self.cuda_home / "bin" / "nvcc" if self.cuda_home else None

    @property
    def backends(self) -> list[str]:
        return ["cpu", "cuda"] if self.enabled else ["cpu"]


def find_cxx() -> Path | None:
    """The C++ compiler torch's load() will run: $CXX, else c++."""
    found = shutil.which(os.environ.get("CXX", "c++"))
    return Path(found) if found else None


def find_cuda_home() -> Path | None:
    """The CUDA toolkit to build with: torch's own guesses, in torch's order ($CUDA_HOME/$CUDA_PATH,
    the grandparent of the nvcc on PATH, /usr/local/cuda), plus the nvcc on PATH with its links
    resolved; the first that holds bin/nvcc and include/cuda_runtime.h.

    Torch takes its first guess whether or not it is a toolkit: an nvcc on PATH may be a wrapper
    script (/usr/local/bin/nvcc), whose grandparent is none. Where torch's guess is a toolkit, this
    is the same one; a build points torch at the result (_build._use_cuda_home), and the key names it.
    """
    for home in _cuda_home_candidates():
        if all(os.path.isfile(os.path.join(home, *part)) for part in _TOOLKIT_FILES):
            return home
    return None


_TOOLKIT_FILES = (("bin", "nvcc"), ("include", "cuda_runtime.h"))  # what makes a folder a toolkit


def _cuda_home_candidates():
    """find_cuda_home's guesses, in its order (a generator: PATH is searched only when needed)."""
    configured = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if configured:
        yield Path(configured)  # the usual case, without searching PATH
    on_path = shutil.which("nvcc")
    if on_path:
        yield Path(on_path).parent.parent
        yield Path(on_path).resolve().parent.parent
    yield Path("/usr/local/cuda")


def plan_cuda() -> CudaPlan:
    import torch

    if torch.version.cuda is None:
        return CudaPlan(False, None, None, f"torch {torch.__version__} is a CPU-only build")
    cuda_home = find_cuda_home()
    if cuda_home is None:
        return CudaPlan(False, None, None, "no CUDA toolkit (nvcc) was found: set CUDA_HOME")
    arch_list = _warm.cuda_arch_list()
    if not arch_list:
        return CudaPlan(False, None, cuda_home, "no CUDA device is visible and TORCH_CUDA_ARCH_LIST is not set")
    return CudaPlan(True, arch_list, cuda_home, "")


_probed_versions: dict[str, str] = {}  # this process's copy of the cache root's probes


def tool_version(binary: Path) -> str:
    """First informative line of `binary --version`, cached per binary identity in the cache root."""
    return _tool_probe(binary)[1]


def _tool_probe(binary: Path) -> tuple[str, str]:
    """binary's resolved path and its version line (the key names both). A process is started only
    for a binary not probed before (in this cache root) with its current identity."""
    resolved, identity = _cache.binary_identity(binary)
    if identity in _probed_versions:
        return resolved, _probed_versions[identity]
    root = _cache.cache_root()
    _probed_versions.update(_cache.read_toolchain_probes(root))
    if identity in _probed_versions:
        return resolved, _probed_versions[identity]
    import subprocess

    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    # nvcc's first lines are a banner; the release line is the one that identifies it.
    release = [line for line in lines if "release" in line]
    version = (release or lines or [f"unknown (exit {result.returncode})"])[0]
    _cache.remember_toolchain_probe(root, identity, version)
    _probed_versions[identity] = version
    return resolved, version


def _tool_description(binary: Path) -> str:
    return ": ".join(_tool_probe(binary))


# ---------------------------------------------------------------------------------------------
# The key
# ---------------------------------------------------------------------------------------------


def abi_components(sources: OpSources, record_hashes: bool = True) -> dict:
    """The key components a built .so must share with this process to be usable here (see
    _build.PREBUILT_MATCH_FIELDS): no compiler is run to get them. record_hashes=False hashes the
    sources without reading or writing the cache root's record (for commands that only inspect)."""
    return {
        **process_abi(),
        "sources_sha256": _cache.hash_files(
            sources.hashed_files(), sources.root, _cache.known_file_hashes() if record_hashes else None
        ),
    }


def build_environment(cuda: CudaPlan) -> dict:
    """The environment variables set here that change what a build produces (_warm.py lists them;
    the CUDA ones only where CUDA units are built), with their values."""
    names = _warm.COMPILER_ENVIRONMENT + (_warm.CUDA_BUILD_ENVIRONMENT if cuda.enabled else ())
    return {name: os.environ[name] for name in names if name in os.environ}


def environment_tools(cuda: CudaPlan) -> list[Path]:
    """The programs build_environment() names (nvcc's host compiler $CC, the $PYTORCH_NVCC that
    replaces nvcc), as found on PATH: the key probes them like the compilers."""
    environment = build_environment(cuda)
    commands = [environment.get("CC", ""), *environment.get("PYTORCH_NVCC", "").split()[:1]]
    return [Path(found) for found in map(shutil.which, filter(None, commands)) if found]


def key_components(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> dict:
    """Everything that can change the built .so. Any difference gives a different cache entry."""
    return {
        "op": sources.op,
        **process_abi(),
        "cuda_arch_list": cuda.arch_list if cuda.enabled else None,
        "backends": cuda.backends,
        "cflags": CFLAGS + (["-DWITH_CUDA"] if cuda.enabled else []),
        "cuda_cflags": CUDA_CFLAGS if cuda.enabled else [],
        "ldflags": link_flags(),
        "sources_sha256": abi_components(sources)["sources_sha256"],
        "cxx": _tool_description(cxx) if cxx else None,
        "nvcc": _tool_description(cuda.nvcc) if cuda.enabled and cuda.nvcc else None,
        "environment": build_environment(cuda),
        "environment_tools": [_tool_description(tool) for tool in environment_tools(cuda)],
    }


def _key_folders(sources: OpSources) -> list[str]:
    """The folders whose contents decide which files the key reads: kernels/ and bindings/ (the
    headers), the op's source folders, every folder on PATH (the compilers, nvcc)."""
    op_folders = [sources.root / "kernels", sources.root / "bindings", sources.cpu.parent, sources.cuda.parent]
    return [str(folder) for folder in op_folders] + [folder for folder in os.environ.get("PATH", "").split(os.pathsep) if folder]


def _key_files(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> list[str]:
    """The files key_components reads (the sources it hashes; the compilers it probes, named as
    found, each file's identity that of the file its links end at), the files that make each CUDA
    toolkit find_cuda_home looks at one, and this module, which holds the flags."""
    compilers = [str(cxx) if cxx else ""] + ([str(cuda.nvcc)] if cuda.enabled and cuda.nvcc else [])
    compilers += [str(tool) for tool in environment_tools(cuda)]
    toolkits = [os.path.join(home, *part) for home in _cuda_home_candidates() for part in _TOOLKIT_FILES]
    return sources.hashed_files() + compilers + toolkits + [__file__]


class PlannedEntry:
    """Where one op's build for this process lives: its cache entry, what keyed it, and what the
    key depends on (for the warm record: the settings, and the files and folders with their
    identities)."""

    def __init__(self, sources: OpSources):
        sources.check_present()
        self.sources = sources
        # Everything the key depends on is read before the key is computed from it, the folders
        # before the files found in them: a change meanwhile misses the warm record next time,
        # rather than matching a key computed from what was there before.
        self.settings = _warm.settings(sources.op, str(sources.root))
        folders = _key_folders(sources)
        self.dependencies = [(folder, _warm.identity_or_none(folder)) for folder in folders]
        self.cxx, cuda = find_cxx(), plan_cuda()
        if cuda.enabled and not sources.cuda.is_file():
            cuda = CudaPlan(False, None, None, f"op {sources.op!r} has no CUDA source")
        self.cuda = cuda
        self.dependencies += [(path, _warm.identity_or_none(path)) for path in _key_files(sources, self.cxx, cuda)]
        self.dependencies = list(dict(self.dependencies).items())  # each path once (PATH may repeat one)
        self.components = key_components(sources, self.cxx, cuda)
        self.entry = _cache.Entry(_cache.cache_root(), sources.op, _cache.compute_key(self.components))


def planned_entry(op: str, root: Path = SOURCE_ROOT) -> PlannedEntry:
    return PlannedEntry(OpSources(op, Path(root)))


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


_load_locks: dict[str, threading.Lock] = {}
_load_locks_guard = threading.Lock()


def load_op(op: str, root: Path = SOURCE_ROOT, cached_only: bool = False) -> LoadedOp | None:
    """The op's extension, loaded into this process: from memory, the cache, or a fresh build.
    cached_only=True stops after step 2: None where the op would have to be built (or taken
    prebuilt), so that a caller can load warm ops at once and hand only the rest to threads."""
    if op in _warm.loaded:
        return _warm.loaded[op]
    with _load_locks_guard:
        op_lock = _load_locks.setdefault(op, threading.Lock())
    with op_lock:
        if op not in _warm.loaded:
            loaded = _load_uncached(OpSources(op, Path(root)), cached_only)
            if loaded is None:
                return None
            _warm.loaded[op] = loaded
        return _warm.loaded[op]


def _load_uncached(sources: OpSources, cached_only: bool = False) -> LoadedOp | None:
    recalled = _warm.recall(sources.op, str(sources.root))
    if recalled is not None:
        return recalled
    planned = PlannedEntry(sources)
    for attempt in ("first", "again"):
        library = verified_or_discarded(planned.entry)
        how, backends = "cache", planned.cuda.backends
        if library is None and cached_only:
            return None
        if library is None:
            from . import _build

            library, backends, how = _build.build_or_prebuilt(planned)
        import torch

        try:
            # dlopen runs the library's STABLE_TORCH_LIBRARY registrations; it defines no Python module.
            torch.ops.load_library(str(library))
            break
        except OSError as err:
            if how == "prebuilt" or attempt == "again" or not _worth_another_try(planned.entry, library, err):
                raise
    with_cuda = "cuda" in backends
    reason = "" if with_cuda else (planned.cuda.reason or "the prebuilt library has no CUDA kernels")
    if how != "prebuilt":
        _remember(planned, library, with_cuda, reason)
    return LoadedOp(library, with_cuda, reason, how)


def _worth_another_try(entry: _cache.Entry, library: Path, err: OSError) -> bool:
    """After a cache entry's verified library failed to open: True where finding or building it
    again may succeed (it was removed meanwhile, by `jitops-cache clear` or prune; or its bytes
    no longer match their sha256, when it is discarded with a warning). A library that matches its
    sha256 and still does not open is an error naming it and the way out."""
    if not library.exists() or verified_or_discarded(entry, full_hash=True) is None:
        return True
    raise _cache.CacheError(
        f"jitops: the library {library} of the cache entry {entry.path} matches its sha256 but does not open: "
        f"{err.__cause__ or err}. `jitops-cache clear {entry.op}` removes the entry, and the next load builds it again."
    ) from err


def _remember(planned: PlannedEntry, library: Path, with_cuda: bool, reason: str) -> None:
    """The warm record of a library that was just verified (or built: then its identity is the
    one its manifest was published with)."""
    entry = planned.entry
    if entry.verified_identities is None:
        try:
            entry.verified_library(touch=False)
        except _cache.CacheError:
            return
    _warm.remember(planned.sources.op, planned.settings, planned.dependencies, str(entry.path), str(library),
                   entry.verified_identities, with_cuda, reason)


def verified_or_discarded(entry: _cache.Entry, full_hash: bool = False) -> Path | None:
    """The entry's verified library, or None: absent, or corrupt (then warned about and removed).
    full_hash: hash the library even where its identity is the one recorded with its hash."""
    try:
        return entry.verified_library(full_hash=full_hash)
    except _cache.CacheError as err:
        _cache.warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
        entry.discard()
        return None
