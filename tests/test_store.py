# SPDX-License-Identifier: MIT
"""The store (jitops/store/_root.py): published entries never change, a load that loses its entry
between the check and the open finds or builds it again, a root whose objects/ or pch/ cannot be
used only compiles more, and the budget evicts the least recently used, never what a live process
holds. Real builds of tiny_ext and real concurrent processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import children
import pytest
from test_loader import LOAD_TINY, TIMEOUT_S, TINY_SOURCES, finish, load_tiny, load_tiny_failing, start_tiny, tiny_env

from jitops import _files, _layout, _settings
from jitops.store import _budget

# The long way (no warm record), paused where the test says until the file `go` appears: a third
# process acts in the window between the entry's check and its open.
PAUSE = """
import os, time, torch
import jitops.warm, jitops.warm._namespaces
jitops.warm.recall = lambda *a, **k: None
def _paused(original):
    def wait(*args, **kwargs):
        folder = os.environ["PAUSE_DIR"]
        open(os.path.join(folder, "paused"), "w").close()
        while not os.path.exists(os.path.join(folder, "go")):
            time.sleep(0.05)
        return original(*args, **kwargs)
    return wait
"""
BEFORE_DLOPEN = PAUSE + "torch.ops.load_library = _paused(torch.ops.load_library)\n"
BEFORE_OPEN = PAUSE + "jitops.warm._namespaces.defined_in = _paused(jitops.warm._namespaces.defined_in)\n"


def tree(tmp_path: Path, name: str, value: int = 42) -> Path:
    """A copy of tiny_ext whose header says TINY_VALUE value (the same declared sources: one key)."""
    copy = tmp_path / name
    shutil.copytree(TINY_SOURCES, copy)
    header = copy / "kernels" / "tiny.h"
    header.write_text(header.read_text().replace("TINY_VALUE 42", f"TINY_VALUE {value}"))
    return copy


def paused(cache: Path, sources: Path, prelude: str, folder: Path) -> children.Process:
    proc = start_tiny(cache, sources, prelude=prelude, PAUSE_DIR=str(folder))
    deadline = time.monotonic() + TIMEOUT_S
    while not (folder / "paused").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the paused load never reached its pause"
        time.sleep(0.05)
    return proc


def cli(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "-m", "jitops", *args], env=tiny_env(cache), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def entry_folders(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if _layout.parse_entry_name(p.name) and p.is_dir())


def test_trees_that_differ_in_a_header_never_swap_the_library_a_loader_checked(tmp_path):
    """D2: tree B's build, while A's process sits between its check and its dlopen, publishes an
    entry of its own (a variant of the same key) and leaves A's as it was: A runs A's code."""
    a, b, cache = tree(tmp_path, "a"), tree(tmp_path, "b", 7), tmp_path / "cache"
    first = load_tiny(cache, a)
    assert (first["how"], first["value"]) == ("built", 42)
    held = paused(cache, a, BEFORE_DLOPEN, tmp_path)
    other = load_tiny(cache, b)
    assert (other["how"], other["value"]) == ("built", 7), other["stderr"]
    (tmp_path / "go").touch()
    got = finish(held)
    assert (got["how"], got["value"], got["library"]) == ("cache", 42, first["library"]), "A opens what A checked"
    keys = {_layout.parse_entry_name(p.name)[:2] for p in entry_folders(cache)}
    assert len(entry_folders(cache)) == 2 and len(keys) == 1, "one key, a variant per tree"
    # From now on each tree finds its own entry: nothing is rebuilt at a switch.
    for sources, value in ((a, 42), (b, 7), (a, 42)):
        again = load_tiny(cache, sources)
        assert (again["how"], again["value"]) == ("cache", value)


@pytest.mark.parametrize("remover", ["clear", "prune"])
def test_an_entry_removed_between_the_check_and_the_open_is_built_again(tmp_path, remover):
    """D3: `jitops-cache clear` or `prune` inside that window: the load builds it again, with no
    raw FileNotFoundError."""
    cache = tmp_path / "cache"
    first = load_tiny(cache)
    held = paused(cache, TINY_SOURCES, BEFORE_OPEN, tmp_path)
    removed = cli(cache, *(["clear", "jitops_test.tiny"] if remover == "clear" else ["prune", "--max-size", "0"]))
    assert removed.returncode == 0, removed.stderr
    assert not Path(first["library"]).exists(), removed.stdout
    (tmp_path / "go").touch()
    got = finish(held)
    assert (got["how"], got["value"]) == ("built", 42) and "Error" not in got["stderr"], got["stderr"]


def make_unusable(folder: Path, state: str, elsewhere: Path) -> None:
    """Put the store's folder in a state it must not be used in (or cannot be written in)."""
    if folder.exists():
        shutil.rmtree(folder)
    if state == "symlink":
        elsewhere.mkdir(mode=0o700)
        folder.symlink_to(elsewhere)
    elif state == "file":
        folder.write_text("not a folder")
    elif state == "0777":
        folder.mkdir()
        folder.chmod(0o777)
    elif state == "foreign":
        folder.mkdir(mode=0o700)
        os.chown(folder, 1234, 1234)


