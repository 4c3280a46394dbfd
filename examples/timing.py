# SPDX-License-Identifier: MIT
"""Timing shared by the examples: warm-up, then the median of many samples.

On CUDA each sample is bracketed by CUDA events; on the CPU by perf_counter. A sample runs the
function `inner` times and reports the mean, so that calls far shorter than a launch-to-event
round trip are still timed as a user running them back to back would see them.
"""

import statistics
import time

import torch


def median_ms(fn, device: str, repeats: int = 30, warmup: int = 3, target_sample_ms: float = 2.0) -> float:
    """Median milliseconds per call of fn() on device."""
    for _ in range(warmup):
        fn()
    inner = max(1, int(target_sample_ms / max(_sample_ms(fn, device, 1), 1e-3)))
    return statistics.median(_sample_ms(fn, device, inner) for _ in range(repeats))


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
