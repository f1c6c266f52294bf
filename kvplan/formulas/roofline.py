"""Roofline quantities of a model on a device: the ridge point, decode's asymptotic intensity,
the critical context s*, the throughput ceiling BW/(s*k), and B_read.

Notation: f(s) FLOPs per decode token at context s, KV(s) cache bytes per sequence, BW bandwidth.
"""

from kvplan.anatomy.model import KEPT, ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.flops import attention_flops_per_decode_token, matmul_params
from kvplan.formulas.kv import kv_read_bytes_per_decode
from kvplan.formulas.weights import (  # B_mem lives with the weights: `size` needs no FLOPs
    batch_equal_memory,  # noqa: F401 (kvplan.formulas.roofline.batch_equal_memory, as before)
    weight_bytes_read_per_decode_step,
)

MAX_CONTEXT_SEARCH = 1 << 30  # tokens: where the search for s* gives up (a bounded cache)
MAX_BATCH_SEARCH = 1e9  # sequences: the upper end of the B_read bisection
_READS: dict[tuple, tuple] = {}  # batch_equal_reads's answers (see there)
_INTENSITIES: dict[tuple, tuple] = {}  # I_inf(s) per model, format and tp (see _intensity)


def ridge_flop_per_byte(peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """I* = peak / bandwidth (FLOP per byte): below it a kernel is memory-bound."""
    return peak_flop_per_s / bandwidth_bytes_per_s


def compute_dtype(weights_dtype: str) -> str:
    """The tensor-core dtype the matmuls run in: fp8 weights run fp8 GEMMs; 4-bit and int8
    weight-only formats dequantize to bf16; fp32 is taken at the bf16 peak (TF32-class)."""
    return "fp8" if weights_dtype == "fp8" else "fp16" if weights_dtype == "fp16" else "bf16"


def asymptotic_intensity(spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1) -> float:
    """I_inf(s) = f(s) / KV_read(s): decode intensity as B -> infinity (weights amortised away),
    over the KV a decode reads (kv_read_bytes_per_decode: what it holds, a DeepSeek-V4
    compressed layer's entries as read)."""
    return _intensity(spec, fmt, tp)(context_len)


def critical_context_len(spec: ModelSpec, ridge: float, fmt: KvFormat, tp: int = 1) -> int | None:
    """s*: the longest context at which I_inf(s) still reaches the ridge, so that enough batching
    makes decode compute-bound. None when no context reaches it (or every context does)."""
    intensity = _intensity(spec, fmt, tp)
    lo, hi = 1, MAX_CONTEXT_SEARCH
    if intensity(lo) < ridge:
        return None
    if intensity(hi) >= ridge:
        return None  # bounded cache (all-sliding or state-only): never memory-walled by context
    while hi - lo > 1:  # I_inf falls as s grows
        mid = (lo + hi) // 2
        if intensity(mid) >= ridge:
            lo = mid
        else:
            hi = mid
    return lo


def _intensity(spec: ModelSpec, fmt: KvFormat, tp: int):
    """asymptotic_intensity(spec, s, fmt, tp) as a function of s alone, f(s) / tp / KV_read(s)
    (f(s) = flops_per_decode_token's exact integer sum), with what does not depend on s taken out
    of the bisection, and each answer kept: the bisections of the GPU kinds (each its own ridge) share their first
    steps. Kept per spec, format and tp, with the spec (holding it keeps its id from being
    reused)."""
    key = (id(spec), fmt, tp)
    kept = _INTENSITIES.get(key)
    if kept is not None and kept[0] is spec:
        return kept[1]
    matmul_flops = 2 * matmul_params(spec)
    values: dict[int, float] = {}

    def intensity(s: int) -> float:
        found = values.get(s)
        if found is None:
            attention = attention_flops_per_decode_token(spec, s)
            kv = kv_read_bytes_per_decode(spec, s, fmt, tp)
            found = values[s] = (matmul_flops + attention) / tp / kv
        return found

    if len(_INTENSITIES) >= KEPT:
        del _INTENSITIES[next(iter(_INTENSITIES))]
    _INTENSITIES[key] = (spec, intensity)
    return intensity


def ceiling_tokens_per_s(bandwidth_bytes_per_s: float, kv_bytes_per_seq: float) -> float:
    """BW / (s * k): the decode token rate no batch size can beat (every KV byte a decode reads
    per token: kv_read_bytes_per_decode, a sparse layer's top-k rather than all it holds)."""
    return bandwidth_bytes_per_s / kv_bytes_per_seq


def batch_equal_reads(
    spec: ModelSpec, context_len: int, weights_dtype: str, fmt: KvFormat, tp: int = 1
) -> float:
    """B_read: the batch at which a decode step's KV reads equal its weight reads, which is where
    throughput reaches half of the ceiling BW/(s*k). Solved numerically: an MoE step reads more
    experts as the batch grows, and the input embedding is a lookup of B rows. It depends on
    no GPU, and `capacity --gpu all` asks it of every kind and layout: the last KEPT
    answers are kept, each with the spec it came from (holding it keeps its id from being
    reused)."""
    key = (id(spec), context_len, weights_dtype, fmt, tp)
    kept = _READS.get(key)
    if kept is not None and kept[0] is spec:
        return kept[1]
    found = _batch_equal_reads(spec, context_len, weights_dtype, fmt, tp)
    if len(_READS) >= KEPT:
        del _READS[next(iter(_READS))]
    _READS[key] = (spec, found)
    return found


def _batch_equal_reads(
    spec: ModelSpec, context_len: int, weights_dtype: str, fmt: KvFormat, tp: int
) -> float:
    kv = kv_read_bytes_per_decode(spec, context_len, fmt, tp)
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
