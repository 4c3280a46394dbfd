# SPDX-License-Identifier: MIT
"""Build or load one op's extension, following DESIGN.md's resolution order.

1. loaded in this process already      -> return it
2. verified cache entry                 -> load it (no lock, no ninja, no subprocess)
3. build under the entry's file lock    -> torch's load() in a child process and a private
                                           directory, then an atomic publish
4. prebuilt fallback                    -> a matching library from JITOPS_PREBUILT_DIR or the package
5. otherwise one BuildError naming the op, what is missing or the first compiler error, and
   the path of the full log.

The build runs in a child process (`python -m jitops._build SPEC`) so that ninja's step counter can
be shown live, the compiler output can be kept as a log, and a failed or killed build never leaves
half-initialised state in the user's process.

A warm load (step 2) is on every user's start-up path, so it spawns no process, takes no lock and
re-hashes nothing whose identity is unchanged (_cache.py), and importing this module runs as
little as it can.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import __version__
from . import _cache

# Compiler flags are part of every cache key. -O3 because torch's load() adds no optimisation flag.
# -fno-trapping-math (clang's default) lets GCC vectorize loops with branch-free selects, such as the
# clamps in kernels/fast_math.h; no jitops kernel relies on floating-point exceptions.
CFLAGS = ["-O3", "-fno-trapping-math"]
CUDA_CFLAGS = ["-O3"]
LDFLAGS: list[str] = []

# How long a process waits for another one's build of the same entry (JITOPS_LOCK_TIMEOUT):
# generous for a cold CUDA build on a busy machine, but finite.
DEFAULT_LOCK_TIMEOUT_S = 1800.0

# The Python ABI tag (e.g. cpython-311-x86_64-linux-gnu), read from the import system's extension
# suffix rather than sysconfig: sysconfig costs a millisecond to import and fills its variables
# lazily and not thread-safely (load_all() computes keys in several threads; one once got None).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]

# A kernel file may ask to be compiled as several translation units, which ninja runs in parallel:
# a line `// jitops: shards N` makes the loader compile it N times, with JITOPS_SHARD set to 0 .. N-1
# and JITOPS_SHARD_COUNT to N, and each unit instantiates its share of the kernels. (Compiled once,
# without those macros, as setup.py's ahead-of-time build does, the file instantiates them all.)
# Patterns in this module are compiled where they are used, by re's own cache, and its classes are
# plain ones, not dataclasses: building either at import costs a warm load time for nothing.
_SHARDS = rb"(?m)^// jitops: shards (\d+)\s*$"


def openmp_flags() -> list[str]:
    """Compile and link flags that make at::parallel_for parallel in the CPU kernels that use it.

    With an OpenMP build of torch, at::parallel_for is an inline `#pragma omp parallel` loop
    (ATen/ParallelOpenMP.h): compiled without -fopenmp it silently runs on one thread. The .so then
    needs libgomp.so.1, which torch has already loaded, so there is one OpenMP runtime. (Kernels on
    the stable API call torch::stable::parallel_for, which runs inside libtorch and needs neither.)
    """
    import torch

    return ["-fopenmp"] if torch.backends.openmp.is_available() else []


def _find_source_root() -> Path:
    """kernels/ and bindings/ sit inside the installed package, or beside it in a checkout."""
    package_dir = Path(__file__).resolve().parent
    for candidate in (package_dir, package_dir.parent):
        if (candidate / "kernels").is_dir() and (candidate / "bindings").is_dir():
            return candidate
    raise ImportError(f"jitops: no kernels/ and bindings/ sources found in or beside {package_dir}")


SOURCE_ROOT = _find_source_root()


class BuildError(RuntimeError):
    """An op could not be built or loaded. The message says why and what to do."""


class OpSources:
    """The source files of one op under a root holding kernels/ and bindings/ (DESIGN.md layout)."""

    def __init__(self, op: str, root: Path = SOURCE_ROOT):
        self.op = op
        self.root = Path(root)
        self.cpu = self.root / "kernels" / "cpu" / f"{op}.cpp"
        self.cuda = self.root / "kernels" / "cuda" / f"{op}.cu"
        self.binding = self.root / "bindings" / f"{op}.cpp"
        self.extension_name = f"jitops_{op}"

    def hashed_files(self) -> list[Path]:
        # Every header, since any of them may be included; the op's sources whether or not this
        # build compiles them, so one key names one set of sources.
        header_dirs = (self.root / "kernels", self.root / "bindings")
        headers = sorted(p for d in header_dirs for p in d.iterdir() if p.suffix in (".h", ".cuh"))
        return headers + [p for p in (self.cpu, self.cuda, self.binding) if p.exists()]

    def check_present(self) -> None:
        missing = [str(p) for p in (self.cpu, self.binding) if not p.is_file()]
        if missing:
            raise BuildError(f"jitops: op {self.op!r} has no sources: missing {', '.join(missing)}")

    @staticmethod
    def shards(kernel_file: Path) -> int:
        """How many translation units kernel_file asks to be compiled as (see _SHARDS)."""
        match = re.search(_SHARDS, kernel_file.read_bytes())
        return max(1, int(match.group(1))) if match else 1


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
    """The CUDA toolkit to build with: $CUDA_HOME/$CUDA_PATH, nvcc's on PATH, /usr/local/cuda.

    A candidate counts only if it holds bin/nvcc and include/cuda_runtime.h: an nvcc on PATH may
    be a wrapper script (/usr/local/bin/nvcc), whose grandparent is no toolkit. The child build
    gets the result as CUDA_HOME, so torch's load() links against the same toolkit.
    """
    configured = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    on_path = shutil.which("nvcc")
    candidates = [Path(configured)] if configured else []
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        if (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file():
            return home
    return None


_probed_versions: dict[str, str] = {}  # this process's copy of the cache root's probes


def tool_version(binary: Path) -> str:
    """First informative line of `binary --version`, cached per binary identity in the cache root."""
    identity = _cache.binary_identity(binary)
    if identity in _probed_versions:
        return _probed_versions[identity]
    root = _cache.cache_root()
    _probed_versions.update(_cache.read_toolchain_probes(root))
    if identity in _probed_versions:
        return _probed_versions[identity]
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    # nvcc's first lines are a banner; the release line is the one that identifies it.
    release = [line for line in lines if "release" in line]
    version = (release or lines or [f"unknown (exit {result.returncode})"])[0]
    _cache.remember_toolchain_probe(root, identity, version)
    _probed_versions[identity] = version
    return version


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


def missing_tools(cxx: Path | None) -> list[str]:
    """What a build needs and this machine lacks, each with how to get it."""
    missing = []
    if shutil.which("ninja") is None:
        missing.append("ninja is not on PATH (pip install ninja, and activate the environment it went into)")
    if cxx is None:
        missing.append(f"no C++ compiler: {os.environ.get('CXX', 'c++')!r} is not on PATH (install g++ or set CXX)")
    return missing


def abi_components(sources: OpSources, record_hashes: bool = True) -> dict:
    """The key components a built .so must share with this process to be usable here (see
    _cache.PREBUILT_MATCH_FIELDS): no compiler is run to get them. record_hashes=False hashes the
    sources without reading or writing the cache root's record (for commands that only inspect)."""
    import torch

    return {
        "jitops": __version__,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "python_soabi": PYTHON_SOABI,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "sources_sha256": _cache.hash_files(
            sources.hashed_files(), sources.root, _cache.known_file_hashes() if record_hashes else None
        ),
    }


