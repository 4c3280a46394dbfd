# SPDX-License-Identifier: MIT
"""A warm start of two (or more) jitops source trees, side by side in one run: did a change slow it?

    python scripts/warm_ab.py BEFORE_TREE AFTER_TREE [TREE...] [--rounds 5] [--repeats 7] [--ops add2,...] [--drop-in | --floor]

Each tree (a checkout, e.g. `git worktree add /tmp/before <commit>`) is imported from its own
folder (each child runs there with it on PYTHONPATH, as a regular install is imported; the script
checks where jitops came from, but where this Python has the checkout installed editable, a module
a tree lacks is still found in the checkout) into a cache of its own, which is first filled by one
cold load. Then, round after round, alternating the trees so that a busy machine slows all alike: warm add2 (`jitops.ops._framework.require`) and warm `load_all()` of the ops,
each the median of --repeats new processes, timed as examples/load_time.py times them. With
--drop-in, warm `jitops.load` of examples/drop_in_time.py's extensions instead (the tutorial add2,
3 units), timed as that script times them. Prints each tree's median over the rounds and its ratio to
BEFORE's (each tree after the second is one more "after"), and how many jitops modules each warm
load imported and the KB of bytecode they hold: in a new process Python unmarshals all of it, and
unlike the milliseconds that figure has no noise.

With --floor, warm add2 only, and one tree more: a copy of the last tree whose warm-path modules keep only the
functions a warm add2 runs (found by tracing one in the copy; every other function becomes one stub).
No one could ship that copy; it is the floor of AFTER's modules: what deleting code from them, short of
importing fewer of them, could win at most.
"""

import argparse
import ast
import importlib.util
import json
import os
import shutil
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


# Run in the floor copy once it is warm: which functions of its jitops a warm add2 calls, and
# which of its modules it imports.
TRACE_CHILD = """
import json, sys, torch
ran = set()
def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(sys.argv[1]):
        ran.add((frame.f_code.co_filename, frame.f_code.co_firstlineno))
sys.setprofile(_profile)
import jitops, jitops.ops._framework
jitops.ops._framework.require("add2")
sys.setprofile(None)
modules = [m.__file__ for name, m in sys.modules.items() if name.split(".")[0] == "jitops"]
print(json.dumps({"ran": sorted(ran), "modules": modules, "package": jitops.__file__}))
"""
STUB = 'def _floor_stub(*args, **kwargs):\n    raise NotImplementedError("removed by scripts/warm_ab.py --floor")\n'


def floor_copy(after: Path, floor: Path) -> None:
    """What a checkout's warm add2 needs: the package and the ops' sources beside it."""
    for part in ("jitops", "kernels", "bindings"):
        shutil.copytree(after / part, floor / part, ignore=shutil.ignore_patterns("__pycache__"))


def strip_to_what_ran(floor: Path, env: dict) -> int:
    """Replace every function of the warm path's modules that a warm add2 did not run with one stub
    per module (its name stays bound: other modules import it); the number replaced."""
    traced = run_in_tree(TRACE_CHILD, [str(floor / "jitops")], floor, env)
    ran = {(path, line) for path, line in traced["ran"]}
    replaced = 0
    for path in traced["modules"]:
        # Never a file outside the copy (an editable install could have lent one from the checkout).
        assert Path(path).is_relative_to(floor), f"the floor's warm add2 imported {path}"
        module = ast.parse(Path(path).read_text())

        def keep_or_stub(body: list) -> list:
            nonlocal replaced
            kept = []
            for node in body:
                if isinstance(node, ast.FunctionDef) and not ran & {(path, n.lineno) for n in [node, *node.decorator_list]}:
                    replaced += 1
                    node = ast.Assign([ast.Name(node.name, ast.Store())], ast.Name("_floor_stub", ast.Load()), lineno=0)
                elif isinstance(node, ast.ClassDef):
                    node.body = keep_or_stub(node.body)
                kept.append(node)
            return kept

        module.body = keep_or_stub(module.body)
        first = 1 if ast.get_docstring(module) is not None else 0  # the stub goes after the __future__ imports
        while first < len(module.body) and getattr(module.body[first], "module", None) == "__future__":
            first += 1
        module.body[first:first] = ast.parse(STUB).body
        Path(path).write_text(ast.unparse(module) + "\n")
    return replaced


