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
