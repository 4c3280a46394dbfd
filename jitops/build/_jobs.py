# SPDX-License-Identifier: MIT
"""How many compiles this machine can run at once, and who runs them: the CPUs, memory and processes
the process may use (its affinity; its cgroup's and every cgroup's above it, v1 or v2; /proc/meminfo),
one pool of jobs for all of this process's ninjas (a GNU make jobserver, which ninja 1.13 joins), and
one background PCH compile per machine at a time."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import _flock

# Where the limits are read: tests give the functions a fake tree instead (never this machine's cgroups).
PROC, CGROUP = "/proc", "/sys/fs/cgroup"

# What one job holds at its peak: a C++ unit with torch's headers 1-3 GB (gcc's heap starts at 1 GB,
# _buildfile.GCC_HEAP_FLAG), an nvcc unit more (cicc and ptxas after the host compile); a PCH of
# torch's headers about 2 GB. Processes: a compiler driver and its passes, nvcc's several.
MEMORY_PER_JOB = {"c++": 2 << 30, "cuda": 4 << 30}
PCH_MEMORY = 2 << 30
PROCESSES_PER_JOB = 6


@dataclass
class Limits:
    """What this process may use now: CPUs (each with why), bytes of memory and processes still free (None: no limit found)."""

    cpus: int
    cpus_why: str
    memory: int | None
    memory_why: str
    processes: int | None
    processes_why: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _cgroup_folders(proc: str, cgroup: str, controller: str) -> list[Path]:
    """The process's cgroup folders that may hold the controller's files, its own first, then each
    above it up to its hierarchy's root (v2's unified tree, or v1's controller tree)."""
    folders = []
    for line in (_read(Path(proc, "self", "cgroup")) or "").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":  # v2 (unified, or mounted beside v1 as unified/)
            bases = [Path(cgroup), Path(cgroup, "unified")]
        elif controller in controllers.split(","):
            bases = [Path(cgroup, controllers), Path(cgroup, controller)]
        else:
            continue
        for base in bases:
            if not base.is_dir():
                continue
            folder = base / path.lstrip("/")
            while True:
                folders.append(folder)
                if folder == base or base not in folder.parents:
                    break
                folder = folder.parent
            break
    return folders


def cpu_quota(proc: str, cgroup: str) -> tuple[float | None, str]:
    """The smallest CPU quota (in CPUs) of the process's cgroup and those above it, and where it is set."""
    found, where = None, ""
    for folder in _cgroup_folders(proc, cgroup, "cpu"):
        quota = period = None
        v2 = (_read(folder / "cpu.max") or "").split()
        if len(v2) == 2:
            quota, period = _number(v2[0]), _number(v2[1])
        else:
            quota, period = _number(_read(folder / "cpu.cfs_quota_us")), _number(_read(folder / "cpu.cfs_period_us"))
        if quota and period and (found is None or quota / period < found):
            found, where = quota / period, str(folder)
    return found, where


def _free_in_cgroups(proc: str, cgroup: str, controller: str, files: list[tuple[str, str]]) -> tuple[int | None, str]:
    """The least (limit - use) of the process's cgroups and those above, for each (limit, use) file pair."""
    found, where = None, ""
    for folder in _cgroup_folders(proc, cgroup, controller):
        for limit_name, use_name in files:
            limit, use = _number(_read(folder / limit_name)), _number(_read(folder / use_name))
            if limit is None or use is None or limit >= 1 << 60:  # "max", or v1's "no limit"
                continue
            if found is None or limit - use < found:
                found, where = max(0, limit - use), str(folder)
    return found, where


def limits(proc: str | None = None, cgroup: str | None = None) -> Limits:
    proc, cgroup = proc or PROC, cgroup or CGROUP
    try:
        cpus, cpus_why = len(os.sched_getaffinity(0)), "CPU affinity"
    except (AttributeError, OSError):
        cpus, cpus_why = os.cpu_count() or 1, "CPUs"
    quota, where = cpu_quota(proc, cgroup)
    if quota is not None and math.ceil(quota) < cpus:
        cpus, cpus_why = max(1, math.ceil(quota)), f"the CPU quota of {where}"
    memory, memory_why = _free_in_cgroups(
        proc, cgroup, "memory", [("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")]
    )
    memory_why = f"the memory limit of {memory_why}" if memory is not None else ""
    for line in (_read(Path(proc, "meminfo")) or "").splitlines():
        if line.startswith("MemAvailable:") and (kib := _number(line.split()[1])) is not None:
            if memory is None or kib * 1024 < memory:
                memory, memory_why = kib * 1024, "MemAvailable"
    processes, processes_why = _free_in_cgroups(proc, cgroup, "pids", [("pids.max", "pids.current")])
    return Limits(cpus, cpus_why, memory, memory_why, processes, f"pids.max of {processes_why}" if processes_why else "")