STATES = ["symlink", "file", "0777", "foreign"]
# A unit that starts with one of torch's headers: its PCH is looked up (and a missing one built in
# the background) in pch/.
TORCH_FIRST = "#include <c10/macros/Macros.h>\n"


@pytest.mark.parametrize("part", _layout.OPTIONAL_PARTS)
@pytest.mark.parametrize("state", STATES)
def test_an_unusable_objects_or_pch_folder_costs_compiles_with_one_warning(tmp_path, part, state):
    """A12/A13: an objects/ or pch/ that is a link, a file, writable by others or another user's:
    builds go on without it (one warning naming it), and `verify` names it."""
    if state == "foreign" and os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    cache, sources = tmp_path / "cache", tree(tmp_path, "src")
    binding = sources / "bindings" / "tiny.cpp"
    binding.write_text(TORCH_FIRST + binding.read_text())
    assert load_tiny(cache, sources, JITOPS_PCH="1")["value"] == 42
    make_unusable(cache / part, state, tmp_path / "elsewhere")
    header = sources / "kernels" / "tiny.h"
    header.write_text(header.read_text().replace("TINY_VALUE 42", "TINY_VALUE 43"))
    got = load_tiny(cache, sources, JITOPS_PCH="1")
    assert (got["how"], got["value"]) == ("built", 43), got["stderr"]
    warnings = [line for line in got["stderr"].splitlines() if f"{cache / part}" in line and "building without" in line]
    assert len(warnings) == 1, got["stderr"]
    assert "Traceback" not in got["stderr"]
    verify = cli(cache, "verify")
    assert verify.returncode == 1 and f"{part}/" in verify.stdout and str(cache / part) in verify.stdout, verify.stdout
    listed = cli(cache, "list")
    assert f"unusable: cache directory {cache / part}" in listed.stdout, listed.stdout


def read_only(folder: Path) -> list[str]:
    """The command prefix that runs a program with folder mounted read-only (a private mount
    namespace of its own: nothing else sees it)."""
    script = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, "sh"]


