# SPDX-License-Identifier: MIT
"""build.ninja for one extension: torch's flags (_torch_flags), an edge per unit to compile (with
its PCH and compiler launcher, where there are), and the link."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import BuildError
from .._layout import CUDA_SUFFIXES, OPS_NAMESPACE
from ..store import CudaPlan, Store
from . import _jobs, _torch_flags

if TYPE_CHECKING:
    from .._records import KeyComponents
    from ..extension import Extension

# CMake's names for a compiler launcher (ccache, sccache), read from the environment as CMake reads
# them: a launcher changes how a unit is compiled, not what, so it is in no key.
LAUNCHER_VARIABLES = {"cxx": "CMAKE_CXX_COMPILER_LAUNCHER", "cuda": "CMAKE_CUDA_COMPILER_LAUNCHER"}


# gcc collects garbage each time its heap outgrows a threshold that starts at 128 MB at most: parsing
# torch's headers collects again and again. Starting at 1 GB makes the same object, bit for bit, in
# less time for about 0.5 GB more memory (BENCHMARKS.md): in no key, as a launcher.
GCC_HEAP_FLAG, GCC_HEAP_MEMORY_PER_JOB = "--param=ggc-min-heapsize=1048576", 3 << 30


class TorchFlags:
    """The compiler commands and flags torch's load() would use for this extension (shell text),
    and gcc_heap: GCC_HEAP_FLAG where it applies, for every C++ compile (a PCH's too), else ""."""

    def __init__(self, cxx: str, nvcc: str, cflags: str, cuda_cflags: str, ldflags: str, gcc_heap: str):
        self.cxx, self.nvcc, self.ldflags = cxx, nvcc, ldflags
        self.cflags, self.cuda_cflags, self.gcc_heap = cflags, cuda_cflags, gcc_heap


def gcc_heap(cxx_description: str | None) -> str:
    """GCC_HEAP_FLAG where the C++ compiler (the key's "path: version") is gcc and each of ninja's
    jobs can have GCC_HEAP_MEMORY_PER_JOB of this machine's (or its cgroup's) memory, else ""."""
    version = (cxx_description or "").rpartition(": ")[2]
    if "clang" in version.lower() or not re.match(r"\S*(g\+\+|gcc|c\+\+)\S* \(", version):
        return ""
    found = _jobs.limits()
    memory = found.memory or os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return GCC_HEAP_FLAG if memory >= _jobs.job_count(found=found)[0] * GCC_HEAP_MEMORY_PER_JOB else ""


class Unit:
    """One source compiled to one object, through a one-line wrapper that includes it by its absolute
    path (object names stay unique, and no source path reaches a command line); planned: key, headers, reuse."""

    def __init__(
        self, relative: str, source: str, wrapper: str, cuda: bool, compiler: str, flags: str, post_flags: str, library: str
    ):
        self.relative, self.source, self.wrapper, self.cuda = relative, source, wrapper, cuda
        # As torch names objects (file.o, file.cuda.o), after the wrapper: unique per source path.
        self.object = os.path.splitext(os.path.basename(wrapper))[0] + (".cuda.o" if cuda else ".o")
        self.compiler, self.flags, self.post_flags = compiler, flags, post_flags
        self.key = ""  # the key its object is stored (or found) under (Store.object_keys, reuse_object, keep_object)
        self.name_free_key: str | None = None  # the key without the extension's name, where the source never names it
        self.portable_key = ""  # the remote's
        self.name_define = f"-DTORCH_EXTENSION_NAME={library}"  # as torch's flags hold it
        self.headers: dict[str, str] = {}  # absolute path -> sha256, of the headers the key does not name
        self.reused = False
        self.pch: str | None = None  # the precompiled header's text file, -include'd, where one is used
        self.pch_fetched: str | None = None  # made once the download of its PCH ended (_pch.Fetches)
        self.module_stem: str | None = None  # compiled as the module <stem>, linked as <stem>_v<n> (module_stem)

    @property
    def command(self) -> list[str]:
        """What makes this object, apart from its source: compiler, flags (no launcher, no PCH)."""
        return [self.compiler, self.flags, self.post_flags]


def torch_flags(extension: Extension, cuda: CudaPlan, components: KeyComponents, cxx: Path) -> TorchFlags:
    """torch's flags for the extension (_torch_flags), with the compilers the key names and jitops'
    own flags (the key's cflags and ldflags), the archs as -gencode flags."""
    cuda_home = cuda.cuda_home if cuda.enabled else None
    cuda_cflags = list(components["cuda_cflags"]) + (gencode_flags(cuda.arch_list or "") if cuda.enabled else [])
    cflags, cuda_cflags_text = _torch_flags.compile_flags(
        extension.library_name, components["cflags"], cuda_cflags, extension.include_paths(), cuda_home
    )
    nvcc = os.environ.get("PYTORCH_NVCC") or (shlex.quote(str(cuda.nvcc)) if cuda.enabled else "")
    ldflags = _link_flags(extension, _torch_flags.link_flags(components["ldflags"], cuda_home))
    return TorchFlags(shlex.quote(str(cxx)), nvcc, cflags, cuda_cflags_text, ldflags, gcc_heap(components["cxx"]))


def _link_flags(extension: Extension, ldflags: str) -> str:
    """torch's link flags. jitops' ops take torch's symbols from c10 and torch_cpu alone: since torch
    2.14, libtorch.so's weak C++ runtime symbols would otherwise make every dlopen walk it."""
    if extension.namespace != OPS_NAMESPACE:
        return ldflags
    return " ".join(word for word in ldflags.split(" ") if word != "-ltorch")


def plan_units(staging: Path, extension: Extension, cuda: CudaPlan, components: KeyComponents, flags: TorchFlags) -> list[Unit]:
    """The units to compile, each with its wrapper written in staging/src."""
    src = staging / "src"
    src.mkdir(exist_ok=True)
    units = []
    for relative in components["sources"]:
        source = str(Path(extension.root, relative).resolve())
        if '"' in source or "\n" in source:  # #include "..." takes a path literally, up to a quote
            raise BuildError(f"jitops: cannot compile {source!r}: a C++ #include cannot name a path holding a quote or a newline")
        wrapper = src / relative.replace(os.sep, "_")
        wrapper.write_text(f'#include "{source}"\n', encoding="utf-8")
        is_cuda = cuda.enabled and relative.endswith(CUDA_SUFFIXES)
        if is_cuda:
            unit = Unit(relative, source, str(wrapper), True, flags.nvcc, flags.cuda_cflags, "", extension.library_name)
        else:
            unit = Unit(relative, source, str(wrapper), False, flags.cxx, flags.cflags, "", extension.library_name)
        stem = module_stem(extension, source)
        if stem is not None:
            stem_define = f"-DTORCH_EXTENSION_NAME={stem}"
            unit.flags = re.sub(rf"(?<!\S){re.escape(unit.name_define)}(?!\S)", stem_define, unit.flags)
            unit.name_define, unit.module_stem = stem_define, stem
        units.append(unit)
    if len({unit.object for unit in units}) < len(units):  # x.cpp beside x.cc: objects named in full
        for unit in units:
            unit.object = os.path.basename(unit.wrapper) + (".cuda.o" if unit.cuda else ".o")
    return units


_RENAMED = re.compile(r"(.+)_v[1-9][0-9]*")
_MODULE_DEFINITION = re.compile(rb"PYBIND11_MODULE\s*\(\s*TORCH_EXTENSION_NAME\s*,")
_QUOTED_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.M)


