# SPDX-License-Identifier: MIT
"""The job budget (jitops/builder/_jobs.py): read from a fake /proc and cgroup tree given to the code
(never this machine's cgroups), and one pool shared by every ninja of a process (load_all's)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import children
import pytest

from jitops.builder import _jobs

GIB = 1 << 30


def fake_tree(tmp_path: Path, cgroup_lines: str, files: dict[str, str], available_kib: int = 20 << 20) -> tuple[str, str]:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup_lines)
    (proc / "meminfo").write_text(f"MemTotal: {available_kib * 2} kB\nMemAvailable: {available_kib} kB\n")
    cgroup.mkdir()
    for name, text in files.items():
        path = cgroup / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(proc), str(cgroup)


# Kubernetes nests a container's cgroup under its pod's, which holds the quota (ninja #2805).
POD = {
    "cgroup.controllers": "cpu memory pids\n",
    "kubepods/pod1/cpu.max": "50000 100000\n",
    "kubepods/pod1/memory.max": f"{4 * GIB}\n",
    "kubepods/pod1/memory.current": f"{GIB}\n",
    "kubepods/pod1/memory.stat": f"anon 0\ninactive_file {GIB}\n",  # page cache the kernel reclaims: free
    "kubepods/pod1/ctr/cpu.max": "max 100000\n",
    "kubepods/pod1/ctr/memory.max": "max\n",
    "kubepods/pod1/ctr/memory.current": f"{GIB}\n",
    "kubepods/pod1/ctr/pids.max": "100\n",
    "kubepods/pod1/ctr/pids.current": "10\n",
}


def test_the_limits_of_the_cgroups_above_count_v2(tmp_path):
    proc, cgroup = fake_tree(tmp_path, "0::/kubepods/pod1/ctr\n", POD)
    found = _jobs.limits(proc, cgroup)
    assert found.cpus == 1 and "kubepods/pod1" in found.cpus_why and not found.cpus_why.endswith("ctr")
    assert found.memory == 4 * GIB and found.memory_why.endswith("kubepods/pod1")
    assert found.processes == 90
    jobs, why = _jobs.job_count("c++", proc, cgroup)
    assert (jobs, why) == (2, "1 CPUs (the CPU quota of " + str(Path(cgroup, "kubepods/pod1")) + ")")
    assert _jobs.job_count("cuda", proc, cgroup)[0] == 1  # 4 GiB free, 4 GiB an nvcc unit


def test_the_limits_of_the_cgroups_above_count_v1_and_pids_max(tmp_path):
    files = {
        "cpu,cpuacct/a/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/a/cpu.cfs_period_us": "100000\n",
        "memory/a/memory.limit_in_bytes": f"{9223372036854771712}\n",
        "memory/a/memory.usage_in_bytes": "0\n",
        "pids/a/pids.max": "20\n",
        "pids/a/pids.current": "8\n",
    }
    proc, cgroup = fake_tree(tmp_path, "4:memory:/a\n3:pids:/a\n2:cpu,cpuacct:/a\n", files, available_kib=64 << 20)
    found = _jobs.limits(proc, cgroup)
    assert found.memory == 64 * GIB and found.memory_why == "MemAvailable"  # v1's "no limit"
    jobs, why = _jobs.job_count("c++", proc, cgroup)
    assert jobs == 2 and why.startswith("12 processes free (pids.max of") and "/pids/a" in why
    (tmp_path / "cgroup" / "cpu,cpuacct/a/cpu.cfs_quota_us").write_text("100000\n")
    assert _jobs.limits(proc, cgroup).cpus == 1


def test_max_jobs_wins(tmp_path, monkeypatch):
    proc, cgroup = fake_tree(tmp_path, "0::/kubepods/pod1/ctr\n", POD)
    monkeypatch.setenv("MAX_JOBS", "7")
    assert _jobs.job_count("cuda", proc, cgroup) == (7, "")


def logged_events(times: Path) -> list[tuple[int, str]]:
    """The compiles' "+ <ns>" (start) and "- <ns>" (end) lines a timing compiler wrapper wrote."""
    return sorted((int(t), sign) for sign, t in (line.split() for line in times.read_text().splitlines()))


def most_at_once(events: list[tuple[int, str]]) -> int:
    running = peak = 0
    for _, sign in sorted(events, key=lambda e: (e[0], e[1] == "+")):  # an end before a start at one instant
        running += 1 if sign == "+" else -1
        peak = max(peak, running)
    return peak