def test_a_read_only_objects_folder_costs_only_the_store(tmp_path):
    """A11: objects/ read-only (a read-only bind mount): the build that must compile still
    publishes and loads; its object is simply not stored."""
    cache, sources = tmp_path / "cache", tree(tmp_path, "src")
    assert load_tiny(cache, sources)["value"] == 42
    if children.run([*read_only(cache / "objects"), "true"], capture_output=True).returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm)")
    header = sources / "kernels" / "tiny.h"
    header.write_text(header.read_text().replace("TINY_VALUE 42", "TINY_VALUE 44"))
    run = children.run(
        [*read_only(cache / "objects"), sys.executable, "-c", LOAD_TINY, str(sources)],
        env=tiny_env(cache),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert (got["how"], got["value"]) == ("built", 44), run.stderr
    assert "Traceback" not in run.stderr and "objects" in run.stderr and "building without" in run.stderr


def test_stats_zero_on_a_read_only_cache_is_one_line_not_a_traceback(tmp_path):
    """`jitops-cache stats --zero` where the root cannot be written (a read-only bind mount): one
    line naming the root and why, exit 1, the counters kept."""
    cache = tmp_path / "cache"
    assert load_tiny(cache)["value"] == 42
    if children.run([*read_only(cache), "true"], capture_output=True).returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm)")
    had_stats = (cache / _layout.STATS_NAME).exists()
    run = children.run(
        [*read_only(cache), sys.executable, "-m", "jitops", "stats", "--zero"],
        env=tiny_env(cache),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "stats --zero" in run.stderr and str(cache) in run.stderr and "ead-only file system" in run.stderr, run.stderr
    assert (cache / _layout.STATS_NAME).exists() == had_stats


HOLD = """
import json, sys, time, ctypes
sys.path.insert(0, sys.argv[2])
from jitops import _resolution
from tiny_extension import tiny_extension
loaded = _resolution.resolve(tiny_extension(sys.argv[1]))
print(json.dumps({"library": str(loaded.library), "value": ctypes.CDLL(str(loaded.library)).jitops_tiny_value()}), flush=True)
sys.stdin.read()  # holds the library until the test closes stdin
"""


def test_the_budget_evicts_the_least_recently_used_and_never_what_a_live_process_loaded(tmp_path):
    """JITOPS_CACHE_MAX_SIZE: after a build the least recently used entries and objects go until
    the root fits, except an entry a live process has loaded (and the one just built)."""
    cache = tmp_path / "cache"
    oldest, held_tree, newest = tree(tmp_path, "old", 1), tree(tmp_path, "held", 2), tree(tmp_path, "new", 3)
    old = load_tiny(cache, oldest)
    time.sleep(1.1)  # last-use times a second apart (file systems with coarse mtimes)
    holder = children.popen(
        [sys.executable, "-c", HOLD, str(held_tree), str(Path(__file__).parent)],
        env=tiny_env(cache),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        held = json.loads(holder.stdout.readline())
        assert held["value"] == 2, holder.stderr.read() if holder.poll() is not None else held
        time.sleep(1.1)
        # A budget smaller than anything: everything that may go, goes.
        new = load_tiny(cache, newest, JITOPS_CACHE_MAX_SIZE="1")
        assert new["value"] == 3
        assert not Path(old["library"]).exists(), "the least recently used entry is evicted"
        assert Path(held["library"]).exists(), "an entry a live process loaded is kept"
        assert Path(new["library"]).exists(), "the entry just built (and loaded) is kept"
        assert not [item for item in _budget.items(cache) if item.kind == "object"], "unused objects are evicted"
    finally:
        holder.stdin.close()
        holder.wait(timeout=TIMEOUT_S)
    # Within a budget that holds everything, nothing is evicted.
    again = load_tiny(cache, oldest, JITOPS_CACHE_MAX_SIZE="1G")
    assert again["how"] == "built" and Path(new["library"]).exists() and Path(held["library"]).exists()


KILLED_REMOVER = """
import shutil, sys, time
from pathlib import Path
from jitops.store import _root
def stuck(*args, **kwargs):  # killed while deleting: the entry renamed away, its files still there
    print("renamed", flush=True)
    time.sleep(600)
shutil.rmtree = stuck
_root.remove_tree(Path(sys.argv[1]))
"""


def test_an_eviction_killed_mid_delete_leaves_nothing_the_budget_keeps_counting(tmp_path):
    """reliability-review-4 S6: a remover SIGKILLed mid-delete leaves its renamed-away folder; the
    next build's budget removes it (its owner is gone, nothing reads it) rather than counting it and
    evicting every other entry to make room."""
    cache = tmp_path / "cache"
    old = load_tiny(cache, tree(tmp_path, "old", 1))
    with open(Path(old["library"]).parent / "padding", "wb") as pad:
        pad.truncate(50 << 20)  # 50 MiB counted by the budget, none written
    kept = [load_tiny(cache, tree(tmp_path, f"kept{n}", 10 + n)) for n in range(2)]
    remover = children.popen(
        [sys.executable, "-c", KILLED_REMOVER, str(Path(old["library"]).parent)], stdout=subprocess.PIPE, text=True
    )
    assert remover.stdout.readline().strip() == "renamed"
    remover.kill()
    remover.wait(timeout=TIMEOUT_S)
    assert [p.name for p in cache.glob(".tmp-removing-*")], "the killed remover left its folder"
    new = load_tiny(cache, tree(tmp_path, "new", 3), JITOPS_CACHE_MAX_SIZE="20M")
    assert new["value"] == 3 and not list(cache.glob(".tmp-removing-*"))
    assert all(Path(entry["library"]).exists() for entry in kept), "entries that fit the budget stay"
    assert _files.tree_size(cache) <= 20 << 20


SUPERSEDED = """
import ctypes, json, sys, jitops
path = jitops.load("sup", [sys.argv[1]], is_python_module=False)
print(json.dumps([ctypes.CDLL(path).sup_value(), path]))
"""


def test_prune_without_arguments_removes_superseded_load_entries_and_keeps_the_budget(tmp_path):
    """A jitops.load entry whose sources are in none of the trees it was loaded for, and of which a
    newer build exists, is stale: `prune` removes it. One another clone still holds is kept."""
    cache, here, clone = tmp_path / "cache", tmp_path / "here", tmp_path / "clone"
    for folder, value in ((here, 1), (clone, 1)):
        folder.mkdir()
        (folder / "sup.cpp").write_text(f'extern "C" int sup_value() {{ return {value}; }}\n')

    def load(folder: Path) -> tuple[int, str]:
        proc = children.run(
            [sys.executable, "-c", SUPERSEDED, str(folder / "sup.cpp")],
            env=tiny_env(cache),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert proc.returncode == 0, proc.stderr
        return tuple(json.loads(proc.stdout.strip().splitlines()[-1]))

    _, first = load(here)
    assert load(clone)[1] == first, "two clones share one entry"
    (here / "sup.cpp").write_text('extern "C" int sup_value() { return 2; }\n')
    assert load(here)[0] == 2
    listed = json.loads(cli(cache, "--json", "list").stdout)
    assert {e["status"] for e in listed["entries"]} == {"ok"}, "the clone still holds the first one's sources"
    assert listed["budget_bytes"] == _settings.SETTINGS["JITOPS_CACHE_MAX_SIZE"].default and listed["total_bytes"] > 0
    (clone / "sup.cpp").write_text('extern "C" int sup_value() { return 2; }\n')
    listed = json.loads(cli(cache, "--json", "list").stdout)
    stale = [e for e in listed["entries"] if e["status"] == "stale"]
    assert [Path(e["path"]).name for e in stale] == [Path(first).parent.name] and "superseded" in stale[0]["reason"]
    pruned = cli(cache, "prune")
    assert pruned.returncode == 0 and "removed" in pruned.stdout, pruned.stderr
    assert not Path(first).exists() and len(json.loads(cli(cache, "--json", "list").stdout)["entries"]) == 1
    human = cli(cache, "list").stdout
    assert "of a budget of 2.0 GiB (JITOPS_CACHE_MAX_SIZE)" in human, human


def test_a_bad_budget_is_an_error_naming_it(tmp_path):
    """Before any build (not after one was published), and in the CLI, as a usage error."""
    build = load_tiny_failing(tmp_path / "cache", JITOPS_CACHE_MAX_SIZE="lots")
    assert "JITOPS_CACHE_MAX_SIZE must be a size" in build and "'lots'" in build, build
    assert not list((tmp_path / "cache").glob("jitops_test.tiny-*")), "nothing built"
    bad = children.run(
        [sys.executable, "-m", "jitops", "prune"],
        env={**tiny_env(tmp_path / "cache"), "JITOPS_CACHE_MAX_SIZE": "lots"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert bad.returncode == 2 and "JITOPS_CACHE_MAX_SIZE" in bad.stderr and "'lots'" in bad.stderr, bad.stderr
    assert [_settings.parse_size(s) for s in ("4096", "2G", "1.5GiB", "500m")] == [4096, 2 << 30, 3 << 29, 500 << 20]


def test_the_manifest_records_the_extensions_headers_not_the_systems(tmp_path):
    """Headers under /usr/include, /usr/lib and /usr/lib64 (the system's packages, as the
    compiler's own), torch's and the toolkit's are left out of an entry's recorded headers: the key
    names the compiler and torch they come with (docs/cache.md). The extension's own are recorded."""
    from jitops import Extension
    from jitops.store import _entries

    (tmp_path / "local.h").write_text("#define LOCAL_VALUE 3\n")
    (tmp_path / "m.cpp").write_text('#include <stdio.h>\n#include "local.h"\nextern "C" int m_value() { return LOCAL_VALUE; }\n')
    extension = Extension("system_headers", ["m.cpp"], namespace="jitops_test", root=tmp_path, cache_dir=tmp_path / "cache")
    assert extension.load().how == "built"
    # What the compiler says the unit includes: system headers among them.
    included = subprocess.run(["c++", "-M", "m.cpp"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "/usr/include/" in included and "local.h" in included, included
    (entry,) = _entries.entries(tmp_path / "cache")
    assert list(entry.read_manifest()["headers"]) == ["local.h"]