def key_components(sources: OpSources, cxx: Path | None, cuda: CudaPlan) -> dict:
    """Everything that can change the built .so. Any difference gives a different cache entry."""
    return {
        "op": sources.op,
        **abi_components(sources),
        "cxx": f"{cxx.resolve()}: {tool_version(cxx)}" if cxx else None,
        "nvcc": f"{cuda.nvcc.resolve()}: {tool_version(cuda.nvcc)}" if cuda.enabled and cuda.nvcc else None,
        "cuda_arch_list": cuda.arch_list if cuda.enabled else None,
        "backends": cuda.backends,
        "cflags": CFLAGS + openmp_flags() + (["-DWITH_CUDA"] if cuda.enabled else []),
        "cuda_cflags": CUDA_CFLAGS if cuda.enabled else [],
        "ldflags": LDFLAGS + openmp_flags(),
    }


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
    sources.check_present()
    cxx = find_cxx()
    cuda = plan_cuda()
    if cuda.enabled and not sources.cuda.is_file():
        cuda = CudaPlan(False, None, None, f"op {sources.op!r} has no CUDA source")
    components = key_components(sources, cxx, cuda)
    root = _cache.cache_root()
    entry = _cache.Entry(root, sources.op, _cache.compute_key(components))

    library = _verified_or_discarded(entry)
    how = "cache"
    backends = cuda.backends
    if library is None and cached_only:
        return None
    if library is None:
        missing = missing_tools(cxx)
        if missing:
            # DESIGN.md's step 4: building is impossible, so a matching prebuilt or a clear error.
            (library, backends), how = _prebuilt(sources.op, components, why="; ".join(missing), required=True), "prebuilt"
        elif cuda_toolkit_missing(cuda) and (prebuilt := _prebuilt(sources.op, components, cuda.reason, required=False)):
            # A build here would be CPU-only; a prebuilt may have the CUDA kernels.
            (library, backends), how = prebuilt, "prebuilt"
        else:
            try:
                library, how = _build_locked(entry, sources, cuda, components)
            except BuildError as err:
                why = str(err).removeprefix("jitops: ")
                (library, backends), how = _prebuilt(sources.op, components, why=why, required=True), "prebuilt"
    import torch

    # dlopen runs the library's STABLE_TORCH_LIBRARY registrations; it defines no Python module.
    torch.ops.load_library(str(library))
    with_cuda = "cuda" in backends
    reason = "" if with_cuda else (cuda.reason or "the prebuilt library has no CUDA kernels")
    return LoadedOp(library, with_cuda, reason, how)


