#!/usr/bin/env bash
# The CUDA tests and timings on a lent GPU machine, in parts that each fit one 10-minute device call:
#   bash scripts/gpu.sh first-build|cross-torch|remote|remote-ab|tests|tests-wide|tests-ops|tests-ab|tests-cd|tests-cud|tests-a|tests-b|tests-c|tests-d|issue25|edit-loop|edit-loop-paced|unmodified|gcc-heap|drop-in|drop-in-installed|drop-in-phases|loader|installed|phases|dlopen|warm-ab|bias-act-ab|bench|bench-others|upfirdn2d|bench-upfirdn2d|ncu-upfirdn2d|nccl-two-nodes
# (logs under $OUT). `tests` runs the whole suite: its four parts at once, each with its own cache;
# on a fresh 16-core machine part d (the downstream package's wheels, venvs and CUDA builds) no longer
# fits the 10 minutes beside the others: run `tests-ab`, `tests-c`, `tests-d` there, or `tests-wide`
# (the same, part d in 4 workers) on a host of 32 cores. Builds for the card only
# (TORCH_CUDA_ARCH_LIST=9.0) into caches kept between calls.
set -uo pipefail
OUT=$(realpath -m "${OUT:-gpu-logs}")
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0 JITOPS_CACHE_DIR=/tmp/jitops-gpu-cache JITOPS_KILL_TRIALS=${JITOPS_KILL_TRIALS:-8}
unset PYTHONDONTWRITEBYTECODE
python3 -m pip install -q -e . --no-deps --no-build-isolation
# Test extras the GPU image lacks (mypy, wheel, pytest-xdist), from wheels downloaded beside the
# checkout (`pip download mypy wheel pytest-xdist --python-version 3.12 --only-binary=:all: -d .whl`;
# run with carry .whl).
[ -d .whl ] && python3 -m pip install -q --no-index --find-links .whl mypy wheel pytest-xdist torch-abi-audit cryptography
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
  echo "faster linkers: $(command -v ld.lld ld.gold | tr '\n' ' ')"; } | tee "$OUT/machine.txt"
