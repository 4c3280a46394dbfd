# SPDX-License-Identifier: MIT
"""The declaration of the loader tests' extension (tiny_ext/), for the tests and their child processes."""

from pathlib import Path

from jitops import Extension

NAMESPACE = "jitops_test"
SOURCES = Path(__file__).parent / "tiny_ext"


def tiny_extension(root=SOURCES, name: str = "tiny", namespace: str = NAMESPACE) -> Extension:
    """tiny (or a copy of it under another name: kernels/cpu/<name>.cpp and bindings/<name>.cpp)."""
    sources = [f"kernels/cpu/{name}.cpp", "kernels/cpu/tiny_second.cpp", f"bindings/{name}.cpp"]
    return Extension(name, sources, namespace=namespace, root=str(root))


# A child process (argv: the sources, this folder) that loads tiny once and prints, as JSON, how,
# its value, the seconds, those spent inside remote calls (the remote tier's own measure), and how
# much its memory grew meanwhile (torch imported first: a program's memory is not the load's).
MEASURED_LOAD = """
import json, os, sys, time, ctypes
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
import torch
sys.path.insert(0, sys.argv[2])
from tiny_extension import tiny_extension
from jitops import _resolution
from jitops.store import _remote
before = status("VmRSS:")
started = time.monotonic()
loaded = _resolution.resolve(tiny_extension(sys.argv[1]))
seconds = time.monotonic() - started
remote = _remote.active()
print(json.dumps({"how": loaded.how, "value": ctypes.CDLL(str(loaded.library)).jitops_tiny_value(), "seconds": seconds,
                  "remote_seconds": remote.seconds if remote else 0, "grew": status("VmHWM:") - before}))
"""
