# SPDX-License-Identifier: MIT
"""Build one extension's library (the loader's steps 3 and 4; imported only on a cache miss).

build.ninja is written by the writer behind torch's load() (torch's flags, include paths and
libraries); ninja runs from this process, so its steps show live and its output is kept as a log.
The headers each unit included come from ninja's deps log, into the manifest.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import _cache, _prebuilt
from ._errors import BuildError
from ._key import CudaPlan, PlannedEntry, environment_tools

if TYPE_CHECKING:
    from .extension import Extension

# Waiting for another process's build (JITOPS_LOCK_TIMEOUT), and one build's run before it is
# stopped as hung (JITOPS_BUILD_TIMEOUT): far beyond a cold CUDA build on a busy machine, but finite.
DEFAULT_LOCK_TIMEOUT_S = 1800.0
DEFAULT_BUILD_TIMEOUT_S = 3600.0


def find_ninja() -> str | None:
    """ninja on PATH, else the one pip installed beside this interpreter (an un-activated venv:
    systemd units, cron, `ENTRYPOINT ["/venv/bin/python"]`), else the ninja package's own."""
    found = shutil.which("ninja")
    if found is None:
        beside = os.path.join(os.path.dirname(sys.executable), "ninja")
        found = beside if os.access(beside, os.X_OK) else None
    if found is None:
        try:
            import ninja  # the PyPI package, a jitops dependency

            found = shutil.which("ninja", path=ninja.BIN_DIR)
        except (ImportError, AttributeError):
            pass
    return found


def missing_tools(cxx: Path | None) -> list[str]:
    """What a build needs and this machine lacks, each with how to get it."""
    missing = []
    if find_ninja() is None:
        missing.append("no ninja on PATH, beside this Python or in the ninja package (pip install ninja)")
    if cxx is None:
        missing.append(f"no C++ compiler: {os.environ.get('CXX', 'c++')!r} is not on PATH (install g++ or set CXX)")
    return missing


def build_or_prebuilt(planned: PlannedEntry) -> tuple[Path, list[str], str]:
    """Steps 3 to 5 for an entry that is not in the cache: the library, the backends it has, and
    how it was got ("built", "cache" where another process published it meanwhile, "prebuilt")."""
    extension, cuda, components, entry = planned.extension, planned.cuda, planned.components, planned.entry
    lock_timeout(), build_timeout()  # a bad setting is an error of its own, not a reason to fall back
    # A package's shipped prebuilt first: whoever installed a binary wheel expects no compile.
    library, manifest, _ = _prebuilt.find_prebuilt(extension, components, shipped_only=True)
    if library is not None:
        return library, list(manifest["components"].get("backends", [])), "prebuilt"
    if os.environ.get("JITOPS_DISABLE_BUILD", "") not in ("", "0"):  # images that must never compile at run time
        library, backends = _prebuilt.prebuilt_or_error(
            extension,
            components,
            required=True,
            why=f"JITOPS_DISABLE_BUILD is set, and the cache has no entry {entry.path} for this key",
            advice="Build it where compiling is allowed (`jitops-cache build`, or a first run), with this same "
            "torch, toolchain and sources, or unset JITOPS_DISABLE_BUILD.",
        )
        return library, backends, "prebuilt"
    missing = missing_tools(planned.cxx)
    if missing:
        library, backends = _prebuilt.prebuilt_or_error(
            extension,
            components,
            why="; ".join(missing),
            required=True,
            advice="Install the missing tools, or point JITOPS_PREBUILT_DIR at libraries made by "
            "`jitops-cache build --out DIR` under this same torch.",
        )
        return library, backends, "prebuilt"
    # torch has CUDA but no toolkit is found: a build here would be CPU-only; a prebuilt may have the CUDA kernels.
    toolkit_missing = not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")
    if toolkit_missing and (prebuilt := _prebuilt.prebuilt_or_error(extension, components, cuda.reason, required=False)):
        return *prebuilt, "prebuilt"
    try:
        library, how = under_entry_lock(entry, "building", lambda: _build(planned))
        return library, cuda.backends, how
    except _BuildInterrupted:
        os.kill(os.getpid(), signal.SIGTERM)  # cleaned up on the way here; now end as SIGTERM would have
        raise
    except BuildError as err:
        why = str(err).removeprefix("jitops: ")
        library, backends = _prebuilt.prebuilt_or_error(extension, components, why=why, required=True)
        return library, backends, "prebuilt"


