# SPDX-License-Identifier: MIT
"""jitops.load: torch.utils.cpp_extension's load(), with the same parameters in the same order and
the same result, built and loaded by jitops' loader (its key, lock, atomic publish and warm
records). Migrating is changing one import. jitops.load_inline (_torch_load_inline) declares its
sources with this module's helpers.
"""

from __future__ import annotations

import os

from ._core import DROP_IN_NAMESPACE, loaded
from .extension import Extension

BUILD_SUBFOLDER = "jitops"


def load(
    name,
    sources,
    extra_cflags=None,
    extra_cuda_cflags=None,
    extra_sycl_cflags=None,
    extra_ldflags=None,
    extra_include_paths=None,
    build_directory=None,
    verbose=False,
    with_cuda=None,
    with_sycl=None,
    is_python_module=True,
    is_standalone=False,
    keep_intermediates=True,
):
    """torch.utils.cpp_extension.load, through jitops: the pybind11 module (is_python_module=True),
    else the library's path after its TORCH_LIBRARY registrations ran. keep_intermediates has no
    effect (jitops keeps the build log, not the object files); verbose=True streams the compiler's
    output (as JITOPS_VERBOSE=1). build_directory: this extension's cache entries live in its
    subfolder jitops/, with the same key, lock and checks as in jitops' cache root."""
    refuse_unsupported(extra_sycl_cflags=extra_sycl_cflags, with_sycl=with_sycl, is_standalone=is_standalone)
    paths = [os.path.abspath(s) for s in ([sources] if isinstance(sources, (str, os.PathLike)) else sources)]
    if not paths:
        raise ValueError("load: sources is empty")
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    prefix = os.path.join(root, "")  # every path starts with it: slicing, not os.path.relpath (slow)
    extension = declare(
        name,
        root,
        [p[len(prefix) :] for p in paths],
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        with_cuda,
        is_python_module,
        entries_dir(build_directory),
    )
    return load_declared(extension, with_cuda, verbose)


def refuse_unsupported(**arguments) -> None:
    """What jitops cannot do is an error naming the argument, never silently ignored."""
    for argument, value in arguments.items():
        if value:  # every one of them defaults to None or False
            why = "jitops builds libraries, not executables" if argument == "is_standalone" else "jitops builds no SYCL code"
            raise ValueError(f"{argument}={value!r} is not supported: {why}")


def entries_dir(build_directory) -> str | None:
    """Where a build_directory holds jitops' entries: a subfolder, since get_plugin passes the
    folder holding the sources, whose identity the key reads (a build there would change it)."""
    return os.path.join(os.path.abspath(build_directory), BUILD_SUBFOLDER) if build_directory else None


def declare(name, root, sources, cflags, cuda_cflags, ldflags, include_paths, with_cuda, python_module, cache_dir) -> Extension:
    """The declaration of a load()/load_inline() call. A name this process loaded from other sources
    or flags becomes <name>_v1, _v2, ... as torch's load() does: an edited cell of a notebook
    loads its new code beside the old, as does one whose sources or headers changed since it was
    loaded (a second TORCH_LIBRARY block of one namespace still aborts)."""
    for argument, value in (
        ("extra_cflags", cflags),
        ("extra_cuda_cflags", cuda_cflags),
        ("extra_ldflags", ldflags),
        ("extra_include_paths", include_paths),
    ):
        if isinstance(value, str):
            raise TypeError(f"{argument} must be a list of strings, got the string {value!r}")
    # Include paths as torch takes them: relative to the working directory (an absolute path joined
    # to the extension's root stays itself).
    include_dirs = [os.path.abspath(path) for path in include_paths or []]
    version = 0
    while True:
        extension = Extension(
            name if version == 0 else f"{name}_v{version}",
            sources,
            namespace=DROP_IN_NAMESPACE,
            root=root,
            include_dirs=include_dirs,
            cflags=cflags or [],
            cuda_cflags=cuda_cflags or [],
            ldflags=ldflags or [],
            cuda="never" if with_cuda is False else "auto",
            python_module=bool(python_module),
            cache_dir=cache_dir,
        )
        found = loaded.get(extension.qualified_name)
        if found is None or (found.extension == extension and not _inputs_changed(found)):
            return extension
        version += 1


def _inputs_changed(found) -> bool:
    """Whether a file a loaded library was built from (a source, a header, a compiler) has changed
    since it was loaded (a folder's identity changes with any file added to it: those are left out)."""
    from ._core import identity_or_none

    return any(identity_or_none(path) != identity and not os.path.isdir(path) for path, identity in found.inputs)


def load_declared(extension: Extension, with_cuda, verbose):
    """The declared library, loaded, as torch's load() returns it: its module, or its path."""
    name = extension.qualified_name
    if with_cuda and extension.has_cuda_sources():
        from ._key import plan_cuda  # only where CUDA is demanded: torch's load() fails without it

        plan = plan_cuda(extension)
        if not plan.enabled:
            from ._errors import BuildError

            raise BuildError(f"jitops: with_cuda=True, but {name} cannot be built with CUDA here: {plan.reason}")
    verbose_before = os.environ.get("JITOPS_VERBOSE")
    if verbose:
        os.environ["JITOPS_VERBOSE"] = "1"
    try:
        loaded = extension.load()
    finally:
        if verbose and verbose_before is None:
            del os.environ["JITOPS_VERBOSE"]
    return loaded.module if extension.python_module else str(loaded.library)
