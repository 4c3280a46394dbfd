# SPDX-License-Identifier: MIT
"""Every JITOPS_* setting: its parser, default and one line of doc, and the one module that reads
them from the environment (docs/cache.md's table and `jitops-cache info` are this table).

A setting is read on each use, since some change within a process on purpose (load(verbose=True)
sets JITOPS_VERBOSE around a load, the CLI's build sets JITOPS_PCH, the remote follows its
variables), and parsed once per distinct value. A value a setting does not take is one error, a
jitops.BuildError and a jitops.CacheError, naming the variable and what it takes."""

from __future__ import annotations

import contextlib
import math
import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

MAX_SECONDS = 365 * 24 * 3600.0  # a timer's limit: more than a year counts as a year


def parse_size(text: str) -> int:
    """Bytes from 4096, 500M, 2G, 1.5GiB (powers of 1024); ValueError for anything else, and for a
    size below one byte that is not 0 (0.5 would otherwise mean 0: no budget)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, flags=re.I)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 500M, 2G, 1048576)")
    number, unit = float(match[1]), match[2].lower()
    size = int(number * 1024 ** ["", "k", "m", "g", "t"].index(unit))
    if size == 0 and number != 0:
        raise ValueError(f"{text!r} is less than one byte")
    return size


def _seconds(text: str) -> float:
    seconds = float(text)  # "nan" and "inf" parse: refused below
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(text)
    return min(seconds, MAX_SECONDS)


def _positive_size(text: str) -> int:
    if (size := parse_size(text)) < 1:
        raise ValueError(text)
    return size


def _flag(text: str) -> bool:
    return {"1": True, "0": False}[text.strip()]


def _choice(*words: str, **aliases: str) -> Callable[[str], str]:
    """A parser that takes one of words (any case), or an alias of one."""
    table = {**{word: word for word in words}, **aliases}
    return lambda text: table[text.strip().lower()]


def _paths(text: str) -> tuple[str, ...]:
    return tuple(path for path in text.split(os.pathsep) if path)


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


class Setting:
    """One setting. Hand-written: a NamedTuple's class costs a warm start (which imports this) 0.4 ms."""

    __slots__ = ("name", "parse", "default", "takes", "doc", "older_name")

    def __init__(self, name: str, parse: Callable[[str], Any], default: Any, takes: str, doc: str, older_name: str = ""):
        self.name = name
        self.parse = parse  # the value's text (never blank) to its value; ValueError or KeyError where refused
        self.default = default  # the value when unset or blank
        self.takes = takes  # what parse takes, for the error
        self.doc = doc
        self.older_name = older_name  # a name it had before, still read