def seconds_from_env(name: str, default: float) -> float:
    """Seconds from the environment variable `name`, else default. 0, -1, nan or inf is refused,
    naming the variable, rather than read as "stop at once" or "wait forever"."""
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise BuildError(f"jitops: {name} must be a finite number of seconds above 0, got {value!r}")
    return seconds


def build_timeout() -> float:
    return seconds_from_env("JITOPS_BUILD_TIMEOUT", DEFAULT_BUILD_TIMEOUT_S)


def lock_timeout() -> float:
    return seconds_from_env("JITOPS_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S)


def under_entry_lock(entry: _cache.Entry, doing: str, make) -> tuple[Path, str]:
    """(library, "built") made by make(), which publishes the entry, under the entry's file lock;
    (library, "cache") where another process published it first. doing: make's work, for errors."""
    import filelock  # only a build takes a lock

    timeout, owner = lock_timeout(), entry.lock_path.with_suffix(".owner")
    # A kernel (flock) lock: the OS drops it when its holder dies, so a killed build blocks no one.
    lock = filelock.FileLock(str(entry.lock_path), timeout=timeout, mode=0o600)
    try:
        lock.acquire()
    except filelock.Timeout:  # before OSError: filelock.Timeout is a TimeoutError
        try:
            holder = owner.read_text().strip()
        except OSError:
            holder = "unknown"
        raise BuildError(
            f"jitops: timed out after {timeout:.0f} s waiting for another process ({holder}) to build "
            f"{entry.name} (lock {entry.lock_path}); raise JITOPS_LOCK_TIMEOUT or stop that process"
        ) from None
    except OSError as err:  # not a lock file: a directory, say, or no permission
        raise BuildError(
            f"jitops: cannot take the lock {entry.lock_path} to build {entry.name}: {err.strerror or err}; "
            f"remove whatever is at that path (`rm -r {entry.lock_path}`), or point JITOPS_CACHE_DIR elsewhere"
        ) from None
    try:
        _write_private(owner, f"pid {os.getpid()} on {os.uname().nodename}\n")
        # Another process may have published the entry while this one waited for the lock.
        library = _cache.verified_or_discarded(entry)
        if library is not None:
            return library, "cache"
        _cache.remove_orphans(entry)
        return make(), "built"
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        # make() has removed its staging directory: nothing is published, and no log kept.
        raise BuildError(
            f"jitops: {doing} {entry.name} failed: the disk holding the cache {entry.root} is full "
            f"({err.strerror or err}); free some space or point JITOPS_CACHE_DIR elsewhere"
        ) from err
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _write_private(path: Path, text: str) -> None:
    """Write a small file readable by its owner alone, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)
        file.write(text)


def publish_received(entry: _cache.Entry, manifest: dict, library_bytes: bytes) -> Path:
    """Publish an entry built elsewhere (jitops.distributed) as a local build would: its sha256
    checked, a private staging folder, one atomic rename under the entry's lock. Returns the library."""
    if manifest.get("name") != entry.name or manifest.get("key") != entry.key:
        raise BuildError(
            f"jitops: the entry received for {entry.name} is for {manifest.get('name')!r} key {manifest.get('key')!r}, not key {entry.key!r}"
        )
    name = manifest.get("library")
    if not isinstance(name, str) or os.path.basename(name) != name or not name.endswith(".so"):
        raise BuildError(f"jitops: the entry received for {entry.name} names no valid library ({name!r})")
    if _cache.sha256_bytes(library_bytes) != manifest.get("library_sha256"):
        raise BuildError(f"jitops: the library received for {entry.name} does not match its manifest's sha256")

    def write() -> Path:
        staging = _cache.new_build_dir(entry)
        try:
            library = staging / name
            with open(library, "wb") as file:
                file.write(library_bytes)
                file.flush()
                os.fsync(file.fileno())
            _cache.publish(entry, staging, {**manifest, "library_identity": _cache.file_identity(library)})
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return entry.path / name

    return under_entry_lock(entry, "receiving", write)[0]


def _build(planned: PlannedEntry) -> Path:
    entry, extension, cuda = planned.entry, planned.extension, planned.cuda
    staging = _cache.new_build_dir(entry)
    published = False
    try:
        build_dir, wrappers = _write_build_file(staging, extension, cuda, planned.components)
        log_path = staging / _cache.BUILD_LOG_NAME
        started = time.time()
        failure = _run_ninja(build_dir, log_path, extension.qualified_name, cuda)
        seconds = time.time() - started
        built = build_dir / f"{extension.library_name}.so"
        if failure is None:
            failure = _load_check(built, log_path)
        if failure is not None:
            if "No space left on device" in log_path.read_text(errors="replace"):
                raise OSError(errno.ENOSPC, failure)  # a compiler's write failed (under_entry_lock says so)
            failed_log = entry.root / f"{entry.name}-{entry.key}.failed.log"
            shutil.copyfile(log_path, failed_log)
            raise BuildError(f"jitops: building {entry.name} failed: {failure}\nfull log: {failed_log}")
        library = staging / built.name
        os.replace(built, library)
        headers = included_headers(build_dir, extension, planned.cxx, cuda, skip=wrappers)
        unit_seconds = _unit_seconds(build_dir)
        shutil.rmtree(build_dir)
        shutil.rmtree(staging / "src")
        manifest = _cache.make_manifest(
            entry,
            planned.components,
            library,
            headers,
            built_at=started,
            build_seconds=round(seconds, 3),
            unit_seconds=unit_seconds,
        )
        _cache.publish(entry, staging, manifest)
        published = True
        return entry.path / library.name
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)


