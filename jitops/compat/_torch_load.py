# SPDX-License-Identifier: MIT
"""jitops.load: torch.utils.cpp_extension's load(), same parameters, same result, built and loaded
by jitops' loader; and the helpers load_inline shares."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload

from .. import _settings
from .._files import identity_or_none
from .._layout import DROP_IN_NAMESPACE
from ..extension import Extension
from ..warm import loaded
from . import _module_names

BUILD_SUBFOLDER = "jitops"


Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
Flags = Sequence[str] | None


if TYPE_CHECKING:
    from typing import TypedDict

    from typing_extensions import Unpack

    class Options(TypedDict, total=False):
        """The parameters load() and load_inline() share, for their overloads (written once here)."""

        extra_cflags: Flags
        extra_cuda_cflags: Flags
        extra_sycl_cflags: Flags
        extra_ldflags: Flags
        extra_include_paths: Flags
        build_directory: str | os.PathLike[str] | None
        verbose: bool
        with_cuda: bool | None
        with_sycl: bool | None
        keep_intermediates: bool

    class LoadOptions(Options, total=False):
        is_standalone: bool


# Type checkers see the options as keywords, and is_python_module picks the result's type; a call
# passing options by position (as torch's signature allows) gets the third form.
@overload
def load(name: str, sources: Paths, *, is_python_module: Literal[True] = True, **options: Unpack[LoadOptions]) -> ModuleType: ...
@overload
def load(name: str, sources: Paths, *, is_python_module: Literal[False], **options: Unpack[LoadOptions]) -> str: ...
@overload
def load(
    name: str, sources: Paths, *positional: Any, is_python_module: bool = True, **options: Unpack[LoadOptions]
) -> ModuleType | str: ...
def load(  # type: ignore[misc]  # options given by position bind to the parameters below
    name: str,
    sources: Paths,
    extra_cflags: Flags = None,
    extra_cuda_cflags: Flags = None,
    extra_sycl_cflags: Flags = None,
    extra_ldflags: Flags = None,
    extra_include_paths: Flags = None,
    build_directory: str | os.PathLike[str] | None = None,
    verbose: bool = False,
    with_cuda: bool | None = None,
    with_sycl: bool | None = None,
    is_python_module: bool = True,
    is_standalone: bool = False,
    keep_intermediates: bool = True,
) -> ModuleType | str:
    """torch.utils.cpp_extension.load, through jitops: the pybind11 module, or (is_python_module=False)
    the library's path once its TORCH_LIBRARY registrations ran. verbose streams the compiler's output;
    build_directory keeps the entries in its jitops/ subfolder; keep_intermediates has no effect."""
    refuse_unsupported(extra_sycl_cflags=extra_sycl_cflags, with_sycl=with_sycl, is_standalone=is_standalone)
    listed = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    if not all(isinstance(s, (str, os.PathLike)) for s in listed):
        raise TypeError(f"load: sources must be paths, got {sources!r}")
    paths = list(dict.fromkeys(os.path.abspath(s) for s in listed))  # a source listed twice is built once
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
    try:
        return as_torch_returns(extension, name, with_cuda, verbose)
    except jitops_errors() as err:  # its message says what failed; the loader's frames would bury it
        raise err.with_traceback(None) from err.__cause__


def refuse_unsupported(**arguments) -> None:
    """What jitops cannot do is an error naming the argument, never silently ignored."""
    for argument, value in arguments.items():
        if value:  # every one of them defaults to None or False
            why = "jitops builds libraries, not executables" if argument == "is_standalone" else "jitops builds no SYCL code"
            raise ValueError(f"{argument}={value!r} is not supported: {why}")


def jitops_errors() -> tuple[type[Exception], ...]:
    """jitops' own errors, for an except clause (evaluated only when something was raised: a warm
    load imports one module fewer)."""
    from .._errors import ERRORS  # only once something was raised: a warm load imports no _errors

    return ERRORS


def entries_dir(build_directory) -> str | None:
    """Where a build_directory holds jitops' entries: a subfolder, since get_plugin passes the
    folder holding the sources, whose identity the key reads (a build there would change it)."""
    return os.path.join(os.path.abspath(build_directory), BUILD_SUBFOLDER) if build_directory else None


_naming = threading.Lock()  # a name is chosen and taken in one step (two threads: <name>, <name>_v1)
_declared: dict[str, Extension] = {}  # by qualified name: the declaration each name was given


def declare(name, root, sources, cflags, cuda_cflags, ldflags, include_paths, with_cuda, python_module, cache_dir) -> Extension:
    """The declaration of a load()/load_inline() call: a name given other inputs (or whose inputs changed
    since), or held by any module of the process, becomes <name>_v1, _v2, ... as in torch's load()."""
    for argument, value in (
        ("extra_cflags", cflags),
        ("extra_cuda_cflags", cuda_cflags),
        ("extra_ldflags", ldflags),
        ("extra_include_paths", include_paths),
    ):
        if isinstance(value, str) or not all(isinstance(item, str) for item in value or []):
            raise TypeError(f"{argument} must be a list of strings, got {value!r}")
    # Flags and include paths as torch takes them: each stripped of surrounding whitespace, include
    # paths relative to the working directory (an absolute path joined to the root stays itself).
    cflags, cuda_cflags, ldflags = ([flag.strip() for flag in flags or []] for flags in (cflags, cuda_cflags, ldflags))
    include_dirs = [os.path.abspath(path.strip()) for path in include_paths or []]
    version = 0
    with _naming:
        while True:
            extension = Extension(
                name if version == 0 else f"{name}_v{version}",
                sources,
                namespace=DROP_IN_NAMESPACE,
                root=root,
                include_dirs=include_dirs,
                cflags=cflags,
                cuda_cflags=cuda_cflags,
                ldflags=ldflags,
                cuda="never" if with_cuda is False else "always" if with_cuda else "auto",
                python_module=bool(python_module),
                # Sources on torch's stable API alone, loaded with torch.ops: one build for every
                # torch and Python, decided where the key is computed (the warm path reads no source).
                stable_abi=False if python_module else "auto",
                cache_dir=cache_dir,
            )
            held = _declared.get(extension.qualified_name)
            if held is None and not (extension.python_module and _module_names.taken(extension.name)):
                _declared[extension.qualified_name] = extension
                return extension
            if held == extension:
                # Unless a file its loaded library was built from changed since (not a folder: its
                # identity changes with any file added to it).
                found = loaded.get(extension.qualified_name)
                if found is None or all(identity_or_none(p) == i or os.path.isdir(p) for p, i in found.inputs):
                    return extension
            version += 1


