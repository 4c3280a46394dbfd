# SPDX-License-Identifier: MIT
"""bias_act's training step in several jitops source trees, side by side on one GPU: which change
made it slower?

    python scripts/bias_act_ab.py TREE [TREE ...] [--rounds 3] [--dtype float32]

For each tree (e.g. `git archive <commit> jitops kernels bindings | tar -x -C trees/<commit>`),
at StyleGAN2's 64x512x64x32 (lrelu, clamp 256, as examples/benchmark.py times it), in a new
process importing that tree: forward+backward through autograd (the training step
examples/benchmark.py reports), and its two ops called directly, without autograd (the kernels'
time), plus the same step on a small tensor (8x64x16x16), where the time is the CPU's cost of a
call. Each tree builds into a cache of its own (all at once, first); then the trees take turns,
round after round. Prints each figure's median over the rounds per tree.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from warm_ab import run_in_tree, tree_env  # scripts/ is this script's folder, first on sys.path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

CHILD = """
import json, sys, torch
sys.path.insert(1, sys.argv[1])  # examples/timing.py, after the tree ('' first)
from timing import median_ms
import jitops, jitops.ops._framework
jitops.ops._framework.require("bias_act")  # its ops exist once loaded
dtype = getattr(torch, sys.argv[2])
args = ("lrelu", 0.2, 2 ** 0.5, 256.0)
def tensors(shape):
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(shape[1], device="cuda", dtype=dtype, requires_grad=True)
    return x, b, torch.randn(shape, device="cuda", dtype=dtype)
def step(x, b, grad):
    torch.autograd.grad((jitops.bias_act(x, b, act="lrelu", clamp=256.0),), (x, b), (grad,))
x, b, grad = tensors((64, 512, 64, 32))
xs, bs, grads = tensors((8, 64, 16, 16))
forward, backward = torch.ops.jitops.bias_act.default, torch.ops.jitops._bias_act_backward
result = {
    "forward+backward": median_ms(lambda: step(x, b, grad), "cuda"),
    "forward op": median_ms(lambda: forward(x.detach(), b.detach(), 1, *args), "cuda"),
    "backward op": median_ms(lambda: backward(grad, x.detach(), b.detach(), 1, *args), "cuda"),
    "small step": median_ms(lambda: step(xs, bs, grads), "cuda"),
}
print(json.dumps({**result, "package": jitops.__file__}))
"""

BUILD = "import sys, jitops.ops._framework; jitops.ops._framework.require('bias_act')"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    with tempfile.TemporaryDirectory(prefix="jitops-bias-act-ab-") as tmp:
        envs = [tree_env(tree, Path(tmp) / f"cache{i}") for i, tree in enumerate(trees)]
        builds = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, cwd=tree) for tree, env in zip(trees, envs)]
        if any(build.wait() != 0 for build in builds):
            raise SystemExit("a tree's bias_act did not build")
        results = {tree: [] for tree in trees}
        for round_ in range(args.rounds):
            for tree, env in zip(trees, envs):
                result = run_in_tree(CHILD, [str(EXAMPLES), args.dtype], tree, env)
                results[tree].append(result)
                print(
                    f"round {round_ + 1} {tree.name}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()),
                    file=sys.stderr,
                    flush=True,
                )
    names = list(results[trees[0]][0])
    print(f"bias_act {args.dtype}, ms, median of {args.rounds} rounds ({torch_and_gpu()})")
    print(f"{'tree':<14}" + "".join(f"{name:>18}" for name in names))
    for tree in trees:
        print(f"{tree.name:<14}" + "".join(f"{statistics.median(r[name] for r in results[tree]):>18.4f}" for name in names))


def torch_and_gpu() -> str:
    import torch

    return f"torch {torch.__version__}, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}"


if __name__ == "__main__":
    main()
