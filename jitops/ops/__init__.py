# SPDX-License-Identifier: MIT
"""One module per op: its public function, checks, fake kernel, autograd and pure-torch *_ref.

An op module's `_register()` runs once, right after its extension is loaded, because
torch.library can only attach a fake kernel or autograd formula to an op whose schema exists, and
the schema comes from the extension (bindings/<op>.cpp).
"""

from __future__ import annotations

import importlib
import threading

import torch

from .._build import load_op

_ready: set[str] = set()
_register_lock = threading.Lock()

# The Python-side registrations of every op go through this one handle (kept for the process's
# life: a Library's registrations go away with it).
_library = torch.library.Library("jitops", "FRAGMENT")


def register_fake(op: str, fake_kernel) -> None:
    """The op's fake kernel, registered as its Meta kernel, which FakeTensor (torch.compile,
    opcheck) runs for an op without a register_fake entry. Same tracing behaviour, but without
    torch.library.register_fake's caller inspection (inspect.getmodule scans sys.modules: about a
    millisecond per kernel, more than a warm load's whole budget)."""
    _library.impl(op, fake_kernel, "Meta")


def require(op: str) -> bool:
    """Load op's extension and its Python-side registrations, once per process."""
    if op not in _ready:
        load_op(op)
        # load_all() calls this from several threads; torch.library refuses a second registration.
        with _register_lock:
            if op not in _ready:
                importlib.import_module(f"{__name__}.{op}")._register()
                _ready.add(op)
    return True


# dynamo must run require() eagerly while tracing and treat its result as a constant, so that
# torch.compile(fullgraph=True) traces a first call of an op without tracing the loader's I/O.
# torch.compiler.assume_constant_result(require) does exactly that by setting this marker, but it
# imports torch._dynamo (about a second) on `import jitops.ops`, which would dwarf a warm load.
# tests/test_loader.py::test_first_call_inside_torch_compile checks that dynamo still honours it.
require._dynamo_marked_constant = True


def check_backend(op: str, *tensors: torch.Tensor) -> None:
    """A CUDA tensor reaching a CPU-only build gets the reason, not a dispatcher error."""
    loaded = load_op(op)
    if not loaded.with_cuda and any(t.is_cuda for t in tensors):
        raise RuntimeError(
            f"jitops.{op} was built without CUDA kernels ({loaded.cuda_reason or 'built for CPU only'}), "
            "so it cannot take CUDA tensors; fix that and the next call builds a CUDA-enabled entry in a new process"
        )


def check_tensor_args(op: str, **args: object) -> None:
    """A non-tensor argument gets a TypeError naming it, before anything is built or dispatched."""
    for name, value in args.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{op}(): {name} must be a Tensor, got {type(value).__name__}")
