# SPDX-License-Identifier: MIT
"""`jitops-cache` on a real cache: real built entries (add2), plus corrupt, stale, orphan and
locked ones, and locks held by live child processes."""

import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import children
import pytest
import torch

import jitops._files
import jitops.ops._framework
import jitops.warm
from cache_tools.__main__ import main as cache_tools_main
from jitops import _files, _layout, _settings

TIMEOUT_S = 300
REPO = Path(__file__).resolve().parent.parent


def cli(cache: Path, *args: str, env_extra: dict | None = None, python: str | None = None) -> subprocess.CompletedProcess:
    """jitops-cache ARGS on cache: its main() in this process, with the environment patched and the
    output captured (each new process would import torch again); in a new process of `python` where
    the interpreter is what a test is about. The entry point itself is run by the tests at the end."""
    env = {"JITOPS_CACHE_DIR": str(cache), "TORCH_EXTENSIONS_DIR": str(cache.parent / "torch_ext"), **(env_extra or {})}
    if python is not None:
        return children.run(
            [python, "-m", "cache_tools", *args],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        for name, value in env.items():
            patch.setenv(name, value)
        try:
            rc = cache_tools_main(list(args))
        except SystemExit as exit:  # argparse's usage errors
            rc = exit.code
    return subprocess.CompletedProcess(["jitops-cache", *args], rc, stdout.getvalue(), stderr.getvalue())


def cli_json(cache: Path, *args: str, expect_rc: int = 0, env_extra: dict | None = None):
    result = cli(cache, *args, "--json", env_extra=env_extra)
    assert result.returncode == expect_rc, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def list_rows(cache: Path, *args: str) -> list:
    data = cli_json(cache, "list", *args)
    assert data["schema"] == 2 and data["root"] == str(cache)
    return data["entries"]


def copy_entry(source: Path, cache: Path, key: str, edit_components: dict | None = None) -> Path:
    """A copy of a published entry under another key, its manifest rewritten to match (and with
    some key components changed, to stand for a build made under another torch, say)."""
    name, _, variant = _layout.parse_entry_name(source.name)
    target = cache / _layout.entry_name(name, key, variant)
    shutil.copytree(source, target)
    manifest = json.loads((target / _layout.MANIFEST_NAME).read_text())
    manifest["key"] = key
    manifest["components"].update(edit_components or {})
    jitops._files.write_json_atomic(target / _layout.MANIFEST_NAME, manifest)
    return target


class HeldLock:
    """A child process holding a lock file: flock (as a jitops build does) or merely open (as a
    torch FileBaton holder does)."""

    CODE = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
if sys.argv[2] == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""

    def __init__(self, path: Path, how: str):
        self.proc = children.popen([sys.executable, "-c", self.CODE, str(path), how], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def add2_entry() -> Path:
    """A real build of add2 (from the session's cache, where the op tests build it)."""
    jitops.ops._framework.require("add2")
    return jitops.warm.loaded["jitops.add2"].library.parent


@pytest.fixture
def cache(tmp_path, add2_entry) -> Path:
    """A cache holding one entry of each status but `building`."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    shutil.copytree(add2_entry, root / add2_entry.name)  # ok
    copy_entry(add2_entry, root, "0" * 16, {"torch_floor": "2.99"})  # stale: add2 is stable, built for another floor
    corrupt = copy_entry(add2_entry, root, "1" * 16)
    (library,) = corrupt.glob("*.so")
    library.write_bytes(library.read_bytes()[:1000])  # corrupt: truncated
    orphan = root / f"{_layout.TMP_PREFIX}jitops.add2-{'2' * 16}-abc"
    orphan.mkdir()
    (orphan / "half.o").write_bytes(b"\0" * 5000)
    return root


def statuses(rows) -> dict:
    return {row["key"]: row["status"] for row in rows}


def test_dir_names_the_root_and_why(tmp_path):
    data = cli_json(tmp_path / "somewhere", "dir")
    assert data == {"schema": 2, "root": str(tmp_path / "somewhere"), "reason": "JITOPS_CACHE_DIR"}


def test_list_shows_every_status(cache, add2_entry):
    ok_key = _layout.parse_entry_name(add2_entry.name)[1]
    with HeldLock(cache / f"jitops.add2-{'3' * 16}.lock", "flock"):
        (cache / f"{_layout.TMP_PREFIX}jitops.add2-{'3' * 16}-xyz").mkdir()  # a build in progress
        rows = list_rows(cache)
    assert statuses(rows) == {
        ok_key: "ok",
        "0" * 16: "stale",
        "1" * 16: "corrupt",
        "2" * 16 + "-abc": "orphan",
        "3" * 16 + "-xyz": "building",
    }
    ok = next(r for r in rows if r["status"] == "ok")
    assert ok["name"] == "add2" and ok["backends"] and ok["torch"] and ok["size"] > 0 and ok["built_at"] and ok["last_used"]
    stale = next(r for r in rows if r["status"] == "stale")
    assert "torch_floor '2.99', here '2.11'" in stale["reason"]
    readable = cli(cache, "list")
    assert readable.returncode == 0 and "STATUS" in readable.stdout and "corrupt" in readable.stdout
    assert list_rows(cache, "lltm") == []


def test_info_totals(cache):
    data = cli_json(cache, "info")
    assert data["entries"] == 4 and data["by_status"] == {"ok": 1, "stale": 1, "corrupt": 1, "building": 0, "orphan": 1}
    assert data["bytes"] > 0 and data["lock_timeout_s"] == _settings.SETTINGS["JITOPS_LOCK_TIMEOUT"].default
    assert "torch" in data["environment"]


def test_verify_finds_the_corrupt_entry(cache):
    data = cli_json(cache, "verify", expect_rc=1)
    bad = [e for e in data["entries"] if not e["ok"]]
    assert [e["key"] for e in bad] == ["1" * 16] and "sha256" in bad[0]["problem"]
    shutil.rmtree(next(cache.glob(f"jitops.add2-{'1' * 16}-*")))
    assert cli_json(cache, "verify")["problems"] == 0


def test_clear_dry_run_removes_nothing_then_stale_then_all(cache, add2_entry):
    before = sorted(p.name for p in cache.iterdir())
    dry = cli_json(cache, "clear", "--all", "--dry-run")
    assert dry["dry_run"] and len(dry["removed"]) == 4 and dry["bytes_freed"] > 0
    assert sorted(p.name for p in cache.iterdir()) == before

    left = cache / f"jitops.add2-{'3' * 16}.lock"  # a removed entry's lock, left by an older jitops (T16)
    left.write_text("")
    stale = cli_json(cache, "clear", "--stale")
    assert sorted(r["status"] for r in stale["removed"]) == ["corrupt", "orphan", "stale"]
    assert [r["status"] for r in list_rows(cache)] == ["ok"]
    assert not left.exists(), "the lock files of removed entries go with them"

    with HeldLock(Path(_layout.lock_path(cache, *_layout.parse_entry_name(add2_entry.name)[:2])), "flock"):
        kept = cli_json(cache, "clear", "--all")
        assert kept["removed"] == [] and kept["skipped"], "an entry being built must survive clear --all"
    cleared = cli_json(cache, "clear", "add2")
    assert len(cleared["removed"]) == 1 and list_rows(cache) == []
    assert list(cache.glob("*.lock")) == [], "the lock files of removed entries go with them (T16)"


def test_clear_removes_the_warm_records_of_entries_that_are_gone(cache, add2_entry):
    def record(name: str, content: bytes) -> Path:
        path = cache / f"{_layout.RECORD_PREFIX}jitops.add2-{name}.json"
        path.write_bytes(content)
        return path

    # What the CLI reads of a record is the entry folder it names (_resolution._remember writes the rest).
    of_ok = record("ok", json.dumps({"entry": add2_entry.name}).encode())
    of_stale = record("stale", json.dumps({"entry": next(cache.glob(f"jitops.add2-{'0' * 16}-*")).name}).encode())
    unreadable = record("unreadable", b"{not json")
    elsewhere = record("elsewhere", json.dumps({"entry": f"../jitops.add2-{'0' * 16}"}).encode())

    dry = cli_json(cache, "clear", "--stale", "--dry-run")
    # A dry run removes no entry, so only the records that already name nothing are listed.
    assert sorted(dry["warm_records_removed"]) == sorted(map(str, [unreadable, elsewhere])) and unreadable.exists()
    stale = cli_json(cache, "clear", "--stale")
    assert sorted(stale["warm_records_removed"]) == sorted(map(str, [of_stale, unreadable, elsewhere]))
    assert of_ok.exists() and not of_stale.exists() and not unreadable.exists() and not elsewhere.exists()
    cleared = cli(cache, "clear", "add2")
    assert cleared.returncode == 0 and "removed 1 warm record of entries that are gone" in cleared.stdout
    assert not of_ok.exists()


def test_clear_without_a_selection_is_bad_usage(cache):
    result = cli(cache, "clear")
    assert result.returncode == 2 and "say what to clear" in result.stderr


@pytest.mark.parametrize(
    "args", [["frobnicate"], ["prune", "--older-than", "soon"], ["prune", "--max-size", "lots"], ["list", "--bogus"]]
)
def test_bad_usage_exits_2(cache, args):
    assert cli(cache, *args).returncode == 2


@pytest.mark.parametrize(
    "args", [["clear", "add"], ["list", "add"], ["clear", "add2", "nosuchop", "--dry-run"], ["build", "add"]]
)
def test_an_unknown_op_name_is_bad_usage_naming_the_ops(cache, args):
    result = cli(cache, *args)
    assert result.returncode == 2 and "unknown extension(s)" in result.stderr and "available: add2, bias_act" in result.stderr, (
        result.stderr
    )
    assert len(list_rows(cache)) == 4, "nothing was removed"


def test_an_op_with_entries_in_the_cache_is_known_even_if_not_shipped(cache, add2_entry):
    copy_entry(add2_entry, cache, "5" * 16).rename(cache / f"someone.someones_op-{'5' * 16}")
    assert cli(cache, "clear", "someones_op").returncode == 0
    assert not (cache / f"someone.someones_op-{'5' * 16}").exists()


def test_prune_goes_stale_first_then_least_recently_used(cache, add2_entry):
    # A second usable entry, used longer ago than the first.
    older = copy_entry(add2_entry, cache, "4" * 16)
    a_day_ago = time.time() - 86400
    os.utime(older, (a_day_ago, a_day_ago))  # an entry's folder's mtime is its last-used time
    one_entry = _files.tree_size(older)
    dry = cli_json(cache, "prune", "--max-size", str(one_entry + 100), "--dry-run")
    assert sorted(r["status"] for r in dry["removed"][:3]) == ["corrupt", "orphan", "stale"]
    assert dry["removed"][-1]["key"] == "4" * 16, "the least recently used usable entry goes next"
    assert len(list(cache.iterdir())) == 5
    done = cli_json(cache, "prune", "--max-size", str(one_entry + 100))
    assert len(done["removed"]) == 4
    assert [r["status"] for r in list_rows(cache)] == ["ok"]
    assert cli_json(cache, "prune", "--older-than", "1h")["removed"] == []


def test_locks_tells_live_from_stale_and_clears_only_stale(cache, tmp_path):
    torch_ext = tmp_path / "torch_ext"
    stale_baton = torch_ext / "other_project" / "lock"
    live_baton = torch_ext / "busy_project" / "lock"
    for path in (stale_baton, live_baton):
        path.parent.mkdir(parents=True)
        path.write_text("")
    entry_lock = cache / f"jitops.add2-{'5' * 16}.lock"
    with HeldLock(live_baton, "open") as baton_holder, HeldLock(entry_lock, "flock") as builder:
        data = cli_json(cache, "locks", expect_rc=1)
        states = {row["path"]: row for row in data["locks"]}
        assert states[str(stale_baton)]["state"] == "stale"
        assert states[str(live_baton)]["state"] == "live" and baton_holder.proc.pid in states[str(live_baton)]["pids"]
        assert states[str(entry_lock)]["state"] == "held" and builder.proc.pid in states[str(entry_lock)]["pids"]
        assert stale_baton.exists(), "listing removes nothing"

        cleared = cli_json(cache, "locks", "--clear-stale")
        assert cleared["cleared"] == [str(stale_baton)]
        assert not stale_baton.exists() and live_baton.exists() and entry_lock.exists()
        assert cli(cache, "locks").returncode == 0


def test_doctor_reports_every_op(tmp_path):
    data = cli_json(tmp_path / "cache", "doctor")
    libraries = {e.name for op in jitops.available_ops() for e in jitops.ops._framework.op_libraries(op)}
    assert {row["name"] for row in data["extensions"]} == libraries  # upfirdn2d's autograd: a library of its own
    assert all(row["how"] == "buildable" for row in data["extensions"])
    assert data["ninja"] and data["cxx"]["path"] and data["torch"]
    text = cli(tmp_path / "cache", "doctor").stdout
    assert "C++ compiler" in text and "add2" in text


def test_doctor_exits_1_when_an_op_cannot_be_had(tmp_path, python_without_ninja):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()  # no compiler, no ninja
    python, env = python_without_ninja
    result = cli(tmp_path / "cache", "doctor", "--json", env_extra={"PATH": str(bin_dir), "CXX": "c++", **env}, python=python)
    assert result.returncode == 1, result.stderr
    ops = json.loads(result.stdout)["extensions"]
    assert all(op["how"] == "unavailable" and "no ninja on PATH" in op["detail"] for op in ops)


def test_doctor_has_the_compiler_compile_a_line_and_a_failing_one_cannot_build(tmp_path):
    """CXX=/bin/false answers no --version but exits 1: no op is "buildable" with it."""
    result = cli(tmp_path / "cache", "doctor", "--json", env_extra={"CXX": "/bin/false"}, python=sys.executable)
    assert result.returncode == 1, result.stderr
    ops = json.loads(result.stdout)["extensions"]
    assert ops and all(op["how"] == "unavailable" and not op["buildable"] for op in ops), ops
    assert "the C++ compiler /bin/false does not compile one line of C++ (exit 1)" in ops[0]["detail"], ops[0]


@pytest.mark.skipif(torch.version.cuda is not None, reason="about a CPU-only torch")
def test_arch_on_a_cpu_only_torch_says_it_has_no_effect(tmp_path):
    result = cli(tmp_path / "cache", "build", "--arch", "9.0", "nosuchop")  # refused before any build
    assert "--arch 9.0 has no effect" in result.stderr and "CPU-only" in result.stderr, result.stderr


# Every command that only reads (a dry run removes nothing), verify aside: it exits 1 on the corrupt entry.
READING_COMMANDS = (
    ["dir"],
    ["list"],
    ["info"],
    ["locks"],
    ["clear", "--stale", "--dry-run"],
    ["prune", "--max-size", "1G", "--dry-run"],
)


def test_commands_other_than_build_never_compile(cache, tmp_path):
    # With no compiler and no ninja on PATH, every inspecting command still works.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir), "CXX": "c++"}
    for command in READING_COMMANDS:
        result = cli(cache, *command, env_extra=env)
        assert result.returncode == 0, f"{command}: {result.stderr}"
    assert cli(cache, "verify", env_extra=env).returncode == 1  # the corrupt entry


def test_entries_of_the_older_layout_are_stale_and_cleared(cache):
    old = cache / f"add2-{'6' * 16}"  # as jitops named entries before extensions had namespaces
    old.mkdir(mode=0o700)
    (old / "jitops_add2.so").write_bytes(b"old")
    rows = {r["key"]: r for r in list_rows(cache)}
    assert rows["6" * 16]["status"] == "stale" and "older jitops" in rows["6" * 16]["reason"]
    assert cli(cache, "clear", "--stale").returncode == 0
    assert not old.exists() and not (cache / f".add2-{'6' * 16}.lock").exists()


def test_every_json_output_is_an_object_with_its_schema(cache):
    for command in [*READING_COMMANDS, ["verify"]]:
        result = cli(cache, *command, "--json")
        assert result.returncode in (0, 1), f"{command}: {result.stderr}"
        data = json.loads(result.stdout)
        assert isinstance(data, dict) and data["schema"] == 2, command


def on_a_terminal(cache: Path, *args: str, answer: bytes = b"", columns: int = 80) -> tuple[int, str]:
    """The CLI run with stdin and stdout on a pty of `columns` columns; `answer` typed once it asks."""
    from test_loader import on_a_terminal as run_on_a_terminal

    env = {**os.environ, "JITOPS_CACHE_DIR": str(cache), "TORCH_EXTENSIONS_DIR": str(cache.parent / "torch_ext")}
    env.pop("COLUMNS", None)
    return run_on_a_terminal(
        [sys.executable, "-m", "cache_tools", *args], env, ("stdin", "stdout"), columns, answer, cwd=REPO, timeout_s=60
    )


def test_clear_all_on_a_terminal_asks_first(cache):
    before = sorted(p.name for p in cache.iterdir())
    rc, text = on_a_terminal(cache, "clear", "--all", answer=b"n\n")
    assert "Remove 4 entries" in text and "[y/N]" in text and "nothing removed" in text and rc == 1
    assert sorted(p.name for p in cache.iterdir()) == before
    rc, text = on_a_terminal(cache, "clear", "--all", answer=b"y\n")
    assert rc == 0 and "removed 4 entries" in text
    assert list_rows(cache) == []


def test_clear_all_with_yes_or_without_a_terminal_does_not_ask(cache, add2_entry):
    failed = [cache / f"jitops.add2-{'4' * 16}{suffix}" for suffix in (".failed.log", ".failed.json")]
    for path in failed:
        path.write_text("{}")
    rc, text = on_a_terminal(cache, "clear", "--all", "--yes")
    assert rc == 0 and "[y/N]" not in text and "removed 4 entries" in text
    assert "removed 2 files of failed builds" in text and not any(p.exists() for p in failed), text
    shutil.copytree(add2_entry, cache / add2_entry.name)
    piped = cli(cache, "clear", "--all")
    assert piped.returncode == 0 and "removed 1 entry," in piped.stdout, piped.stdout


def test_list_fits_an_80_column_terminal_and_is_whole_when_piped(cache):
    rc, text = on_a_terminal(cache, "list", columns=80)
    table = text.splitlines()[: 1 + 4]  # the header and the four rows
    assert rc == 0 and "NAME" in table[0].split(), text
    assert all(len(line) <= 80 for line in table), table
    assert "STATUS" in table[0] and "SIZE" in table[0] and "corrupt" in text
    piped = cli(cache, "list").stdout.splitlines()[0].split()
    assert piped[:3] == ["OWNER", "NAMESPACE", "NAME"] and piped[-1] == "STATUS" and "BUILT" in piped


def test_version_and_python_m_jitops():
    version = children.run(
        [sys.executable, "-m", "cache_tools", "--version"], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert version.returncode == 0 and version.stdout.strip() == f"jitops-cache {jitops.__version__}"
    module = children.run([sys.executable, "-m", "jitops", "dir", "--json"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert module.returncode == 0 and json.loads(module.stdout)["schema"] == 2, module.stderr


def test_stats_count_builds_and_cache_loads_not_warm_ones_and_zero(tmp_path):
    from test_loader import load_tiny

    cache = tmp_path / "stats_cache"
    assert load_tiny(cache)["how"] == "built"
    data = cli_json(cache, "stats")
    (tiny,) = data["extensions"]
    assert tiny["name"] == "jitops_test.tiny" and tiny["builds"] == 1 and tiny["build_seconds"] > 0
    assert (tiny["cache_loads"], tiny["prebuilt_loads"], tiny["failed_builds"]) == (0, 0, 0)
    assert load_tiny(cache)["how"] == "cache"  # warm: a record, no count
    assert cli_json(cache, "stats")["extensions"] == [tiny]
    for record in cache.glob("warm-*.json"):
        record.unlink()
    load_tiny(cache)  # the long way, from the cache
    assert cli_json(cache, "stats")["totals"]["cache_loads"] == 1
    readable = cli(cache, "stats").stdout
    assert "1 build (" in readable and "1 cache load," in readable and "warm loads" in readable
    assert cli_json(cache, "stats", "--zero")["zeroed"]
    assert cli_json(cache, "stats")["extensions"] == []


def installed_package(site: Path, distribution: str, module: str, code: str) -> Path:
    """site (for PYTHONPATH) holding the module and a dist-info folder declaring its EXTS."""
    info = site / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "RECORD").write_text("")
    (info / "entry_points.txt").write_text(f"[jitops.extensions]\n{module} = {module}:EXTS\n")
    (site / f"{module}.py").write_text(code + "\n")
    return site


def test_package_takes_the_distributions_name_in_any_spelling_or_its_import_name(tmp_path):
    code = "import jitops; EXTS = [jitops.Extension('m', ['m.cpp'], namespace='my_mod', root='/nonexistent')]"
    site = installed_package(tmp_path / "site", "My_Pkg", "my_mod", code)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    for name in ("My_Pkg", "my-pkg", "my_mod"):
        result = cli(tmp_path / "cache", "doctor", "--json", "--package", name, env_extra=env, python=sys.executable)
        assert {row["owner"] for row in json.loads(result.stdout)["extensions"]} == {"My_Pkg"}, (name, result.stderr)
    wrong = cli(tmp_path / "cache", "list", "--package", "nosuch", env_extra=env, python=sys.executable)
    assert wrong.returncode == 2 and "My_Pkg (import my_mod)" in wrong.stderr, wrong.stderr


# Installed packages whose declaring module misbehaves at import (N18, N19), or declares an
# Extension whose source is missing: each made a dist-info folder on PYTHONPATH.
BROKEN_MODULES = {
    "prints": 'print("hello from an import"); EXTS = []',
    "exits": "import sys; sys.exit(3)",
    "interrupts": "raise KeyboardInterrupt",
    "hangs": "import time; time.sleep(1000)",  # given up after JITOPS_ENTRY_POINT_TIMEOUT (N19)
    "lacks_a_source": "import jitops; EXTS = [jitops.Extension('gone', ['gone.cpp'], namespace='lacks_a_source', root='/nonexistent')]",
}


@pytest.mark.parametrize("behaviour", sorted(BROKEN_MODULES))
def test_one_broken_package_does_not_break_the_cli_for_the_others(tmp_path, behaviour):
    site = installed_package(tmp_path / "site", behaviour, behaviour, BROKEN_MODULES[behaviour])
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), "JITOPS_ENTRY_POINT_TIMEOUT": "1"}
    cache = tmp_path / "cache"
    for command in ("list", "doctor", "verify"):
        result = cli(cache, command, "--json", env_extra=env, python=sys.executable)
        assert result.returncode in (0, 1), f"{command}: rc {result.returncode}\n{result.stderr}"
        data = json.loads(result.stdout)  # stdout stays JSON: the package's print went to stderr
        if command == "doctor":
            rows = {row["owner"]: row for row in data["extensions"]}
            assert rows[behaviour]["how"] == "broken" and not rows[behaviour]["available"], rows[behaviour]
            assert any(row["owner"] == "jitops" and row["available"] for row in data["extensions"]), (
                "jitops' own ops still reported"
            )
            assert result.returncode == 1, "an op that cannot be had: exit 1, as documented"
    if behaviour != "lacks_a_source":
        assert "skipping the jitops.extensions entry point" in result.stderr, result.stderr
    else:  # the likely cause named: a wheel without its package data
        assert "missing sources" in rows[behaviour]["detail"] and "package data" in rows[behaviour]["detail"], rows
    only = cli(cache, "doctor", "--package", behaviour, "--json", env_extra=env, python=sys.executable)
    assert {row["owner"] for row in json.loads(only.stdout)["extensions"]} == {behaviour}, "--package: that package alone"


@pytest.mark.parametrize("args", [["--json", "list", "--bogus"], ["clear", "--json"], ["--json", "nosuchcommand"]])
def test_usage_errors_under_json_are_json(cache, args):
    result = cli(cache, *args)
    assert result.returncode == 2, result
    error = json.loads(result.stdout)
    assert error["error"] and error["usage"].startswith("usage: jitops-cache"), error


def test_a_reader_that_leaves_early_ends_the_cli_quietly(tmp_path):
    """`jitops-cache doctor | head`: the reader gone before the report is written (`true` reads
    nothing) is no BrokenPipeError traceback; the status is SIGPIPE's, as a C tool's would be."""
    command = f"{shlex.quote(sys.executable)} -m cache_tools doctor | true; echo ${{PIPESTATUS[0]}}"
    env = {**os.environ, "JITOPS_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "141", proc.stdout