SECONDS = "a finite number of seconds above 0"
# The timeouts' defaults: far beyond a cold CUDA build on a busy machine, but finite. The budget's:
# it holds an edit loop (one or two PCHs, its objects and entries).
TABLE = (
    Setting("JITOPS_CACHE_DIR", str, None, "a folder", "the cache root (default: jitops/ under torch's extension root)"),
    Setting(
        "JITOPS_CACHE_MAX_SIZE",
        parse_size,
        2 << 30,
        "a size such as 2G, 500M or 0 (no budget)",
        "the whole cache's budget, precompiled headers and stored objects included; least recently used evicted first",
    ),
    Setting(
        "JITOPS_LOCK_TIMEOUT",
        _seconds,
        1800.0,
        SECONDS,
        "seconds to wait for another process's build of the same entry before an error naming it",
    ),
    Setting(
        "JITOPS_BUILD_TIMEOUT",
        _seconds,
        3600.0,
        SECONDS,
        "seconds one build may run before it is stopped (ninja and its compilers) and reported as hung",
    ),
    Setting("JITOPS_VERBOSE", _flag, False, "1 or 0", "1: the compiler's output on stderr as well as the status lines"),
    Setting(
        "JITOPS_PCH",
        _choice("wait", "auto", "off", **{"1": "auto", "0": "off"}),
        "auto",
        "one of 1, wait or 0",
        "precompiled headers of torch's: 1 uses and builds them in the background, wait builds one during the build, 0 none",
    ),
    Setting(
        "JITOPS_PREBUILT_DIR",
        _paths,
        (),
        "folders separated by :",
        "folders of prebuilt libraries (jitops-cache build --out), used where building is not possible",
    ),
    Setting(
        "JITOPS_DISABLE_BUILD", _flag, False, "1 or 0", "1: never compile at run time; a load that would build fails at once"
    ),
    Setting("JITOPS_AOT", _flag, False, "1 or 0", "1 when building a wheel: compile the ops ahead of time into it"),
    Setting("JITOPS_AOT_OPS", _names, (), "op names separated by commas", "with JITOPS_AOT=1: only these ops"),
    Setting(
        "JITOPS_DROP_IN",
        _flag,
        False,
        "1 or 0",
        "1: every torch.utils.cpp_extension load/load_inline of a Python process is jitops'",
        "JITOPS_TORCH_LOAD",
    ),
    Setting(
        "JITOPS_REMOTE_CACHE", str, "", "redis://host:port/db, file:///folder or module:Class", "the remote cache (unset: none)"
    ),
    Setting(
        "JITOPS_REMOTE_MODE",
        _choice("read-write", "read-only"),
        "read-write",
        "read-write or read-only",
        "read-only: never push (consumers)",
    ),
    Setting("JITOPS_REMOTE_SIGNING_KEY", str, "", "a file", "a writer's ed25519 private key (PEM): its pushes are signed"),
    Setting(
        "JITOPS_REMOTE_TRUSTED_KEYS",
        str,
        "",
        "ed25519:... keys or files, separated by commas or spaces",
        "the public keys whose records a reader loads",
    ),
    Setting(
        "JITOPS_REMOTE_TRUST",
        _choice("keys", "server"),
        "keys",
        "keys (the default) or server",
        "server: load unsigned records too (anyone who can write to the server runs code here)",
    ),
    Setting(
        "JITOPS_REMOTE_TIMEOUT",
        _seconds,
        5.0,
        SECONDS,
        "seconds any one remote call may take, all of it, before the remote is off for the process",
    ),
    Setting(
        "JITOPS_REMOTE_MAX_BLOB",
        _positive_size,
        2 << 30,
        "a size of at least one byte, such as 2G or 500M",
        "the largest library or object a reader downloads",
    ),
    Setting(
        "JITOPS_ENTRY_POINT_TIMEOUT",
        _seconds,
        20.0,
        SECONDS,
        "seconds jitops-cache waits for a package's jitops.extensions entry point to import",
    ),
)
SETTINGS = {setting.name: setting for setting in TABLE}
_parsed: dict[tuple[str, str], Any] = {}  # (name, text) -> value: each distinct value checked once


def text(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The setting's text as set (its older name's where it has none); "" where unset or blank."""
    variable = source(name, environ)
    return "" if variable == "default" else (os.environ if environ is None else environ)[variable]


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The setting's value: its text parsed, else its default; one error naming it where refused."""
    value = text(name, environ)
    if not value:
        return SETTINGS[name].default
    try:
        return _parsed[name, value]
    except KeyError:
        pass
    setting = SETTINGS[name]
    try:
        parsed = _parsed[name, value] = setting.parse(value)
    except (ValueError, KeyError):
        from ._errors import SettingError  # only for a refused value

        raise SettingError(f"jitops: {name} must be {setting.takes}, got {value!r}") from None
    return parsed


def check(*names: str) -> None:
    """Refuse any of these settings that holds a value it does not take (before a build starts)."""
    for name in names:
        get(name)


def source(name: str, environ: Mapping[str, str] | None = None) -> str:
    """Where the setting's value comes from: its variable, its older name, or "default"."""
    environ = os.environ if environ is None else environ
    setting = SETTINGS[name]
    for variable in (name, setting.older_name):
        if variable and environ.get(variable, "").strip():
            return variable
    return "default"


@contextlib.contextmanager
def set_for_now(name: str, value: str) -> Iterator[None]:
    """The setting holds value inside the block (for this process and those it starts), then what it held."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
