# SPDX-License-Identifier: MIT
"""Find or build one op's library and load it, following DESIGN.md's resolution order.

1. loaded in this process already      -> return it
2. verified cache entry                 -> load it (no lock, no ninja, no subprocess)
3. build under the entry's file lock    -> _build.py
4. prebuilt fallback                    -> a matching library from JITOPS_PREBUILT_DIR or the package
5. otherwise one BuildError naming the op, what is missing or the first compiler error, and
   the path of the full log.

Steps 1 and 2 are every user's start-up path, so this module holds only what they need: the key
(what identifies a build) and the cache lookup. Building is in _build.py, imported only when an
op has to be built or taken prebuilt. A warm load spawns no process, takes no lock, re-hashes
nothing whose identity is unchanged, and reuses the key computed last time while every file it
was computed from keeps its identity (_cache.KeyMemo).
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import threading
from pathlib import Path

from . import __version__
from . import _cache

# Compiler flags are part of every cache key. -O3 because torch's load() adds no optimisation flag.
# -fno-trapping-math (clang's default) lets GCC vectorize loops with branch-free selects, such as the
# clamps in kernels/fast_math.h; no jitops kernel relies on floating-point exceptions.
CFLAGS = ["-O3", "-fno-trapping-math"]
CUDA_CFLAGS = ["-O3"]
LDFLAGS: list[str] = []

# The Python ABI tag (e.g. cpython-311-x86_64-linux-gnu), read from the import system's extension
# suffix rather than sysconfig: sysconfig costs a millisecond to import and fills its variables
# lazily and not thread-safely (load_all() computes keys in several threads; one once got None).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]

# Classes here are plain ones, not dataclasses, and patterns are compiled where they are used: a
# dataclass or a compiled pattern at import costs every warm load time for nothing.


def _find_source_root() -> Path:
    """kernels/ and bindings/ sit inside the installed package, or beside it in a checkout."""
    package_dir = Path(__file__).resolve().parent
    for candidate in (package_dir, package_dir.parent):
        if (candidate / "kernels").is_dir() and (candidate / "bindings").is_dir():
            return candidate
    raise ImportError(f"jitops: no kernels/ and bindings/ sources found in or beside {package_dir}")


SOURCE_ROOT = _find_source_root()


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
        # build compiles them, so one key names one set of sources. (Strings and os.scandir, not
        # pathlib: this runs on every warm load.)
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
    configured = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if configured and _is_toolkit(Path(configured)):
        return Path(configured)  # the usual case, without searching PATH
    on_path = shutil.which("nvcc")
    candidates = [Path(on_path).parent.parent, Path(on_path).resolve().parent.parent] if on_path else []
    for home in candidates + [Path("/usr/local/cuda")]:
        if _is_toolkit(home):
            return home
    return None


def _is_toolkit(home: Path) -> bool:
    return os.path.isfile(os.path.join(home, "bin", "nvcc")) and os.path.isfile(
        os.path.join(home, "include", "cuda_runtime.h")
    )


def plan_cuda() -> CudaPlan:
    import torch

    if torch.version.cuda is None:
        return CudaPlan(False, None, None, f"torch {torch.__version__} is a CPU-only build")
    cuda_home = find_cuda_home()
    if cuda_home is None:
        return CudaPlan(False, None, None, "no CUDA toolkit (nvcc) was found: set CUDA_HOME")
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if not arch_list and torch.cuda.is_available():
        capabilities = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
        arch_list = ";".join(f"{major}.{minor}" for major, minor in sorted(capabilities))
    if not arch_list:
        return CudaPlan(False, None, cuda_home, "no CUDA device is visible and TORCH_CUDA_ARCH_LIST is not set")
    return CudaPlan(True, arch_list, cuda_home, "")


# The environment variables find_cxx and plan_cuda read.
_TOOLCHAIN_ENVIRONMENT = ("CXX", "PATH", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST")
_toolchains: dict[tuple, tuple[Path | None, CudaPlan]] = {}


def toolchain(remembered: bool = True) -> tuple[Path | None, CudaPlan]:
    """(find_cxx(), plan_cuda()). remembered=True takes them as found earlier in this process under
    the same values of the environment variables they read, so load_all searches PATH and probes
    the GPUs once, not once per op; a build asks for them anew. (The compilers' identities are read
    for every key all the same (_key_inputs): a compiler replaced in place is still seen. One put
    earlier on an unchanged PATH in the middle of a process is seen by the next build or process.)"""
    environment = tuple(os.environ.get(name) for name in _TOOLCHAIN_ENVIRONMENT)
    found = _toolchains.get(environment) if remembered else None
    if found is None:
        found = _toolchains[environment] = (find_cxx(), plan_cuda())
    return found


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


def openmp_flags() -> list[str]:
    """Compile and link flags that make at::parallel_for parallel in the CPU kernels that use it.

    With an OpenMP build of torch, at::parallel_for is an inline `#pragma omp parallel` loop
    (ATen/ParallelOpenMP.h): compiled without -fopenmp it silently runs on one thread. The .so then
    needs libgomp.so.1, which torch has already loaded, so there is one OpenMP runtime. (Kernels on
    the stable API call torch::stable::parallel_for, which runs inside libtorch and needs neither.)
    """
    import torch

    return ["-fopenmp"] if torch.backends.openmp.is_available() else []


# ---------------------------------------------------------------------------------------------
# The key
# ---------------------------------------------------------------------------------------------


def _process_abi() -> dict:
    """What a built .so must share with this process, apart from its sources."""
    import torch

    return {
        "jitops": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python_soabi": PYTHON_SOABI,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def abi_components(sources: OpSources, record_hashes: bool = True) -> dict:
    """The key components a built .so must share with this process to be usable here (see
    _build.PREBUILT_MATCH_FIELDS): no compiler is run to get them. record_hashes=False hashes the
    sources without reading or writing the cache root's record (for commands that only inspect)."""
    return {
        **_process_abi(),
        "sources_sha256": _cache.hash_files(
            sources.hashed_files(), sources.root, _cache.known_file_hashes() if record_hashes else None
        ),
    }