pytest() { python3 -m pytest -q -rs -p no:cacheprovider --durations=15 "$@"; }
TESTS_A="tests/test_add2.py tests/test_bias_act.py tests/test_lltm.py tests/test_loader.py"
TESTS_B="tests/test_trilinear_interpolation.py tests/test_prebuilt.py tests/test_reliability.py tests/test_large_index.py tests/test_distributed.py"
# Part d: the drop-ins (torch's tests' expectations of both loaders, unmodified programs) and the
# downstream package (wheel, venv, CUDA builds of their own).
TESTS_D="tests/test_torch_load.py tests/test_torch_parity.py tests/test_drop_in.py tests/test_downstream.py"
# Part c: every other tests/test_*.py, so that a new test file always runs here.
TESTS_C=$(for f in tests/test_*.py; do case " $TESTS_A $TESTS_B $TESTS_D " in *" $f "*) ;; *) echo "$f";; esac; done | tr '\n' ' ')
# Part b without the loader's slow fault and packaging suites (prebuilt wheel, killed builds,
# distributed, CLI): every op's CUDA tests in about 4 minutes, when only bindings or kernels changed.
TESTS_B_OPS="tests/test_trilinear_interpolation.py tests/test_large_index.py"
part() {  # part NAME FILES...: one part of the suite, with a cache of its own, logged to pytest-NAME.log
  local name=$1; shift
  JITOPS_CACHE_DIR=/tmp/jitops-gpu-cache-$name pytest "$@" > "$OUT/pytest-$name.log" 2>&1
}
case "$1" in
  tests|tests-wide|tests-ops|tests-ab|tests-cd)
    [ "$1" = tests-ops ] && tests_b=$TESTS_B_OPS || tests_b=$TESTS_B
    [ "$1" = tests-wide ] && workers_d="-n 4" || workers_d=""  # tests-wide: a host of 32 cores or more
    case "$1" in tests-ab) names="a b";; tests-cd) names="c d";; tests-ops) names="a b c";; *) names="a b c d";; esac
    pids=""
    for name in $names; do
      case $name in a) files=$TESTS_A;; b) files=$tests_b;; c) files=$TESTS_C;; d) files="$workers_d $TESTS_D";; esac
      part $name $files & pids="$pids $!"
    done
    status=0; for pid in $pids; do wait $pid || status=1; done
    for name in $names; do echo "part $name: $(tail -n 1 "$OUT/pytest-$name.log")"; done
    exit $status ;;
  first-build)  # a first build against torch's load(): no PCH anywhere, the binding edit right after, with the
    # fleet's PCH (a file:// remote: no redis-server here), after `jitops-cache pch`, the notebook's kernel edit
    env -u MAX_JOBS python3 examples/first_build.py --repeats "${REPEATS:-3}" --json "$OUT/first_build.json" 2>&1 | tee "$OUT/first_build.log" ;;
  cross-torch)  # the ops' CUDA libraries built on a CPU machine under another torch and Python (`make
    # cross-torch`; carry .cross-torch/cuda/{remote,outputs.pt,signing.key.pub}), read by a pod with an
    # empty cache from the remote folder they were pushed to: 0 compiles but upfirdn2d's autograd
    # unit, the same bits, then the ops' CUDA tests from that cache (.ci/cross_torch.py check). Without
    # this image's LIBRARY_PATH (CUDA's stubs, which no op links): it is in the key, and the CPU
    # machine that built them has none.
    rm -rf /tmp/cross-torch && mkdir -p /tmp/cross-torch && cp -r .cross-torch/cuda/. /tmp/cross-torch/
    env -u LIBRARY_PATH JITOPS_REMOTE_CACHE="file:///tmp/cross-torch/remote" JITOPS_REMOTE_MODE=read-only \
      JITOPS_REMOTE_TRUSTED_KEYS=/tmp/cross-torch/signing.key.pub python3 .ci/cross_torch.py check /tmp/cross-torch 2>&1 | tee "$OUT/cross-torch.log" ;;
  tests-a) part a $TESTS_A; tail -n 3 "$OUT/pytest-a.log" ;;
  tests-b) part b $TESTS_B; tail -n 3 "$OUT/pytest-b.log" ;;
  tests-c) part c $TESTS_C; tail -n 3 "$OUT/pytest-c.log" ;;
  tests-d) part d -n 4 $TESTS_D; tail -n 3 "$OUT/pytest-d.log" ;;
  tests-cud)  # parts c (less upfirdn2d's file: part u) and d at once, 4 workers each: one call after tests-ab
    rest=$(for f in $TESTS_C; do [ "$f" = tests/test_upfirdn2d.py ] || echo "$f"; done | tr '\n' ' ')
    part c -n 4 $rest & c=$!; part u -n 4 tests/test_upfirdn2d.py & u=$!; part d -n 4 $TESTS_D & d=$!
    status=0; for pid in $c $u $d; do wait $pid || status=1; done
    for name in c u d; do echo "part $name: $(tail -n 1 "$OUT/pytest-$name.log")"; done
    exit $status ;;  # alone, in 4 workers: a cold run takes 9 minutes in one
  loader) python3 examples/load_time.py --ops "${OPS:-add2,bias_act}" --repeats 7 --baseline-repeats 1 \
             --json "$OUT/load_time.json" 2>&1 | tee "$OUT/load_time.log" ;;
  installed)  # the loader as users have it: a regular install, timed from outside the checkout (then editable again)
    python3 -m pip install -q . --no-deps --no-build-isolation
    python3 examples/load_time.py --installed --repeats "${REPEATS:-11}" 2>&1 | tee "$OUT/load_time_installed.log"
    python3 -m pip install -q -e . --no-deps --no-build-isolation ;;
  edit-loop)  # the edit loop (cold, warm, edit a .cu, the binding, a header, a flag, a 2nd extension) against torch's load()
    # FLAG_VARIANTS=N: then N more -DSCALE1 values, each with its PCH, and the cache's size against its budget
    python3 examples/edit_loop.py --flag-variants "${FLAG_VARIANTS:-0}" --json "$OUT/edit_loop.json" 2>&1 | tee "$OUT/edit_loop.log" ;;
  edit-loop-paced)  # the same loop at a user's pace: each step PACE (30) s after the last load returned, nothing waited for
    # (without the in-process edits, whose goal is the 2-core machine's: both loaders then fit one call)
    python3 examples/edit_loop.py --pace "${PACE:-30}" --skip-in-process --json "$OUT/edit_loop_paced.json" 2>&1 | tee "$OUT/edit_loop_paced.log" ;;
  unmodified)  # an unmodified get_plugin program under `python -m jitops run` against torch's load(), installed as users have it
    python3 -m pip install -q . --no-deps --no-build-isolation
    (cd /tmp && python3 "$OLDPWD/examples/unmodified_program.py" --installed --repeats "${REPEATS:-11}" --edits "${EDITS:-3}" \
      --phases "${PHASES:-3}" --programs "${PROGRAMS:-stylegan,raster}" --json "$OUT/unmodified_program.json") 2>&1 | tee "$OUT/unmodified_program.log"
    python3 -m pip install -q -e . --no-deps --no-build-isolation ;;
  gcc-heap)  # one torch/extension.h unit compiled with and without gcc's later garbage collection
    python3 examples/gcc_heap.py --repeats "${REPEATS:-3}" --json "$OUT/gcc_heap.json" 2>&1 | tee "$OUT/gcc_heap.log" ;;
  drop-in)  # jitops.load against torch's load() on the same sources, cold and warm, in fresh processes
    (cd examples && python3 drop_in_time.py --json "$OUT/drop_in.json") 2>&1 | tee "$OUT/drop_in.log" ;;
  drop-in-installed)  # the same with jitops installed as users have it (pip install .), then editable again
    python3 -m pip install -q . --no-deps --no-build-isolation
    (cd examples && python3 drop_in_time.py --installed --cold-repeats "${COLD_REPEATS:-1}" --json "$OUT/drop_in_installed.json") 2>&1 | tee "$OUT/drop_in_installed.log"
    python3 -m pip install -q -e . --no-deps --no-build-isolation ;;
  drop-in-phases)  # where a warm jitops.load's milliseconds go, step by step (installed, then editable again)
    python3 -m pip install -q . --no-deps --no-build-isolation
    (cd examples && python3 drop_in_time.py --installed --phases) 2>&1 | tee "$OUT/drop_in_phases.log"
    python3 -m pip install -q -e . --no-deps --no-build-isolation ;;
  remote|remote-ab)  # remote: the remote cache's tests (its fault suite too), then examples/remote_cache.py; remote-ab:
    # examples/remote_cache.py (CASES) under the tree issue 60 began from, then this one, each installed as users
    # have it (pip install .). A carried redis-server where it runs, else file://.
    # .remote/ (carried, not committed): wheels for the image's Python (`pip download cryptography cffi pycparser redis
    # --python-version 3.12 --only-binary=:all: -d .remote/wheels`; redis-py only for the older tree), this machine's
    # redis-server with the libraries it links (.remote/bin, .remote/lib), and `git archive 0378501 > .remote/old.tar`.
    [ -d .remote/wheels ] && python3 -m pip install -q --no-index --find-links .remote/wheels cryptography redis
    if [ -x .remote/bin/redis-server ] && LD_LIBRARY_PATH=$PWD/.remote/lib .remote/bin/redis-server --version; then
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/.remote/lib" "$PWD/.remote/bin/redis-server" > /tmp/redis-server
      chmod +x /tmp/redis-server; export PATH=/tmp:$PATH; tier=redis
    else tier=file; fi
    if [ "$1" = remote-ab ]; then
      cases=${CASES:-add2,2 plugins (run)}
      rm -rf /tmp/old && mkdir /tmp/old && tar -xf .remote/old.tar -C /tmp/old && cp examples/remote_cache.py /tmp/old/examples/
      python3 -m pip install -q /tmp/old --no-deps --no-build-isolation
      (cd /tmp/old && python3 examples/remote_cache.py --installed --tier $tier --cases "$cases" --json "$OUT/remote_cache_before.json") 2>&1 | tee "$OUT/remote_cache_before.log"
      python3 -m pip install -q . --no-deps --no-build-isolation
      python3 examples/remote_cache.py --installed --tier $tier --cases "$cases" --json "$OUT/remote_cache_after.json" 2>&1 | tee "$OUT/remote_cache_after.log"
      python3 -m pip install -q -e . --no-deps --no-build-isolation
    else
      JITOPS_CACHE_DIR=/tmp/jitops-gpu-cache-remote pytest tests/test_remote.py tests/test_remote_faults.py > "$OUT/pytest-remote.log" 2>&1
      tail -n 3 "$OUT/pytest-remote.log"
      python3 examples/remote_cache.py --tier $tier --json "$OUT/remote_cache.json" 2>&1 | tee "$OUT/remote_cache.log"
    fi ;;
  issue25)  # the drop-in, downstream-package, namespace and prebuilt tests with CUDA, then the drop-in timing
    JITOPS_CACHE_DIR=/tmp/jitops-gpu-cache-25 pytest tests/test_torch_load.py tests/test_downstream.py tests/test_extension.py \
      tests/test_prebuilt.py > "$OUT/pytest-issue25.log" 2>&1; tail -n 3 "$OUT/pytest-issue25.log"
    bash "$0" drop-in ;;
  phases) for op in ${OPS:-add2}; do python3 examples/load_time.py --phases $op --repeats 9 2>&1 | tee -a "$OUT/phases.log"; done ;;
  dlopen) python3 scripts/dlopen_floor.py --ops "${OPS:-}" --link-variants="${LINK_VARIANTS:-}" 2>&1 | tee "$OUT/dlopen_floor.log" ;;
  bench)
    cd examples
    for dtype in float32 float16; do
      python3 benchmark.py bias_act --dtype $dtype --json "$OUT/bench_bias_act_$dtype.json" 2>&1 | tee "$OUT/bench_bias_act_$dtype.log"
    done
    python3 add2.py 2>&1 | tee "$OUT/add2.log" ;;
  bench-others)  # the ops whose CUDA files lost their ATen headers: same kernels, re-timed
    cd examples
    python3 benchmark.py trilinear_interpolation lltm upfirdn2d --json "$OUT/bench_others.json" 2>&1 | tee "$OUT/bench_others.log" ;;
  warm-ab)  # a warm start of the tree at $BEFORE (e.g. `git archive` of main) against this one, side by side
    python3 scripts/warm_ab.py "${BEFORE:?set BEFORE to the earlier tree}" . --rounds "${ROUNDS:-3}" 2>&1 | tee "$OUT/warm_ab.log" ;;
  bias-act-ab)  # bias_act's training step in the trees under bench_trees/ and this one, side by side
    python3 scripts/bias_act_ab.py bench_trees/* . --rounds "${ROUNDS:-3}" 2>&1 | tee "$OUT/bias_act_ab.log" ;;
  upfirdn2d)  # the tiled kernel against the general one, StyleGAN3's figures and the floor; its tests
    (cd examples && python3 upfirdn2d_sweep.py --json "$OUT/upfirdn2d_sweep.json" 2>&1 | tee "$OUT/upfirdn2d_sweep.log")
    part c tests/test_upfirdn2d.py; tail -n 3 "$OUT/pytest-c.log" ;;
  bench-upfirdn2d)  # against eager and torch.compile (float32), and the StyleGAN2 block example
    cd examples
    python3 benchmark.py upfirdn2d --json "$OUT/bench_upfirdn2d.json" 2>&1 | tee "$OUT/bench_upfirdn2d.log"
    python3 stylegan_block.py 2>&1 | tee "$OUT/stylegan_block.log" ;;
  ncu-upfirdn2d)  # where the tiled kernels' time goes (Nsight Compute, when the machine has it)
    ncu --kernel-name regex:tiled --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis python3 scripts/ncu_upfirdn2d.py 2>&1 | tee "$OUT/ncu.log" ;;
  nccl-two-nodes)  # jitops.distributed over NCCL: two "nodes" of one GPU each (needs 2 GPUs), own caches
    work=$(mktemp -d); port=$((20000 + RANDOM % 20000))
    for node in 0 1; do
      CUDA_VISIBLE_DEVICES=$node JOB_BACKEND=nccl JITOPS_CACHE_DIR=$work/node$node python3 -m torch.distributed.run \
        --nnodes 2 --node-rank $node --nproc-per-node 1 --master-addr 127.0.0.1 --master-port $port \
        tests/jobs/distributed_load_all.py $work add2,trilinear_interpolation > "$OUT/nccl-node$node.log" 2>&1 &
    done
    wait
    cat $work/rank-*.json | tee "$OUT/nccl-ranks.json"; echo
    grep -h "jitops: built" "$OUT"/nccl-node*.log | tee "$OUT/nccl-builds.txt"
    for node in 0 1; do
      for command in list verify; do JITOPS_CACHE_DIR=$work/node$node python3 -m jitops.cache_tools $command 2>&1 | tee -a "$OUT/nccl-caches.txt"; done
    done ;;
  *) echo "usage: $0 tests|tests-wide|tests-ops|tests-ab|tests-cd|tests-cud|tests-a|tests-b|tests-c|tests-d|issue25|edit-loop|edit-loop-paced|unmodified|gcc-heap|drop-in|drop-in-installed|drop-in-phases|loader|installed|phases|dlopen|warm-ab|bias-act-ab|bench|bench-others|upfirdn2d|bench-upfirdn2d|ncu-upfirdn2d|nccl-two-nodes"; exit 2 ;;
esac