def as_torch_returns(extension: Extension, base: str, with_cuda, verbose):
    """The declared library (of the name `base` that load() was given), loaded, as torch's load()
    returns it: its module, or its path."""
    name = extension.qualified_name
    if with_cuda:
        from ..store import plan_cuda  # only where CUDA is demanded: torch's load() fails without it

        plan = plan_cuda(extension)
        if not plan.enabled:
            from .._errors import BuildError  # only for the error

            raise BuildError(f"jitops: with_cuda=True, but {name} cannot be built with CUDA here: {plan.reason}")
    with _settings.set_for_now("JITOPS_VERBOSE", "1") if verbose else contextlib.nullcontext():
        loaded = extension.load()
    if extension.cache_dir is not None:
        _link_into_build_directory(extension, extension.cache_dir, str(loaded.library))
    if not extension.python_module:
        return str(loaded.library)
    module = loaded.module
    _module_names.publish(module, base, 0 if extension.name == base else int(extension.name[len(base) + 2 :]))
    return module


def _link_into_build_directory(extension: Extension, build_directory: str, library: str) -> None:
    """<build_directory>/<name>.so, where torch's load() leaves the library, as a link to jitops' entry;
    not in a folder the key reads (get_plugin's holds its sources): that would miss every warm record."""
    folder = os.path.dirname(build_directory)
    read_by_key = {os.path.dirname(path) for path in extension.paths()} | set(extension.include_paths())
    if folder in read_by_key:
        return
    link, target = os.path.join(folder, f"{extension.name}.so"), os.path.relpath(library, folder)
    try:
        if os.readlink(link) == target:
            return
    except FileNotFoundError:
        pass
    except OSError:  # a file of torch's own build: never replaced (its next build would write through a link)
        return
    staged = f"{link}.new-{os.getpid()}-{threading.get_ident()}"
    try:
        os.symlink(target, staged)
        os.replace(staged, link)
    except OSError:  # a read-only build_directory: the library loads all the same
        with contextlib.suppress(OSError):
            os.unlink(staged)
