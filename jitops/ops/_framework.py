# SPDX-License-Identifier: MIT
"""What every op module shares (private: a package's own ops use Extension.register_fake and
register_autograd): the ops' Extension, load_all, and a cheaper road through autograd per call.

An op module's `_register()` runs once, right after its library is loaded, because torch.library
can only attach a fake kernel or autograd formula to an op whose schema exists, and the schema
comes from the library (bindings/<op>.cpp).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Callable, Sequence
from functools import partial

import torch

from .. import _torch_private
from .._layout import OPS_NAMESPACE, PACKAGE_DIR, VERSION
from ..extension import Extension, assume_constant_result
from ..warm import recall

NAMESPACE = OPS_NAMESPACE  # the TORCH_LIBRARY namespace of every op here
# -O3: torch's build file adds no optimisation flag. -fno-trapping-math (clang's default) lets GCC
# vectorize branch-free selects such as kernels/fast_math.h's clamps; no kernel relies on
# floating-point exceptions.
CFLAGS = ("-O3", "-fno-trapping-math")
CUDA_CFLAGS = ("-O3",)
PREBUILT_DIR = os.path.join(PACKAGE_DIR, "prebuilt")  # filled by an ahead-of-time wheel (setup.py)


def _find_source_root() -> str:
    """The ops' kernels/ and bindings/: inside the installed package, or beside it in a checkout,
    or beside the folder a linked package leads to (realpath is slow: only then)."""

    def found_in(package_dir: str) -> str | None:
        for candidate in (package_dir, os.path.dirname(package_dir)):
            if os.path.isdir(os.path.join(candidate, "kernels")) and os.path.isdir(os.path.join(candidate, "bindings")):
                return candidate
        return None

    root = found_in(PACKAGE_DIR) or found_in(os.path.realpath(PACKAGE_DIR))
    if root is None:
        raise ImportError(f"jitops: no kernels/ and bindings/ sources found in or beside {PACKAGE_DIR}")
    return root


SOURCE_ROOT = _find_source_root()


def op_extension(name: str, *sources: str, stable_abi: bool = True) -> Extension:
    """The Extension of one of jitops' own ops: its sources (relative to the source root holding
    kernels/ and bindings/) with the flags and version every op here shares. Each op's bindings use
    torch's stable API alone (bindings/stable.h): one build serves every supported torch and Python."""
    return Extension(
        name,
        sources,
        namespace=NAMESPACE,
        root=SOURCE_ROOT,
        cflags=CFLAGS,
        cuda_cflags=CUDA_CFLAGS,
        version=VERSION,
        prebuilt_dir=PREBUILT_DIR,
        stable_abi=stable_abi,
    )


def available_ops() -> list[str]:
    """The ops this installation ships: one module in jitops/ops/ each."""
    return sorted(m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)]) if not m.name.startswith("_"))


def extension(op: str) -> Extension:
    """The Extension an op module declares (its schema and kernels)."""
    return importlib.import_module(f"{__package__}.{op}").EXTENSION


def op_libraries(op: str) -> list[Extension]:
    """Every library an op loads, in loading order: its EXTENSION, then the ones its module lists in
    PARTS (upfirdn2d's C++ autograd formula, which uses torch's C++ API: built for each torch)."""
    module = importlib.import_module(f"{__package__}.{op}")
    return [module.EXTENSION, *getattr(module, "PARTS", ())]


def chosen(ops: Sequence[str] | None, extensions: Sequence[Extension] | None) -> tuple[list[str], list[Extension]]:
    """What load_all(ops, extensions) loads: jitops' op names (all of them where neither is given;
    unknown names are an error) and the extensions."""
    if extensions is not None and not all(isinstance(e, Extension) for e in extensions):
        raise TypeError(f"extensions must be a list of jitops.Extension, got {extensions!r}")
    names: list[str] = []
    if ops is not None or extensions is None:
        available = available_ops()  # lists a folder: once
        names = available if ops is None else list(ops)
        unknown = sorted(set(names) - set(available))
        if unknown:
            raise ValueError(f"ops: unknown op(s) {unknown}; available: {available}")
    return names, list(extensions or [])


