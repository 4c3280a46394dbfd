# SPDX-License-Identifier: MIT
"""Running ninja: finding it, one run (its steps on the status line, its output in the build log,
stopped on a timeout, an exception or SIGTERM), what it recorded, and the first compiler error."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

from .. import _settings
from .._errors import BuildError
from . import _jobs
from ._progress import BuildStatus


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
    return os.path.abspath(found) if found else None  # a relative PATH entry: ninja runs in the build folder


def missing_tools(cxx: Path | None) -> list[str]:
    """What a build needs and this machine lacks, each with how to get it."""
    missing = []
    if find_ninja() is None:
        missing.append("no ninja on PATH, beside this Python or in the ninja package (pip install ninja)")
    if cxx is None:
        missing.append(f"no C++ compiler: {os.environ.get('CXX', 'c++')!r} is not on PATH (install g++ or set CXX)")
    return missing


_NINJA_STEP = r"^\[\d+/\d+\]"


@functools.cache
def joins_jobserver(ninja: str) -> bool:
    """Whether this ninja joins a GNU make jobserver (1.13 and later)."""
    try:
        version = subprocess.run([ninja, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return tuple(int(n) for n in re.findall(r"\d+", version)[:2]) >= (1, 13)


def _edges(build_dir: Path) -> int:
    """The compiles a build file holds (what more jobs than that would leave idle)."""
    try:
        return max(1, (build_dir / "build.ninja").read_text().count("\nbuild "))
    except OSError:
        return 1


def run_ninja(build_dir: Path, log_path: Path, status: BuildStatus, verbose: bool, kind: str = "c++") -> str | None:
    """Run ninja in build_dir (in this process's group: Ctrl-C reaches it), teeing its output to the
    log, its jobs from the process's pool (_jobs; MAX_JOBS: its own -j). None if it succeeded, else
    the first compiler error or the timeout."""
    timeout = _settings.get("JITOPS_BUILD_TIMEOUT")
    jobs, lowered_because = _jobs.job_count(kind)
    if lowered_because:
        status.say(f"jitops: {jobs} compile jobs at once: {lowered_because}")
    explicit, ninja = _jobs.max_jobs(), find_ninja() or "ninja"
    timed_out = threading.Event()
    proc = watchdog = None
    try:
        # SIGTERM is caught before ninja starts: a signal in between would leave its compilers running.
        pool: contextlib.AbstractContextManager[tuple[list[str], dict[str, str]]]
        if explicit is not None:
            pool = contextlib.nullcontext((["-j", str(explicit)], {}))
        else:
            pool = _jobs.ninja_jobs(jobs, joins_jobserver(ninja), _edges(build_dir))
        with _sigterm_raises(), open(log_path, "a") as log, pool as (jobs_args, jobserver):
            with _held_while_starting():
                proc = subprocess.Popen(
                    [ninja, "-v", *jobs_args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    cwd=build_dir,
                    env={**os.environ, **jobserver},
                )
            watchdog = threading.Timer(timeout, _time_out, (timed_out, proc))
            watchdog.daemon = True
            watchdog.start()
            assert proc.stdout is not None  # a pipe: stdout=PIPE
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
        raise
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
    if timed_out.is_set():
        with open(log_path, "a") as log:
            log.write(f"\njitops: stopped after {timeout:g} s (JITOPS_BUILD_TIMEOUT)\n")
        return f"it did not finish within {timeout:g} s (JITOPS_BUILD_TIMEOUT); a compiler may hang"
    if returncode != 0:
        return first_compiler_error(log_path.read_text(errors="replace"))
    return None


def _time_out(timed_out: threading.Event, proc: subprocess.Popen) -> None:
    timed_out.set()
    _stop_ninja(proc)


def _stop_ninja(proc: subprocess.Popen) -> None:
    """Stop ninja and its compilers: SIGINT (ninja interrupts each command's process group and waits);
    a command that misses it has its group killed after 5 s, and ninja is killed if it still waits."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    for stop in (_kill_command_groups, subprocess.Popen.kill):
        try:
            proc.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            stop(proc)
    proc.wait()


def _kill_command_groups(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of each command ninja still runs (Linux: read from /proc). ninja has
    not reaped those commands, so their ids, and their groups', still name them."""
    own_group = os.getpgid(0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            ppid, pgrp = stat.read_text().rpartition(")")[2].split()[1:3]
        except (OSError, ValueError):
            continue  # ended meanwhile
        if int(ppid) == proc.pid and int(pgrp) != own_group:  # a console-pool command shares ours
            with contextlib.suppress(OSError):  # ended meanwhile
                os.killpg(int(pgrp), signal.SIGKILL)


class BuildInterrupted(BaseException):
    """SIGTERM arrived during a build (see _sigterm_raises)."""


@contextlib.contextmanager
def _sigterm_raises():
    """On the main thread of a program without a SIGTERM handler: SIGTERM raises BuildInterrupted, so
    ninja, the staging folder and the lock are cleaned up; the build then ends as SIGTERM would have."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def interrupt(signum, frame):
        raise BuildInterrupted()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _held_while_starting():
    """On the main thread: SIGINT and SIGTERM are held while ninja starts, then delivered once `proc`
    names it (raised inside Popen, they would leave ninja and its compilers running)."""
    held: list[int] = []
    signals = [signal.SIGINT, signal.SIGTERM] if threading.current_thread() is threading.main_thread() else []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in signals if signal.getsignal(sig) is not None
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in held:  # to the handler restored above: KeyboardInterrupt, BuildInterrupted or the program's
            signal.raise_signal(signum)


def deps(build_dir: Path, targets: Sequence[str] = ()) -> dict[str, list[str]]:
    """The files each target (or all) was compiled from, absolute and resolved: from the compiler's
    depfile where the build kept it (jitops'), else from ninja's deps log (torch's)."""
    kept = {target: build_dir / f"{target}.d" for target in targets}
    resolved = _Resolver(build_dir)
    if targets and all(depfile.exists() for depfile in kept.values()):
        return {target: [resolved(p) for p in read_depfile(d)] for target, d in kept.items()}
    if not targets and not (build_dir / ".ninja_deps").exists():
        return {}
    result = subprocess.run(
        [find_ninja() or "ninja", "-t", "deps", *targets], cwd=build_dir, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(f"jitops: `ninja -t deps` failed in {build_dir}: {result.stderr.strip()}")
    found: dict[str, list[str]] = {}
    files: list[str] = []
    for line in result.stdout.splitlines():
        if line.startswith("    "):
            files.append(resolved(line.strip()))
        elif ": #deps" in line:
            files = found.setdefault(line.partition(": #deps")[0], [])
    return found


class _Resolver:
    """os.path.realpath of paths relative to build_dir, each folder resolved once: a unit that
    includes torch/extension.h lists thousands of headers in a few hundred folders."""

    def __init__(self, build_dir: Path):
        self.build_dir = str(build_dir)
        self.folders: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        if not path.startswith("/"):
            path = os.path.join(self.build_dir, path)
        folder, _, name = path.rpartition("/")
        resolved = self.folders.get(folder)
        if resolved is None:
            resolved = self.folders[folder] = os.path.realpath(folder or "/").rstrip("/")
        joined = f"{resolved}/{name}"
        return os.path.realpath(joined) if os.path.islink(joined) else joined


def read_depfile(depfile: Path) -> list[str]:
    """The prerequisites a gcc/nvcc depfile (Makefile syntax: `target: a.cpp b.h \\`) lists, its
    escapes undone (`\\ ` a space, `\\#` a #, `$$` a $); any other character is the path's own."""
    text = depfile.read_text(encoding="utf-8", errors="surrogateescape").replace("\\\n", " ")
    colon = re.search(r":(\s|$)", text)  # after the target (an object name of ours, no colon in it)
    if "\\" not in text and "$$" not in text:  # nothing escaped (nearly always): words as they are
        return text[colon.end() if colon else 0 :].split()
    words = re.findall(r"(?:\\.|[^\s\\])+", text[colon.end() if colon else 0 :])
    return [re.sub(r"\\([ #\t])", r"\1", word).replace("$$", "$") for word in words]


def unit_seconds(build_dir: Path) -> dict[str, float]:
    """Seconds per ninja step (object file or link), from ninja's log: where a build's time went."""
    steps: dict[str, float] = {}
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
    """The first `file:line: message` error of a build log with the source line and caret the
    compiler printed under it, else the log's last meaningful line."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        for pattern in _COMPILER_ERROR:
            match = re.match(pattern, line.strip())
            if match:
                location, message = match.groups()
                found = [f"{location}: {message}" if location else message]
                # gcc/clang: `  4 |   code` then `    |   ^~~~`; nvcc: the code, then the caret, indented
                for context in lines[index + 1 : index + 4]:
                    if not context.startswith(" ") or not context.strip() or context.lstrip().startswith(("[", "ninja")):
                        break
                    found.append(context.rstrip())
                return "\n".join(found)
    meaningful = [line.strip() for line in lines if line.strip() and not line.startswith(" ")]
    return failed_program(lines) or (meaningful[-1] if meaningful else "no output")


def failed_program(lines: list[str]) -> str | None:
    """Which program (launcher, compiler, linker) ninja's first failed step ran, and the first
    lines it printed (RELIABILITY F1, F2): ninja itself says only "subcommand failed". None without a step."""
    import shlex

    failed = next((index for index, line in enumerate(lines) if line.startswith("FAILED: ")), None)
    if failed is None or failed + 1 >= len(lines):
        return None
    target = re.sub(r"^\[code=\d+\] ", "", lines[failed][len("FAILED: ") :])  # ninja >= 1.12 adds the code
    try:
        program = shlex.split(lines[failed + 1])[0]
    except (ValueError, IndexError):
        return None
    output = []
    for line in lines[failed + 2 :]:
        if line.startswith(("[", "ninja: ", "FAILED: ")):
            break
        output.append(line.rstrip())
    said = "\n".join([line for line in output if line.strip()][:5])
    return f"{program} failed making {target}" + (f", saying:\n{said}" if said else ", printing nothing")
