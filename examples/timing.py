# SPDX-License-Identifier: MIT
"""Timing shared by the examples: warm-up, then the median of many samples.

On CUDA each sample is bracketed by CUDA events; on the CPU by perf_counter. A sample runs the
function `inner` times and reports the mean, so that calls far shorter than a launch-to-event
round trip are still timed as a user running them back to back would see them.
"""

import statistics
import time

import torch

# A timing whose middle half of samples spans more than this share of its median is noise-bound
# (a busy machine): a ratio taken from it is flagged rather than printed as a result.
NOISY_SPREAD = 0.25
_flagged = False


class Ms(float):
    """Milliseconds (a median), with the spread of the samples it came from: (q3 - q1) / median."""

    spread = 0.0


def median_ms(fn, device: str, repeats: int = 30, warmup: int = 3, target_sample_ms: float = 2.0) -> Ms:
    """Median milliseconds per call of fn() on device, with the samples' spread."""
    for _ in range(warmup):
        fn()
    inner = max(1, int(target_sample_ms / max(_sample_ms(fn, device, 1), 1e-3)))
    samples = [_sample_ms(fn, device, inner) for _ in range(repeats)]
    q1, median, q3 = statistics.quantiles(samples, n=4)
    timed = Ms(median)
    timed.spread = (q3 - q1) / median if median > 0 else 0.0
    return timed


def ratio(theirs: float, ours: float) -> str:
    """theirs / ours as `2.10x`, marked `*` where either timing is noise-bound (see noise_note)."""
    global _flagged
    noisy = max(getattr(theirs, "spread", 0.0), getattr(ours, "spread", 0.0)) > NOISY_SPREAD
    _flagged |= noisy
    return f"{theirs / ours:.2f}x" + ("*" if noisy else "")


def noise_note() -> str:
    """The footnote for the ratios marked `*`, or nothing where none was."""
    if not _flagged:
        return ""
    return f"* its timings spread over more than {NOISY_SPREAD:.0%} of their median (a busy machine?): not a result; run again"


def _sample_ms(fn, device: str, inner: int) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / inner
    started = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - started) * 1e3 / inner


def train_and_time(loss_fn, optimizer, device: str, steps: int, log_every: int) -> tuple[float, float]:
    """Take `steps` optimiser steps on loss_fn() (a fresh batch's loss), printing the loss every
    log_every steps (never when 0); then time more steps. Returns (median ms per step, last loss)."""

    def step():
        loss = loss_fn()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    for i in range(steps):
        loss = step()
        if log_every and (i % log_every == 0 or i == steps - 1):
            print(f"  step {i:4d}  loss {loss.item():.6f}")
    return median_ms(step, device, repeats=20), loss.item()
