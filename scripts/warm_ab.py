# SPDX-License-Identifier: MIT
"""A warm start of two jitops source trees, side by side in one run: did a change slow it?

    python scripts/warm_ab.py BEFORE_TREE AFTER_TREE [--rounds 5] [--repeats 7] [--ops add2,...] [--drop-in]

Each tree (a checkout, e.g. `git worktree add /tmp/before <commit>`) is imported from its own
folder (each child runs there with it on PYTHONPATH, as a regular install is imported: no
editable-install finder; the script checks where jitops came from) into a cache of its own,
which is first filled by one cold load. Then, round after round, alternating the trees so that a
busy machine slows both alike: warm add2 (`jitops.ops._framework.require`) and warm `load_all()` of the ops,
each the median of --repeats new processes, timed as examples/load_time.py times them. With
--drop-in, warm `jitops.load` of examples/drop_in_time.py's extensions instead (the tutorial add2,
3 units), timed as that script times them. Prints each tree's median over the rounds and after / before.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from drop_in_time import CHILD as DROP_IN_CHILD  # noqa: E402 (the timed children and how they are run)
from drop_in_time import cases  # noqa: E402
from load_time import JITOPS_CHILD, run_child  # noqa: E402


def tree_env(tree: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("JITOPS_VERBOSE", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "PYTHONPATH": str(tree), "JITOPS_CACHE_DIR": str(cache)}


def run_in_tree(code: str, args: list[str], tree: Path, env: dict) -> dict:
    """run_child in the tree's folder (python -c puts it first on sys.path), checking that the
    child's jitops came from that tree; its report without the package's path."""
    result = run_child(code, args, env, cwd=tree)
    package = result.pop("package")
    assert Path(package).is_relative_to(tree), f"{tree} imported jitops from {package}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs=2, type=Path, metavar="TREE")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ops", help="comma-separated (default: every op of this checkout)")
    parser.add_argument("--drop-in", action="store_true", help="time jitops.load of drop_in_time.py's extensions")
    args = parser.parse_args()
    if args.drop_in:  # name -> (child, its arguments)
        loads = {
            case.replace(" ", "_"): (DROP_IN_CHILD, ["jitops", name, "", *map(json.dumps, (sources, cflags, includes))])
            for case, (name, sources, cflags, includes) in cases().items()
        }
    else:
        if args.ops is None:
            from jitops.ops._framework import available_ops

            args.ops = ",".join(available_ops())
        loads = {"add2": (JITOPS_CHILD, ["add2"]), "load_all": (JITOPS_CHILD, [args.ops])}
    with tempfile.TemporaryDirectory(prefix="jitops-warm-ab-") as tmp:
        trees = [tree.resolve() for tree in args.trees]
        envs = [tree_env(tree, Path(tmp) / f"cache{i}") for i, tree in enumerate(trees)]
        for tree, env in zip(trees, envs):
            for code, child_args in loads.values():  # builds each once
                run_in_tree(code, child_args, tree, env)
        medians = {(i, name): [] for i in range(2) for name in loads}
        for round_ in range(args.rounds):
            for i, (tree, env) in enumerate(zip(trees, envs)):
                for name, (code, child_args) in loads.items():
                    runs = [run_in_tree(code, child_args, tree, env) for _ in range(args.repeats)]
                    assert all(r["spawned"] == 0 and r["locks"] == 0 for r in runs), f"a warm load spawned or locked: {runs}"
                    medians[i, name].append(statistics.median(r["seconds"] for r in runs) * 1e3)
            print(
                f"round {round_ + 1}: "
                + ", ".join(f"{name} {medians[0, name][-1]:.2f} -> {medians[1, name][-1]:.2f} ms" for name in loads),
                file=sys.stderr,
                flush=True,
            )
    print(
        f"{'warm load':<14}{'before ms':>11}{'after ms':>10}{'after / before':>16}   (median of {args.rounds} rounds x {args.repeats} processes)"
    )
    for name in loads:
        before, after = statistics.median(medians[0, name]), statistics.median(medians[1, name])
        print(f"{name:<14}{before:>11.2f}{after:>10.2f}{after / before:>15.3f}x")
    print(f"before: {args.trees[0]}\nafter:  {args.trees[1]}")


if __name__ == "__main__":
    main()