def _key_context(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> dict:
    """The key components that are read from this process, not from files: with the identities of
    the files behind the rest (_key_inputs), they determine the key (_cache.KeyMemo).

    Everything here is in key_components too; the memo's fingerprint relies on that."""
    return {
        "op": sources.op,
        **_process_abi(),
        "cuda_arch_list": cuda.arch_list if cuda.enabled else None,
        "backends": cuda.backends,
        "cflags": CFLAGS + openmp_flags() + (["-DWITH_CUDA"] if cuda.enabled else []),
        "cuda_cflags": CUDA_CFLAGS if cuda.enabled else [],
        "ldflags": LDFLAGS + openmp_flags(),
    }


def key_components(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> dict:
    """Everything that can change the built .so. Any difference gives a different cache entry."""
    return {
        **_key_context(sources, cxx, cuda),
        "sources_sha256": abi_components(sources)["sources_sha256"],
        "cxx": _tool_description(cxx) if cxx else None,
        "nvcc": _tool_description(cuda.nvcc) if cuda.enabled and cuda.nvcc else None,
    }


def _key_inputs(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> list[str]:
    """The files key_components reads (the sources it hashes, the compilers it probes), each named
    as found before any link is resolved: a key computed from them holds while each keeps its
    identity (size, mtime, inode, device), the compilers' as the files their links end at."""
    compilers = [str(cxx) if cxx else ""] + ([str(cuda.nvcc)] if cuda.enabled and cuda.nvcc else [])
    return sources.hashed_files() + compilers


class PlannedEntry:
    """Where one op's build for this process lives: its cache entry, and what keyed it.

    The key is the one remembered for the same context and file identities (_cache.KeyMemo) when
    there is one, else computed from the key components; use_memo=False always computes it (the
    build path does, so that what it builds and publishes is keyed by what it read)."""

    def __init__(self, sources: OpSources, use_memo: bool = True):
        sources.check_present()
        self.sources = sources
        self.cxx, cuda = toolchain(remembered=use_memo)
        if cuda.enabled and not sources.cuda.is_file():
            cuda = CudaPlan(False, None, None, f"op {sources.op!r} has no CUDA source")
        self.cuda = cuda
        inputs = _key_inputs(sources, self.cxx, cuda)
        identities = [_cache.identity_or_none(path) for path in inputs]
        fingerprint = _cache.KeyMemo.fingerprint(_key_context(sources, self.cxx, cuda), inputs, identities)
        root = _cache.cache_root()
        memo = _cache.key_memo(root)
        key = memo.key(fingerprint) if use_memo else None
        self._components = None
        if key is None:
            key = _cache.compute_key(self.components)
            memo.remember(fingerprint, key)
        self.entry = _cache.Entry(root, sources.op, key)

    @property
    def components(self) -> dict:
        """The key components (computed when first asked for: a warm load needs only the key)."""
        if self._components is None:
            self._components = key_components(self.sources, self.cxx, self.cuda)
        return self._components


def planned_entry(op: str, root: Path = SOURCE_ROOT) -> PlannedEntry:
    return PlannedEntry(OpSources(op, Path(root)))


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


class LoadedOp:
    """An op's library, loaded into this process (its TORCH_LIBRARY registrations have run)."""

    def __init__(self, library: Path, with_cuda: bool, cuda_reason: str, how: str):
        self.library = library
        self.with_cuda = with_cuda
        self.cuda_reason = cuda_reason  # why the CUDA kernels are absent; empty when present
        self.how = how  # "cache", "built" or "prebuilt"


_loaded: dict[str, LoadedOp] = {}
_load_locks: dict[str, threading.Lock] = {}
_load_locks_guard = threading.Lock()


def load_op(op: str, root: Path = SOURCE_ROOT, cached_only: bool = False) -> LoadedOp | None:
    """The op's extension, loaded into this process: from memory, the cache, or a fresh build.
    cached_only=True stops after step 2: None where the op would have to be built (or taken
    prebuilt), so that a caller can load warm ops at once and hand only the rest to threads."""
    if op in _loaded:
        return _loaded[op]
    with _load_locks_guard:
        op_lock = _load_locks.setdefault(op, threading.Lock())
    with op_lock:
        if op not in _loaded:
            loaded = _load_uncached(OpSources(op, Path(root)), cached_only)
            if loaded is None:
                return None
            _loaded[op] = loaded
        return _loaded[op]


def _load_uncached(sources: OpSources, cached_only: bool = False) -> LoadedOp | None:
    planned = PlannedEntry(sources)
    library = verified_or_discarded(planned.entry)
    how, backends = "cache", planned.cuda.backends
    if library is None and cached_only:
        return None
    if library is None:
        from . import _build

        # The key of what is built and published is computed from the files as they are now.
        library, backends, how = _build.build_or_prebuilt(PlannedEntry(sources, use_memo=False))
    import torch

    # dlopen runs the library's STABLE_TORCH_LIBRARY registrations; it defines no Python module.
    torch.ops.load_library(str(library))
    with_cuda = "cuda" in backends
    reason = "" if with_cuda else (planned.cuda.reason or "the prebuilt library has no CUDA kernels")
    return LoadedOp(library, with_cuda, reason, how)


def verified_or_discarded(entry: _cache.Entry) -> Path | None:
    """The entry's verified library, or None: absent, or corrupt (then warned about and removed)."""
    try:
        return entry.verified_library()
    except _cache.CacheError as err:
        _cache.warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
        entry.discard()
        return None
