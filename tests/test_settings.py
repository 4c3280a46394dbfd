# SPDX-License-Identifier: MIT
"""One owner for the JITOPS_* settings (jitops/_settings.py): no other module reads one from the
environment, docs/cache.md's table is its table, a refused value is one error naming the variable
and what it takes, and `jitops-cache info` shows every setting with its value and source."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jitops
from jitops import _settings

REPO = Path(__file__).resolve().parent.parent
# Read before jitops can be imported (a Python start with the drop-in's switch): they must not import it.
EXEMPT = {"_jitops_drop_in.py"}
SCANNED = [*sorted((REPO / "jitops").rglob("*.py")), *sorted((REPO / "cache_tools").rglob("*.py")), REPO / "setup.py"]


def environment_reads(tree: ast.AST) -> list[str]:
    """JITOPS_* names read from the environment: os.environ[...] / .get(...) / .pop(...) /
    os.getenv(...) / `... in os.environ`, with the name as a constant or an f-string's start."""

    def named(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            return str(node.values[0].value)
        return None

    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" or isinstance(node, ast.Name) and node.id == "environ"

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop") and is_environ(node.func.value) or node.func.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            if any(is_environ(c) for c in node.comparators):
                key = node.left
        if key is not None and (name := named(key)) is not None and name.startswith("JITOPS_"):
            found.append(f"line {node.lineno}: {name}")
    return found


def test_no_module_but_the_settings_reads_a_jitops_variable():
    reads = {
        str(path.relative_to(REPO)): found
        for path in SCANNED
        if path.name not in EXEMPT and path != REPO / "jitops" / "_settings.py"
        if (found := environment_reads(ast.parse(path.read_text())))
    }
    assert reads == {}, f"read these through jitops._settings: {reads}"


def test_the_scan_finds_each_way_of_reading_one():
    code = """
import os
a = os.environ.get("JITOPS_A"); b = os.environ["JITOPS_B"]; c = os.getenv("JITOPS_C")
d = "JITOPS_D" in os.environ; e = os.environ.pop(f"JITOPS_E{1}", None); os.environ["JITOPS_F"] = "1"
"""
    assert [read.split(": ")[1] for read in environment_reads(ast.parse(code))] == [
        "JITOPS_A", "JITOPS_B", "JITOPS_C", "JITOPS_D", "JITOPS_E",
    ]  # fmt: skip


def test_docs_cache_md_lists_every_setting_and_no_other():
    text = (REPO / "docs" / "cache.md").read_text()
    table = text[text.index("## Environment variables") :]
    listed = set(re.findall(r"^\| `(JITOPS_[A-Z_]+)`", table, flags=re.M))
    assert listed == set(_settings.SETTINGS), (
        f"only in the docs: {listed - set(_settings.SETTINGS)}; only in the table: {set(_settings.SETTINGS) - listed}"
    )
    for setting in _settings.TABLE:
        if setting.older_name:
            assert setting.older_name in table, f"docs/cache.md: {setting.name}'s older name {setting.older_name}"


# A value each setting refuses (a str setting, a path or a URL, takes any text).
REFUSED = {"size": "lots", "seconds": "-1", "flag": "yes", "choice": "sometimes", "tiny": "0.5"}


def refused_value(setting: _settings.Setting) -> str | None:
    if setting.parse in (str, _settings._paths, _settings._names):
        return None
    if setting.parse is _settings._seconds:
        return REFUSED["seconds"]
    if setting.parse in (_settings.parse_size, _settings._positive_size):
        return REFUSED["size"]
    return REFUSED["flag"] if setting.parse is _settings._flag else REFUSED["choice"]


@pytest.mark.parametrize("setting", [s for s in _settings.TABLE if refused_value(s)], ids=lambda s: s.name)
def test_a_refused_value_is_one_error_naming_the_variable_and_what_it_takes(monkeypatch, setting):
    monkeypatch.setenv(setting.name, refused_value(setting))
    with pytest.raises(jitops.BuildError) as raised:
        _settings.get(setting.name)
    assert isinstance(raised.value, jitops.CacheError), "both: callers caught either before"
    assert str(raised.value) == f"jitops: {setting.name} must be {setting.takes}, got {refused_value(setting)!r}"


@pytest.mark.parametrize("value", ["0.5", "0.0009k", "0.5b"])
def test_a_budget_below_one_byte_is_refused_not_taken_as_no_budget(monkeypatch, value):
    monkeypatch.setenv("JITOPS_CACHE_MAX_SIZE", value)
    with pytest.raises(jitops.CacheError, match="JITOPS_CACHE_MAX_SIZE must be a size"):
        _settings.get("JITOPS_CACHE_MAX_SIZE")
    monkeypatch.setenv("JITOPS_CACHE_MAX_SIZE", "0")
    assert _settings.get("JITOPS_CACHE_MAX_SIZE") == 0, "0 is no budget, as documented"


def test_a_setting_is_read_on_each_use_and_its_older_name_still_counts(monkeypatch):
    monkeypatch.delenv("JITOPS_DROP_IN", raising=False)
    monkeypatch.setenv("JITOPS_TORCH_LOAD", "1")
    assert _settings.get("JITOPS_DROP_IN") is True and _settings.source("JITOPS_DROP_IN") == "JITOPS_TORCH_LOAD"
    monkeypatch.setenv("JITOPS_PCH", "WAIT")
    assert _settings.get("JITOPS_PCH") == "wait"
    with _settings.set_for_now("JITOPS_PCH", "0"):
        assert _settings.get("JITOPS_PCH") == "off"
    assert _settings.get("JITOPS_PCH") == "wait" and _settings.source("JITOPS_PCH") == "JITOPS_PCH"


def test_jitops_cache_info_shows_every_setting_with_its_value_and_source(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "JITOPS_CACHE_DIR": str(tmp_path / "cache")}
    env |= {"JITOPS_PCH": "wait", "JITOPS_TORCH_LOAD": "1", "JITOPS_REMOTE_TIMEOUT": "nan"}
    info = [sys.executable, "-m", "jitops", "info"]
    shown = json.loads(subprocess.run([*info[:3], "--json", "info"], env=env, capture_output=True, text=True, check=True).stdout)
    settings = shown["settings"]
    assert list(settings) == list(_settings.SETTINGS)
    assert settings["JITOPS_PCH"] == {"value": "wait", "source": "environment", "error": ""}
    assert settings["JITOPS_DROP_IN"]["source"] == "environment, as JITOPS_TORCH_LOAD"
    assert settings["JITOPS_LOCK_TIMEOUT"] == {"value": 1800.0, "source": "default", "error": ""}
    assert (
        "JITOPS_REMOTE_TIMEOUT must be a finite number of seconds above 0, got 'nan'"
        in settings["JITOPS_REMOTE_TIMEOUT"]["error"]
    )
    human = subprocess.run(info, env=env, capture_output=True, text=True, check=True).stdout
    for name in _settings.SETTINGS:
        assert re.search(rf"^  {name} +\S.*\((default|environment.*)\)$", human, flags=re.M), (name, human)