def chosen_loads(args: argparse.Namespace) -> dict:
    """name -> (child, its arguments): what each tree's warm start is timed on."""
    if args.drop_in:
        return {
            case.replace(" ", "_"): (DROP_IN_CHILD, ["jitops", name, "", *map(json.dumps, (sources, cflags, includes))])
            for case, (name, sources, cflags, includes) in cases().items()
        }
    if args.floor:  # the floor copy keeps only what a warm add2 runs
        return {"add2": (JITOPS_CHILD, ["add2"])}
    if args.ops is None:
        from jitops.ops._framework import available_ops

        args.ops = ",".join(available_ops())
    return {"add2": (JITOPS_CHILD, ["add2"]), "load_all": (JITOPS_CHILD, [args.ops])}


def time_trees(trees: list[Path], envs: list[dict], loads: dict, rounds: int, repeats: int) -> tuple[dict, dict]:
    """(tree's index, load's name) -> the median of each round's `repeats` new processes, the trees
    alternating round after round so that a busy machine slows them alike; and -> the jitops modules
    that load imported (JITOPS_CHILD reports them; the drop-in's child does not)."""
    medians: dict = {(i, name): [] for i in range(len(trees)) for name in loads}
    imported: dict = {}
    for round_ in range(rounds):
        for i, (tree, env) in enumerate(zip(trees, envs)):
            for name, (code, child_args) in loads.items():
                runs = [run_in_tree(code, child_args, tree, env) for _ in range(repeats)]
                assert all(r["spawned"] == 0 and r["locks"] == 0 for r in runs), f"a warm load spawned or locked: {runs}"
                medians[i, name].append(statistics.median(r["seconds"] for r in runs) * 1e3)
                if "modules" in runs[-1]:
                    imported[i, name] = runs[-1]["modules"]
        print(
            f"round {round_ + 1}: "
            + ", ".join(
                f"{name} " + " -> ".join(f"{medians[i, name][-1]:.2f}" for i in range(len(trees))) + " ms" for name in loads
            ),
            file=sys.stderr,
            flush=True,
        )
    return medians, imported


def code_kb(modules: list[str]) -> float:
    """The KB of bytecode these modules hold (their .pyc files), which a new process unmarshals."""
    return sum(os.path.getsize(importlib.util.cache_from_source(module)) for module in modules) / 1024


def report(loads: dict, labels: list[str], medians: dict, imported: dict, rounds: int, repeats: int) -> None:
    """Each tree's median over the rounds and its ratio to the first's, with the code it imported."""
    width = max(len(label) for label in labels) + 2
    print(
        f"{'warm load':<14}{'tree':<{width}}{'ms':>8}{'/ before':>11}{'modules':>9}{'code KB':>9}"
        f"   (median of {rounds} rounds x {repeats} processes)"
    )
    for name in loads:
        ms = [statistics.median(medians[i, name]) for i in range(len(labels))]
        for i, (label, value) in enumerate(zip(labels, ms)):
            modules = imported.get((i, name))
            code = f"{len(modules):>9}{code_kb(modules):>9.0f}" if modules else ""
            print(f"{name:<14}{label:<{width}}{value:>8.2f}{value / ms[0]:>10.3f}x{code}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, metavar="TREE")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ops", help="comma-separated (default: every op of this checkout)")
    parser.add_argument("--drop-in", action="store_true", help="time jitops.load of drop_in_time.py's extensions")
    parser.add_argument(
        "--floor", action="store_true", help="warm add2 only, and the last tree with what it does not run removed"
    )
    args = parser.parse_args()
    if len(args.trees) < 2:
        parser.error("TREE: give a tree before and at least one after")
    if args.floor and args.drop_in:
        parser.error("--floor times warm add2: not with --drop-in")
    loads = chosen_loads(args)
    trees = [tree.resolve() for tree in args.trees]
    labels = [f"{tree} (before)" if i == 0 else str(tree) for i, tree in enumerate(trees)]
    with tempfile.TemporaryDirectory(prefix="jitops-warm-ab-") as tmp:
        if args.floor:
            labels.append(f"the floor of {trees[-1]}")
            trees.append(Path(tmp) / "floor")
            floor_copy(trees[-2], trees[-1])
        envs = [tree_env(tree, Path(tmp) / f"cache{i}") for i, tree in enumerate(trees)]
        for tree, env in zip(trees, envs):
            for code, child_args in loads.values():  # builds each once
                run_in_tree(code, child_args, tree, env)
        if args.floor:  # once its cache is filled, so that its warm start is the one timed
            print(f"floor: {strip_to_what_ran(trees[-1], envs[-1])} functions a warm add2 does not run stubbed", file=sys.stderr)
            run_in_tree(*loads["add2"], trees[-1], envs[-1])  # still loads, and its bytecode is written again
        medians, imported = time_trees(trees, envs, loads, args.rounds, args.repeats)
        report(loads, labels, medians, imported, args.rounds, args.repeats)  # the trees' bytecode is still there


if __name__ == "__main__":
    main()