def load_all(
    ops: Sequence[str] | None = None, extensions: Sequence[Extension] | None = None, *, max_workers: int | None = None
) -> None:
    """jitops.load_all: build or load jitops' ops (all, or those named) and any package's
    `extensions` now, in parallel: e.g. in a Docker build step. With only extensions given, none of
    jitops' ops. (Many nodes: jitops.distributed.load_all, the same arguments, builds each once
    for all of them.)"""
    names, declared = chosen(ops, extensions)
    # Cached ones load here one after another (a dlopen holds the GIL); the rest build in threads.
    jobs: list[tuple[str, Extension, Callable[[], object]]] = [(name, extension(name), partial(require, name)) for name in names]
    # An op's other libraries build in threads of their own too (require loads them in order).
    jobs += [(part.qualified_name, part, part.load) for name in names for part in op_libraries(name)[1:]]
    jobs += [(e.qualified_name, e, e.load) for e in declared]
    to_build: list[tuple[str, Callable[[], object]]] = []
    seen: dict[str, object] = {}  # each file's identity, read once for all the warm records
    for name, declaration, finish in jobs:
        if recall(declaration, seen=seen) is None:  # not a warm start: the long way
            from .._resolution import resolve  # only on a miss, as in require

            if resolve(declaration, cached_only=True) is None:
                to_build.append((name, finish))
                continue
        finish()  # the Python-side registrations
    if not to_build:  # all warm: no thread pool
        return
    from .._errors import in_threads  # only a load_all that builds uses threads (a warm start imports no _errors)

    raised = in_threads(dict(to_build), max_workers)
    failures = {name: err for name, err in raised.items() if err is not None}
    if failures:
        details = "\n".join(f"  {name}: {err}" for name, err in failures.items())
        raise RuntimeError(f"jitops.load_all: {len(failures)} of {len(jobs)} failed:\n{details}")


_ready: set[str] = set()
_register_lock = threading.Lock()

# The Python-side registrations of every op go through this one handle (kept for the process's
# life: a Library's registrations go away with it).
_library = torch.library.Library(NAMESPACE, "FRAGMENT")


def register_fake(op: str, fake_kernel) -> None:
    """The op's fake kernel, registered as its Meta kernel, which FakeTensor (torch.compile,
    opcheck) runs for an op without a register_fake entry: the same tracing, without
    torch.library.register_fake's caller inspection (a scan of sys.modules per kernel)."""
    _library.impl(op, fake_kernel, "Meta")


_without_cuda: dict[str, str] = {}  # op -> why its library has no CUDA kernels


def require(op: str) -> bool:
    """Load op's library and its Python-side registrations, once per process."""
    if op not in _ready:
        loaded = [library.load() for library in op_libraries(op)][0]  # the parts: for their registrations
        if not loaded.with_cuda:
            _without_cuda[op] = loaded.cuda_reason or "built for CPU only"
        # load_all() calls this from several threads; torch.library refuses a second registration.
        with _register_lock:
            if op not in _ready:
                importlib.import_module(f"{__package__}.{op}")._register()
                _ready.add(op)
    return True


assume_constant_result(require)  # torch.compile traces a first call without the loader (extension.py)


# A small op's call must cost about what an eager torch op costs (tiny tensors are never slower
# through jitops). An Autograd kernel written in Python runs on every dispatcher call of the
# op, gradient or not, and costs several times a small op's own time (BENCHMARKS.md, loader: per
# call). So eager calls take the cheapest correct road (call_op): below the autograd layer when
# nothing needs a gradient (what that kernel itself would do), else the op's autograd.Function
# directly. torch.compile and direct
# torch.ops.jitops calls go through the Autograd kernel, which does the same. (The guard is the one
# torch.library's own autograd kernels use.)
_below_autograd, _after_autograd_keyset, _any_requires_grad = _torch_private.autograd_internals()


