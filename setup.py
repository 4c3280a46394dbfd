# SPDX-License-Identifier: MIT
"""The package metadata is in setup.cfg (the build system in pyproject.toml). This file adds one switch:

    JITOPS_AOT=1 pip wheel . --no-build-isolation --no-deps -w dist   # torch must be importable

compiles every op's Extension (or those JITOPS_AOT_OPS names, comma-separated) ahead of time
with setuptools (torch's BuildExtension, the same sources and flags as the JIT loader) and ships
each library with its manifest in jitops/prebuilt/<namespace>.<name>-<key>/, where the loader
finds it when it cannot compile (docs/ARCHITECTURE.md, resolution order). Without the switch the
wheel is source-only, and the ops are compiled on first use.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # this checkout's jitops: its settings here, its ops and flags for an AOT build
from jitops import _settings  # noqa: E402 - after the path it is found on

STARTUP_FILE = "jitops-drop-in.pth"


class FreshBuildPy(build_py):
    """pip builds in the source tree, and build_py copies only files newer than their last copy
    under build/: a file deleted from the sources would ride along in every later wheel (a removed
    header, say, which then also fails an AOT wheel's prebuilt libraries' sources check). It runs
    before build_ext, so libraries stamped by an earlier AOT build (older sources, another torch)
    go too."""

    def run(self):
        for old in Path(self.build_lib).glob("*"):  # the package and the top-level modules beside it
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        super().run()
        # The switch for programs run without `python -m jitops run` (JITOPS_DROP_IN=1): a .pth
        # file, which only site-packages' top level runs at start-up.
        self.copy_file(str(ROOT / STARTUP_FILE), str(Path(self.build_lib) / STARTUP_FILE))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / STARTUP_FILE)]


class EditableWheel(editable_wheel):
    """`pip install -e .` installs the switch's .pth too (setuptools' editable wheel holds only its
    own finder and .pth). Through setuptools' strategy hook, a private one: where it is gone, an
    editable install has no switch, as before."""

    def _select_strategy(self, name, tag, build_lib):
        return _WithStartupFile(super()._select_strategy(name, tag, build_lib))


class _WithStartupFile:
    """An editable strategy that also writes jitops-drop-in.pth into the wheel."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        wheel.write(str(ROOT / STARTUP_FILE), STARTUP_FILE)

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self.strategy.__exit__(*exc_info)


COMMANDS = {"build_py": FreshBuildPy, "editable_wheel": EditableWheel}


def ahead_of_time_build() -> dict:
    """setup() arguments that compile every op (or those chosen) and stamp each result with a manifest."""
    import time

    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    from jitops import _files
    from jitops.builder import _builder, _torch_flags
    from jitops.ops._framework import available_ops, op_libraries
    from jitops.store import Store, built_under, compute_key, find_cxx, key_components, plan_cuda

    cxx = find_cxx()
    extensions = []
    chosen = list(_settings.get("JITOPS_AOT_OPS")) or available_ops()
    unknown = sorted(set(chosen) - set(available_ops()))
    if unknown:
        raise SystemExit(f"JITOPS_AOT_OPS: unknown op(s) {unknown}; available: {available_ops()}")
    for declared in [e for op in chosen for e in op_libraries(op)]:
        cuda = plan_cuda(declared)
        components = key_components(declared, cxx, cuda)
        built = (CUDAExtension if cuda.enabled else CppExtension)(
            name=f"jitops.prebuilt.{declared.library_name}",
            sources=[str(Path(declared.root, s).relative_to(ROOT)) for s in components["sources"]],
            include_dirs=declared.include_paths(),
            extra_compile_args={"cxx": components["cflags"], "nvcc": components["cuda_cflags"]},
            extra_link_args=components["ldflags"],
        )
        built.jitops = (declared, cuda, components)
        extensions.append(built)

    class BuildAndStamp(BuildExtension):
        """Each library goes to prebuilt/<namespace>.<name>-<key>/, named as the JIT build names it,
        with the manifest a cache entry has (headers from the deps log ninja kept in build_temp)."""

        def build_extension(self, ext):
            started = time.time()
            super().build_extension(ext)
            declared, cuda, components = ext.jitops
            objects = self.compiler.object_filenames(ext.sources, output_dir=self.build_temp)
            headers = _builder.included_headers(
                Path(self.build_temp), declared, cxx, cuda, targets=[os.path.abspath(o) for o in objects]
            )
            built = Path(self.get_ext_fullpath(ext.name))
            entry = Store(built.parent).entry(declared.qualified_name, compute_key(components))
            entry.path.mkdir(exist_ok=True)
            library = entry.path / f"{declared.library_name}.so"
            os.replace(built, library)
            stable_build = (
                built_under(components, library, cxx, _torch_flags.include_paths(None))
                if components.get("abi") == "stable"
                else None
            )
            if stable_build and stable_build["audit"]["offending"]:
                raise SystemExit(
                    f"{declared.qualified_name}: not on torch's stable ABI: {stable_build['audit']['offending'][:3]}"
                )
            manifest = Store.manifest(
                entry,
                components,
                library,
                headers,
                built_at=started,
                build_seconds=round(time.time() - started, 3),
                ahead_of_time=True,
                **({"built_under": stable_build} if stable_build else {}),
            )
            _files.write_json_atomic(entry.manifest_path, manifest)

    return {"ext_modules": extensions, "cmdclass": {**COMMANDS, "build_ext": BuildAndStamp}}


setup(**(ahead_of_time_build() if _settings.get("JITOPS_AOT") else {"cmdclass": COMMANDS}))
