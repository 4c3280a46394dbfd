# SPDX-License-Identifier: MIT
"""Libraries on torch's stable ABI (torch/csrc/stable, torch/headeronly): built once for every torch
from the floor up and any Python. What their key holds instead of torch's and Python's exact
identity, the flags that target the floor, which sources qualify, the audit of a built library
(its dynamic symbols), and whether one built elsewhere can run here. docs/extensions.md says how
an extension opts in."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from .._layout import RECIPE
from ..warm import cxx_runtime, process_abi

if TYPE_CHECKING:
    from .._records import KeyComponents

# The oldest torch jitops supports (setup.cfg's torch>=): stable builds target its ABI
# (TORCH_TARGET_VERSION), so one library serves it and every later torch. tests/test_stable_abi.py
# fails when a binding needs a newer one.
FLOOR = (2, 11)
# The C++ standard of stable builds: torch's extensions use c++17 up to 2.11 and c++20 from 2.12,
# and one library must build the same under each.
STANDARD = "c++20"
# Where the stable API's declarations live: a source including any other torch header is not stable.
STABLE_HEADERS = ("torch/csrc/stable/", "torch/headeronly/", "torch/csrc/inductor/aoti_torch/c/")
# What keeps a source off the stable ABI however it includes torch (GPTQModel's conservative test).
# (\b: STABLE_TORCH_LIBRARY is the stable API's own.) <jitops/library.h> is torch's <torch/library.h>.
UNSTABLE_MARKS = re.compile(rb"Python\.h|pybind11|PYBIND11_MODULE|\bTORCH_LIBRARY|TORCH_EXTENSION_NAME|\bJITOPS_LIBRARY")
_INCLUDE = re.compile(rb'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# The stable C shim's symbols (C names) and the runtimes' symbol versions a stable library may need.
SHIM_SYMBOL = re.compile(r"(aoti_torch_\w+|torch_\w+)")
RUNTIME_VERSIONS = ("GLIBC_", "GLIBCXX_", "CXXABI_", "GCC_", "libcudart.so")
# Undefined symbols that tie a library to one torch (its C++ API) or one Python (its C API).
TORCH_CXX = re.compile(r"\b(at|c10|torch|caffe2|pybind11)::")
PYTHON_SYMBOL = re.compile(r"_?Py[A-Z_]")
# Libraries a stable library must not depend on: they tie it to one torch or one Python.
UNSTABLE_LIBRARIES = re.compile(r"libtorch_python|libpython")


def floor_text(floor: tuple[int, int] = FLOOR) -> str:
    return ".".join(map(str, floor))


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version ("2.14.1+cu130"); (0, 0) where it names none."""
    found = re.match(r"(\d{1,9})\.(\d{1,9})", version or "")
    return (int(found[1]), int(found[2])) if found else (0, 0)


def target_flags() -> list[str]:
    """The flags of a stable build: torch's stable API as of the floor (newer shim functions are
    not declared), and one C++ standard whatever torch builds it."""
    major, minor = FLOOR
    return [f"-DTORCH_TARGET_VERSION=0x{major:02x}{minor:02x}000000000000", f"-std={STANDARD}"]


def components(with_cuda: bool = False) -> dict:
    """What a stable library shares with every process that may load it, in place of
    warm.process_abi(): the floor, the standard, the C++ ABI, the platform, and torch's CUDA
    major where the library has CUDA code (a CPU-only one serves CPU and CUDA builds of torch alike)."""
    import torch  # loaded by the caller already: this module imports without it

    return {
        "recipe": RECIPE,
        "abi": "stable",
        "torch_floor": floor_text(),
        "cxx_standard": STANDARD,
        "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
        "torch_cuda_major": cuda_major() if with_cuda else None,
        "platform": f"{os.uname().sysname.lower()}-{os.uname().machine}",
    }


