# SPDX-License-Identifier: MIT
"""Time jitops ops against eager PyTorch, torch.compile and the device-copy floor, in one run.

    python examples/benchmark.py [OP ...] [--device cuda|cpu] [--json FILE] [--plot FILE.png]
    python examples/benchmark.py --from-json FILE --plot FILE.png   # plot saved results

For every op and size it prints the forward, the backward alone (jitops' backward op, called
without autograd), for bias_act also the forward op without autograd, and the forward+backward, each for jitops, eager PyTorch (the op's *_ref), torch.compile of the *_ref,
and the copy floor: the time a device-to-device copy takes to move the bytes the pass must read
and write at least. "% copy BW" is jitops' bandwidth as a share of the copy's; "x eager" and
"x compile" are speed-ups of jitops (above 1 means jitops is faster). Every figure comes from
fresh random inputs, after warm-up, as the median of many samples (examples/timing.py).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from timing import median_ms

import jitops
from jitops.ops.bias_act import bias_act_ref
from jitops.ops.lltm import lltm_ref
from jitops.ops.trilinear_interpolation import trilinear_interpolation_ref
from jitops.ops.upfirdn2d import upfirdn2d_ref

IMPLEMENTATIONS = ("jitops", "eager", "compile")


@dataclass
class Case:
    """One op at one size: what to run for each pass, and the bytes each pass must move."""

    size: str  # printed label
    scale: float  # x axis of the plot: the problem's size in elements
    passes: dict[str, dict[str, Callable[[], object]]] = field(default_factory=dict)  # pass -> impl -> fn
    min_bytes: dict[str, int] = field(default_factory=dict)  # pass -> bytes read + written at least


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def training_step(fn, inputs, grads):
    """forward + backward of fn, as torch.autograd.grad would run it in training."""
    differentiable = [t for t in inputs if t.requires_grad]

    def step():
        outputs = fn(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        torch.autograd.grad(outputs, differentiable, grads)

    return step


def implementations(op, ref):
    return {"jitops": op, "eager": ref, "compile": torch.compile(ref, fullgraph=True)}


def add_forward_and_training(case: Case, op, ref, inputs, grads) -> None:
    impls = implementations(op, ref)
    with torch.no_grad():
        case.passes["forward"] = {name: (lambda fn=fn: fn(*inputs)) for name, fn in impls.items()}
    case.passes["forward+backward"] = {name: training_step(fn, inputs, grads) for name, fn in impls.items()}


# ---------------------------------------------------------------------------------------------
# The ops. Each yields its Cases for a device; sizes on a GPU reach many times its L2.
# ---------------------------------------------------------------------------------------------


def add2_cases(device: str, dtype: torch.dtype):
    counts = [1 << 22, 1 << 24, 1 << 26] if device == "cuda" else [1 << 16, 1 << 20, 1 << 22]
    for n in counts:
        a = torch.randn(n, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(n, device=device, dtype=dtype, requires_grad=True)
        grad_out = torch.randn(n, device=device, dtype=dtype)
        case = Case(f"N={n}", n)
        add_forward_and_training(case, jitops.add2, torch.add, (a, b), (grad_out,))
        case.min_bytes["forward"] = nbytes(a, b, grad_out)  # read a, b; write out
        case.min_bytes["forward+backward"] = 2 * case.min_bytes["forward"]  # + read the gradient, write two
        yield case


def trilinear_interpolation_cases(device: str, dtype: torch.dtype):
    jitops.load_all(["trilinear_interpolation"])  # the backward op is timed directly
    f = 256
    counts = [4096, 16384, 65536, 262144] if device == "cuda" else [1024, 4096, 16384]
    for n in counts:
        feats = torch.randn(n, 8, f, device=device, dtype=dtype, requires_grad=True)
        points = (torch.rand(n, 3, device=device, dtype=dtype) * 2 - 1).requires_grad_()
        grad_out = torch.randn(n, f, device=device, dtype=dtype)
        case = Case(f"N={n} F={f}", n * f)
        add_forward_and_training(case, jitops.trilinear_interpolation, trilinear_interpolation_ref, (feats, points), (grad_out,))
        backward = torch.ops.jitops._trilinear_interpolation_backward
        case.passes["backward"] = {"jitops": lambda: backward(grad_out, feats.detach(), points.detach())}
        case.min_bytes["forward"] = nbytes(feats, points, grad_out)  # read feats, points; write out
        case.min_bytes["backward"] = nbytes(grad_out, feats, points, feats, points)  # + write both grads
        case.min_bytes["forward+backward"] = case.min_bytes["forward"] + case.min_bytes["backward"]
        yield case


def lltm_cases(device: str, dtype: torch.dtype):
    # The two sizes, and one between; matrix products dominate, so no copy floor.
    for batch, features, state in [(16, 32, 128), (512, 128, 512), (4096, 256, 1024)]:
        bound = 1 / math.sqrt(state)
        inputs = (
            torch.randn(batch, features, device=device, dtype=dtype),
            torch.empty(3 * state, state + features, device=device, dtype=dtype).uniform_(-bound, bound),
            torch.empty(3 * state, device=device, dtype=dtype).uniform_(-bound, bound),
            torch.randn(batch, state, device=device, dtype=dtype),
            torch.randn(batch, state, device=device, dtype=dtype),
        )
        for t in inputs:
            t.requires_grad_()
        grads = (torch.randn(batch, state, device=device, dtype=dtype), torch.randn(batch, state, device=device, dtype=dtype))
        case = Case(f"B={batch} I={features} S={state}", batch * state)
        add_forward_and_training(case, jitops.lltm, lltm_ref, inputs, grads)
        yield case


def bias_act_cases(device: str, dtype: torch.dtype):
    # StyleGAN2's common case: lrelu with a clamp on an NCHW activation, up to 64 Mi elements.
    jitops.load_all(["bias_act"])  # the backward op is timed directly
    sizes = [(8, 64, 64, 64), (16, 512, 64, 64), (64, 512, 64, 32)] if device == "cuda" else [(4, 64, 32, 32), (8, 128, 64, 64)]
    for shape in sizes:
        x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(shape[1], device=device, dtype=dtype, requires_grad=True)
        grad = torch.randn(shape, device=device, dtype=dtype)
        case = Case("x".join(map(str, shape)), x.numel())
        op = lambda x, b: jitops.bias_act(x, b, act="lrelu", clamp=256.0)  # noqa: E731
        ref = lambda x, b: bias_act_ref(x, b, act="lrelu", clamp=256.0)  # noqa: E731
        add_forward_and_training(case, op, ref, (x, b), (grad,))
        # The ops themselves, called without autograd: the kernels' time. Through autograd every
        # call also pays torch.library's Python autograd wrapper (about 40 us of CPU time), which
        # is longer than the fp16 kernel even at 64 Mi elements.
        # The backward op is the one a training step's backward runs: grad_x and grad_b together.
        forward, backward = torch.ops.jitops.bias_act.default, torch.ops.jitops._bias_act_backward
        case.passes["forward op"] = {"jitops": lambda: forward(x.detach(), b.detach(), 1, "lrelu", 0.2, 2**0.5, 256.0)}
        case.passes["backward"] = {"jitops": lambda: backward(grad, x.detach(), b.detach(), 1, "lrelu", 0.2, 2**0.5, 256.0)}
        case.min_bytes["forward"] = case.min_bytes["forward op"] = nbytes(x, x)  # read x, write y
        case.min_bytes["backward"] = nbytes(grad, x, x)  # read grad and x, write grad_x
        case.min_bytes["forward+backward"] = case.min_bytes["forward"] + case.min_bytes["backward"]
        yield case


def upfirdn2d_cases(device: str, dtype: torch.dtype):
    # StyleGAN2's resampling: a 4-tap separable filter, 2x up (padding [2, 1, 2, 1], gain 4) and
    # 2x down (padding [1, 1, 1, 1]), at N=8, C=512.
    f = torch.tensor([1.0, 3.0, 3.0, 1.0], device=device, dtype=dtype) / 8
    sizes = [64, 256] if device == "cuda" else [16, 32]
    batch, channels = (8, 512) if device == "cuda" else (2, 64)
    for side in sizes:
        for name, kwargs in (("up2", dict(up=2, padding=[2, 1, 2, 1], gain=4)), ("down2", dict(down=2, padding=1))):
            x = torch.randn(batch, channels, side, side, device=device, dtype=dtype, requires_grad=True)
            out_side = side * 2 if name == "up2" else side // 2
            grad = torch.randn(batch, channels, out_side, out_side, device=device, dtype=dtype)
            case = Case(f"{batch}x{channels}x{side}x{side} {name}", grad.numel())
            op = lambda x, kwargs=kwargs: jitops.upfirdn2d(x, f, **kwargs)  # noqa: E731
            ref = lambda x, kwargs=kwargs: upfirdn2d_ref(x, f, **kwargs)  # noqa: E731
            add_forward_and_training(case, op, ref, (x,), (grad,))
            case.min_bytes["forward"] = nbytes(x, grad)  # read x, write out
            case.min_bytes["forward+backward"] = 2 * case.min_bytes["forward"]
            yield case


OPS = {
    "add2": add2_cases,
    "trilinear_interpolation": trilinear_interpolation_cases,
    "lltm": lltm_cases,
    "bias_act": bias_act_cases,
    "upfirdn2d": upfirdn2d_cases,
}


# ---------------------------------------------------------------------------------------------
# Measuring and reporting
# ---------------------------------------------------------------------------------------------


def copy_floor_ms(total_bytes: int, device: str) -> float:
    """Time a device copy takes to read and write total_bytes in all (half each way)."""
    src = torch.randint(0, 255, (total_bytes // 2,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    # The least of three medians: a floor read high (a busy CPU) would show a pass above 100%.
    return min(median_ms(lambda: dst.copy_(src), device) for _ in range(3))


def measure(op: str, case: Case, device: str) -> list[dict]:
    rows = []
    for pass_name, impls in case.passes.items():
        row = {"op": op, "size": case.size, "scale": case.scale, "pass": pass_name}
        for name in IMPLEMENTATIONS:
            row[name] = median_ms(impls[name], device) if name in impls else None
        min_bytes = case.min_bytes.get(pass_name)
        row["copy_floor"] = copy_floor_ms(min_bytes, device) if min_bytes else None
        rows.append(row)
    return rows


def check_correct(op: str, case: Case) -> None:
    """The numbers are only worth printing if jitops and the reference agree."""
    forward = case.passes["forward"]
    with torch.no_grad():
        got, want = forward["jitops"](), forward["eager"]()
    # Both sides round to the dtype; half precision allows a couple of units in the last place.
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2}.get(_first_tensor(got).dtype, 1e-4)
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance, msg=lambda m: f"{op} {case.size}: {m}")


def _first_tensor(value):
    return value[0] if isinstance(value, tuple) else value


def ratio(numerator, denominator) -> str:
    return f"{numerator / denominator:.2f}" if numerator and denominator else "-"


def print_table(rows: list[dict]) -> None:
    header = f"{'op':<24}{'size':<24}{'pass':<18}{'jitops ms':>10}{'eager ms':>10}{'compile ms':>11}{'floor ms':>10}{'% copy BW':>10}{'x eager':>9}{'x compile':>10}"
    print(header)
    print("-" * len(header))
    ms = lambda v: f"{v:.4f}" if v is not None else "-"  # noqa: E731
    above_floor = False
    for r in rows:
        share = r["copy_floor"] / r["jitops"] if r["copy_floor"] else None
        bandwidth = "-" if share is None else f"{share:.0%}" + ("*" if share > 1 else "")
        above_floor |= share is not None and share > 1
        print(
            f"{r['op']:<24}{r['size']:<24}{r['pass']:<18}{ms(r['jitops']):>10}{ms(r['eager']):>10}{ms(r['compile']):>11}"
            f"{ms(r['copy_floor']):>10}{bandwidth:>10}{ratio(r['eager'], r['jitops']):>9}{ratio(r['compile'], r['jitops']):>10}"
        )
    if above_floor:
        print(
            "* above 100%: no pass can move its bytes faster than a copy does, so this is the floor's noise "
            "(or the working set fit a cache the copy's did not); read it as 'at the floor'"
        )


def configuration(row: dict) -> str:
    """What a row's size label adds to its shape (upfirdn2d's "up2", "down2"): one line each."""
    words = row["size"].split()
    return " ".join(w for w in words if not (w[0].isdigit() or "=" in w))


def plot(rows: list[dict], path: str, title: str) -> None:
    """Per op, two panels: the training step's time (forward+backward) against size, one line per
    implementation and configuration; below it, how many times faster jitops is than eager and
    torch.compile, forward and forward+backward, with a line at 1x."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        raise SystemExit("--plot needs matplotlib (pip install matplotlib); --json saves the results to plot elsewhere") from None
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig, axes = plt.subplots(2, len(ops), figsize=(4.6 * len(ops), 9), squeeze=False)
    colors = {"jitops": "C0", "eager": "C1", "compile": "C2", "copy_floor": "C3"}
    for column, op in enumerate(ops):
        mine = [r for r in rows if r["op"] == op]
        configurations = list(dict.fromkeys(configuration(r) for r in mine))
        step = "forward+backward" if any(r["pass"] == "forward+backward" for r in mine) else "forward"
        time_ax, speed_ax = axes[0][column], axes[1][column]
        for number, config in enumerate(configurations):
            dashes, suffix = ["-", "--", ":"][number % 3], f", {config}" if config else ""
            selected = sorted((r for r in mine if configuration(r) == config), key=lambda r: r["scale"])
            for impl in IMPLEMENTATIONS + ("copy_floor",):
                points = [(r["scale"], r[impl]) for r in selected if r["pass"] == step and r[impl] is not None]
                if points:
                    time_ax.plot(
                        *zip(*points), dashes, color=colors[impl], marker="o", ms=4, label=f"{impl.replace('_', ' ')}{suffix}"
                    )
            for baseline in ("eager", "compile"):
                for pass_name, marker, short in (("forward", "^", "fwd"), ("forward+backward", "o", "fwd+bwd")):
                    points = [
                        (r["scale"], r[baseline] / r["jitops"])
                        for r in selected
                        if r["pass"] == pass_name and r[baseline] is not None and r["jitops"]
                    ]
                    if points:
                        speed_ax.plot(
                            *zip(*points),
                            dashes,
                            color=colors[baseline],
                            marker=marker,
                            ms=5,
                            label=f"vs {baseline}, {short}{suffix}",
                        )
        time_ax.set(xscale="log", yscale="log", ylabel=f"ms per {step}", title=op)
        speed_ax.axhline(1.0, color="black", linewidth=0.8)
        speed_ax.set(xscale="log", xlabel="problem size (elements)", ylabel="jitops is N x faster")
        speed_ax.set_ylim(bottom=0)
        speed_ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
        for ax in (time_ax, speed_ax):
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels run into each other
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(
                fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16 if ax is time_ax else -0.2), ncol=2, frameon=False
            )
    fig.suptitle(
        f"{title}\ntop: time of one {'training step' if step != 'forward' else 'call'}; "
        "bottom: speed-up of jitops (above the black line: jitops is faster)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def environment(device: str) -> str:
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    return f"{where}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ops", nargs="*", metavar="OP", help=f"ops to time: {', '.join(OPS)} (default: all)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--plot", help="write a PNG of time against size to this file")
    parser.add_argument("--from-json", help="skip measuring; report (and plot) results saved by --json")
    args = parser.parse_args()
    unknown = [op for op in args.ops if op not in OPS]
    if unknown:
        parser.error(f"unknown op {', '.join(unknown)}; choose from {', '.join(OPS)}")

    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        rows, title = saved["rows"], saved["environment"]
    else:
        torch.manual_seed(0)
        dtype = getattr(torch, args.dtype)
        title = f"{environment(args.device)}, {args.dtype}"
        print(title)
        rows = []
        for op in args.ops or OPS:
            for case in OPS[op](args.device, dtype):
                check_correct(op, case)
                rows += measure(op, case, args.device)
                print(
                    f"  measured {op} {case.size}: "
                    + ", ".join(
                        f"{r['pass']} jitops {r['jitops']:.4f} eager {r['eager'] or 0:.4f} compile {r['compile'] or 0:.4f} ms"
                        for r in rows
                        if r["size"] == case.size
                    ),
                    flush=True,
                )
                del case
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": title, "rows": rows}, f, indent=1)
    if args.plot:
        plot(rows, args.plot, title)


if __name__ == "__main__":
    main()
