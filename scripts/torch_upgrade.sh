#!/usr/bin/env bash
# A torch upgrade as a user lives it: jitops' five ops loaded by `jitops.load_all()` in a new process
# under one venv's torch, then under another venv's torch from the same cache (the upgrade), warm,
# and from an empty cache (a cold build under the new torch, for scale). Wall time of each whole
# process, the cache's size after it and the precompiled headers it started; JITOPS_PCH=0 unless set
# (JITOPS_PCH=1: the default policy, which builds none for a rebuild an upgrade caused).
#   bash scripts/torch_upgrade.sh OLD_PYTHON NEW_PYTHON [TREE]
# TREE: the jitops checkout to import (default: this one), e.g. a `git worktree` of an older commit.
set -euo pipefail
old=$1 new=$2 tree=$(realpath "${3:-$PWD}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seconds() {  # seconds PYTHON CACHE: one process's wall time, and how many units it compiled
  local python=$1 cache=$2 log="$work/log"
  (cd "$tree" && env JITOPS_CACHE_DIR="$cache" JITOPS_PCH="${JITOPS_PCH:-0}" PYTHONPATH="$tree" PATH="$(dirname "$python"):$PATH" \
    /usr/bin/time -f "%e s" "$python" -c "import jitops; jitops.load_all()" > "$log" 2>&1) || { cat "$log"; exit 1; }
  echo "$(tail -n 1 "$log"), cache $(du -sh "$cache" | cut -f1), $(grep -o 'built .* in [0-9.]*s \[[0-9]*/[0-9]*\]' "$log" | grep -o '\[[0-9]*/' | tr -d '[/' \
    | awk '{n += $1} END {print n + 0}') ninja steps (compiles and links), $(grep -c 'precompiled header' "$log") PCHs started"
}
echo "tree: $tree"
echo "old torch ($("$old" -c 'import torch; print(torch.__version__)')), empty cache: $(seconds "$old" "$work/cache")"
echo "new torch ($("$new" -c 'import torch; print(torch.__version__)')), the same cache: $(seconds "$new" "$work/cache")"
echo "new torch, warm: $(seconds "$new" "$work/cache")"
echo "new torch, empty cache: $(seconds "$new" "$work/empty")"
