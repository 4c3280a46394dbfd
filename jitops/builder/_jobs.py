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

from .. import _flock, _layout, _settings

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


def _free_in_cgroups(proc: str, cgroup: str, controller: str, files: list[tuple[str, ...]]) -> tuple[int | None, str]:
    """The least (limit - use) of the process's cgroups and those above, for each (limit, use) file
    pair; a third name: the line of memory.stat whose bytes the kernel reclaims at need (inactive page
    cache), not counted as used."""
    found, where = None, ""
    for folder in _cgroup_folders(proc, cgroup, controller):
        for limit_name, use_name, *reclaimable in files:
            limit, use = _number(_read(folder / limit_name)), _number(_read(folder / use_name))
            if limit is None or use is None or limit >= 1 << 60:  # "max", or v1's "no limit"
                continue
            for line in (_read(folder / "memory.stat") or "").splitlines() if reclaimable else ():
                name, _, value = line.partition(" ")
                if name == reclaimable[0] and (cache := _number(value)) is not None:
                    use -= min(use, cache)
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
        proc,
        cgroup,
        "memory",
        [
            ("memory.max", "memory.current", "inactive_file"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
        ],
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


def job_count(
    kind: str = "c++", proc: str | None = None, cgroup: str | None = None, found: Limits | None = None
) -> tuple[int, str]:
    """How many compiles of this kind ("c++" or "cuda") may run at once, and why fewer than ninja's
    default (CPUs + 2) where the memory or processes free are what bound it ("" where they are not)."""
    if (jobs := max_jobs()) is not None:
        return jobs, ""
    found = found or limits(proc, cgroup)
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


# The machine's jobs are slot files in machine_dir()/jobs, each one job while its flock is held (by
# a ninja's thread, or a background PCH's compile): the kernel frees a dead holder's, so no job is
# ever lost. Within a process, the slots its ninjas hold beyond each one's first are tokens in one
# jobserver FIFO that ninja 1.13 joins: its ninjas (load_all runs several) share them job by job.
_pool_lock = threading.Lock()
_pool: dict = {"fd": None, "path": None, "alive": 0}


def claim(total: int, wanted: int, block: bool = True, poll_s: float = 0.1, wait_s: float = 120.0) -> list[int | None]:
    """Up to `wanted` of the machine's `total` job slots (flock fds; release() frees them), at least
    one where block: waited for while every slot is held. After wait_s, on only while every holder is
    seen working (a build may hold a slot for minutes), and never past JITOPS_BUILD_TIMEOUT; a holder
    stopped with Ctrl-Z or out of sight keeps its slots: then one job beside them, never a hang. Where
    the machine's folder or its slot files cannot be used: min(total, wanted) slots of this process
    alone (None each)."""
    folder = machine_dir()
    alone: list[int | None] = [None] * max(1, min(total, wanted))
    if folder is None:
        return alone
    with contextlib.suppress(OSError):
        os.mkdir(os.path.dirname(_layout.job_slot_path(folder, 0)), 0o700)
    held: list[int | None] = []
    started = time.monotonic()
    while True:
        # Asked before the slots are tried: a holder that just ended is then no longer seen, and its slot is taken.
        waited = time.monotonic() - started
        give_up = waited > wait_s and (waited > _settings.get("JITOPS_BUILD_TIMEOUT") or not holders_working(folder, total))
        opened = 0
        for slot in range(total):
            if len(held) >= wanted:
                break
            try:
                fd = _flock.try_flock(_layout.job_slot_path(folder, slot))
            except OSError:
                continue  # unopenable: not a slot
            opened += 1
            if fd is not None:
                held.append(fd)
        if held or not block:
            return held
        if opened == 0:
            return alone
        if give_up:
            return [None]
        time.sleep(poll_s)


def holders_working(folder: Path, total: int) -> bool:
    """Whether the processes holding the machine's slots (from /proc/locks) can all be seen and none is
    stopped (Ctrl-Z) or a zombie: a wait for them is a wait for builds that are running."""
    slots = set()
    for slot in range(total):
        with contextlib.suppress(OSError):
            info = os.stat(_layout.job_slot_path(folder, slot))
            slots.add(f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}")
    try:
        with open("/proc/locks") as file:  # "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"
            holders = {int(f[4]) for f in map(str.split, file) if f[1:2] == ["FLOCK"] and f[5] in slots}
        for pid in holders:
            with open(f"/proc/{pid}/stat") as file:
                if file.read().rpartition(")")[2].split()[0] in "TtZX":  # the state, after the name
                    return False
    except (OSError, ValueError, IndexError):
        return False  # no /proc, or a holder out of sight (another pid namespace): as a stopped one
    return bool(holders)


def release(slots: list[int | None]) -> None:
    for fd in slots:
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def ninja_jobs(jobs: int, joins: bool = True, wanted: int = 1):
    """The arguments and environment for one ninja within the machine's `jobs`: it holds the slots
    it could claim (one waited for, up to `wanted` in all where free) until it ends; a ninja that joins
    a jobserver (1.13 and later) shares those beyond its first with the process's other ninjas, an
    older one gets `-j` their number."""
    slots = claim(jobs, max(1, wanted))
    extra = len(slots) - 1
    try:
        if not joins:
            yield ["-j", str(len(slots))], {}
            return
        with _pool_lock:
            fd, path = _fifo()
            _pool["alive"] += 1
            os.write(fd, b"+" * extra)
        try:
            yield [], {"MAKEFLAGS": f"-j{jobs} --jobserver-auth=fifo:{path}"}
        finally:
            with _pool_lock:
                _pool["alive"] -= 1
            _take_back(fd, extra)
    finally:
        release(slots)


def _fifo() -> tuple[int, str]:
    """The process's jobserver FIFO (made at its first build; removed at exit), read without blocking."""
    if _pool["fd"] is None:
        folder = tempfile.mkdtemp(prefix="jitops-jobs-")
        path = os.path.join(folder, "fifo")
        os.mkfifo(path, 0o600)
        _pool["fd"], _pool["path"] = os.open(path, os.O_RDWR | os.O_NONBLOCK), path
        import atexit  # only where a build runs

        atexit.register(shutil.rmtree, folder, True)
    return _pool["fd"], _pool["path"]


def _take_back(fd: int, count: int, poll_s: float = 0.05) -> None:
    """Take `count` tokens out of the FIFO before their slots are released: they may be running a
    job of another ninja of the process, which returns them. Once no ninja of the process runs,
    what is not there was lost with a killed ninja: the slots are released all the same."""
    while count > 0:
        with _pool_lock:
            try:
                count -= len(os.read(fd, count))
                continue
            except BlockingIOError:
                if _pool["alive"] == 0:
                    return
        time.sleep(poll_s)


def machine_dir() -> Path | None:
    """This user's folder for what jitops coordinates across the machine (a private one under the
    temporary folder; None where it is not this user's alone)."""
    folder = Path(_layout.machine_dir_path(tempfile.gettempdir()))
    with contextlib.suppress(FileExistsError, OSError):
        folder.mkdir(mode=0o700)
    try:
        found = folder.lstat()
    except OSError:
        return None
    import stat  # only where a build runs

    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return None
    return folder


@contextlib.contextmanager
def background_compile(still_wanted, wait_s: float = 600.0, poll_s: float = 2.0):
    """Wait for the machine's one background PCH compile slot (a queue of flock waiters), then for
    PCH_MEMORY to be free; yields whether to compile: False where it is no longer wanted (asked
    of still_wanted() after each wait) or the memory was not free within wait_s."""
    folder = machine_dir()
    with _flock.flocked(folder / _layout.BACKGROUND_PCH_LOCK_NAME) if folder else contextlib.nullcontext():
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
