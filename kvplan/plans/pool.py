"""The KV pool of one GPU and the sequences it holds: the budget (memory the device reports x
utilization - weights per GPU - reserve) and whole paged sequences on every pipeline stage."""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import paged_bytes_per_sequence, sequences_in_pool
from kvplan.formulas.memory import runtime_reserve_bytes
from kvplan.formulas.weights import weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile
from kvplan.record import NamedTuple


class Budget(NamedTuple):
    usable_bytes: float  # reported memory x utilization
    weights_bytes: float  # per GPU
    reserve_bytes: float
    pool_bytes: float  # what is left for the KV cache, per GPU (negative: weights do not fit)


def budget(
    spec: ModelSpec,
    gpu: GpuProfile,
    wdtype: str,
    *,
    tp: int = 1,
    pp: int = 1,
    dp_attention: int = 1,
    gpu_mem_util: float = 0.9,
    reserve_bytes: float | None = None,
    max_num_batched_tokens: int = 8192,
) -> Budget:
    """One GPU's budget. `reserve_bytes` None: the activation and runtime estimate of
    kvplan.formulas.memory for this rank's share (a DP-attention rank runs at TP 1)."""
    usable = gpu.usable_memory_bytes * gpu_mem_util
    weights = weights_bytes_per_gpu(spec, wdtype, tp, pp, dp_attention)
    if reserve_bytes is None:
        rank_tp = 1 if dp_attention > 1 else tp
        reserve: float = runtime_reserve_bytes(spec, max_num_batched_tokens, rank_tp)
    else:
        reserve = reserve_bytes
    return Budget(usable, weights, reserve, usable - weights - reserve)


def max_sequences(
    stages: list[ModelSpec],
    pool: float,
    context_len: int,
    fmt: KvFormat,
    tp: int,
    block_size: int,
    prefix_tokens: int = 0,
) -> int:
    """Whole sequences of `context_len` the pool holds on every stage. A shared prefix is stored
    once, in its whole blocks (a partial block is private to each sequence)."""
    best = None
    # Only whole blocks are shared, and a sequence's last block is always its own (engines
    # compute the last token of a fully cached prompt, and generation writes after it).
    shared_tokens = min(prefix_tokens, context_len - 1) // block_size * block_size
    for stage in stages:
        per_seq = paged_bytes_per_sequence(stage, context_len, fmt, tp, block_size)
        if per_seq == 0:
            continue
        shared = 0
        if shared_tokens:
            shared = paged_bytes_per_sequence(stage, shared_tokens, fmt, tp, block_size)
            shared -= _state_bytes(stage, fmt, tp)
            per_seq -= shared
        count = sequences_in_pool(pool - shared, per_seq)
        best = count if best is None else min(best, count)
    return max(0, best or 0)


def _state_bytes(stage: ModelSpec, fmt: KvFormat, tp: int) -> int:
    return paged_bytes_per_sequence(
        stage._replace(layers=tuple(layer._replace(attention=None) for layer in stage.layers)),
        1,
        fmt,
        tp,
    )


def max_context_at_batch(
    stages: list[ModelSpec], pool: float, batch_size: int, fmt: KvFormat, tp: int, block_size: int
) -> int:
    """The longest context at which `batch_size` sequences fit (0 if none)."""

    def fits(s: int) -> bool:
        return all(
            batch_size * paged_bytes_per_sequence(st, s, fmt, tp, block_size) <= pool
            for st in stages
        )

    if pool <= 0 or not fits(1):
        return 0
    lo, hi = 1, 1 << 34
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