# load_all's ninjas (one per library, in threads) under a fake pod of 4 CPUs and 4 GB: at most the
# jobs that fit run at once, all ninjas together. The compiler logs when each compile starts and ends.
LOAD_ALL = """
import sys
from jitops.builder import _jobs
_jobs.PROC, _jobs.CGROUP = sys.argv[1], sys.argv[2]
import jitops
jitops.load_all()
"""


@pytest.mark.slow
@pytest.mark.parametrize("ninja", ["pip's (1.13: joins the jobserver)", "PATH's (may be older: -j its tokens)"])
def test_load_all_runs_at_most_the_jobs_that_fit_all_ninjas_together(tmp_path, ninja):
    pod = {**POD, "kubepods/pod1/cpu.max": "400000 100000\n"}
    proc, cgroup = fake_tree(tmp_path, "0::/kubepods/pod1/ctr\n", pod)
    expected, why = _jobs.job_count("c++", proc, cgroup)
    assert expected == 2 and "GiB free" in why  # 4 GB: two C++ units at once
    times = tmp_path / "times"
    compiler = tmp_path / "timed-c++"
    compiler.write_text(
        f'#!/bin/sh\ncase "$*" in *" -c "*) echo "+ $(date +%s%N)" >> {times};; esac\n'
        f'c++ "$@"; rc=$?\ncase "$*" in *" -c "*) echo "- $(date +%s%N)" >> {times};; esac\nexit $rc\n'
    )
    compiler.chmod(0o755)
    env = {**os.environ, "JITOPS_CACHE_DIR": str(tmp_path / "cache"), "CXX": str(compiler), "JITOPS_PCH": "0"}
    env["TMPDIR"] = str(tmp_path)  # the machine's job slots of its own: no other test's build holds one
    env.pop("MAX_JOBS", None)
    if ninja.startswith("pip"):
        env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    proc_ = children.run([sys.executable, "-c", LOAD_ALL, proc, cgroup], env=env, capture_output=True, text=True, timeout=900)
    assert proc_.returncode == 0, proc_.stderr
    assert " compile jobs at once: " in proc_.stderr, proc_.stderr
    events = logged_events(times)
    peak, starts = most_at_once(events), sum(1 for _, sign in events if sign == "+")
    # With a CUDA torch and nvcc, the libraries with CUDA sources run one job (4 GB an nvcc unit):
    # the C++ compiles counted here then peak at most at the C++ count.
    import torch

    cuda_builds = torch.version.cuda is not None and shutil.which("nvcc") is not None
    assert starts >= 6 and (peak <= expected if cuda_builds else peak == expected), json.dumps({"peak": peak, "starts": starts})


HOLD_SLOTS = """
import sys, time
from jitops.builder import _jobs
held = _jobs.claim(int(sys.argv[1]), int(sys.argv[1]))
print(len(held), flush=True)
time.sleep(600)
"""


