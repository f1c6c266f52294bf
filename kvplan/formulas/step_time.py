"""The step-time model: how long a decode step or a prefill takes on a device, at its floor.

time floor = max(bytes / bandwidth, FLOPs / peak): a step cannot move its bytes faster than the
memory streams, nor do its arithmetic faster than the peak. `roofline`, `measure` and the planner
all predict through these functions; the device enters as `Rates` (a datasheet's or measured).
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan.anatomy.model import ModelSpec
from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.flops import flops_per_decode_token, prefill_flops
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.weights import weight_bytes_read_per_decode_step


class Rates(NamedTuple):
    """What a device sustains: memory bandwidth and matmul throughput in the compute dtype."""

    bandwidth_bytes_per_s: float
    peak_flop_per_s: float


def time_floor_s(num_bytes: float, flops: float, rates: Rates) -> float:
    """Roofline time floor: max(bytes / BW, FLOPs / peak)."""
    return max(num_bytes / rates.bandwidth_bytes_per_s, flops / rates.peak_flop_per_s)


def bound(num_bytes: float, flops: float, rates: Rates) -> str:
    """Which roof limits: 'memory' when moving the bytes takes at least as long as the FLOPs."""
    memory_s = num_bytes / rates.bandwidth_bytes_per_s
    return "memory" if memory_s >= flops / rates.peak_flop_per_s else "compute"


class Step(NamedTuple):
    batch_size: int
    context_len: int
    flops: float
    bytes: float
    time_floor_s: float
    bound: str

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def _step(batch_size: int, context_len: int, flops: float, num_bytes: float, rates: Rates) -> Step:
    return Step(
        batch_size,
        context_len,
        flops,
        num_bytes,
        time_floor_s(num_bytes, flops, rates),
        bound(num_bytes, flops, rates),
    )


def decode_step(
    spec: ModelSpec,
    rates: Rates,
    batch_size: int,
    context_len: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> Step:
    """One decode step of `batch_size` sequences at `context_len`, per GPU:
    FLOPs = B * f(s) / tp; bytes = weights read per step / tp + B * KV(s) per rank."""
    flops = batch_size * flops_per_decode_token(spec, context_len) / tp
    weights = weight_bytes_read_per_decode_step(spec, weights_dtype, batch_size) / tp
    num_bytes = weights + batch_size * kv_bytes_per_sequence(spec, context_len, fmt, tp)
    return _step(batch_size, context_len, flops, num_bytes, rates)


def prefill_step(
    spec: ModelSpec,
    rates: Rates,
    num_tokens: int,
    weights_dtype: str,
    fmt: KvFormat,
    tp: int = 1,
) -> Step:
    """Prefill of one sequence of `num_tokens`: weights read once, the KV written once."""
    flops = prefill_flops(spec, num_tokens) / tp
    weights = weight_bytes_read_per_decode_step(spec, weights_dtype, num_tokens) / tp
    num_bytes = weights + kv_bytes_per_sequence(spec, num_tokens, fmt, tp)
    return _step(1, num_tokens, flops, num_bytes, rates)