def _write_build_file(staging: Path, extension: Extension, cuda: CudaPlan, components: dict) -> tuple[Path, list[str]]:
    """staging/build/build.ninja, and the units' wrappers: torch names object files after a source's
    file name, which two sources may share (kernels/cpu/x.cpp, bindings/x.cpp), so a one-line
    wrapper in staging/src, named after the source's path, gives each unit its own name."""
    src = staging / "src"
    src.mkdir()
    wrappers = []
    for relative, path in zip(components["sources"], extension.paths(cuda.enabled)):
        wrapper = src / relative.replace(os.sep, "_")
        source = str(Path(path).resolve())
        if '"' in source or "\n" in source:  # #include "..." takes a path literally, up to a quote
            raise BuildError(f"jitops: cannot compile {source!r}: a C++ #include cannot name a path holding a quote or a newline")
        wrapper.write_text(f'#include "{source}"\n', encoding="utf-8")
        wrappers.append(str(wrapper))
    build_dir = staging / "build"
    build_dir.mkdir()

    # torch's private writer, by keyword (torch >= 2.10): load() would run ninja without a log.
    from torch.utils import cpp_extension  # slow to import (setuptools): builds only

    build_file = build_dir / "build.ninja"
    cuda_cflags = list(components["cuda_cflags"])
    if cuda.enabled:
        _use_cuda_home(cpp_extension, cuda.cuda_home)
        cuda_cflags += gencode_flags(cuda.arch_list)  # explicit -gencode: torch skips its own choice
    try:
        ldflags = cpp_extension._prepare_ldflags(
            extra_ldflags=list(components["ldflags"]), with_cuda=cuda.enabled, with_sycl=False, verbose=False, is_standalone=False
        )
        cpp_extension._write_ninja_file_to_build_library(
            path=str(build_file),
            name=extension.library_name,
            sources=wrappers,
            extra_cflags=list(components["cflags"]),
            extra_cuda_cflags=cuda_cflags,
            extra_sycl_cflags=[],
            extra_ldflags=ldflags,
            extra_include_paths=extension.include_paths(),
            with_cuda=cuda.enabled,
            with_sycl=False,
            is_standalone=False,
        )
    except (AttributeError, TypeError) as err:  # a torch whose private writer moved or changed
        import torch  # loaded by the caller already: this module imports without it

        raise BuildError(
            f"jitops: cannot write a build file with torch {torch.__version__}'s cpp_extension "
            f"(_prepare_ldflags / _write_ninja_file_to_build_library: {err}); this jitops is tested "
            "with torch 2.10 to 2.14"
        ) from err
    _escape_build_paths(build_file, wrappers)
    return build_dir, wrappers