def test_the_machines_job_slots_are_shared_by_processes_and_freed_by_a_killed_holder(tmp_path, monkeypatch):
    """Another process's build holds both jobs: none is free here until it is killed (the kernel
    frees its slots); a ninja's slots beyond its first wait in the process's jobserver FIFO."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    monkeypatch.setattr(_jobs, "machine_dir", lambda: tmp_path / f"jitops-{os.getuid()}")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SLOTS, "2"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "2"
        assert _jobs.claim(2, 1, block=False) == []
        # A holder that never lets go (stopped with Ctrl-Z): one job beside it after the wait, no hang.
        holder.send_signal(signal.SIGSTOP)
        assert _jobs.claim(2, 1, wait_s=0.3) == [None]
        # A holder at work (a long build): waited for past wait_s, and its slot taken once it ends.
        holder.send_signal(signal.SIGCONT)
        threading.Timer(1.5, holder.kill).start()
        started = time.monotonic()
        slot = _jobs.claim(2, 1, wait_s=0.3)
        assert slot != [None] and time.monotonic() - started > 1.0
        _jobs.release(slot)
    finally:
        holder.kill()
        holder.wait()
    slots = _jobs.claim(2, 2, block=False)
    assert len(slots) == 2
    _jobs.release(slots)
    with _jobs.ninja_jobs(3, joins=True, wanted=3) as (args, env):
        fifo = env["MAKEFLAGS"].split("fifo:")[1]
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        assert args == [] and os.read(fd, 10) == b"++"  # a "ninja" takes the two and is killed
    freed = _jobs.claim(3, 3, block=False)
    assert len(freed) == 3, "the slots of its lost tokens are free again"
    _jobs.release(freed)
    with _jobs.ninja_jobs(3, joins=False, wanted=5) as (args, env):  # a ninja before 1.13: -j what it holds
        assert (args, env) == (["-j", "3"], {})
        assert _jobs.claim(3, 1, block=False) == []
    os.close(fd)


def test_a_background_pch_waits_its_turn_and_for_its_memory(tmp_path, monkeypatch):
    """One background PCH compile per machine: a second waits for the first; none starts while less
    memory is free than it takes (it waits, then gives up), nor once no longer wanted."""
    monkeypatch.setattr(_jobs, "machine_dir", lambda: tmp_path)
    proc, cgroup = fake_tree(tmp_path, "0::/\n", {"cgroup.controllers": ""}, available_kib=1 << 20)  # 1 GiB
    monkeypatch.setattr(_jobs, "PROC", proc)
    monkeypatch.setattr(_jobs, "CGROUP", cgroup)
    with _jobs.background_compile(lambda: True, wait_s=0.3, poll_s=0.05) as go:
        assert go is False
    (tmp_path / "proc" / "meminfo").write_text(f"MemAvailable: {4 << 20} kB\n")
    with _jobs.background_compile(lambda: False) as go:
        assert go is False
    spans = []

    def compile_one():
        with _jobs.background_compile(lambda: True) as go:
            began = time.monotonic()
            time.sleep(0.3)
            spans.append((go, began, time.monotonic()))

    threads = [threading.Thread(target=compile_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans.sort(key=lambda span: span[1])
    assert [go for go, _, _ in spans] == [True] * 3
    assert all(later[1] >= earlier[2] for earlier, later in zip(spans, spans[1:])), spans


TWENTY = """
import ctypes, sys, jitops
folder = sys.argv[1]
for n in range(20):  # different include paths: a PCH key each
    path = f"{folder}/ext{n}.cpp"
    open(path, "w").write('#include <c10/macros/Macros.h>\\nextern "C" int value() { return %d; }\\n' % n)
    library = ctypes.CDLL(jitops.load(f"ext{n}", [path], extra_include_paths=[f"{folder}/inc{n}"], is_python_module=False))
    assert library.value() == n
print("loaded 20")
"""


@pytest.mark.slow
def test_twenty_extensions_leave_at_most_one_background_pch_compiling_at_a_time(tmp_path):
    """PyTorch's JIT-extension tests' shape: 20 loads, each flags of its own and so a PCH of its own,
    each PCH's compile slowed by a second. The compiler logs when each PCH compile starts and ends
    (before its process ends, so before its turn passes on): never two at once."""
    import time

    for n in range(20):
        (tmp_path / f"inc{n}").mkdir()
    times = tmp_path / "times"
    slow = tmp_path / "timed-pch-c++"
    slow.write_text(
        f'#!/bin/sh\ncase "$*" in *c++-header*) echo "+ $(date +%s%N)" >> {times}; sleep 1; c++ "$@"; rc=$?; '
        f'echo "- $(date +%s%N)" >> {times}; exit $rc;; esac\nexec c++ "$@"\n'
    )
    slow.chmod(0o755)
    env = {
        **os.environ,
        "JITOPS_CACHE_DIR": str(tmp_path / "cache"),
        "CXX": str(slow),
        "JITOPS_PCH": "1",
        "TMPDIR": str(tmp_path),
    }
    proc = children.run([sys.executable, "-c", TWENTY, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "loaded 20" in proc.stdout, proc.stderr
    assert proc.stderr.count("building a precompiled header") >= 10, proc.stderr
    deadline = time.time() + 300  # the queue drains after the script: one at a time

    while time.time() < deadline and sum(sign == "-" for _, sign in logged_events(times)) < 10:
        time.sleep(0.5)
    time.sleep(2)  # the last ones to start, if any
    events = logged_events(times)
    assert sum(sign == "-" for _, sign in events) >= 10
    assert most_at_once(events) == 1, f"{most_at_once(events)} background PCH compiles at once"
