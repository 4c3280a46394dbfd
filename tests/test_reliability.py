# SPDX-License-Identifier: MIT
"""Faults the loader must survive, each with real processes and the real toolchain on the tiny
test extension: builds killed at chosen points, crowds of cold starts, corrupt entries, a
read-only cache, a lock held past its timeout, and caches that are not ours. RELIABILITY.md
records the trials; JITOPS_KILL_TRIALS sets how many kills run (default 8: each kill point twice,
about 30 s on the 2-core VM; RELIABILITY.md's recorded run used 20)."""

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import children
import pytest
from test_loader import TIMEOUT_S, TINY_SOURCES, entries, finish, load_tiny, load_tiny_failing, slow_compiler, start_tiny

import jitops._files
from cache_tools import inventory
from jitops import _flock, _layout
from jitops._errors import BuildError
from jitops.store import _entries

KILL_TRIALS = int(os.environ.get("JITOPS_KILL_TRIALS", "8"))
KILL_POINTS = ("compile", "link", "publish", "random")


def wall_time_of_cold_load(cache: Path) -> float:
    started = time.monotonic()
    assert load_tiny(cache)["how"] == "built"
    return time.monotonic() - started


@pytest.fixture(scope="module")
def cold_wall_s(tmp_path_factory) -> float:
    """Seconds a cold build of tiny takes here, process start included: the yardstick."""
    return wall_time_of_cold_load(tmp_path_factory.mktemp("yardstick") / "cache")


def staging_dirs(cache: Path) -> list[Path]:
    return list(cache.glob(f"{_layout.TMP_PREFIX}jitops_test.tiny-*"))


def build_phase(cache: Path) -> str:
    """Where a build of tiny in cache has got to, from what is on disk."""
    if entries(cache):
        return "published"
    for staging in staging_dirs(cache):
        build = staging / "build"
        if list(staging.glob("*.so")) or list(build.glob("*.so")):
            return "publish"  # linked: the parent load-checks it, then publishes it
        if len(list(build.glob("*.o"))) >= 2:
            return "link"
        if (build / "build.ninja").exists():
            return "compile"
        return "prepare"
    return "start"


def wait_for(condition, victim: children.Process, deadline: float) -> bool:
    while not condition():
        if victim.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.slow
def test_killed_builds_never_hang_lose_or_corrupt(tmp_path, cold_wall_s):
    rng = random.Random(20261122)
    hit = Counter()
    for trial in range(KILL_TRIALS):
        cache = tmp_path / f"trial{trial}"
        target = KILL_POINTS[trial % len(KILL_POINTS)]
        victim = start_tiny(cache)
        deadline = time.monotonic() + TIMEOUT_S
        if target == "random":
            time.sleep(rng.uniform(0.0, cold_wall_s))
        else:
            order = ["compile", "link", "publish"]
            wait_for(lambda: build_phase(cache) in order[order.index(target) :] + ["published"], victim, deadline)
        phase = build_phase(cache)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=TIMEOUT_S)
        hit[phase] += 1

        # Whatever is published verifies; no loader can see anything else.
        for entry in entries(cache):
            assert _entries.Entry(
                cache, *_layout.parse_entry_name(entry.name)[:2], variant=_layout.parse_entry_name(entry.name)[2]
            ).verified_library(touch=False)
        # Every leftover is listed, as an orphan (its build is dead): once no process holds its lock. A
        # kill that lands while the victim forks ninja leaves the child a copy of the lock's descriptor
        # until it execs (close_fds): microseconds, longer on a loaded machine.
        released = time.monotonic() + 10
        while any(_flock.flock_is_held(lock) for lock in cache.glob("*.lock")) and time.monotonic() < released:
            time.sleep(0.01)
        rows = inventory.entry_rows(cache)
        leftovers = {str(p) for p in staging_dirs(cache)}
        assert {r.path for r in rows if r.status == inventory.ORPHAN} == leftovers
        assert all(r.status != inventory.BUILDING for r in rows)

        started = time.monotonic()
        result = load_tiny(cache)
        elapsed = time.monotonic() - started
        assert result["value"] == 42, f"trial {trial} ({phase})"
        assert elapsed < cold_wall_s * 1.5 + 5, f"trial {trial} ({phase}): {elapsed:.1f}s, a cold load takes {cold_wall_s:.1f}s"
    print(f"\n{KILL_TRIALS} kills, by the phase they hit: {dict(hit)}")
    assert len(hit) >= 3, f"the kills must land in several phases, got {dict(hit)}"


