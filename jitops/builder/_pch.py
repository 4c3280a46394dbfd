# SPDX-License-Identifier: MIT
"""Precompiled headers, shared by a cache root's extensions, for C++ units that start with torch's
headers (docs/ARCHITECTURE.md). gcc uses a .gch only where made with the same compiler and flags
(-Winvalid-pch), else reads the header as text: a PCH makes a unit faster, never different."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _files, _flock, _layout, _settings
from .._errors import CacheError
from .._files import file_identity, write_json_atomic
from .._layout import DROP_IN_NAMESPACE
from ..store import PchStore, remote_tier
from . import _jobs
from ._progress import BuildStatus

if TYPE_CHECKING:
    from .._records import KeyComponents, Manifest, PchJob
    from ..extension import Extension
    from ._pch_fetch import Fetches

_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"]((?:torch|ATen|c10)/[^>"]+)[>"]\s*$')


def worth_building(extension, previous: Manifest | None, components: KeyComponents) -> bool:
    """Whether a missing PCH (a compile of torch's headers, 0.4-0.8 GB) is built for the builds that
    follow: after an edit here (the newest other entry built with this same toolchain), or a
    jitops.load extension's first build (a notebook's). Never for a rebuild that a torch, Python or
    compiler upgrade caused, nor a package's first build: nobody is editing those."""

    if previous is None:
        return extension.namespace == DROP_IN_NAMESPACE
    before = previous.get("components")
    return isinstance(before, dict) and all(before.get(name) == components.get(name) for name in PchStore.TOOLCHAIN_COMPONENTS)


def left_out_of_key(extension, library_name: str) -> list[str]:
    """The flags a PCH is built without: the defines that name the extension, and the -D/-U flags
    it declares (one PCH serves a notebook's sweep over -DVALUE=...; gcc checks the rest)."""
    declared = [flag for flag in extension.cflags if flag.startswith(("-D", "-U"))]
    return [f"-DTORCH_EXTENSION_NAME={library_name}", f"-DJITOPS_NAMESPACE={extension.namespace}", *declared]


@contextlib.contextmanager
def foreground(root: Path | None, pause: bool = True):
    """Held around a build's compiles (pause: one that leaves no CPU idle): background PCH builds of
    the root pause meanwhile."""
    parent = PchStore(root).folder() if root is not None and pause else None
    if parent is None:
        yield
        return
    with _flock.flocked(_layout.foreground_lock_path(root), shared=True):
        yield


def leading_torch_includes(source: str) -> str:
    """The `#include <torch/...>` (ATen, c10) lines a source starts with, as text; "" where it starts
    with anything else (a macro or header before them could change what they mean)."""
    try:
        text = Path(source).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    found = []
    for line in text.splitlines():
        line = line.split("//", 1)[0].strip()
        if not line or line == "#pragma once":
            continue
        match = _TORCH_INCLUDE.match(line)
        if match is None:
            break
        found.append(f"#include <{match.group(1)}>")
    return "\n".join(found) + "\n" if found else ""


def command_flags(unit, left_out: list[str]) -> str | None:
    """The unit's flags (shell text) less left_out_of_key's: one PCH serves every extension compiled
    with the same flags. None where the shell could not split them (an unbalanced quote): no PCH."""
    try:
        return shlex.join(word for word in shlex.split(unit.flags) if word not in left_out)
    except ValueError:
        return None


def key(header: str, unit, flags: str, components: KeyComponents) -> str:

    made_of = {
        "header": header,
        "compiler": unit.compiler,
        "flags": flags,
        "post_flags": unit.post_flags,
        "toolchain": PchStore.toolchain(components),
    }
    return _files.json_digest(made_of, 32)


@contextlib.contextmanager
def in_use(headers: list[str]):
    """Hold a shared lock on each PCH (its -include path) while units compile with it: the budget
    evicts no PCH whose lock it cannot take."""
    with contextlib.ExitStack() as stack:
        for header in sorted(set(headers)):
            folder = os.path.dirname(header)
            stack.enter_context(_flock.flocked(_layout.pch_lock_path(folder), shared=True))
        yield


