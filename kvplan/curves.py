"""Measured curves read between their points: one interpolation for every layer (the step
model's rate curves, kvplan.formulas.step_time; the kernel-row ratios a GPU borrows by,
kvplan.inputs.kernel_tables)."""

from __future__ import annotations

import math


def curve_value(curve: tuple[tuple[float, float], ...], size: float) -> float:
    """A rate at `size`: linear in log(size) and log(rate) between the measured points, the
    nearest point's value beyond either end (never extrapolated)."""
    if not curve:
        raise ValueError("empty throughput curve")
    if size <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
        if size == x1:
            return y1
        if size < x1:
            t = math.log(size / x0) / math.log(x1 / x0)
            return math.exp(math.log(y0) + t * math.log(y1 / y0))
    return curve[-1][1]


def curve_time_s(curve: tuple[tuple[float, float], ...], size: float) -> float:
    """A measured time at `size` (a message's bytes): linear in log(size) and log(time) between
    the measured points, the smallest point's time below it, and beyond the largest point its
    time grown in proportion to the size (the largest measured rate kept)."""
    if not curve:
        raise ValueError("empty time curve")
    last_size, last_s = curve[-1]
    if size > last_size:
        return last_s * size / last_size
    return curve_value(curve, size)
