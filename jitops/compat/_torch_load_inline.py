# SPDX-License-Identifier: MIT
"""jitops.load_inline: torch.utils.cpp_extension's load_inline(), same parameters, same result (a
module of its own: a warm jitops.load does not import it)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload

from .._layout import DROP_IN_NAMESPACE
from ..extension import check_name
from ._torch_load import Flags, as_torch_returns, declare, entries_dir, jitops_errors, refuse_unsupported

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._torch_load import Options

    class InlineOptions(Options, total=False):
        cuda_sources: str | Sequence[str] | None
        sycl_sources: str | Sequence[str] | None
        functions: str | Sequence[str] | dict[str, str] | None
        with_pytorch_error_handling: bool
        use_pch: bool
        no_implicit_headers: bool
        gil_not_used: bool


# As load()'s overloads: the options as keywords, is_python_module picking the result's type.
@overload
def load_inline(
    name: str, cpp_sources: str | Sequence[str], *, is_python_module: Literal[True] = True, **options: Unpack[InlineOptions]
) -> ModuleType: ...
@overload
def load_inline(
    name: str, cpp_sources: str | Sequence[str], *, is_python_module: Literal[False], **options: Unpack[InlineOptions]
) -> str: ...
@overload
def load_inline(
    name: str, cpp_sources: str | Sequence[str], *positional: Any, is_python_module: bool = True, **options: Unpack[InlineOptions]
) -> ModuleType | str: ...
def load_inline(  # type: ignore[misc]  # options given by position bind to the parameters below
    name: str,
    cpp_sources: str | Sequence[str],
    cuda_sources: str | Sequence[str] | None = None,
    sycl_sources: str | Sequence[str] | None = None,
    functions: str | Sequence[str] | dict[str, str] | None = None,
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
    with_pytorch_error_handling: bool = True,
    keep_intermediates: bool = True,
    use_pch: bool = False,
    no_implicit_headers: bool = False,
    gil_not_used: bool = False,
) -> ModuleType | str:
    """torch.utils.cpp_extension.load_inline, through jitops: the sources are written as torch writes
    them (main.cpp with a pybind11 block for `functions`, cuda.cu) into a folder named after their
    content, then built as load() builds files. use_pch is accepted: JITOPS_PCH decides."""
    refuse_unsupported(sycl_sources=sycl_sources, extra_sycl_cflags=extra_sycl_cflags, with_sycl=with_sycl)
    check_name(name, DROP_IN_NAMESPACE, "load_inline: ")  # it names a folder before the Extension checks it
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cuda = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
    if not no_implicit_headers:
        cpp.insert(0, "#include <torch/extension.h>")
        if cuda:
            cuda.insert(0, "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>")
    if functions is not None:
        cpp.append(_pybind_block(functions, with_pytorch_error_handling, gil_not_used))
    files = {"main.cpp": "\n".join(cpp)} | ({"cuda.cu": "\n".join(cuda)} if cuda else {})
    cache_dir = entries_dir(build_directory)
    from ..store import inline_sources  # its folder is checked at every call; the store's door only then

    root = inline_sources(name, files, cache_dir)
    extension = declare(
        name,
        root,
        sorted(files),
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        with_cuda if cuda or with_cuda else False,  # with_cuda=True: C++ sources built with CUDA, as in torch
        is_python_module,
        cache_dir,
    )
    try:
        return as_torch_returns(extension, name, with_cuda, verbose)
    except jitops_errors() as err:  # its message says what failed; the loader's frames would bury it
        raise err.with_traceback(None) from err.__cause__


def _pybind_block(functions, with_pytorch_error_handling: bool, gil_not_used: bool = False) -> str:
    """The PYBIND11_MODULE block torch's load_inline writes for `functions` (a name, a list, or a dict
    of name -> docstring); gil_not_used (torch 2.15): the module runs without the GIL."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, list):
        functions = {function: function for function in functions}  # each one's docstring its name
    elif not isinstance(functions, dict):  # torch refuses a tuple too
        raise ValueError(f"load_inline: functions must be a name, a list of names or a dict, got {type(functions).__name__}")
    if not all(isinstance(function, str) for function in functions):
        raise ValueError(f"load_inline: functions must name C++ functions, got {list(functions)!r}")
    docs = functions
    lines = []
    for function, doc in docs.items():
        bound = f"torch::wrap_pybind_function({function})" if with_pytorch_error_handling else function
        lines.append(f'm.def("{function}", {bound}, "{doc}");')
    gil = ", pybind11::mod_gil_not_used()" if gil_not_used else ""
    return f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m{gil}) {{\n" + "\n".join(lines) + "\n}"