def tiny_variant(tmp_path: Path, value: int) -> Path:
    copy = tmp_path / f"tiny_{value}"
    shutil.copytree(TINY_SOURCES, copy)
    header = copy / "kernels" / "tiny.h"
    header.write_text(header.read_text().replace("TINY_VALUE 42", f"TINY_VALUE {value}"))
    return copy


def test_crowd_of_eight_builds_once(tmp_path):
    cache = tmp_path / "cache"
    results = [finish(p) for p in [start_tiny(cache) for _ in range(8)]]
    assert all(r["value"] == 42 for r in results)
    assert Counter(r["how"] for r in results) == {"built": 1, "cache": 7}
    assert len(entries(cache)) == 1


def test_crowd_of_two_trees_that_differ_in_a_header_each_gets_its_own_code(tmp_path):
    # Same sources, one header different: one key (the header is not declared), and a variant of
    # it per tree (the headers each build included). Each process gets its own tree's value, and
    # each tree's entry is built once.
    cache = tmp_path / "cache"
    sources = [TINY_SOURCES, tiny_variant(tmp_path, 43)] * 4
    results = [finish(p) for p in [start_tiny(cache, s) for s in sources]]
    assert [r["value"] for r in results] == [42, 43] * 4
    assert len(entries(cache)) == 2 and len({_layout.parse_entry_name(e.name)[1] for e in entries(cache)}) == 1
    assert Counter(r["how"] for r in results) == {"built": 2, "cache": 6}


def corrupt_truncated(entry: Path) -> None:
    (library,) = entry.glob("*.so")
    library.write_bytes(library.read_bytes()[:4096])


def corrupt_garbage(entry: Path) -> None:
    (library,) = entry.glob("*.so")
    library.write_bytes(random.Random(0).randbytes(library.stat().st_size))


def corrupt_no_manifest(entry: Path) -> None:
    (entry / _layout.MANIFEST_NAME).unlink()


def corrupt_malformed_manifest(entry: Path) -> None:
    (entry / _layout.MANIFEST_NAME).write_text('{"op": "tiny", "key": ')


def corrupt_other_key(entry: Path) -> None:
    manifest = json.loads((entry / _layout.MANIFEST_NAME).read_text())
    jitops._files.write_json_atomic(entry / _layout.MANIFEST_NAME, {**manifest, "key": "0" * 16})


@pytest.mark.parametrize(
    "corrupt,message",
    [
        (corrupt_truncated, "does not match the sha256"),
        (corrupt_garbage, "does not match the sha256"),
        (corrupt_no_manifest, "has no manifest.json"),
        (corrupt_malformed_manifest, "is not valid JSON"),
        (corrupt_other_key, "describes another build"),
    ],
    ids=["truncated", "garbage", "no-manifest", "malformed-manifest", "other-key"],
)
def test_corrupt_entry_is_rebuilt_with_a_warning_never_loaded(tmp_path, corrupt, message):
    cache = tmp_path / "cache"
    load_tiny(cache)
    (entry,) = entries(cache)
    corrupt(entry)
    result = load_tiny(cache)
    assert result["how"] == "built" and result["value"] == 42
    assert message in result["stderr"] and "discarding the corrupt cache entry" in result["stderr"]
    assert load_tiny(cache)["how"] == "cache"


def read_only_root(tmp_path: Path) -> Path:
    """An existing directory this process cannot write. root ignores mode bits, so for root it is
    /proc/sys (root's own, mode 0555, on a read-only filesystem)."""
    if os.geteuid() == 0:
        return Path("/proc/sys")
    root = tmp_path / "readonly"
    root.mkdir(mode=0o500)
    return root


