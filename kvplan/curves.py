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
