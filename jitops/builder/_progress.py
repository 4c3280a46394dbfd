# SPDX-License-Identifier: MIT
"""What a build tells the user: a status line per build (the `jitops` logger, or stderr with a
live line cut to the terminal's width) and why a library is being built (`k1.cu changed`)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from .._layout import DROP_IN_NAMESPACE

if TYPE_CHECKING:
    from .._records import KeyComponents, Manifest

LOGGER = logging.getLogger("jitops")  # build status lines, at INFO


def _status_on_stderr() -> bool:
    """Whether status lines go to stderr: where nothing handles the "jitops" logger (no handler on it
    or above it; Python's last resort would drop INFO) and nobody silenced it. Else to the logger."""
    return not LOGGER.hasHandlers() and not LOGGER.disabled and LOGGER.level <= logging.INFO


class BuildStatus:
    """One build's status, each write a whole line under one lock: logged, a line at its start and end;
    on a terminal, one live line for all builds in flight, each build's final line printed above it."""

    _lock = threading.Lock()
    _in_flight: list[BuildStatus] = []
    _live_line = False  # whether a live line is on the terminal now
    _reasons_said: set[str] = set()

    def __init__(self, op: str, cuda, verbose: bool, why: str = "", left_out: tuple[str, ...] = (), started: float | None = None):
        self.op, self.step, self.cuda, self.why = op, "", cuda, why
        self.name = op.removeprefix(DROP_IN_NAMESPACE + ".")  # a jitops.load's, as the program named it
        self.started = time.time() if started is None else started  # the build's own start, where it began earlier
        self.left_out = left_out  # the CUDA sources a CPU-only build leaves out
        self.summary = ""  # set before finish(): what was compiled and what reused
        self.live = sys.stderr.isatty() and not verbose and _status_on_stderr()
        with BuildStatus._lock:
            BuildStatus._in_flight.append(self)
            if self.live and len(BuildStatus._in_flight) == 1:
                threading.Thread(target=BuildStatus._redraw, daemon=True).start()
            if not self.live:
                self._write_line(f"jitops: building {self._label(self.why)} ...")

    def _why(self) -> str:
        return f" ({self.why})" if self.why else ""

    def _label(self, why: str = "") -> str:
        """The extension's name and one group of notes: cpu+cuda, or cpu only and why (once per reason)
        with the CUDA sources left out (nothing for a library without CUDA sources); then `why`."""
        name = self.name
        if self.cuda.enabled:
            notes = ["cpu+cuda"]
        elif not self.left_out:  # C++ alone: nothing was left out
            notes = []
        else:
            reason = self.cuda.reason
            said = reason in BuildStatus._reasons_said
            BuildStatus._reasons_said.add(reason)
            left_out = ", ".join(self.left_out) if len(self.left_out) <= 2 else f"{len(self.left_out)} CUDA sources"
            details = ([] if said else [reason]) + [f"{left_out} left out"]
            notes = [f"cpu only: {'; '.join(details)}"]
        notes += [why] if why else []
        return f"{name} ({'; '.join(notes)})" if notes else name

    @classmethod
    def _redraw(cls) -> None:
        while True:
            time.sleep(0.25)
            with cls._lock:
                live = [b for b in cls._in_flight if b.live]
                if not live:
                    return
                now = time.time()
                line = "jitops: building " + "; ".join(f"{b.name} {now - b.started:.1f}s {b.step}".rstrip() for b in live)
                try:  # read each time: the terminal may have been resized
                    width = os.get_terminal_size(sys.stderr.fileno()).columns
                except (OSError, ValueError):
                    width = 0
                width = width or 80  # 0: a terminal that does not know (`script`, `docker run -t`)
                # One row at most: \r\033[K erases only the row the cursor is on.
                sys.stderr.write("\r\033[K" + line[: max(width - 1, 1)])
                sys.stderr.flush()
                cls._live_line = True

    @classmethod
    def _write_line(cls, line: str) -> None:
        """A whole line, above the live one if there is one (which the next redraw puts back)."""
        if not _status_on_stderr():
            LOGGER.info(line.removeprefix("jitops: "))  # the logger's name says it: INFO:jitops:building ...
            return
        sys.stderr.write(("\r\033[K" if cls._live_line else "") + line + "\n")
        sys.stderr.flush()
        cls._live_line = False

    @classmethod
    def say(cls, line: str) -> None:
        """A line of its own, between builds' lines."""
        with cls._lock:
            cls._write_line(line)

    def finish(self, ok: bool, instead: str = "") -> None:
        """The build's last line: built, FAILED, or `instead` (a build that compiled but ends
        otherwise: "stopped ... after {seconds}: ...", formatted with the label and seconds)."""
        seconds = f"{time.time() - self.started:.1f}s {self.step}".rstrip()
        with BuildStatus._lock:
            label = self._label()
            if instead:
                line = "jitops: " + instead.format(label=label, seconds=seconds)
            elif ok:
                line = f"jitops: built {label} in {seconds}{self._why()}"
                line += f": {self.summary}" if self.summary else ""
            else:
                line = f"jitops: FAILED to build {label} after {seconds}{self._why()}"
            BuildStatus._in_flight.remove(self)
            self._write_line(line)


# Why a library is built: its key's components against those of the newest other entry of its name.
_COMPONENT_WORDS = {
    "recipe": "new jitops build recipe",
    **dict.fromkeys(("torch", "torch_git", "torch_cuda", "cxx11_abi"), "new torch"),
    "python_soabi": "new Python",
    "version": "version changed",
    "cuda_arch_list": "CUDA archs changed",
    "backends": "backends changed",
    "sources": "sources changed",
    "include_dirs": "include dirs changed",
    "cflags": "flags changed",
    "cuda_cflags": "CUDA flags changed",
    "ldflags": "link flags changed",
    "cxx": "C++ compiler changed",
    "nvcc": "nvcc changed",
    **dict.fromkeys(("environment", "environment_tools"), "build environment changed"),
}


def why_built(components: KeyComponents, source_hashes: dict, previous: Manifest | None) -> str:
    """Why a build with these key components is needed, against the manifest of the newest other
    entry of the same extension (None: there is none, and "" is returned): `k1.cu changed`, `flags changed`, ..."""
    if previous is None:
        return ""  # a first build
    before = previous.get("components")
    if not isinstance(before, dict):  # a malformed manifest's
        before = {}
    reasons = []
    if before.get("sources_sha256") != components.get("sources_sha256"):
        old = previous.get("source_hashes")
        if not isinstance(old, dict):
            old = {}
        changed = [name for name, digest in source_hashes.items() if old.get(name) != digest]
        reasons += [f"{os.path.basename(name)} changed" for name in changed[:3]] or ["sources changed"]
        reasons += [f"{len(changed) - 3} more changed"] if len(changed) > 3 else []
    for name, words in _COMPONENT_WORDS.items():
        if before.get(name) != components.get(name) and words not in reasons:
            reasons.append(words)
    return ", ".join(reasons) or "key changed"