def test_read_only_cache_falls_back_with_one_warning(tmp_path):
    # The per-user fallback is reused: a refused root costs one build, not one per process.
    root, tmp = read_only_root(tmp_path), tmp_path / "tmp"
    tmp.mkdir()
    first, second = load_tiny(root, TMPDIR=str(tmp)), load_tiny(root, TMPDIR=str(tmp))
    assert first["how"] == "built" and second["how"] == "cache" and first["value"] == second["value"] == 42
    for result in (first, second):
        assert result["stderr"].count("cannot use the cache at") == 1 and "per-user fallback cache" in result["stderr"]
    fallback = tmp / f"jitops-cache-{os.getuid()}"
    assert oct(fallback.stat().st_mode & 0o777) == "0o700" and len(entries(fallback)) == 1


def test_planted_fallback_is_refused_and_the_private_one_removed_at_exit(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    planted = tmp / f"jitops-cache-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # as if another user had made it first
    result = load_tiny(read_only_root(tmp_path), TMPDIR=str(tmp))
    assert result["how"] == "built" and result["value"] == 42
    assert "nor the fallback" in result["stderr"] and "removed at exit" in result["stderr"], result["stderr"]
    assert not list(planted.iterdir()), "nothing is written into a refused fallback"
    left = [p.name for p in tmp.iterdir() if p.name != os.path.basename(_layout.machine_dir_path(str(tmp)))]  # job slots
    assert left == [planted.name], "the private temporary cache is gone after exit"


@pytest.mark.slow
def test_lock_held_past_timeout_is_a_clear_error_naming_the_holder(tmp_path):
    cache = tmp_path / "cache"
    # A real build, made slow by a compiler wrapper, holds the entry's lock.
    wrapper = slow_compiler(tmp_path, 30)
    holder = start_tiny(cache, CXX=wrapper)
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob("jitops_test.tiny-*.owner")):
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
        # The same CXX, so that the waiter computes the same key and waits on the same lock.
        waiter = start_tiny(cache, CXX=wrapper, JITOPS_LOCK_TIMEOUT="3")
        _, stderr = waiter.communicate(timeout=TIMEOUT_S)
        assert waiter.returncode != 0
        assert time.monotonic() - started < 30, "the waiter must give up at its timeout"
        assert f"timed out after 3 s waiting for another process (pid {holder.pid} on" in stderr, stderr
    finally:
        # SIGTERM, not SIGKILL: the loader then stops its ninja and the sleeping compiler, which
        # would otherwise hold the holder's pipes open (and this test) for the rest of their 30 s.
        holder.terminate()
        holder.communicate(timeout=TIMEOUT_S)


# ---------------------------------------------------------------------------------------------
# Security
# ---------------------------------------------------------------------------------------------


def test_cache_root_and_entries_are_private(tmp_path):
    cache = tmp_path / "new" / "cache"
    load_tiny(cache)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert all(oct(e.stat().st_mode & 0o777) == "0o700" for e in entries(cache))


def assert_warning_points_at_the_caller(stderr: str) -> None:
    # load_tiny's child runs `python -c`, so the user's line is "<string>:N", not jitops' own file.
    locations = re.findall(r"^(\S+?):\d+: RuntimeWarning: jitops:", stderr, re.M)
    assert locations and set(locations) == {"<string>"}, stderr


