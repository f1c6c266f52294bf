"""Roofline quantities of a model on a device: the ridge point, decode's asymptotic intensity,
the critical context s*, the throughput ceiling BW/(s*k), and B_read.

Notation: f(s) FLOPs per decode token at context s, KV(s) cache bytes per sequence, BW bandwidth.
"""

from kvplan.anatomy.model import ModelSpec
from kvplan.formulas.dtypes import KvFormat
from kvplan.formulas.flops import flops_per_decode_token
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.weights import weight_bytes_read_per_decode_step

MAX_CONTEXT_SEARCH = 1 << 30  # tokens: where the search for s* gives up (a bounded cache)
MAX_BATCH_SEARCH = 1e9  # sequences: the upper end of the B_read bisection


def ridge_flop_per_byte(peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """I* = peak / bandwidth (FLOP per byte): below it a kernel is memory-bound."""
    return peak_flop_per_s / bandwidth_bytes_per_s


def compute_dtype(weights_dtype: str) -> str:
    """The tensor-core dtype the matmuls run in: fp8 weights run fp8 GEMMs; 4-bit and int8
    weight-only formats dequantize to bf16; fp32 is taken at the bf16 peak (TF32-class)."""
    return "fp8" if weights_dtype == "fp8" else "fp16" if weights_dtype == "fp16" else "bf16"


def asymptotic_intensity(spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1) -> float:
    """I_inf(s) = f(s) / KV(s): decode intensity as B -> infinity (weights amortised away)."""
    return (
        flops_per_decode_token(spec, context_len)
        / tp
        / kv_bytes_per_sequence(spec, context_len, fmt, tp)
    )


def critical_context_len(spec: ModelSpec, ridge: float, fmt: KvFormat, tp: int = 1) -> int | None:
    """s*: the longest context at which I_inf(s) still reaches the ridge, so that enough batching
    makes decode compute-bound. None when no context reaches it (or every context does)."""
    lo, hi = 1, MAX_CONTEXT_SEARCH
    if asymptotic_intensity(spec, lo, fmt, tp) < ridge:
        return None
    if asymptotic_intensity(spec, hi, fmt, tp) >= ridge:
        return None  # bounded cache (all-sliding or state-only): never memory-walled by context
    while hi - lo > 1:  # I_inf falls as s grows
        mid = (lo + hi) // 2
        if asymptotic_intensity(spec, mid, fmt, tp) >= ridge:
            lo = mid
        else:
            hi = mid
    return lo


def ceiling_tokens_per_s(bandwidth_bytes_per_s: float, kv_bytes_per_seq: float) -> float:
    """BW / (s * k): the decode token rate no batch size can beat (every KV byte read per token)."""
    return bandwidth_bytes_per_s / kv_bytes_per_seq


def batch_equal_memory(weights_bytes: float, kv_bytes_per_seq: float) -> float | None:
    """B_mem = weights stored / KV per sequence: the batch at which the cache's memory equals the
    weights' memory (the seed's B_equal)."""
    if kv_bytes_per_seq <= 0:
        return None
    return weights_bytes / kv_bytes_per_seq


def batch_equal_reads(
    spec: ModelSpec, context_len: int, weights_dtype: str, fmt: KvFormat, tp: int = 1
) -> float:
    """B_read: the batch at which a decode step's KV reads equal its weight reads, which is where
    throughput reaches half of the ceiling BW/(s*k). Solved numerically: an MoE step reads more
    experts as the batch grows, and the input embedding is a lookup of B rows."""
    kv = kv_bytes_per_sequence(spec, context_len, fmt, tp)
    lo, hi = 0.0, MAX_BATCH_SEARCH
    read: dict[
        int, float
    ] = {}  # by whole batch: once the bracket is narrower than one, 1-2 of them
    for _ in range(200):
        mid = (lo + hi) / 2
        batch = max(1, round(mid))
        weights = read.get(batch)
        if weights is None:
            weights = read[batch] = weight_bytes_read_per_decode_step(spec, weights_dtype, batch)
        if weights / tp > mid * kv:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