def cuda_toolkit_missing(cuda: CudaPlan) -> bool:
    """True when this torch has CUDA but no toolkit was found: a build would be CPU-only."""
    return not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")


_warned_prebuilt: set[str] = set()


def _prebuilt(op: str, components: dict, why: str, required: bool) -> tuple[Path, list[str]] | None:
    """DESIGN.md's step 4: a prebuilt .so matching the running torch/CUDA/Python ABI and sources,
    with the backends it was built for.

    `why` says why building is not an option. With required=True the absence of a match is an
    error naming both that reason and what each refused prebuilt differs in; else None.
    """
    library, manifest, refused = _cache.find_prebuilt(op, components)
    if library is None:
        if not required:
            return None
        refusals = "".join(f"\n  - {reason}" for reason in refused) or (
            "\n  - none found in " + ", ".join(str(d) for d in _cache.prebuilt_dirs())
        )
        raise BuildError(
            f"jitops: cannot build op {op!r}: {why}\nand no prebuilt library matches this torch/CUDA/Python:"
            f"{refusals}\nInstall the missing tools, or point JITOPS_PREBUILT_DIR at libraries made by "
            "`jitops-cache build --out DIR` under this same torch."
        )
    backends = list(manifest["components"].get("backends", []))
    if op not in _warned_prebuilt:
        _warned_prebuilt.add(op)
        _warn(f"loading the prebuilt {op} ({'+'.join(backends)}) from {library.parent}, since building is not possible: {why}")
    return library, backends


def _verified_or_discarded(entry: _cache.Entry) -> Path | None:
    try:
        return entry.verified_library()
    except _cache.CacheError as err:
        _warn(f"discarding the corrupt cache entry {entry.path}: {err}; rebuilding")
        entry.discard()
        return None


def lock_timeout() -> float:
    value = os.environ.get("JITOPS_LOCK_TIMEOUT", "")
    if not value:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        return float(value)
    except ValueError:
        raise BuildError(f"JITOPS_LOCK_TIMEOUT must be a number of seconds, got {value!r}") from None


def _owner_path(entry: _cache.Entry) -> Path:
    return entry.lock_path.with_suffix(".owner")