def included_headers(
    build_dir: Path, extension: Extension, cxx: Path | None, cuda: CudaPlan, targets: list[str] = (), skip: list[str] = ()
) -> dict:
    """The headers the units (ninja's `targets`, or all) included, from ninja's deps log, each with
    its sha256, named relative to the extension's root where under it. skip: the units' wrappers.
    torch's, the CUDA toolkit's and the compilers' own headers are left out: the key names their
    versions, and checking each on every load would cost hundreds of stat calls."""
    result = subprocess.run(
        [find_ninja() or "ninja", "-t", "deps", *targets], cwd=build_dir, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(f"jitops: `ninja -t deps` failed in {build_dir}: {result.stderr.strip()}")
    import torch  # loaded by the caller already: this module imports without it

    # A compiler's installation: the folder above its bin/, where that holds its C++ headers.
    installs = [os.path.dirname(os.path.dirname(os.path.realpath(c))) for c in [cxx, *environment_tools(cuda)] if c]
    prefixes = [os.path.dirname(torch.__file__), "/usr/include", "/usr/lib", "/usr/lib64", cuda.cuda_home]
    prefixes += [install for install in installs if os.path.isdir(os.path.join(install, "include", "c++"))]
    prefixes = tuple(os.path.join(os.path.realpath(p), "") for p in prefixes if p and os.path.realpath(p) not in ("/", "/usr"))
    root = os.path.join(os.path.realpath(extension.root), "")
    skipped = {os.path.realpath(p) for p in [*skip, *extension.paths()]}
    headers = {}
    for line in result.stdout.splitlines():
        path = os.path.realpath(os.path.join(build_dir, line.strip()))
        if line.startswith("    ") and path not in skipped and not path.startswith(prefixes):
            if not os.path.isfile(path):  # split by a ninja that misreads quotes in depfiles
                raise BuildError(
                    f"jitops: ninja's deps log of {build_dir} names {path!r}, no file: a path holding quotes "
                    "that this ninja misread? A newer ninja (pip install -U ninja) reads them"
                )
            headers[path[len(root) :] if path.startswith(root) else path] = _cache.sha256_file(path)
    return dict(sorted(headers.items()))


def _escape_build_paths(build_file: Path, paths: list[str]) -> None:
    """Name the units' sources in build.ninja relative to the build folder, escaped as ninja reads
    them: torch escapes only a space (a `$` or `:` in the cache root would break the build), and
    the depfiles name a source as given, where ninja 1.11 splits a path at quotes."""
    text = build_file.read_text(encoding="utf-8")
    for path in paths:
        if "\n" in path:
            raise BuildError(
                f"jitops: cannot build under {path!r}: ninja cannot name a path holding a newline; set JITOPS_CACHE_DIR to another directory"
            )
        as_torch_wrote_it = path.replace(" ", "$ ")
        escaped = os.path.relpath(path, build_file.parent).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")
        if text.count(f" {as_torch_wrote_it}\n") != 1:
            raise BuildError(f"jitops: torch's build.ninja does not name the source {path} as expected; cannot escape it")
        text = text.replace(f" {as_torch_wrote_it}\n", f" {escaped}\n")
    build_file.write_text(text, encoding="utf-8")


def _use_cuda_home(cpp_extension, cuda_home: Path) -> None:
    """Point torch's build code at the toolkit the key names. They differ only where torch's guess,
    read once at import, is no toolkit (_key.find_cuda_home), which could not have built anyway."""
    if cpp_extension.CUDA_HOME is None or Path(cpp_extension.CUDA_HOME).resolve() != cuda_home.resolve():
        cpp_extension.CUDA_HOME = str(cuda_home)


_ARCH = r"(\d+)\.(\d+)([a-z]?)(\+PTX)?"


def gencode_flags(arch_list: str) -> list[str]:
    """nvcc's -gencode flags for a TORCH_CUDA_ARCH_LIST such as "8.6;9.0a" or "8.0 9.0+PTX"."""
    flags = []
    for arch in arch_list.replace(";", " ").split():
        match = re.fullmatch(_ARCH, arch)
        if match is None:
            raise BuildError(
                f"jitops: TORCH_CUDA_ARCH_LIST entry {arch!r} is not a compute capability such as 8.6, 9.0a or "
                "9.0+PTX (architecture names are not accepted)"
            )
        number = "".join(match.group(1, 2, 3))
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if match.group(4):
            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags


_NINJA_STEP = r"^\[\d+/\d+\]"


def _run_ninja(build_dir: Path, log_path: Path, op: str, cuda: CudaPlan) -> str | None:
    """Run ninja in build_dir, teeing its output to the log. None if it succeeded, else the first
    compiler error or the timeout. ninja stays in this process's group, so a terminal's Ctrl-C
    reaches it directly; on a timeout, an exception or SIGTERM it is stopped (_stop_ninja)."""
    verbose = os.environ.get("JITOPS_VERBOSE", "") not in ("", "0")
    timeout = build_timeout()
    command = [find_ninja() or "ninja", "-v"]
    jobs = os.environ.get("MAX_JOBS", "")  # as torch's load() reads it
    if jobs.isdigit():
        command += ["-j", jobs]
    status = _BuildStatus(op, cuda, verbose)
    timed_out = threading.Event()
    proc = watchdog = None
    try:
        # SIGTERM is caught before ninja starts: a signal in between would leave its compilers running.
        with _sigterm_raises(), open(log_path, "w") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                cwd=build_dir,
            )
            watchdog = threading.Timer(timeout, lambda: (timed_out.set(), _stop_ninja(proc)))
            watchdog.daemon = True
            watchdog.start()
            for line in proc.stdout:
                log.write(line)
                if verbose:
                    sys.stderr.write(line)
                if step := re.match(_NINJA_STEP, line):
                    status.step = step.group()
            returncode = proc.wait()
    except BaseException:
        if proc is not None:
            _stop_ninja(proc)
        status.finish(ok=False)
        raise
    finally:
        if watchdog is not None:
            watchdog.cancel()
    status.finish(ok=returncode == 0 and not timed_out.is_set())
    if timed_out.is_set():
        with open(log_path, "a") as log:
            log.write(f"\njitops: stopped after {timeout:g} s (JITOPS_BUILD_TIMEOUT)\n")
        return f"it did not finish within {timeout:g} s (JITOPS_BUILD_TIMEOUT); a compiler may hang"
    if returncode != 0:
        return first_compiler_error(log_path.read_text(errors="replace"))
    return None


