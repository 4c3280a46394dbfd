# Set-up and checks. `make demo` and `make test` work on a fresh machine: they create .venv with
# a CPU build of torch (override TORCH=... for another) and install jitops into it, editable.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
TORCH ?= torch==2.13.0
CUDA_VENV ?= .venv-cuda
# ninja comes from pip (a jitops dependency) and must be on PATH for torch's load().
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: demo test test-slow test-fast test-cuda-torch test-torch-matrix lint format three-ways cuda-build gpu

# numpy too: torch warns on import (every example's first screen) when it is missing.
$(PYTHON):
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q $(TORCH) numpy
	$(PYTHON) -m pip install -q -e '.[test]'

# The main job: build the ops and run them on example data.
demo: $(PYTHON)
	cd examples && $(abspath $(PYTHON)) add2.py && $(abspath $(PYTHON)) trilinear.py && $(abspath $(PYTHON)) lltm.py \
		&& $(abspath $(PYTHON)) stylegan_block.py

# The test tiers (CONTRIBUTING): `test` is README's and every commit's (what is not marked slow),
# `test-slow` the sweeps of processes, venvs, wheels and servers; CI runs both. pytest's exit code 5
# (no tests collected) is a failure here, not a pass. The tests run in TEST_WORKERS processes
# (pytest-xdist; most of a test's time is its own processes and compiles, on one core each),
# sharing one cache. TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist worksteal
PYTEST = $(PYTHON) -m pytest -q $(XDIST) --durations=3
define run_pytest
	$(PYTEST) $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc
endef
test: $(PYTHON) redis-server
	$(call run_pytest,-m "not slow" tests)

test-slow: $(PYTHON) redis-server
	$(call run_pytest,-m slow tests)

# The remote cache's tests start a real redis-server (Debian's package): installed here where apt
# can (as root, or with sudo); elsewhere those tests skip with the reason, except under CI=true.
.PHONY: redis-server
redis-server:
	@command -v redis-server >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n); \
		$$SUDO apt-get install -y -q redis-server >/dev/null 2>&1 \
		|| { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q redis-server >/dev/null 2>&1; } \
		|| echo "note: redis-server could not be installed: the remote cache's tests will skip"; }

# The quickest tier, for the edit-run loop (about 90 s on a 2-core VM, most of it building the five
# ops): `test` without the reliability, untrusted-disk, AOT-wheel, CLI, torch-load and remote-cache
# suites (each builds extensions or starts servers of its own), opcheck, the kill tests and the edit
# loop's precompiled-header and edited-while-building tests. Every tier ends with its skipped tests
# counted by reason (tests/conftest.py).
FAST_DESELECT := not opcheck and not killed and not precompiled_header and not edited_while
test-fast: TEST_WORKERS = 3  # its tests wait on their processes more than they compute: 3 fit 2 cores
test-fast: $(PYTHON)
	$(call run_pytest,-p no:cacheprovider tests --ignore=tests/test_reliability.py --ignore=tests/test_prebuilt.py \
		--ignore=tests/test_cache_cli.py --ignore=tests/test_untrusted_disk.py --ignore=tests/test_torch_load.py \
		--ignore=tests/test_remote.py --ignore=tests/test_remote_faults.py -m "not slow" -k "$(FAST_DESELECT)")

# ruff (Python) and clang-format (C++/CUDA), configured in pyproject.toml and .clang-format: `lint`
# checks (CI runs it before the tests), `format` rewrites; mypy holds the loader and the CLI to their
# annotations (the records' TypedDicts among them; its settings in pyproject.toml). Pinned, so that a new release cannot fail CI on
# code that did not change.
LINTERS := ruff==0.17.6 clang-format==23.1.5 mypy==2.4.1
CPP_FILES = $(shell git ls-files '*.cpp' '*.cu' '*.h' '*.cuh')
lint: $(PYTHON)
	$(PYTHON) -m pip install -q $(LINTERS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run --Werror $(CPP_FILES)
	$(VENV)/bin/mypy jitops cache_tools

format: $(PYTHON)
	$(PYTHON) -m pip install -q $(LINTERS)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CPP_FILES)

# examples/build_three_ways/: add2 built by jitops, setuptools and CMake; identical results.
# (cmake comes from pip, with the test extras.)
three-ways: $(PYTHON)
	$(PYTHON) examples/build_three_ways/build_three_ways.py

# Compile every op's CUDA kernels through the real loader (CI has nvcc but no GPU): a CUDA
# build of torch (about 5 GB; the newest pip takes here, 2.14.1 on the CI machine) in its own venv,
# TORCH_CUDA_ARCH_LIST=9.0, nothing run on a GPU. numpy too, as in .venv.
$(CUDA_VENV)/bin/python:
	python3 -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install -q --no-cache-dir torch numpy
	$(CUDA_VENV)/bin/python -m pip install -q -e '.[test]'

# `make test` again under that torch, on the CPU: a second supported torch in CI (its CUDA cases skip).
test-cuda-torch: PYTHON = $(CUDA_VENV)/bin/python
test-cuda-torch: $(CUDA_VENV)/bin/python redis-server
	PATH=$(abspath $(CUDA_VENV))/bin:$$PATH; $(call run_pytest,-m "not slow" tests)