def plan(
    root: Path,
    extension: Extension,
    compiled: list,
    components: KeyComponents,
    ignored: tuple[str, ...],
    wanted: bool,
    heap: str,
    fetches: Fetches,
) -> list[PchJob]:
    """Give each C++ unit that starts with torch's headers its PCH where one is ready, or the remote's
    (downloaded while the other units compile), or JITOPS_PCH=wait's (built now), where the budget
    holds it; returns the PCHs wanted in the background after the build."""
    chosen = _settings.get("JITOPS_PCH")
    if chosen == "off":
        return []
    left_out = left_out_of_key(extension, extension.library_name)
    later = {}
    for unit in compiled:
        header = "" if unit.cuda else leading_torch_includes(unit.source)
        if not header:
            continue
        flags = command_flags(unit, left_out)
        if flags is None:
            continue
        pch_key = key(header, unit, flags, components)
        unit.pch = PchStore(root).find(pch_key)
        if unit.pch is None:
            spec = job(root, pch_key, header, unit, f"{flags} {heap}".rstrip(), ignored)  # heap: in no key
            if not (chosen == "wait" or wanted or remote_tier() is not None) or not PchStore(root).fits_budget(header):
                continue  # none is to be had, or it would be evicted at once (JITOPS_CACHE_MAX_SIZE)
            if (fetching := fetches.start(spec)) is not None:  # the fleet's, made in the same image
                unit.pch, unit.pch_fetched = fetching
                continue
            if chosen == "wait":
                unit.pch = build(spec, blocking=True)
            elif wanted:
                later[pch_key] = spec
    return list(later.values())


def job(root: Path, pch_key: str, header: str, unit, flags: str, ignored_prefixes: tuple[str, ...]) -> PchJob:
    """What building one PCH takes (a background process gets it as JSON)."""
    command = f"{unit.compiler} {flags} -x c++-header @header@ -o @gch@ {unit.post_flags} -MMD -MF @deps@"
    ignored = list(ignored_prefixes)
    return {
        "root": str(root),
        "key": pch_key,
        "header": header,
        "command": command,
        "ignored": ignored,
        "compiler": unit.compiler,
    }


def build(spec: PchJob, blocking: bool) -> str | None:
    """Build and publish the PCH `spec` under its lock, unless published meanwhile. The path to
    -include, or None (not blocking and the lock is held, or the compiler refused)."""

    pch, pch_key = PchStore(spec["root"]), spec["key"]
    if pch.folder() is None:
        return None
    with pch.lock(pch_key, blocking=blocking) as lock:
        if not lock.acquired:
            return None
        found = pch.find(pch_key)
        if found is not None:
            return found
        if not blocking:  # the machine's one background PCH compile, with the memory it takes
            with _jobs.background_compile(lambda: pch.find(pch_key) is None and pch.fits_budget(spec["header"])) as go:
                return _compile_and_publish(spec, pch, blocking) if go else pch.find(pch_key)
        return _compile_and_publish(spec, pch, blocking)


def _compile_and_publish(spec: PchJob, pch: PchStore, blocking: bool) -> str | None:
    """Under the PCH's lock: compile it in a staging folder, check what it holds, publish it (and
    push it, where a remote is set)."""
    try:
        with pch.staged(spec["key"]) as staging:
            if not _compile_into(spec, staging.path, pch.root, blocking):
                staging.discard()
    except (OSError, ValueError):
        return None  # a full disk, or flags the shell cannot split: the units compile without it
    # Under the lock (which keeps this PCH from being evicted): whoever waits for it to be
    # free finds the root within its budget.
    pch.enforce_budget()
    found = pch.find(spec["key"])
    if found is not None:
        pch.push(spec["key"], spec["compiler"])
    return found


