# SPDX-License-Identifier: MIT
"""The package metadata is in setup.cfg. This file adds one switch:

    JITOPS_AOT=1 pip wheel . --no-build-isolation      # torch must be importable

compiles every op ahead of time with setuptools (torch's BuildExtension, the same sources and
flags as the JIT loader) and ships each library with its manifest in jitops/prebuilt/<op>-<key>/,
where the loader finds it when it cannot compile (DESIGN.md's step 4). Without the switch the
wheel is source-only, and the ops are compiled on first use.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class FreshBuildPy(build_py):
    """pip builds in the source tree, and build_py copies only files newer than their last copy
    under build/: a file deleted from the sources would ride along in every later wheel (a removed
    header, say, which then also fails an AOT wheel's prebuilt libraries' sources check). It runs
    before build_ext, so libraries stamped by an earlier AOT build (older sources, another torch)
    go too."""

    def run(self):
        shutil.rmtree(Path(self.build_lib) / "jitops", ignore_errors=True)
        super().run()


def ahead_of_time_build() -> dict:
    """setup() arguments that compile every op and stamp each result with a manifest."""
    import time

    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    sys.path.insert(0, str(ROOT))
    from jitops import _cache, _loader, available_ops

    cxx, cuda = _loader.find_cxx(), _loader.plan_cuda()
    extensions = []
    for op in available_ops():
        sources = _loader.OpSources(op, ROOT)
        plan = cuda if cuda.enabled and sources.cuda.is_file() else _loader.CudaPlan(False, None, None, cuda.reason or "no CUDA source")
        components = _loader.key_components(sources, cxx, plan)
        files = [sources.cpu, sources.binding] + ([sources.cuda] if plan.enabled else [])
        extension = (CUDAExtension if plan.enabled else CppExtension)(
            name=f"jitops.prebuilt.{sources.extension_name}",
            sources=[str(f.relative_to(ROOT)) for f in files],
            extra_compile_args={"cxx": components["cflags"], "nvcc": components["cuda_cflags"]},
            extra_link_args=components["ldflags"],
        )
        extension.jitops_op = (op, components)
        extensions.append(extension)

    class BuildAndStamp(BuildExtension):
        """Each library goes to prebuilt/<op>-<key>/, named as the JIT build names it, with the
        manifest a cache entry has (the loader checks its ABI fields and the library's sha256)."""

        def build_extension(self, ext):
            started = time.time()
            super().build_extension(ext)
            op, components = ext.jitops_op
            built = Path(self.get_ext_fullpath(ext.name))
            key = _cache.compute_key(components)
            entry = built.parent / f"{op}-{key}"
            entry.mkdir(exist_ok=True)
            library = entry / f"jitops_{op}.so"
            os.replace(built, library)
            manifest = {
                "op": op,
                "key": key,
                "components": components,
                "library": library.name,
                "library_sha256": _cache.sha256_file(library),
                "built_at": started,
                "build_seconds": round(time.time() - started, 3),
                "ahead_of_time": True,
            }
            _cache.write_json_atomic(entry / _cache.MANIFEST_NAME, manifest)

    return {"ext_modules": extensions, "cmdclass": {"build_py": FreshBuildPy, "build_ext": BuildAndStamp}}


setup(**(ahead_of_time_build() if os.environ.get("JITOPS_AOT") == "1" else {"cmdclass": {"build_py": FreshBuildPy}}))