def shared_root(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    return root


def symlinked_root(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    return tmp_path / "link"


def foreign_root(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a directory another user owns needs root")
    root = tmp_path / "foreign"
    root.mkdir(mode=0o700)
    os.chown(root, 4242, 4242)
    return root


@pytest.mark.parametrize(
    "make_root,message",
    [
        (shared_root, "writable by group or others"),
        (symlinked_root, "is a symbolic link"),
        (foreign_root, "is owned by uid 4242"),
    ],
    ids=["world-writable", "symlink", "other-owner"],
)
def test_unsafe_cache_root_is_refused_and_a_private_one_used(tmp_path, make_root, message):
    root = make_root(tmp_path)
    result = load_tiny(root)
    assert result["value"] == 42 and message in result["stderr"] and "per-user fallback cache" in result["stderr"]
    assert_warning_points_at_the_caller(result["stderr"])
    assert not list(Path(os.path.realpath(root)).glob("jitops_test.tiny-*")), "nothing is written into a refused root"


@pytest.mark.parametrize("plant", ["group-writable", "other-owner"])
def test_planted_entry_is_never_loaded(tmp_path, plant):
    cache = tmp_path / "cache"
    load_tiny(cache)
    (entry,) = entries(cache)
    # Someone else could have replaced the .so (and its manifest) in such a directory.
    if plant == "group-writable":
        entry.chmod(0o770)
    elif os.geteuid() == 0:
        os.chown(entry, 4242, 4242)
    else:
        pytest.skip("making a directory another user owns needs root")
    result = load_tiny(cache)
    assert result["how"] == "built" and "discarding the corrupt cache entry" in result["stderr"]
    assert_warning_points_at_the_caller(result["stderr"])


def test_no_shell_strings():
    """Processes are started from argument lists only: no shell=True, os.system or os.popen."""
    import ast

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in [*root.glob("jitops/**/*.py"), *root.glob("cache_tools/*.py"), *root.glob("examples/**/*.py"), root / "setup.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                offenders.append(f"{path}:{node.value.lineno} shell=")
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen") and getattr(node.value, "id", "") == "os":
                offenders.append(f"{path}:{node.lineno} os.{node.attr}")
    assert offenders == []


@pytest.mark.slow
def test_torchrun_four_ranks_build_each_op_once(tmp_path):
    out = tmp_path / "ranks.json"
    env = {**os.environ, "JITOPS_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    job = Path(__file__).resolve().parent / "jobs" / "torchrun_ops.py"
    result = children.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(job), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    counts = json.loads(out.read_text())
    assert counts["world"] == 4
    for op in ("add2", "trilinear_interpolation"):
        assert counts[op] == {"built": 1, "cache": 3}, counts


# ---------------------------------------------------------------------------------------------
# A compiler that never returns: the build timeout, Ctrl-C and SIGTERM
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def hung_compiler(directory: Path, ignores_ctrl_c: bool = False):
    """A C++ compiler that sleeps (about) forever when asked to compile (it answers --version, which
    the loader asks first), and the token on the sleeping process's command line. ignores_ctrl_c:
    the sleeping process ignores SIGINT. On the way out, whatever still sleeps is killed, so a
    failing test leaves no hour-long compiler behind."""
    token = f"3600.{random.randrange(10**6):06d}"
    wrapper = directory / "hung-c++"
    trap = "trap '' INT\n" if ignores_ctrl_c else ""
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec {shutil.which("c++")} "$@";; esac\n{trap}exec sleep {token}\n')
    wrapper.chmod(0o755)
    try:
        yield str(wrapper), token
    finally:
        kill_processes_with(token)


def processes_with(token: str) -> list[int]:
    found = []
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            try:
                if token.encode() in (proc_dir / "cmdline").read_bytes():
                    found.append(int(proc_dir.name))
            except OSError:
                pass  # exited meanwhile
    return found


def kill_processes_with(token: str) -> None:
    for pid in processes_with(token):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.kill(pid, signal.SIGKILL)


def signal_state(pid: int) -> str:
    """A process's signal masks and state (/proc/PID/status), for a failure message."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as err:
        return f"pid {pid}: {err}"
    tasks = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            tasks.append(f"{task.name}:{(task / 'wchan').read_text()}:{(task / 'syscall').read_text().split()[0]}")
        except (OSError, IndexError):
            pass
    masks = " ".join(
        line for line in status.splitlines() if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
    )
    return f"{masks} tasks {' '.join(tasks)}"


def communicate_or_fail(proc: children.Process, timeout_s: float) -> tuple[str, str]:
    """proc.communicate(), or a failure saying how the child that did not end stands."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not end within {timeout_s:g} s: {signal_state(proc.pid)}")


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_hung_compiler_hits_the_build_timeout_and_leaves_nothing(tmp_path):
    cache = tmp_path / "cache"
    with hung_compiler(tmp_path) as (compiler, token):
        started = time.monotonic()
        proc = start_tiny(cache, CXX=compiler, JITOPS_BUILD_TIMEOUT="2")
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode != 0 and time.monotonic() - started < 30, stderr
        message = re.search(r"BuildError: (.*)\nfull log: (\S+)", stderr)
        assert message, stderr
        assert "building jitops_test.tiny failed: it did not finish within 2 s (JITOPS_BUILD_TIMEOUT)" in message.group(1)
        assert "JITOPS_BUILD_TIMEOUT" in Path(message.group(2)).read_text()
        assert wait_until(lambda: not processes_with(token), 10), "the hung compiler was stopped"
        assert entries(cache) == [] and list(cache.glob(".tmp-*")) == []


# A child that takes Ctrl-C as a program started from a terminal does. Python leaves SIGINT ignored
# in a process that started with it ignored, as every command of a shell's background job (`make
# test &`, nohup) does: there the tests below would wait for an interrupt that never comes.
TAKES_CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


# ninja passes the interrupt on to its commands. One that misses it (it ignores SIGINT, or it was
# still starting when the interrupt came: a race CI met) is killed with its process group.
@pytest.mark.parametrize(
    "sig, ignores_ctrl_c",
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["ctrl-c", "sigterm", "compiler-ignores-ctrl-c"],
)
@pytest.mark.slow
def test_interrupted_build_stops_its_compilers_and_leaves_nothing(tmp_path, sig, ignores_ctrl_c):
    cache = tmp_path / "cache"
    with hung_compiler(tmp_path, ignores_ctrl_c) as (compiler, token):
        proc = start_tiny(cache, prelude=TAKES_CTRL_C, CXX=compiler)
        assert wait_until(lambda: processes_with(token) or proc.poll() is not None, 60) and proc.poll() is None
        proc.send_signal(sig)
        communicate_or_fail(proc, 30)
        # After the cleanup the process ends by the signal, as it would have without jitops (Python ends
        # an uncaught KeyboardInterrupt by SIGINT; load_op delivers SIGTERM again).
        assert proc.returncode == -sig
        assert wait_until(lambda: not processes_with(token), 10), "no compiler is left running"
        assert entries(cache) == [] and list(cache.glob(".tmp-*")) == []
        assert load_tiny(cache)["value"] == 42, "the next load builds normally"


# Ctrl-C while subprocess.Popen is still starting ninja (inside its __init__), by which time
# ninja has started its compilers.
INTERRUPT_INSIDE_POPEN = """
import os, signal, subprocess, time
_execute_child = subprocess.Popen._execute_child
def _interrupted_start(self, args, *rest, **kwargs):
    _execute_child(self, args, *rest, **kwargs)
    if os.path.basename(args[0]) == "ninja":
        time.sleep(1.0)
        signal.raise_signal(signal.SIGINT)
subprocess.Popen._execute_child = _interrupted_start
"""


def test_ctrl_c_while_ninja_starts_still_stops_it_and_its_compilers(tmp_path):
    cache = tmp_path / "cache"
    with hung_compiler(tmp_path) as (compiler, token):
        proc = start_tiny(cache, prelude=TAKES_CTRL_C + INTERRUPT_INSIDE_POPEN, CXX=compiler)
        _, stderr = communicate_or_fail(proc, 60)
        assert proc.returncode == -signal.SIGINT, stderr
        assert wait_until(lambda: not processes_with(token), 10), "no compiler is left running"
        assert entries(cache) == [] and list(cache.glob(".tmp-*")) == []


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str):
    """A tmpfs of `size` mounted at folder (skips where it cannot be: it needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_when_the_lock_names_its_holder_is_the_disk_full_error(tmp_path):
    # G4: the lock file takes no block, its .owner file does: the disk fills between the two.
    from jitops.store._lock import HeldLock

    with small_tmpfs(tmp_path / "disk", "16k") as disk:
        with open(disk / "filler", "wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"x" * 4096)
        lock = disk / "jitops_test.tiny-0123456789abcdef.lock"
        with pytest.raises(BuildError, match=r"cannot take the lock .* to build tiny: the disk holding it is full"):
            HeldLock(lock, "tiny")
        assert not Path(_layout.owner_path(lock)).exists(), "no half-written owner file"
        (disk / "filler").unlink()
        with HeldLock(lock, "tiny") as held:  # released: the next build takes it at once
            assert held.acquired


@pytest.mark.parametrize("size", ["16k", "64k"])
def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, size):
    # A tmpfs too small for the build: the cache's own files fit, the build does not (16k fails
    # early, 64k part-way through; tiny needs about 70k).
    with small_tmpfs(tmp_path / "disk", size) as disk:
        cache = disk / "cache"
        proc = start_tiny(cache)
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode != 0
        assert f"building jitops_test.tiny failed: the disk holding the cache {cache} is full" in stderr, stderr
        assert re.search(r"^jitops.BuildError: jitops: building jitops_test.tiny failed: the disk", stderr, re.M), stderr
        assert "Install the missing tools" not in stderr, "only advice that applies (no tool is missing)"
        assert entries(cache) == [] and list(cache.glob(".tmp-*")) == [], "nothing published or half-written"


@pytest.mark.parametrize(
    "setting, said",
    [
        ({"CXX": "/bin/false"}, "/bin/false failed making"),  # F2: a compiler that fails without a word
        ({"CMAKE_CXX_COMPILER_LAUNCHER": "/no/such/launcher"}, "/no/such/launcher failed making"),  # F1: a missing launcher
    ],
)
def test_a_failing_program_is_named_with_its_own_first_lines(tmp_path, setting, said):
    stderr = load_tiny_failing(tmp_path / "cache", **setting)
    assert said in stderr, stderr
    assert "subcommand failed" not in stderr.split("full log:")[0], "ninja's own line is not the message"
    if "CMAKE_CXX_COMPILER_LAUNCHER" in setting:
        assert "not found" in stderr, "the program's own words: the shell could not find it"


def processes_working_in(folder: Path, running: bytes = b"") -> list[int]:
    """The processes whose working folder is inside folder (and whose command line holds `running`)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(folder)):
                if running in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
    return found


def test_the_next_build_stops_a_killed_builds_orphaned_compilers_and_removes_its_folder(tmp_path):
    # N24: SIGKILL reaches the loader alone; its ninja and compilers run on, in its staging folder.
    cache, slow = tmp_path / "cache", tmp_path / "slow"
    compiler = tmp_path / "c++"  # one compiler for both builds (one key), slow while `slow` exists
    # It ignores every signal but SIGKILL, as its sleep does: on a 16-core H200 the killed build's
    # compilers were gone at once (something signalled them; not investigated), and the case that
    # matters is a compiler that ignores that, which only the next build's SIGKILL ends.
    ignore = "trap '' INT TERM HUP PIPE"
    compiler.write_text(f'#!/bin/sh\n{ignore}\ncase "$*" in *--version*) ;; *) [ -e {slow} ] && sleep 30;; esac\nexec c++ "$@"\n')
    compiler.chmod(0o755)
    slow.touch()
    victim = start_tiny(cache, CXX=str(compiler))
    deadline = time.monotonic() + TIMEOUT_S
    # Waits for the compiler's own sleep: the first process working in the cache may be ninja, which
    # can end with the killed loader (its output pipe gone) before it starts a compiler; beside
    # another suite on the H200 the premise below then failed.
    assert wait_for(lambda: processes_working_in(cache, b"sleep\x0030"), victim, deadline), "the build started compiling"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=TIMEOUT_S)
    assert processes_working_in(cache), "its compilers run on as orphans"
    slow.unlink()
    assert load_tiny(cache, CXX=str(compiler))["value"] == 42
    assert processes_working_in(cache) == [], "the next build of the key stopped them"
    assert staging_dirs(cache) == [], "and removed the killed build's folder"
