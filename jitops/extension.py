# SPDX-License-Identifier: MIT
"""`Extension`: the declaration of one library, jitops' own ops' and any other package's. Declaring
one imports no torch and reads no file; `.load()` builds or loads it on first use."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING

from ._layout import CUDA_SUFFIXES, INCLUDE_DIR, is_identifier
from .warm import LoadedLibrary, recall

if TYPE_CHECKING:  # for type checkers only: a warm start pays for every line this module runs
    from collections.abc import Callable, Sequence
    from typing import Any, Literal, NoReturn, TypeVar

    PathLike = str | os.PathLike[str]
    Function = TypeVar("Function", bound=Callable[..., Any])

# auto: CUDA units are built where torch has CUDA and a toolkit is found; always: the library is
# built with CUDA (include paths, libraries) even from C++ sources alone, else an error (torch's
# with_cuda=True)
CUDA_POLICIES = ("auto", "never", "always")
# <namespace>.<name>: its longest derived file name (a build's staging folder, the name and key
# and pid and a random part) must stay within the file system's 255 bytes.
MAX_QUALIFIED_NAME = 200


def check_name(name, namespace: str, caller: str) -> None:
    """ValueError, naming the argument, for a name or namespace that no file name could carry."""
    for argument, value in (("name", name), ("namespace", namespace)):
        if not is_identifier(value):
            raise ValueError(f"{caller}{argument} must be a C identifier, got {value!r}")
    if len(namespace) + 1 + len(name) > MAX_QUALIFIED_NAME:
        raise ValueError(
            f"{caller}name {name[:24]}... is {len(name)} characters long; with the namespace {namespace!r} "
            f"at most {MAX_QUALIFIED_NAME - len(namespace) - 1} fit the file names the cache derives from it"
        )


def assume_constant_result(fn: Function) -> Function:
    """torch.compiler.assume_constant_result(fn) (dynamo keeps fn's result: a graph never traces the
    loader) without importing torch._dynamo where nothing has: it sets only the marker (test_loader.py)."""
    if "torch._dynamo" in sys.modules:
        return sys.modules["torch"].compiler.assume_constant_result(fn)  # type: ignore[no-any-return]
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


# Hand-written, since creating a frozen dataclass is a large share of a warm start.
class Extension:
    """One library: its name and TORCH_LIBRARY namespace (its identity), sources and include
    directories (relative to root), flags, CUDA policy and archs, and a version (bump it where the key
    cannot see a change). python_module: also a pybind11 module named `name`. stable_abi: its sources use
    only torch's stable C++ API (torch/csrc/stable, torch/headeronly), so one build serves every torch
    from jitops' floor up and any Python (checked after the build: docs/extensions.md); "auto" (what
    jitops.load declares): where the sources include no other torch header. cache_dir: its entries'
    folder instead of the cache root. prebuilt_dir: libraries shipped with the package, tried first."""

    __slots__ = (
        "name",
        "namespace",
        "root",
        "sources",
        "include_dirs",
        "cflags",
        "cuda_cflags",
        "ldflags",
        "cuda",
        "cuda_archs",
        "version",
        "python_module",
        "stable_abi",
        "cache_dir",
        "prebuilt_dir",
        "_library",  # what load() returned, once its registrations have run (not part of its identity)
        "_registrations",  # [(torch.library function, op, args, kwargs)], run when the library loads
        "_token",  # names this object to _load (a str: what dynamo can pass as a constant)
        "__weakref__",
    )
    _IDENTITY = __slots__[:-4]
    name: str
    namespace: str
    root: str
    sources: tuple[str, ...]
    include_dirs: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    cuda: Literal["auto", "never", "always"]
    cuda_archs: str | None
    version: str
    python_module: bool
    stable_abi: bool | Literal["auto"]
    cache_dir: str | None
    prebuilt_dir: str | None
    _library: LoadedLibrary | None
    _registrations: list[tuple[str, str, Any, dict[str, Any]]]
    _token: str

    def __init__(
        self,
        name: str,
        sources: Sequence[str],
        *,
        namespace: str,
        root: PathLike,
        include_dirs: Sequence[str] = (),
        cflags: Sequence[str] = (),
        cuda_cflags: Sequence[str] = (),
        ldflags: Sequence[str] = (),
        cuda: Literal["auto", "never", "always"] = "auto",
        cuda_archs: str | None = None,
        version: str = "0",
        python_module: bool = False,
        stable_abi: bool | Literal["auto"] = False,
        cache_dir: PathLike | None = None,
        prebuilt_dir: PathLike | None = None,
    ) -> None:
        check_name(name, namespace, "Extension: ")
        if cuda not in CUDA_POLICIES:
            raise ValueError(f"Extension {name!r}: cuda must be one of {CUDA_POLICIES}, got {cuda!r}")
        for argument, value in (("root", root), ("cache_dir", cache_dir), ("prebuilt_dir", prebuilt_dir)):
            if not isinstance(value, (str, os.PathLike)) and (value is not None or argument == "root"):
                raise TypeError(f"Extension {name!r}: {argument} must be a path, got {value!r}")
        root = os.path.abspath(root)
        values: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "root": root,
            "cuda": cuda,
            "cuda_archs": cuda_archs,
            "version": str(version),
            "python_module": bool(python_module),
            "stable_abi": stable_abi,
            "cache_dir": os.path.abspath(cache_dir) if cache_dir is not None else None,
            "prebuilt_dir": os.path.join(root, prebuilt_dir) if prebuilt_dir is not None else None,
        }
        for argument, words in (
            ("sources", sources),
            ("include_dirs", include_dirs),
            ("cflags", cflags),
            ("cuda_cflags", cuda_cflags),
            ("ldflags", ldflags),
        ):
            if isinstance(words, str) or not all(isinstance(item, str) for item in words):
                raise TypeError(f"Extension {name!r}: {argument} must be a list of strings, got {words!r}")
            values[argument] = flag_words(name, argument, words) if argument in TORCH_ARGUMENTS else tuple(words)
        for directory in values["include_dirs"]:
            if "$" in directory or "\n" in directory:  # ninja reads the build file's $; a newline ends its line
                refuse(
                    f"Extension {name!r}: include_dirs (torch's extra_include_paths) entry {directory!r} holds "
                    f"{'a $' if '$' in directory else 'a newline'}, which no build file can pass on: rename that folder"
                )
        if stable_abi not in (True, False, "auto"):
            raise ValueError(f"Extension {name!r}: stable_abi must be True, False or 'auto', got {stable_abi!r}")
        if stable_abi is True and values["python_module"]:
            raise ValueError(
                f"Extension {name!r}: stable_abi=True is for a library loaded with torch.ops (TORCH_LIBRARY or "
                "STABLE_TORCH_LIBRARY), and python_module=True makes a pybind11 module, which needs one exact Python and torch"
            )
        if not values["sources"]:
            raise ValueError(f"Extension {name!r}: sources is empty")
        # Every build and warm record written into a folder the key reads would change it.
        watched = (
            [os.path.dirname(os.path.join(root, s)) for s in values["sources"]]
            + [os.path.join(root, d) for d in values["include_dirs"]]
            if cache_dir is not None
            else []
        )
        if values["cache_dir"] in {os.path.normpath(folder) for folder in watched}:
            raise ValueError(
                f"Extension {name!r}: cache_dir {values['cache_dir']} holds its sources or headers; "
                "give it a folder of its own (a subfolder will do)"
            )
        values.update(_library=None, _registrations=[], _token=f"{namespace}.{name}#{next(_numbers)}")
        for argument, value in values.items():
            object.__setattr__(self, argument, value)
        _declared[self._token] = self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Extension is frozen: cannot set {name}")

    def __repr__(self) -> str:
        return "Extension(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self._IDENTITY) + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Extension) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))

    def load(self) -> LoadedLibrary:
        """The library, built or loaded on first use (then from this process's registry): its
        TORCH_LIBRARY ops are in `.ops` (torch.ops.<namespace>), its pybind11 module in `.module`.
        Safe inside torch.compile(fullgraph=True): the compiled graph holds only the ops."""
        _load(self._token)  # under torch.compile, run eagerly while tracing (marked below); dynamo traces the read
        return self._library  # type: ignore[return-value]  # set by _load

    def register_fake(self, op: str) -> Callable[[Function], Function]:
        """A decorator: torch.library.register_fake for `<namespace>::<op>`, run when the library loads
        (which defines the op's schema): the op then works under torch.compile and passes opcheck."""
        return self._register("register_fake", op, None)  # type: ignore[no-any-return]

    def register_autograd(
        self, op: str, backward: Callable[..., Any], *, setup_context: Callable[..., Any] | None = None
    ) -> None:
        """torch.library.register_autograd for `<namespace>::<op>`, run when the library loads."""
        self._register("register_autograd", op, backward, setup_context=setup_context)

    def _register(self, kind: str, op: str, function: Callable[..., Any] | None, **kwargs: Any) -> Any:
        if function is None:  # as a decorator
            return lambda function: self._register(kind, op, function, **kwargs) or function
        if not is_identifier(op):
            raise ValueError(f"Extension {self.name!r}: {kind}'s op must be the op's name in {self.namespace}, got {op!r}")
        with _registering:
            self._registrations.append((kind, op, function, kwargs))
            if self._library is not None:  # already loaded: now
                _run_registrations(self, [self._registrations[-1]], self._library.library)
        return function

    @property
    def qualified_name(self) -> str:
        """<namespace>.<name>: its identity in the cache, warm records, locks and the registry."""
        return f"{self.namespace}.{self.name}"

    @property
    def library_name(self) -> str:
        """The library's file name, without .so (a Python module's is its name: Python imports it by that)."""
        return self.name if self.python_module else f"{self.namespace}_{self.name}"

    def paths(self, cuda: bool = True) -> list[str]:
        """The absolute paths of its sources (the CUDA ones only with cuda=True)."""
        return [os.path.join(self.root, s) for s in self.sources if cuda or not s.endswith(CUDA_SUFFIXES)]

    def has_cuda_sources(self) -> bool:
        return any(s.endswith(CUDA_SUFFIXES) for s in self.sources)

    def include_paths(self) -> list[str]:
        """Its include directories, absolute, then jitops' own (<jitops/library.h>)."""
        return [os.path.join(self.root, d) for d in self.include_dirs] + [INCLUDE_DIR]


# Flags: the names torch's load() gives them.
TORCH_ARGUMENTS = {"cflags": "extra_cflags", "cuda_cflags": "extra_cuda_cflags", "ldflags": "extra_ldflags"}
SHELL_CODE = (";", "|", "&", "`", "$", "\n")  # control operators, substitutions, a second command
SPLIT_AT = frozenset(" \t\r\n'\"\\")  # what shlex splits at or unquotes: a flag with none is one word


def flag_words(name: str, argument: str, flags) -> tuple[str, ...]:
    """Each flag split into words as a shell would (users write '-O3 -fopenmp'), each word passed to the
    compiler as one argument, never to a shell; a flag holding shell code is refused, naming it."""
    words: list[str] = []
    for flag in flags:
        held = [code for code in SHELL_CODE if code in flag]
        why = f"holds {held[0]!r}, which a shell would run or substitute" if held else ""
        try:
            words += [flag] if flag and SPLIT_AT.isdisjoint(flag) else _shell_words(flag)
        except ValueError as err:  # an unbalanced quote
            why = why or f"cannot be split into words as a shell would ({err})"
        if why:
            refuse(
                f"Extension {name!r}: {argument} (torch's {TORCH_ARGUMENTS[argument]}) entry {flag!r} {why}; "
                "flags are passed to the compiler as words, never to a shell: remove it"
            )
    return tuple(words)


def _shell_words(flag: str) -> list[str]:
    import shlex  # only for a flag with a space, quote or backslash: its import was on every warm start

    return shlex.split(flag)


def refuse(message: str) -> NoReturn:
    from ._errors import FlagRefused  # only on a refusal: a warm start imports no _errors

    raise FlagRefused(message)


_registering = threading.Lock()
_numbers = itertools.count()
# Every Extension by its token, for _load: dynamo passes only constants (such as a str) to a
# function it runs eagerly, and some torch versions do not take an Extension for one.
_declared: weakref.WeakValueDictionary[str, Extension] = weakref.WeakValueDictionary()


@assume_constant_result
def _load(token: str) -> bool:
    """Load the library of the Extension named by token and run its registrations, once per object; the
    result is kept on the object, so that dynamo, which runs this eagerly, keeps only a constant."""
    extension = _declared[token]
    if extension._library is None:
        found = recall(extension)  # a warm start goes no further
        if found is None:
            from ._errors import BuildError  # only on a miss, as the line below
            from ._resolution import resolve  # only on a miss: the rest of the loader costs a warm start's budget

            try:
                found = resolve(extension)
            except BuildError as err:  # its message says what failed and where; the loader's frames would bury it
                raise err.with_traceback(None) from None
            assert found is not None  # resolve answers None only where asked for a cached library
        with _registering:
            if extension._library is None:
                _run_registrations(extension, extension._registrations, found.library)
                object.__setattr__(extension, "_library", found)
    return True


def _run_registrations(extension: Extension, registrations: list[tuple[str, str, Any, dict[str, Any]]], library) -> None:
    import torch  # loaded by the library's load already

    for kind, op, function, kwargs in registrations:
        # torch would take a registration for an op that does not exist, and fail only at its
        # first call, through its own frames: an op name's typo or a C++ block in another
        # namespace is named here, when the library loads.
        if not hasattr(getattr(torch.ops, extension.namespace), op):
            raise ValueError(_unknown_op(extension, kind, op, library)).with_traceback(None) from None
        getattr(torch.library, kind)(f"{extension.namespace}::{op}", function, **kwargs)


def _unknown_op(extension: Extension, kind: str, op: str, library) -> str:
    from . import _torch_private  # only for an op that is not there: a warm start never asks
    from .warm import _namespaces  # the same

    namespace = extension.namespace
    said = f"Extension {extension.name!r}: {kind}({op!r}): its library defines no op {op!r} in the namespace {namespace!r}"
    ops = _torch_private.ops_in(namespace)
    if ops:
        return f"{said}; the namespace has: {', '.join(ops)}. Is {op!r} a typo?"
    elsewhere = [name for name in _namespaces.registered_in(library) if name != namespace]
    if elsewhere:
        return (
            f"{said}: its C++ registers ops in {', '.join(map(repr, elsewhere))} instead. Declare the Extension "
            f"with namespace={elsewhere[0]!r}, or write JITOPS_LIBRARY(m) (<jitops/library.h>), which takes "
            "the Extension's namespace"
        )
    return f"{said}, nor in any other: does its C++ have a TORCH_LIBRARY or JITOPS_LIBRARY block defining it?"
