"""Formulas of the cache techniques `kvplan whatif` prices that the step-time model does not hold
itself: tokens kept after eviction or merging, the FLOPs a low-rank cache spends rebuilding keys,
and speculative decoding's verification step and time per token.

Notation (docs/formulas.md): s context tokens, F a fraction of them, k drafted tokens per round,
a the probability that the target accepts one drafted token, r a low-rank cache's width per head.
"""

from __future__ import annotations

from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.step_time import Rates, Step, decode_step, floor_step


def kept_tokens(context_len: int, keep_fraction: float) -> int:
    """Tokens a sequence keeps (eviction, merging) or a step reads (sparse reads) when a fraction
    of its `context_len` is kept: max(1, round(s * fraction))."""
    return max(1, round(context_len * keep_fraction))


def lowrank_reconstruction_flops_per_decode_token(spec: ModelSpec, context_len: int) -> int:
    """FLOPs one decode token spends rebuilding keys from a low-rank cache (Palu): per attended
    key, each KV head multiplies its r-wide latent by an r x d_qk matrix, 2 * H_kv * r * d_qk.
    `spec` is the low-rank model (cache width `head_dim` = r below `qk_head_dim`); values need no
    rebuild (their up-projection folds into the output projection)."""
    total = 0
    for attn in spec.attention_layers():
        if attn.kind is not CacheKind.MLA and attn.head_dim < attn.qk_head_dim:
            per_key = 2 * attn.num_kv_heads * attn.head_dim * attn.qk_head_dim
            total += per_key * attn.tokens_held(context_len)
    return total


def expected_tokens_per_round(draft_tokens: int, acceptance: float) -> float:
    """Tokens a speculative round yields per sequence when each of k drafted tokens is accepted
    with probability a (independently, Leviathan et al. 2023): (1 - a^(k+1)) / (1 - a); the
    target's own token always counts, so at least 1 and at most k + 1."""
    if acceptance >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - acceptance ** (draft_tokens + 1)) / (1.0 - acceptance)


def verify_step(
    spec: ModelSpec,
    rates: Rates,
    batch_size: int,
    context_len: int,
    weights_dtype: str,
    fmt: KvFormat,
    tokens_per_sequence: int,
    tp: int = 1,
) -> Step:
    """The target's verification of `tokens_per_sequence` tokens per sequence (k drafted + 1) in
    one forward pass: the FLOPs and weight reads of batch x tokens decode tokens, but each
    sequence's cache read once: decode_step(B * t) less (B * t - B) * KV(s) bytes."""
    tokens = batch_size * tokens_per_sequence
    step = decode_step(spec, rates, tokens, context_len, weights_dtype, fmt, tp)
    reread = (tokens - batch_size) * kv_bytes_per_sequence(spec, context_len, fmt, tp)
    num_bytes = step.bytes - reread
    return floor_step(batch_size, context_len, step.flops, num_bytes, rates)


def speculative_time_per_token_s(
    draft_step_s: float, verify_step_s: float, draft_tokens: int, acceptance: float
) -> float:
    """Time per output token of one sequence: a round (k draft steps, then one verification)
    divided by the tokens it yields, (k * t_draft + t_verify) / E[tokens per round]."""
    round_s = draft_tokens * draft_step_s + verify_step_s
    return round_s / expected_tokens_per_round(draft_tokens, acceptance)