def cuda_major() -> str | None:
    """The CUDA major of this torch's build ("13"), None for a CPU-only torch."""
    import torch  # loaded by the caller already

    return torch.version.cuda.split(".")[0] if torch.version.cuda else None


def torch_supports_floor() -> bool:
    import torch  # loaded by the caller already

    return release(torch.__version__) >= FLOOR


def uses_stable_headers_only(paths: list[str]) -> bool:
    """Whether sources (and the local headers they include) name only the stable API's torch
    headers and no Python or pybind11: what jitops.load builds as a stable library."""
    seen, pending = set(), list(paths)
    while pending:
        path = os.path.realpath(pending.pop())
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, "rb") as file:
                text = file.read(1 << 20)
        except OSError:
            return False
        if UNSTABLE_MARKS.search(text):
            return False
        for bracket, name in _INCLUDE.findall(text):
            header = name.decode(errors="replace")
            if header.startswith(("torch/", "ATen/", "c10/", "caffe2/", "jitops/")) and not header.startswith(STABLE_HEADERS):
                return False
            if bracket == b'"':
                local = os.path.join(os.path.dirname(path), header)
                if os.path.isfile(local):
                    pending.append(local)
    return True


class Audit:
    """What a built library's dynamic section says: the symbols that keep it off the stable ABI
    (offending), the shim names it looks up with dlsym (no symbol table shows those), and the
    newest C++ runtime version it needs."""

    def __init__(self, offending: list[str], looked_up: list[str], glibcxx: str | None):
        self.offending, self.looked_up, self.glibcxx = offending, looked_up, glibcxx

    def record(self) -> dict:
        return {"offending": self.offending[:20], "looked_up": self.looked_up, "glibcxx": self.glibcxx}