def renamed_from(extension: Extension) -> str | None:
    """<name> for a Python module that a reload renamed <name>_v<n> (torch's name for it), else None."""
    renamed = _RENAMED.fullmatch(extension.name) if extension.python_module else None
    return renamed.group(1) if renamed else None


def module_stem(extension: Extension, source: str) -> str | None:
    """For a Python module renamed by a reload (<name>_v1: torch's name for it), <name>, where the
    source spells TORCH_EXTENSION_NAME only in PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) and the
    headers it includes by quoted name never: the unit is compiled as the module <name> (the object
    the first load stored, so a kernel edit does not recompile the binding) and the link gives it
    PyInit_<name>_v1. Else None (compiled under its own name, as torch compiles it)."""
    stem = renamed_from(extension)
    if stem is None:
        return None
    try:
        with open(source, "rb") as file:
            text = file.read()
    except OSError:
        return None
    uses = text.count(Store.NAME_MACRO.encode())
    if uses == 0 or uses != len(_MODULE_DEFINITION.findall(text)):
        return None
    headers = [os.path.join(os.path.dirname(source), os.fsdecode(h)) for h in _QUOTED_INCLUDE.findall(text)]
    return None if any(os.path.isfile(h) and Store.names_extension(h) for h in headers) else stem


def launchers() -> dict[str, str]:
    """The compiler launchers set in the environment, as shell text: {"cxx": ..., "cuda": ...}."""
    found = {}
    for kind, variable in LAUNCHER_VARIABLES.items():
        words = shlex.split(os.environ.get(variable, ""))
        found[kind] = shlex.join(words) if words else ""
    return found