def _build_locked(entry: _cache.Entry, sources: OpSources, cuda: CudaPlan, components: dict) -> tuple[Path, str]:
    import filelock

    timeout = lock_timeout()
    # A kernel (flock) lock: the OS drops it when its holder dies, so a killed build blocks no one.
    lock = filelock.FileLock(str(entry.lock_path), timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        try:
            holder = _owner_path(entry).read_text().strip()
        except OSError:
            holder = "unknown"
        raise BuildError(
            f"jitops: timed out after {timeout:.0f} s waiting for another process ({holder}) to build op "
            f"{entry.op!r} (lock {entry.lock_path}); raise JITOPS_LOCK_TIMEOUT or stop that process"
        ) from None
    owner = _owner_path(entry)
    try:
        owner.write_text(f"pid {os.getpid()} on {os.uname().nodename}\n")
        # Another process may have published the entry while this one waited for the lock.
        library = _verified_or_discarded(entry)
        if library is not None:
            return library, "cache"
        return _build(entry, sources, cuda, components), "built"
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _build(entry: _cache.Entry, sources: OpSources, cuda: CudaPlan, components: dict) -> Path:
    staging = _cache.new_build_dir(entry)
    published = False
    try:
        spec = _write_build_spec(staging, sources, cuda, components)
        log_path = staging / _cache.BUILD_LOG_NAME
        started = time.time()
        returncode = _run_build_worker(spec, log_path, sources.op, cuda)
        seconds = time.time() - started
        if returncode != 0:
            failed_log = entry.root / f"{entry.op}-{entry.key}.failed.log"
            shutil.copyfile(log_path, failed_log)
            raise BuildError(
                f"jitops: building op {entry.op!r} failed: {first_compiler_error(log_path.read_text(errors='replace'))}\n"
                f"full log: {failed_log}"
            )
        built = staging / "build" / f"{sources.extension_name}.so"
        library = staging / built.name
        os.replace(built, library)
        for scratch in ("build", "src", "spec.json"):
            path = staging / scratch
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        manifest = {
            "op": entry.op,
            "key": entry.key,
            "components": components,
            "library": library.name,
            "library_sha256": _cache.sha256_file(library),
            # Renaming the staging directory into place keeps the file's identity, so loads can
            # trust this hash until the file changes (_cache.Entry.verified_library).
            "library_identity": _cache.file_identity(library),
            "built_at": started,
            "build_seconds": round(seconds, 3),
            "last_used": time.time(),
        }
        _cache.publish(entry, staging, manifest)
        published = True
        return entry.path / library.name
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)


def _write_build_spec(staging: Path, sources: OpSources, cuda: CudaPlan, components: dict) -> Path:
    # torch names object files after the source's file name, and kernels/cpu/<op>.cpp and
    # bindings/<op>.cpp share theirs; one-line wrappers give each translation unit its own name.
    src = staging / "src"
    src.mkdir()
    units = []  # (file, wrapper name, defines)
    kernel_files = [(sources.cpu, "cpu", "cpp")] + ([(sources.cuda, "cuda", "cu")] if cuda.enabled else [])
    for kernel_file, backend, extension in kernel_files:
        shards = OpSources.shards(kernel_file)
        for shard in range(shards):
            if shards == 1:
                units.append((kernel_file, f"{sources.op}_{backend}.{extension}", ""))
            else:
                defines = f"#define JITOPS_SHARD {shard}\n#define JITOPS_SHARD_COUNT {shards}\n"
                units.append((kernel_file, f"{sources.op}_{backend}{shard}.{extension}", defines))
    units.append((sources.binding, f"{sources.op}_bindings.cpp", ""))
    wrappers = []
    for original, wrapper_name, defines in units:
        wrapper = src / wrapper_name
        wrapper.write_text(f'{defines}#include "{original.resolve()}"\n')
        wrappers.append(str(wrapper))
    (staging / "build").mkdir()
    spec = {
        "name": sources.extension_name,
        "sources": wrappers,
        "extra_cflags": components["cflags"],
        "extra_cuda_cflags": components["cuda_cflags"],
        "extra_ldflags": components["ldflags"],
        "build_directory": str(staging / "build"),
        "with_cuda": cuda.enabled,
        "cuda_arch_list": cuda.arch_list,
        "cuda_home": str(cuda.cuda_home) if cuda.enabled else None,
    }
    path = staging / "spec.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


_NINJA_STEP = r"^\[(\d+)/(\d+)\]"