def max_jobs() -> int | None:
    """MAX_JOBS, as torch's load() reads it (it wins over every limit); None where unset."""
    jobs = os.environ.get("MAX_JOBS", "")
    return int(jobs) if jobs.isdigit() and int(jobs) > 0 else None


def job_count(kind: str = "c++", proc: str | None = None, cgroup: str | None = None) -> tuple[int, str]:
    """How many compiles of this kind ("c++" or "cuda") may run at once, and why fewer than ninja's
    default (CPUs + 2) where the memory or processes free are what bound it ("" where they are not)."""
    if (jobs := max_jobs()) is not None:
        return jobs, ""
    found = limits(proc, cgroup)
    jobs, why = found.cpus + 2 if found.cpus > 1 else 2, ""
    if found.cpus_why.startswith("the CPU quota"):
        why = f"{found.cpus} CPUs ({found.cpus_why})"
    per_job = MEMORY_PER_JOB[kind]
    if found.memory is not None and found.memory // per_job < jobs:
        jobs = max(1, found.memory // per_job)
        why = f"{found.memory / (1 << 30):.1f} GiB free ({found.memory_why}), {per_job >> 30} GiB a {kind} unit"
    if found.processes is not None and found.processes // PROCESSES_PER_JOB < jobs:
        jobs = max(1, found.processes // PROCESSES_PER_JOB)
        why = f"{found.processes} processes free ({found.processes_why}), {PROCESSES_PER_JOB} a job"
    return jobs, why


# The pool: one jobserver FIFO for the process. Each ninja's own first job is a token its thread
# takes before starting it (the protocol gives every client one job free), the others ninja takes
# itself, so the process's ninjas together (load_all runs several) run at most `size` jobs.
_pool_lock = threading.Lock()
_pool: dict = {"fd": None, "path": None, "size": 0, "running": 0}


@contextlib.contextmanager
def ninja_jobs(jobs: int, joins: bool = True, wanted: int = 1):
    """The arguments and environment for one ninja that shares the process's pool of `jobs`: a
    jobserver where ninja joins one (1.13 and later), else `-j` the tokens it could take at once (at
    least one, at most `wanted`), held until it ends."""
    tokens = b""
    with _pool_lock:
        if _pool["running"] == 0:  # none out: (re)filled, so a killed ninja's tokens are not lost
            _refill(jobs)
        _pool["running"] += 1
        fd, path = _pool["fd"], _pool["path"]
    try:
        tokens = os.read(fd, 1)  # blocks while the pool's jobs are all running
        if joins:
            yield [], {"MAKEFLAGS": f"-j{_pool['size']} --jobserver-auth=fifo:{path}"}
        else:
            os.set_blocking(fd, False)
            with contextlib.suppress(BlockingIOError):
                tokens += os.read(fd, max(0, wanted - 1)) if wanted > 1 else b""
            os.set_blocking(fd, True)
            yield ["-j", str(len(tokens))], {}
    finally:
        with _pool_lock:
            if tokens:
                os.write(fd, tokens)
            _pool["running"] -= 1


def _refill(jobs: int) -> None:
    if _pool["fd"] is None:
        folder = tempfile.mkdtemp(prefix="jitops-jobs-")
        path = os.path.join(folder, "fifo")
        os.mkfifo(path, 0o600)
        _pool["fd"], _pool["path"] = os.open(path, os.O_RDWR), path
        import atexit  # only where a build runs

        atexit.register(shutil.rmtree, folder, True)
    os.set_blocking(_pool["fd"], False)
    with contextlib.suppress(BlockingIOError):
        while os.read(_pool["fd"], 4096):
            pass
    os.set_blocking(_pool["fd"], True)
    os.write(_pool["fd"], b"+" * jobs)
    _pool["size"] = jobs


def machine_dir() -> Path | None:
    """This user's folder for what jitops coordinates across the machine (a private one under the
    temporary folder; None where it is not this user's alone)."""
    folder = Path(tempfile.gettempdir(), f"jitops-{os.getuid()}")
    with contextlib.suppress(FileExistsError, OSError):
        folder.mkdir(mode=0o700)
    try:
        found = folder.lstat()
    except OSError:
        return None
    import stat  # only where a background PCH waits

    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return None
    return folder


@contextlib.contextmanager
def background_compile(still_wanted, wait_s: float = 600.0, poll_s: float = 2.0):
    """Wait for the machine's one background PCH compile slot (a queue of flock waiters), then for
    PCH_MEMORY to be free; yields whether to compile: False where it is no longer wanted (asked
    of still_wanted() after each wait) or the memory was not free within wait_s."""
    folder = machine_dir()
    with _flock.flocked(str(folder / "background-pch.lock")) if folder else contextlib.nullcontext():
        deadline = time.monotonic() + wait_s
        while still_wanted():
            memory = limits().memory
            if memory is None or memory >= PCH_MEMORY:
                yield True
                return
            if time.monotonic() > deadline:
                break
            time.sleep(poll_s)
        yield False
