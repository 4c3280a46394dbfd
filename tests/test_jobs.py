# SPDX-License-Identifier: MIT
"""The job budget (jitops/build/_jobs.py): read from a fake /proc and cgroup tree given to the code
(never this machine's cgroups), and one pool shared by every ninja of a process (load_all's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import children
import pytest

from jitops.build import _jobs

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
    "kubepods/pod1/memory.current": "0\n",
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


# load_all's ninjas (one per library, in threads) under a fake pod of 4 CPUs and 4 GB: at most the
# jobs that fit run at once, all ninjas together. The compiler logs when each compile starts and ends.
LOAD_ALL = """
import sys
from jitops.build import _jobs
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
    env.pop("MAX_JOBS", None)
    if ninja.startswith("pip"):
        env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    proc_ = children.run([sys.executable, "-c", LOAD_ALL, proc, cgroup], env=env, capture_output=True, text=True, timeout=900)
    assert proc_.returncode == 0, proc_.stderr
    assert f"{expected} compile jobs at once: " in proc_.stderr, proc_.stderr
    running = peak = 0
    events = sorted((int(t), sign) for sign, t in (line.split() for line in times.read_text().splitlines()))
    for _, sign in sorted(events, key=lambda e: (e[0], e[1] == "+")):  # an end before a start at one instant
        running += 1 if sign == "+" else -1
        peak = max(peak, running)
    starts = sum(1 for _, sign in events if sign == "+")
    assert starts >= 6 and peak == expected, json.dumps({"peak": peak, "starts": starts})


def test_the_pool_is_refilled_once_no_ninja_runs(tmp_path):
    """A ninja killed while it held tokens loses them; the pool is whole again for the next build."""
    with _jobs.ninja_jobs(3) as (args, env):
        fifo = env["MAKEFLAGS"].split("fifo:")[1]
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        assert os.read(fd, 10) == b"++"  # one is this ninja's own: two left; a "ninja" takes them and dies
    with _jobs.ninja_jobs(3):
        assert os.read(fd, 10) == b"++"
        os.write(fd, b"++")
    with _jobs.ninja_jobs(3, joins=False, wanted=5) as (args, env):  # a ninja before 1.13: -j what it holds
        assert (args, env) == (["-j", "3"], {})
        with pytest.raises(BlockingIOError):  # it holds all three until it ends
            os.read(fd, 1)
    os.close(fd)
    assert subprocess.run(["test", "-p", fifo]).returncode == 0