def audit(library: Path, cxx: Path | None, include_dirs: list[str]) -> Audit:
    """Read the library's dynamic symbols and needed libraries (binutils' readelf): of torch and
    Python, only the stable shim may be undefined (each function declared at the floor); no torch
    C++ symbol, no Python C-API symbol, no libtorch_python or libpython."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return Audit(["(binutils' readelf is not installed: the library could not be audited)"], [], None)
    try:
        shown = subprocess.run(
            [readelf, "-W", "--dyn-syms", "-d", str(library)], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return Audit([f"(readelf could not read it: {err})"], [], None)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", shown)
    offending = [f"needs {name}" for name in needed if UNSTABLE_LIBRARIES.search(name)]
    undefined, glibcxx, cxx_symbols, at_floor = set(), [], [], None
    for line in shown.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name[@version]
        if len(fields) < 8 or fields[6] != "UND" or not fields[0].endswith(":"):
            continue
        name, _, version = fields[7].partition("@")
        version = version.lstrip("@").split()[0] if version else ""
        undefined.add(name)
        if version.startswith("GLIBCXX_"):
            glibcxx.append(version[len("GLIBCXX_") :])
        if version.startswith(RUNTIME_VERSIONS) or (fields[4] == "WEAK" and not SHIM_SYMBOL.fullmatch(name)):
            continue
        if SHIM_SYMBOL.fullmatch(name):
            at_floor = floor_symbols(str(cxx or "c++"), tuple(include_dirs)) if at_floor is None else at_floor
            if at_floor and name not in at_floor:
                offending.append(f"{name} (not in torch {floor_text()}'s stable shim)")
        elif PYTHON_SYMBOL.match(name):
            offending.append(name)
        elif name.startswith("_Z"):
            cxx_symbols.append(name)
        # Any other symbol is another library's: the load check says whether it resolves.
    offending += [name for name in demangled(cxx_symbols) if TORCH_CXX.search(name)]
    strings = re.findall(rb"\x00((?:aoti_torch|torch)_\w+)\x00", library.read_bytes()) if "dlsym" in undefined else []
    looked_up = sorted({name.decode() for name in strings} - undefined)
    return Audit(offending, looked_up, max(glibcxx, key=numbers, default=None))


@functools.cache
def floor_symbols(cxx: str, include_dirs: tuple[str, ...]) -> frozenset[str]:
    """The shim functions torch's headers declare at the floor (preprocessed with its target
    version); empty where the preprocessor fails (then only the symbol kinds are checked)."""
    headers = "".join(f"#include <{h}>\n" for h in ("torch/csrc/inductor/aoti_torch/c/shim.h", "torch/csrc/stable/c/shim.h"))
    command = [cxx, "-E", "-x", "c++", *target_flags(), "-DUSE_CUDA", *(f"-I{d}" for d in include_dirs), "-"]
    try:
        text = subprocess.run(command, input=headers, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"\b((?:aoti_torch|torch)_\w+)\s*\(", text))


def demangled(symbols: list[str]) -> list[str]:
    """C++ symbols as written in the source (binutils' c++filt, in one call), else as they are."""
    tool = shutil.which("c++filt")
    if tool is None or not symbols:
        return symbols
    try:
        shown = subprocess.run([tool], input="\n".join(symbols), capture_output=True, text=True, timeout=30).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return symbols
    return shown if len(shown) == len(symbols) else symbols


def built_under(
    components: KeyComponents, library: Path, cxx: Path | None, include_dirs: list[str], exact_because: str = ""
) -> dict:
    """A stable library's manifest field `built_under`: the torch and Python it was built under, its
    floor, the CUDA toolkit that compiled its CUDA code, and the audit of its dynamic symbols
    (include_dirs: torch's, where the audit reads the shim's declarations)."""

    return {
        **process_abi(),
        "torch_floor": components.get("torch_floor"),
        "cuda_toolkit": toolkit_release(components.get("nvcc")) if "cuda" in (components.get("backends") or []) else None,
        "audit": audit(library, cxx, include_dirs).record(),
        **({"exact_because": exact_because} if exact_because else {}),
    }


def toolkit_release(nvcc_line: str | None) -> str | None:
    """nvcc's major.minor from the line its probe keeps ("... release 13.0, V13.0.88")."""
    found = re.search(r"release (\d+\.\d+)", nvcc_line or "")
    return found[1] if found else None


@functools.cache
def driver_release() -> str | None:
    """The CUDA version the installed driver supports ("13.0"), or None (no driver)."""
    import ctypes  # only for a CUDA library built elsewhere

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def unfit_here(built: dict) -> str:
    """Why a stable library described by its manifest's `built` (floor, C++ runtime, CUDA toolkit)
    cannot run in this process ('' where it can): read before it is opened."""
    import torch  # loaded by the caller already

    floor = built.get("torch_floor")
    if isinstance(floor, str) and release(floor) > release(torch.__version__):
        return f"it needs torch >= {floor}, and this is torch {torch.__version__}"
    needed, here = built.get("glibcxx"), runtime_glibcxx()
    if isinstance(needed, str) and here and numbers(needed) > numbers(here):
        return f"it needs the C++ runtime's GLIBCXX_{needed}, and this process's has GLIBCXX_{here} at most"
    toolkit = built.get("cuda_toolkit")
    if isinstance(toolkit, str) and (driver := driver_release()) and numbers(driver) < numbers(toolkit):
        return f"its CUDA code was compiled by CUDA {toolkit}, newer than this driver's CUDA {driver}"
    return ""


def numbers(text: str | None) -> tuple[int, ...]:
    """A version's numbers, for comparing ("3.4.29" -> (3, 4, 29)); each at most 9 digits, so that
    a hostile record's value cannot make int() refuse it."""
    return tuple(int(part) for part in re.findall(r"\d{1,9}", text or ""))


@functools.cache
def runtime_glibcxx() -> str | None:
    """The newest GLIBCXX_ version the C++ runtime this process loaded provides."""

    path = cxx_runtime()
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        return None
    versions = {m.decode() for m in re.findall(rb"GLIBCXX_(\d+\.\d+(?:\.\d+)?)\x00", data)}
    return max(versions, key=numbers, default=None)
