"""Timing protocol: every item (probe or point) is timed in the same interleaved rounds, so that
drift and background load hit each of them alike; the median and p20/p80 of each.

CPU: time.perf_counter_ns around each call; with one thread, the time that thread ran
(CLOCK_THREAD_CPUTIME_ID), so that a call preempted by another process is not charged for the
wait (on a shared machine a 300 ms step is preempted far more often than a 5 ms probe, which
would bias every prediction low). Items marked cold have the caches flushed before each call (a read
over twice the last-level cache, untimed: clean lines, as a step's later operators find them).
CUDA: a pair of CUDA events around each call and an L2 flush (zeroing twice the L2) before each;
nothing inside the timed call waits for the device: the events are read once per round.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from kvplan.record import NamedTuple

# the standard error of a median is ~1.2533 sigma / sqrt(n), and the p20-p80 range is ~1.683
# sigma of a normal sample: 2 standard errors = NOISE_FACTOR x spread / sqrt(n)
NOISE_FACTOR = 2 * 1.2533 * 2 / 1.683


def noise(spread: float, runs: int) -> float:
    """Two standard errors of a median of `runs` values whose spread (half the p20-p80 range
    relative to the median, Timing.spread) is `spread`: how far the median may sit from the
    truth by chance alone (relative)."""
    return NOISE_FACTOR * spread / math.sqrt(max(1, runs))


class Timing(NamedTuple):
    median_s: float
    p20_s: float
    p80_s: float
    runs: int
    p25_s: float | None = None

    @property
    def typical_s(self) -> float:
        """The time a call takes when nothing else gets in its way: the 25th percentile of the
        samples (background load, cache pollution and preemption only ever slow a call down, so
        the low quartile is robust where a median drifts with the machine's load)."""
        return self.p25_s if self.p25_s is not None else self.median_s

    @property
    def spread(self) -> float:
        """Half the p20-p80 range relative to the median: this item's run-to-run noise."""
        return (self.p80_s - self.p20_s) / 2 / self.median_s if self.median_s > 0 else 0.0


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
        _percentile(ordered, 0.25),
    )


class Item(NamedTuple):
    """Something to time: a label for the progress display, the call, and whether it must find
    the caches cold."""

    key: str
    label: str
    fn: Callable[[], object]
    cold: bool = False


class Clock:
    """Times single calls on one device; `flush` evicts the caches between calls."""

    def __init__(self, device: str, cache_bytes: int, thread_time: bool = False):
        import torch

        self.device = device
        self.cuda = device == "cuda"
        self.now = time.thread_time_ns if thread_time and not self.cuda else time.perf_counter_ns
        self.kind = "cuda_events" if self.cuda else "thread_cpu" if thread_time else "wall"
        # twice the last-level cache (the L2 on a GPU), streamed before each cold call
        scratch = max(2 * cache_bytes, 8 << 20) // 4
        self.scratch = torch.ones(scratch, dtype=torch.float32, device=device)
        self.pending: list[tuple] = []

    def flush(self) -> None:
        if self.cuda:
            self.scratch.zero_()
        else:  # read, not write: evicting dirty lines would slow the timed call's own reads
            self.scratch.sum()

    def time_call(self, fn: Callable[[], object], cold: bool, record: Callable[[float], None]):
        """Time one call; on CUDA the reading is deferred to `settle` (no sync in the step)."""
        if cold:
            self.flush()
        if self.cuda:
            import torch

            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            self.pending.append((begin, end, record))
            return
        t0 = self.now()
        fn()
        record((self.now() - t0) * 1e-9)

    def settle(self) -> None:
        """Read the CUDA events of the calls timed since the last settle (one sync)."""
        if not self.pending:
            return
        self.pending[-1][1].synchronize()
        for begin, end, record in self.pending:
            record(begin.elapsed_time(end) * 1e-3)
        self.pending.clear()


Progress = Callable[[str, float, float], None]  # (step, fraction done, seconds left)


def _flush_time(clock: Clock) -> float:
    start = time.perf_counter()
    for _ in range(3):
        clock.flush()
    if clock.cuda:
        import torch

        torch.cuda.synchronize()
    return (time.perf_counter() - start) / 3


def time_rounds(
    items: list[Item],
    clock: Clock,
    rounds: int,
    min_sample_s: float,
    progress: Progress | None = None,
) -> dict[str, Timing]:
    """Warm every item up (which also sizes the work and the ETA), then `rounds` rounds in which
    every item runs once, in an order rotated each round. A sample is the mean of `inner`
    back-to-back calls, enough to last `min_sample_s` (each call timed alone, the flushes
    between them untimed). Returns each item's Timing over its samples."""
    progress = progress or (lambda step, done, left: None)
    single: dict[str, float] = {}
    for item in items:
        progress(f"warm-up: {item.label}", 0.0, math.nan)
        times: list[float] = []
        for _ in range(2):
            clock.time_call(item.fn, item.cold, times.append)
            clock.settle()
        single[item.key] = max(min(times), 1e-9)
    flush_s = _flush_time(clock)
    inner = {key: max(1, math.ceil(min_sample_s / t)) for key, t in single.items()}
    # the expected wall time of one sample: its calls, and a flush before each cold one
    cost = {
        item.key: inner[item.key] * (single[item.key] + (flush_s if item.cold else 0.0))
        for item in items
    }
    total = rounds * sum(cost.values())
    samples: dict[str, list[float]] = {item.key: [] for item in items}
    began, done = time.perf_counter(), 0.0
    for r in range(rounds):
        for item in items[r % len(items) :] + items[: r % len(items)]:
            elapsed = time.perf_counter() - began
            left = total - done if done == 0 else elapsed / done * (total - done)
            progress(f"round {r + 1}/{rounds}: {item.label}", done / total, max(0.0, left))
            calls: list[float] = []
            for _ in range(inner[item.key]):
                clock.time_call(item.fn, item.cold, calls.append)
            clock.settle()
            samples[item.key].append(sum(calls) / len(calls))
            done += cost[item.key]
    progress("done", 1.0, 0.0)
    return {key: summarize(values) for key, values in samples.items()}