def _run_build_worker(spec: Path, log_path: Path, op: str, cuda: CudaPlan) -> int:
    """Run the child build, teeing its output to the log; returns its exit code."""
    verbose = os.environ.get("JITOPS_VERBOSE", "") not in ("", "0")
    status = _BuildStatus(op, cuda, verbose)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jitops._build", str(spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        cwd=spec.parent,
        env=_worker_env(),
    )
    try:
        with open(log_path, "w") as log:
            for line in proc.stdout:
                log.write(line)
                if verbose:
                    sys.stderr.write(line)
                step = re.match(_NINJA_STEP, line)
                if step:
                    status.step = f"[{step.group(1)}/{step.group(2)}]"
        returncode = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        status.finish(ok=False)
        raise
    status.finish(ok=returncode == 0)
    return returncode


def _worker_env() -> dict[str, str]:
    # The child must import this very jitops, installed or not (a checkout run by pytest, say).
    package_parent = str(Path(__file__).resolve().parent.parent)
    python_path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"}


_COMPILER_ERROR = [
    r"^(\S+?:\d+(?::\d+)?): (?:fatal )?error: (.*)$",  # gcc/clang: file:line:col: error: msg
    r"^(\S+?\(\d+\)): (?:catastrophic )?error:? (.*)$",  # nvcc: file(line): error: msg
    r"^()(.*undefined reference to .*)$",  # linker: missing symbol
    r"^()(?:\S*/)?ld: (.*)$",  # linker: missing library and the like
]


def first_compiler_error(log: str) -> str:
    """The first `file:line: message` error of a build log, else its last meaningful line."""
    lines = log.splitlines()
    for line in lines:
        for pattern in _COMPILER_ERROR:
            match = re.match(pattern, line.strip())
            if match:
                location, message = match.groups()
                return f"{location}: {message}" if location else message
    meaningful = [line.strip() for line in lines if line.strip() and not line.startswith(" ")]
    return meaningful[-1] if meaningful else "no output"


class _BuildStatus:
    """One status line on stderr while building: op, backends, elapsed seconds, ninja's step."""

    def __init__(self, op: str, cuda: CudaPlan, verbose: bool):
        self.started = time.time()
        self.step = ""
        backends = "cpu+cuda" if cuda.enabled else f"cpu only: {cuda.reason}"
        self.label = f"jitops: building {op} ({backends})"
        # On a terminal the line redraws itself; in a log it is written once and completed at the end.
        self.live = sys.stderr.isatty() and not verbose
        self._done = threading.Event()
        if self.live:
            threading.Thread(target=self._redraw, daemon=True).start()
        else:
            sys.stderr.write(f"{self.label} ...\n" if verbose else f"{self.label} ...")
            sys.stderr.flush()

    def _redraw(self) -> None:
        while not self._done.wait(0.25):
            sys.stderr.write(f"\r\033[K{self.label} {time.time() - self.started:.1f}s {self.step}")
            sys.stderr.flush()

    def finish(self, ok: bool) -> None:
        self._done.set()
        outcome = "done" if ok else "FAILED"
        summary = f"{outcome} in {time.time() - self.started:.1f}s {self.step}".rstrip()
        sys.stderr.write(f"\r\033[K{self.label} {summary}\n" if self.live else f" {summary}\n")
        sys.stderr.flush()


def _warn(message: str) -> None:
    import warnings

    warnings.warn(f"jitops: {message}", RuntimeWarning, stacklevel=4)


# ---------------------------------------------------------------------------------------------
# The child build process
# ---------------------------------------------------------------------------------------------


def _worker_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if spec["with_cuda"]:
        # Set before cpp_extension is imported: it reads CUDA_HOME once, at import.
        os.environ["TORCH_CUDA_ARCH_LIST"] = spec["cuda_arch_list"]
        os.environ["CUDA_HOME"] = spec["cuda_home"]
    from torch.utils.cpp_extension import load

    # load() also loads the result (torch.ops.load_library), so a library with unresolved symbols
    # or a registration that torch refuses fails here, in the child, and is never published.
    load(
        name=spec["name"],
        sources=spec["sources"],
        extra_cflags=spec["extra_cflags"],
        extra_cuda_cflags=spec["extra_cuda_cflags"],
        extra_ldflags=spec["extra_ldflags"],
        build_directory=spec["build_directory"],
        with_cuda=spec["with_cuda"],
        is_python_module=False,
        verbose=True,
    )


if __name__ == "__main__":
    _worker_main(sys.argv[1])
