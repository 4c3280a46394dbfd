# SPDX-License-Identifier: MIT
import os
import sys
import tempfile

import pytest
import torch

# Tests build into a cache of their own, unless one is named (e.g. to reuse builds between runs).
# Set here, in the process that starts pytest-xdist's workers, so that all of them share it: each op
# is built once per run (the loader's lock makes a second worker wait for the first's build).
# torch.compile's cache too: its default, in /tmp, outlives the run and would make a second run on
# a machine faster than the first (a fresh machine is the one that counts).
_OWN_CACHES = []
for _variable, _prefix in [("JITOPS_CACHE_DIR", "jitops-test-cache-"), ("TORCHINDUCTOR_CACHE_DIR", "jitops-test-inductor-")]:
    if _variable not in os.environ:
        os.environ[_variable] = tempfile.mkdtemp(prefix=_prefix)
        _OWN_CACHES.append(os.environ[_variable])


# Precompiled headers off, unless a test turns them on: every test's cache would otherwise start a
# background process that compiles torch/extension.h (minutes of a 2-core machine) for a later build.
os.environ.setdefault("JITOPS_PCH", "0")


def pytest_configure(config):
    # The tiers (CONTRIBUTING): `make test` runs what is not slow, `make test-slow` the rest; CI both.
    config.addinivalue_line("markers", "slow: sweeps of processes, venvs, wheels and servers (make test-slow)")


def pytest_terminal_summary(terminalreporter):
    """The skipped tests, counted by reason (a CPU machine skips hundreds of CUDA cases: one line
    says so, where -rs would list each test's location)."""
    from collections import Counter

    skipped = terminalreporter.stats.get("skipped", [])
    reasons = Counter(
        report.longrepr[2].removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for report in skipped
    )
    if reasons:
        terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason")
        for reason, count in reasons.most_common():
            terminalreporter.write_line(f"{count:6d}  {reason}")


def pytest_unconfigure(config):
    """The run's own caches go with it (workers inherit the variables, so only their creator removes them)."""
    import shutil

    for cache in _OWN_CACHES:
        shutil.rmtree(cache, ignore_errors=True)


HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
CPU_DTYPES = [torch.float32, torch.float64]
CUDA_DTYPES = CPU_DTYPES + [torch.float16, torch.bfloat16]
# (device, dtype) pairs every op supports, each marked so a CUDA case shows as skipped, not absent.
DEVICE_DTYPES = [pytest.param("cpu", d, id=f"cpu-{str(d)[6:]}") for d in CPU_DTYPES] + [
    pytest.param("cuda", d, id=f"cuda-{str(d)[6:]}", marks=needs_cuda) for d in CUDA_DTYPES
]

# Tolerances for comparing an op computed in `dtype` against its *_ref computed in float64 on the
# same (exactly representable) inputs: a few units in the last place of the dtype, plus room for
# float32 accumulation over a few hundred terms.
TOLERANCES = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float16: dict(rtol=4e-3, atol=4e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
}


def assert_close_to_float64(actual, expected_float64, dtype):
    """actual (computed in dtype) against the same computation done in float64."""
    torch.testing.assert_close(actual, expected_float64.to(actual.dtype), **TOLERANCES[dtype])


def float64_leaves(*tensors):
    """float64 copies of tensors, as autograd leaves that require grad."""
    return [t.detach().double().requires_grad_() for t in tensors]


@pytest.fixture
def python_without_ninja(tmp_path) -> tuple[str, dict]:
    """(interpreter, environment) of this Python where jitops finds no ninja but PATH's: a venv of
    links to this one's (so no ninja beside the interpreter), and a ninja package naming no binary
    shadowing the real one. Give it a PATH without ninja."""
    from pathlib import Path

    shadow = tmp_path / "shadow"
    (shadow / "ninja").mkdir(parents=True)
    (shadow / "ninja" / "__init__.py").write_text("")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    real = Path(sys.prefix)
    if sys.prefix == sys.base_prefix:  # no venv: this interpreter, where no ninja sits beside it
        if os.access(Path(sys.executable).parent / "ninja", os.X_OK):
            pytest.skip(f"a ninja sits beside {sys.executable}")
        return sys.executable, env
    venv = tmp_path / "venv-without-ninja"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((real / "pyvenv.cfg").read_text())
    for folder in ("lib", "lib64"):
        if (real / folder).exists():
            (venv / folder).symlink_to(real / folder)
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    return str(venv / "bin" / "python"), env