def _stop_ninja(proc: subprocess.Popen) -> None:
    """Stop ninja and the compilers it started: SIGINT, on which ninja interrupts every command it
    runs (each in a process group of its own) and exits; SIGKILL if it has not within 5 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _BuildInterrupted(BaseException):
    """SIGTERM arrived during a build (see _sigterm_raises)."""


@contextlib.contextmanager
def _sigterm_raises():
    """On the main thread of a program without a SIGTERM handler: SIGTERM raises _BuildInterrupted,
    so ninja, the staging folder and the lock are cleaned up on the way out; build_or_prebuilt then
    delivers the signal again, to end as SIGTERM would have."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def interrupt(signum, frame):
        raise _BuildInterrupted()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _load_check(library: Path, log_path: Path) -> str | None:
    """None if the new library loads (unresolved symbols and refused registrations are never
    published), else why not. It stays loaded: the published file is this one renamed (one inode)."""
    import torch  # loaded by the caller already: this module imports without it

    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError) as err:
        # torch's message only names the file; dlopen's own ("undefined symbol: ...") is its cause.
        reason = str(err.__cause__ or err)
        with open(log_path, "a") as log:
            log.write(f"\nloading the built library failed: {reason}\n")
        return f"the built library does not load: {reason}"
    return None


def _unit_seconds(build_dir: Path) -> dict[str, float]:
    """Seconds per ninja step (object file or link), from ninja's log: where a cold build's time went."""
    steps = {}
    try:
        lines = (build_dir / ".ninja_log").read_text().splitlines()
    except OSError:
        return steps
    for line in lines[1:]:  # the first line is the log format's version
        fields = line.split("\t")
        if len(fields) == 5:
            steps[fields[3]] = round((int(fields[1]) - int(fields[0])) / 1000, 3)
    return steps


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


