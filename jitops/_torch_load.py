# SPDX-License-Identifier: MIT
"""jitops.load and jitops.load_inline: torch.utils.cpp_extension's load() and load_inline(), with
the same parameters in the same order and the same results, built and loaded by jitops' loader
(its key, lock, atomic publish and warm records). Migrating is changing one import.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ._core import DROP_IN_NAMESPACE, is_identifier, loaded
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
    _refuse_unsupported(extra_sycl_cflags=extra_sycl_cflags, with_sycl=with_sycl, is_standalone=is_standalone)
    paths = [os.path.abspath(s) for s in ([sources] if isinstance(sources, (str, os.PathLike)) else sources)]
    if not paths:
        raise ValueError("load: sources is empty")
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    prefix = os.path.join(root, "")  # every path starts with it: slicing, not os.path.relpath (slow)
    extension = _extension(
        name,
        root,
        [p[len(prefix) :] for p in paths],
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        with_cuda,
        is_python_module,
        _cache_dir(build_directory),
    )
    return _load(extension, with_cuda, verbose)


def load_inline(
    name,
    cpp_sources,
    cuda_sources=None,
    sycl_sources=None,
    functions=None,
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
    with_pytorch_error_handling=True,
    keep_intermediates=True,
    use_pch=False,
    no_implicit_headers=False,
):
    """torch.utils.cpp_extension.load_inline, through jitops: the sources are written, as torch
    writes them (main.cpp, with a pybind11 block for `functions`; cuda.cu), into a folder named
    after their content under the cache root, then built as load() builds files. use_pch has no
    effect (jitops does not build precompiled headers)."""
    _refuse_unsupported(sycl_sources=sycl_sources, extra_sycl_cflags=extra_sycl_cflags, with_sycl=with_sycl)
    if not is_identifier(name):  # it names a folder before the Extension checks it
        raise ValueError(f"name must be a C identifier, got {name!r}")
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    if not no_implicit_headers:
        cpp.insert(0, "#include <torch/extension.h>")
        if cuda:
            cuda.insert(0, "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>")
    if functions is not None:
        cpp.append(_pybind_block(functions, with_pytorch_error_handling))
    files = {"main.cpp": "\n".join(cpp)} | ({"cuda.cu": "\n".join(cuda)} if cuda else {})
    cache_dir = _cache_dir(build_directory)
    root = _write_once(name, files, cache_dir)
    extension = _extension(
        name,
        root,
        sorted(files),
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        with_cuda if cuda else False,
        is_python_module,
        cache_dir,
    )
    return _load(extension, with_cuda if cuda else None, verbose)


def _refuse_unsupported(**arguments) -> None:
    """What jitops cannot do is an error naming the argument, never silently ignored."""
    for argument, value in arguments.items():
        if value:  # every one of them defaults to None or False
            why = "jitops builds libraries, not executables" if argument == "is_standalone" else "jitops builds no SYCL code"
            raise ValueError(f"{argument}={value!r} is not supported: {why}")


def _cache_dir(build_directory) -> str | None:
    """Where a build_directory holds jitops' entries: a subfolder, since get_plugin passes the
    folder holding the sources, whose identity the key reads (a build there would change it)."""
    return os.path.join(os.path.abspath(build_directory), BUILD_SUBFOLDER) if build_directory else None


def _extension(
    name, root, sources, cflags, cuda_cflags, ldflags, include_paths, with_cuda, python_module, cache_dir
) -> Extension:
    """The declaration of a load()/load_inline() call. A name this process loaded from other sources
    or flags becomes <name>_v1, _v2, ... as torch's load() does: an edited cell of a notebook
    loads its new code beside the old (a second TORCH_LIBRARY block of one namespace still aborts)."""
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
        if found is None or found.extension == extension:
            return extension
        version += 1


def _load(extension: Extension, with_cuda, verbose):
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


def _pybind_block(functions, with_pytorch_error_handling: bool) -> str:
    """The PYBIND11_MODULE block torch's load_inline writes for `functions` (a name, a list of
    names, or a dict of name -> docstring)."""
    if isinstance(functions, str):
        functions = [functions]
    docs = functions if isinstance(functions, dict) else {function: function for function in functions}
    lines = []
    for function, doc in docs.items():
        bound = f"torch::wrap_pybind_function({function})" if with_pytorch_error_handling else function
        lines.append(f'm.def("{function}", {bound}, "{doc}");')
    return "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "\n".join(lines) + "\n}"


def _write_once(name: str, files: dict[str, str], cache_dir: str | None) -> str:
    """A folder holding `files`, named after their content (<cache root>/inline/<name>-<sha256>):
    written once, atomically, and never changed, so its files' identities stay valid for warm loads."""
    from ._cache import INLINE_SOURCES, cache_root, ensure_private_dir

    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    parent = ensure_private_dir(cache_root(cache_dir) / INLINE_SOURCES)
    folder = parent / f"{name}-{digest}"
    if not folder.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=parent))
        for file, text in files.items():
            (staging / file).write_text(text, encoding="utf-8")
        try:
            os.rename(staging, folder)
        except OSError:  # another process wrote the same content first
            for file in files:
                (staging / file).unlink()
            staging.rmdir()
    return str(folder)