# The quick tier under each other supported torch (README: 2.11 to 2.15; 2.13 is .venv's, 2.14.1
# .venv-cuda's): CUDA builds from PyPI (about 3 GB each), run on the CPU, each in a venv of its own
# that goes once its tests ran (7 GB of disk at most). PIP_CONSTRAINT=/dev/null: this machine's pip
# caps torch at 2.14.1 by a constraint file, which would refuse 2.15 (and downgrade it on the
# editable install).
TORCH_MATRIX ?= 2.11.0 2.12.1 2.15.0
.PHONY: test-torch-matrix
test-torch-matrix: $(addprefix test-torch-,$(TORCH_MATRIX))
test-torch-%: redis-server
	rm -rf .venv-torch-$*
	python3 -m venv .venv-torch-$*
	PIP_CONSTRAINT=/dev/null .venv-torch-$*/bin/python -m pip install -q --no-cache-dir torch==$* numpy
	PIP_CONSTRAINT=/dev/null .venv-torch-$*/bin/python -m pip install -q -e '.[test]'
	.venv-torch-$*/bin/python -c "import torch; assert torch.__version__.startswith('$*'), torch.__version__"
	PATH=$(abspath .venv-torch-$*)/bin:$$PATH .venv-torch-$*/bin/python -m pytest -q $(XDIST) --durations=3 -m "not slow" tests; \
		rc=$$?; if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; rc=1; fi; \
		if [ $$rc -eq 0 ] && [ -d $(CROSS) ]; then $(call cross_torch_check,.venv-torch-$*/bin/python) || rc=1; fi; \
		rm -rf .venv-torch-$*; exit $$rc

# One build for every torch (.ci/cross_torch.py): jitops' ops, built once under .venv's torch (CPU
# libraries, with tests/downstream_pkg's stable op in a py3-none wheel) and once under the CUDA
# venv's (CUDA kernels for 9.0), each pushed to a remote folder; every other torch loads them with
# 0 compiles (but upfirdn2d's autograd unit) and the same bits, runs the ops' quick tests and the
# wheel with no compiler, and reads the remote as a pod with an empty cache would.
CROSS := .cross-torch
.PHONY: cross-torch
cross-torch: $(PYTHON) $(CUDA_VENV)/bin/python
	rm -rf $(CROSS) && $(PYTHON) .ci/cross_torch.py build $(CROSS)/cpu
	PATH=$(abspath $(CUDA_VENV))/bin:$$PATH TORCH_CUDA_ARCH_LIST=9.0 $(CUDA_VENV)/bin/python .ci/cross_torch.py build $(CROSS)/cuda
	PATH=$(abspath $(CUDA_VENV))/bin:$$PATH $(CUDA_VENV)/bin/python .ci/cross_torch.py check $(CROSS)/cpu
# Under another torch's python ($(1)): the CPU libraries, then (same CUDA major) the CUDA ones.
cross_torch_check = PATH=$(abspath $(dir $(1))):$$PATH $(1) .ci/cross_torch.py check $(CROSS)/cpu \
	&& PATH=$(abspath $(dir $(1))):$$PATH TORCH_CUDA_ARCH_LIST=9.0 $(1) .ci/cross_torch.py check $(CROSS)/cuda

# Then the edit loop's nvcc test (a CUDA flag change recompiles the .cu units alone), which skips
# under `make test`'s CPU torch.
cuda-build: $(CUDA_VENV)/bin/python
	PATH=$(abspath $(CUDA_VENV))/bin:$$PATH TORCH_CUDA_ARCH_LIST=9.0 $(CUDA_VENV)/bin/python .ci/cuda_build_check.py
	PATH=$(abspath $(CUDA_VENV))/bin:$$PATH JITOPS_TEST_NVCC=1 $(CUDA_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_edit_loop.py \
		-k cuda_flag_change; rc=$$?; if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc

# On a lent GPU machine whose python3 already has torch: `make gpu OUT=dir` installs jitops and runs
# both halves below, logging to $(OUT). Each half fits in one 10-minute device call on its own.
OUT ?= gpu-logs
OPS ?=  # benchmark.py's ops; empty: all of them
GPU_ENV := TORCH_CUDA_ARCH_LIST=9.0 JITOPS_CACHE_DIR=/tmp/jitops-gpu-cache
.PHONY: gpu-install gpu-bench gpu-test
gpu: gpu-bench gpu-test

gpu-install:
	mkdir -p $(OUT)
	python3 -m pip install -q -e . --no-deps --no-build-isolation
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $(OUT)/gpu.txt
	python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a $(OUT)/gpu.txt

# Timings first, on an idle GPU: the benchmark table and plot data, the examples, the loader.
gpu-bench: gpu-install
	set -o pipefail; cd examples && export $(GPU_ENV) && \
	python3 benchmark.py $(OPS) --json $(abspath $(OUT))/benchmark.json 2>&1 | tee $(abspath $(OUT))/benchmark.log && \
	python3 trilinear.py 2>&1 | tee $(abspath $(OUT))/trilinear.log && \
	python3 lltm.py 2>&1 | tee $(abspath $(OUT))/lltm.log && \
	python3 stylegan_block.py 2>&1 | tee $(abspath $(OUT))/stylegan_block.log && \
	python3 add2.py 2>&1 | tee $(abspath $(OUT))/add2.log && \
	python3 load_time.py --json $(abspath $(OUT))/load_time.json 2>&1 | tee $(abspath $(OUT))/load_time.log

# Every test, the CUDA ones included: scripts/gpu.sh runs the suite's four parts at once, each with
# a cache of its own (about 4 minutes on a 16-core host: one 10-minute device call).
gpu-test:
	OUT=$(OUT) bash scripts/gpu.sh tests
