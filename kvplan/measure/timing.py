"""Timing protocol: warm-up, then repeated runs; the median and the 20th/80th percentiles.

CPU: time.perf_counter_ns around each call, a fixed thread count (recorded by the caller).
CUDA: a pair of CUDA events per call, synchronisation, and an L2 flush (zeroing a buffer twice
the L2 size) before every timed call, so that each run reads from HBM.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import NamedTuple


class Timing(NamedTuple):
    median_s: float
    p20_s: float
    p80_s: float
    runs: int

    def to_json(self) -> dict:
        return {
            "median_s": self.median_s,
            "p20_s": self.p20_s,
            "p80_s": self.p80_s,
            "runs": self.runs,
        }


def _percentile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    lo = int(position)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (position - lo)


def summarize(samples_s: list[float]) -> Timing:
    ordered = sorted(samples_s)
    return Timing(
        statistics.median(ordered),
        _percentile(ordered, 0.2),
        _percentile(ordered, 0.8),
        len(ordered),
    )


def time_fn(
    fn: Callable[[], object],
    *,
    device: str = "cpu",
    min_runs: int = 7,
    max_runs: int = 50,
    min_total_s: float = 0.1,
    warmup_s: float = 0.025,
    flush: Callable[[], object] | None = None,
) -> Timing:
    """Time `fn` after a warm-up: at least `min_runs` runs and `min_total_s` of timed work."""
    if device == "cuda":
        return _time_cuda(fn, min_runs, max_runs, min_total_s, warmup_s, flush)
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup_s:
        fn()
    samples: list[float] = []
    while len(samples) < max_runs and (len(samples) < min_runs or sum(samples) < min_total_s):
        if flush is not None:
            flush()
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return summarize(samples)


def _time_cuda(fn, min_runs, max_runs, min_total_s, warmup_s, flush) -> Timing:
    import torch

    if flush is None:
        l2 = (
            torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size or 256 << 20
        )
        scratch = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
        flush = scratch.zero_
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    while time.perf_counter() - start < warmup_s:
        fn()
        torch.cuda.synchronize()
    samples: list[float] = []
    while len(samples) < max_runs and (len(samples) < min_runs or sum(samples) < min_total_s):
        flush()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) * 1e-3)
    return summarize(samples)


def time_interleaved(
    fns: list[Callable[[], object]], *, device: str = "cpu", runs: int = 7, warmup_calls: int = 3
) -> list[Timing]:
    """Time several functions in alternating rounds (A B A B ...), so that machine drift (shared
    VMs vary +-20%) hits each of them alike; one Timing per function."""
    sync = lambda: None
    if device == "cuda":
        import torch

        sync = torch.cuda.synchronize
    for fn in fns:
        for _ in range(warmup_calls):
            fn()
        sync()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter_ns()
            fn()
            sync()
            samples[i].append((time.perf_counter_ns() - t0) * 1e-9)
    return [summarize(s) for s in samples]