LOGGER = logging.getLogger("jitops")  # build status lines, at INFO


def _status_on_stderr() -> bool:
    """Whether status lines go to stderr: where nothing handles the "jitops" logger (no handler on it
    or above it; Python's last resort would drop INFO) and nobody silenced it. Else to the logger."""
    return not LOGGER.hasHandlers() and not LOGGER.disabled and LOGGER.level <= logging.INFO


class _BuildStatus:
    """One build's status: op, backends, elapsed seconds, ninja's step. Every write is a whole line
    under one lock (builds run in threads). In a log, or through the "jitops" logger: a line at
    the start and at the end. On a terminal: one live line for every build in flight, cut to the
    terminal's width (one thread redraws it), and each build's final line printed above it. Why an
    op is built without CUDA is said once per process."""

    _lock = threading.Lock()
    _in_flight: list[_BuildStatus] = []
    _live_line = False  # whether a live line is on the terminal now
    _reasons_said: set[str] = set()

    def __init__(self, op: str, cuda: CudaPlan, verbose: bool):
        self.op, self.started, self.step, self.cuda = op, time.time(), "", cuda
        self.live = sys.stderr.isatty() and not verbose and _status_on_stderr()
        with _BuildStatus._lock:
            _BuildStatus._in_flight.append(self)
            if self.live and len(_BuildStatus._in_flight) == 1:
                threading.Thread(target=_BuildStatus._redraw, daemon=True).start()
            if not self.live:
                self._write_line(f"jitops: building {self._label()} ...")

    def _label(self) -> str:
        """op (cpu+cuda), or op (cpu only: why) the first time this process gives that reason."""
        if self.cuda.enabled:
            return f"{self.op} (cpu+cuda)"
        reason = self.cuda.reason
        said = reason in _BuildStatus._reasons_said
        _BuildStatus._reasons_said.add(reason)
        return f"{self.op} (cpu only)" if said else f"{self.op} (cpu only: {reason})"

    @classmethod
    def _redraw(cls) -> None:
        while True:
            time.sleep(0.25)
            with cls._lock:
                live = [b for b in cls._in_flight if b.live]
                if not live:
                    return
                now = time.time()
                line = "jitops: building " + "; ".join(f"{b.op} {now - b.started:.1f}s {b.step}".rstrip() for b in live)
                try:  # read each time: the terminal may have been resized
                    width = os.get_terminal_size(sys.stderr.fileno()).columns
                except (OSError, ValueError):
                    width = 80
                # One row at most: \r\033[K erases only the row the cursor is on.
                sys.stderr.write("\r\033[K" + line[: max(width - 1, 1)])
                sys.stderr.flush()
                cls._live_line = True

    @classmethod
    def _write_line(cls, line: str) -> None:
        """A whole line, above the live one if there is one (which the next redraw puts back)."""
        if not _status_on_stderr():
            LOGGER.info(line)
            return
        sys.stderr.write(("\r\033[K" if cls._live_line else "") + line + "\n")
        sys.stderr.flush()
        cls._live_line = False

    def finish(self, ok: bool) -> None:
        seconds = f"{time.time() - self.started:.1f}s {self.step}"
        with _BuildStatus._lock:
            label = self._label()
            line = f"jitops: built {label} in {seconds}" if ok else f"jitops: FAILED to build {label} after {seconds}"
            _BuildStatus._in_flight.remove(self)
            self._write_line(line.rstrip())