def _compile_into(spec: PchJob, staging: Path, root: Path, blocking: bool) -> bool:
    """Compile the PCH into staging with its record; whether it compiled and read only torch's and
    the toolchain's headers."""
    header, gch, deps = staging / _layout.PCH_HEADER_NAME, staging / _layout.GCH_NAME, staging / "pch.d"
    header.write_text(spec["header"], encoding="utf-8")
    # The command is ninja text (torch's flags): `$$` is a dollar, as in build.ninja. The
    # placeholders are replaced, not formatted: a flag may hold braces (-DINIT={0}).
    command = spec["command"]
    for name, path in [("header", header), ("gch", gch), ("deps", deps)]:
        command = command.replace(f"@{name}@", shlex.quote(str(path)).replace("$", "$$"))
    command = command.replace("$$", "$")
    if blocking:
        returncode = subprocess.run(shlex.split(command), capture_output=True, check=False).returncode
    else:
        returncode = _compile_in_background(shlex.split(command), root)
    if returncode != 0 or not _only_toolchain_headers(deps, header, spec["ignored"]):
        return False
    record = {
        "sha256": _files.sha256_file(gch),
        "identity": file_identity(gch),
        "command": command,
        "built_at": time.time(),
    }
    write_json_atomic(staging / _layout.RECORD_NAME, record)
    deps.unlink()
    return True


def _compile_in_background(argv: list[str], root: Path) -> int:
    """Run the compiler in a process group of its own, stopped while any build of the root holds the
    foreground lock. If this process dies meanwhile, the kernel hangs up the orphaned, stopped group."""
    total = _jobs.job_count()[0]
    slot = _jobs.claim(total, 1)  # one of the machine's jobs, held while it compiles (not while stopped)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=os.setpgrp)
    foreground_lock, stopped = _layout.foreground_lock_path(root), False
    try:
        while proc.poll() is None:
            busy = _flock.flock_is_held(foreground_lock)
            if busy != stopped and (busy or (slot := _jobs.claim(total, 1, block=False))):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGSTOP if busy else signal.SIGCONT)
                if busy:
                    _jobs.release(slot)
                    slot = []
                stopped = busy
            time.sleep(PAUSE_POLL_S)
        return proc.returncode
    finally:
        _jobs.release(slot)
        if proc.poll() is None:  # interrupted: the compile goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# How often a background PCH build looks for a foreground build (which it pauses for) and back.
PAUSE_POLL_S = 0.1


def _only_toolchain_headers(deps: Path, header: Path, ignored: list[str]) -> bool:
    """Whether every file the PCH holds is torch's, the toolkit's or the compiler's: an extension's own
    header (shadowing one of torch's) would escape the manifest's header list inside the .gch."""
    text = deps.read_text().replace("\\\n", " ")
    files = shlex.split(text.partition(":")[2])
    return all(os.path.realpath(f).startswith(tuple(ignored)) or f == str(header) for f in files)


def start_background(spec: PchJob) -> bool:
    """Build a PCH in a detached process at idle priority (output in <root>/pch/<key>.log); nothing
    waits for it. Returns whether it was started."""
    try:
        parent = PchStore(spec["root"]).folder()
        if parent is None or _flock.flock_is_held(_layout.pch_lock_path(parent / spec["key"])):
            return False  # (held: another process is building it)
        log_path = _layout.pch_log_path(parent / spec["key"])
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jitops.builder._pch", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped if it ends while this process runs
        BuildStatus.say(_describe_background(spec))
        return True
    except (OSError, CacheError):
        return False  # only a later build's speed depends on it


def _describe_background(spec: PchJob) -> str:
    """The status line that says a PCH is being built, and what it costs."""
    headers = " ".join(re.findall(r"<([^>]+)>", spec["header"]))
    return (
        f"jitops: building a precompiled header of {headers} in the background, at idle priority, for the next "
        f"builds (up to 0.8 GB in {_layout.pch_dir(spec['root'])}; JITOPS_PCH=0 turns this off)"
    )


if __name__ == "__main__":  # the background build: python -m jitops.builder._pch '<job as JSON>'
    with contextlib.suppress(AttributeError, OSError):  # SCHED_IDLE: only on a core nothing else wants
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    os.nice(19)
    built = build(json.loads(sys.argv[1]), blocking=False)
    print(f"jitops: precompiled header {'ready: ' + built if built else 'not built'}")