def write_build_file(build_dir: Path, units: list[Unit], flags: TorchFlags, library: str) -> None:
    """build_dir/build.ninja: an edge per unit whose object is not reused (a reused one is a plain
    input of the link), with -MMD depfiles kept for _ninja.deps, and the link; paths escaped for ninja."""
    launcher = launchers()
    lines = [
        "ninja_required_version = 1.3",
        "rule compile",
        f"  command = $compiler -MMD -MF $out.d $flags $pch {flags.gcc_heap} -c $in -o $out $post_flags",
        "rule cuda_compile",
        "  command = $compiler -MD -MF $out.d $flags -c $in -o $out $post_flags",
        # A unit whose PCH is being downloaded starts once the download ended (made by _pch.Fetches).
        "rule wait_for_file",
        "  command = while [ ! -e $out ]; do sleep 0.02; done",
        "rule link",
        f"  command = {flags.cxx} $in {flags.ldflags} $aliases -o $out",
    ]
    for unit in units:
        if unit.reused:
            continue
        wrapper = escape_path(os.path.relpath(unit.wrapper, build_dir))
        waits = f" || {escape_path(os.path.relpath(unit.pch_fetched, build_dir))}" if unit.pch_fetched else ""
        lines.append(f"build {escape_path(unit.object)}: {'cuda_compile' if unit.cuda else 'compile'} {wrapper}{waits}")
        compiler = f"{launcher['cuda' if unit.cuda else 'cxx']} {unit.compiler}".lstrip()
        lines += [f"  compiler = {compiler}", f"  flags = {unit.flags}", f"  post_flags = {unit.post_flags}"]
        if unit.pch:
            lines.append(f"  pch = -include {shlex.quote(unit.pch).replace('$', '$$')} -Winvalid-pch")
    for fetched in sorted({unit.pch_fetched for unit in units if unit.pch_fetched and not unit.reused}):
        lines.append(f"build {escape_path(os.path.relpath(fetched, build_dir))}: wait_for_file")
    objects = " ".join(escape_path(unit.object) for unit in units)
    lines.append(f"build {escape_path(library)}: link {objects}")
    # A binding compiled as the module <stem> (module_stem): Python looks for PyInit_<name>.
    name = os.path.splitext(library)[0]
    aliases = sorted({f"-Wl,--defsym=PyInit_{name}=PyInit_{u.module_stem}" for u in units if u.module_stem})
    if aliases:
        lines.append(f"  aliases = {' '.join(aliases)}")
    lines.append(f"default {escape_path(library)}")
    (build_dir / "build.ninja").write_text("\n".join(lines) + "\n", encoding="utf-8")


def escape_path(path: str) -> str:
    """A path as ninja reads it in a build line."""
    if "\n" in path:
        raise BuildError(f"jitops: cannot build under {path!r}: ninja cannot name a path holding a newline")
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


_ARCH = r"(\d+)\.(\d+)([a-z]?)(\+PTX)?"
# The architecture names TORCH_CUDA_ARCH_LIST may hold (as torch's load() reads them), each the
# compute capabilities it stands for; a "+Tegra" name before the plain one, which it contains.
ARCH_NAMES = {
    "Kepler+Tesla": "3.7",
    "Kepler": "3.5+PTX",
    "Maxwell+Tegra": "5.3",
    "Maxwell": "5.0 5.2+PTX",
    "Pascal": "6.0 6.1+PTX",
    "Volta+Tegra": "7.2",
    "Volta": "7.0+PTX",
    "Turing": "7.5+PTX",
    "Ampere+Tegra": "8.7",
    "Ampere": "8.0 8.6+PTX",
    "Ada": "8.9+PTX",
    "Hopper": "9.0+PTX",
    "Blackwell+Tegra": "11.0",
    "Blackwell": "10.0 10.3 12.0 12.1+PTX",
}


def gencode_flags(arch_list: str) -> list[str]:
    """nvcc's -gencode flags for a TORCH_CUDA_ARCH_LIST such as "8.6;9.0a", "8.0 9.0+PTX" or "Ampere"."""
    for name, capabilities in ARCH_NAMES.items():
        arch_list = arch_list.replace(name, f" {capabilities} ")
    result = []
    for arch in arch_list.replace(";", " ").split():
        match = re.fullmatch(_ARCH, arch)
        if match is None:
            raise BuildError(
                f"jitops: TORCH_CUDA_ARCH_LIST entry {arch!r} is neither a compute capability such as 8.6, 9.0a or "
                f"9.0+PTX nor one of the names {', '.join(ARCH_NAMES)}"
            )
        number = "".join(match.group(1, 2, 3))
        for flag in (f"-gencode=arch=compute_{number},code=sm_{number}", f"-gencode=arch=compute_{number},code=compute_{number}"):
            if flag not in result and (match.group(4) or "code=sm_" in flag):
                result.append(flag)
    return result