def register_autograd(op: str, backward, setup_context=None) -> OpAutograd:
    """jitops::op's autograd formula: backward (and setup_context, called as
    setup_context(ctx, inputs, output)), registered as the op's Autograd kernel; returns the
    OpAutograd that kernel uses, for call_op.

    What torch.library.register_autograd does for an op defined in C++, minus its per-op
    dataclass, whose creation would take a large share of a warm start."""
    autograd = OpAutograd(op, backward, setup_context)
    _library.impl(op, autograd.kernel, "Autograd", with_keyset=True)
    return autograd


class OpAutograd:
    """One op's autograd formula: its Autograd kernel, and the autograd.Function that applies it.

    The Function is made on first use: creating it and resolving the op's overload would cost
    every warm start, for ops that may never see a gradient. It is written in the classic style
    (forward takes ctx and calls setup_context itself): a Function that defines setup_context
    binds its arguments with inspect.signature on every call, which doubled a small op's cost."""

    def __init__(self, op: str, backward, setup_context=None):
        self.op = op
        self.backward = backward
        self.setup_context = setup_context
        self._function: type[torch.autograd.Function] | None = None

    def function(self) -> type[torch.autograd.Function]:
        if self._function is None:  # two threads may both make one here: either serves
            self._function = self._make_function()
        return self._function

    def _make_function(self) -> type[torch.autograd.Function]:
        overload = getattr(torch.ops.jitops, self.op).default
        setup_context = self.setup_context

        class OpFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *args):
                with _below_autograd():
                    output = overload(*args)
                if setup_context is not None:
                    setup_context(ctx, args, output)
                return output

        OpFunction.backward = staticmethod(self.backward)  # type: ignore[method-assign]  # the op's formula
        OpFunction.overload = overload  # type: ignore[attr-defined]  # what the op runs, for its readers
        OpFunction.__name__ = OpFunction.__qualname__ = f"{self.op}_autograd"
        return OpFunction

    def kernel(self, keyset, *args):
        """The op's Autograd kernel: the Function where a gradient is needed, else the op below."""
        function = self.function()
        if _needs_grad(args):
            return function.apply(*args)
        with _below_autograd():
            return function.overload.redispatch(keyset & _after_autograd_keyset, *args)  # type: ignore[attr-defined]


def call_op(op, autograd: OpAutograd | None, *args):
    """op(*args) in eager mode without the dispatcher's round trip through the Python Autograd
    kernel (see above). autograd: what register_autograd returned for op (None only before require(op))."""
    if _is_compiling():
        return op(*args)
    if _grad_enabled() and _any_requires_grad(*args):  # _needs_grad(args), without its call
        assert autograd is not None, "require(op) registers its autograd before a call"
        return autograd.function().apply(*args)
    with _below_autograd():
        return op._op(*args)  # the overload's C++ callable, without OpOverload.__call__'s frame


# Module-level names for what call_op runs on every call: each saves an attribute lookup or a
# Python frame, a tenth of a microsecond apiece on a call that costs a few.
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def _needs_grad(args: tuple) -> bool:
    """Whether a call with these arguments records a graph: grad mode on and a tensor requiring grad."""
    return _grad_enabled() and _any_requires_grad(*args)


def check_backend(op: str, *tensors: torch.Tensor | None) -> None:
    """A CUDA tensor reaching a CPU-only build gets the reason, not a dispatcher error. (After
    require(op): a dict lookup per call where the build has CUDA kernels.) None stands for an
    optional tensor left out. (A loop, not any() over a generator: a third of the time, on every
    call of a CPU-only build.)"""
    if op in _without_cuda:
        for t in tensors:
            if t is not None and t.is_cuda:
                raise RuntimeError(
                    f"jitops.{op} was built without CUDA kernels ({_without_cuda[op]}), so it cannot take "
                    "CUDA tensors; fix that and the next call builds a CUDA-enabled entry in a new process"
                )


def check_tensor_args(op: str, **args: object) -> None:
    """A non-tensor argument gets a TypeError naming it, before anything is built or dispatched."""
    for name, value in args.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{op}(): {name} must be a Tensor, got {type(value).__name__}")
