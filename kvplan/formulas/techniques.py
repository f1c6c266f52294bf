"""Formulas of the cache techniques `kvplan whatif` prices that the step-time model does not hold
itself: tokens kept after eviction or merging, the FLOPs a low-rank cache spends rebuilding keys,
and speculative decoding's verification step and time per token.

Notation (docs/formulas.md): s context tokens, F a fraction of them, k drafted tokens per round,
a the probability that the target accepts one drafted token, r a low-rank cache's width per head.
"""

from __future__ import annotations

import math

from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.formulas.step_time import Op, OpKind, Rates, StepTime, decode_step, floor_step


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


def lowrank_reconstruction_op(spec: ModelSpec, context_len: int, num_tokens: int, tp: int) -> Op:
    """The key rebuild of `num_tokens` decode tokens (each sequence's, or a verification's k + 1
    per sequence) as an operator of the step, on one of `tp` ranks: FLOPs only (the latent it
    multiplies is the cache the attention already reads), priced with the step's other
    operators (floor_sums)."""
    flops = num_tokens * (lowrank_reconstruction_flops_per_decode_token(spec, context_len) / tp)
    return Op("key_rebuild", OpKind.DECODE_ATTENTION, num_tokens * context_len, flops, 0, 0, 0)


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
) -> StepTime:
    """The target's verification of `tokens_per_sequence` tokens per sequence (k drafted + 1) in
    one forward pass: the FLOPs and weight reads of batch x tokens decode tokens, but each
    sequence's cache read once: decode_step(B * t) less (B * t - B) * KV(s) bytes."""
    tokens = batch_size * tokens_per_sequence
    step = decode_step(spec, rates, tokens, context_len, weights_dtype, fmt, tp)
    reread = (tokens - batch_size) * kv_bytes_per_sequence(spec, context_len, fmt, tp)
    flops, num_bytes = step.counts()
    return floor_step(batch_size, context_len, flops, num_bytes - reread, rates)


def tokens_per_round_from_positions(position_rates) -> float:
    """Tokens a round yields per sequence from per-position acceptance rates, as vLLM's
    spec-decode metrics print them (position i: the share of rounds whose i-th drafted token
    was accepted, every one before it too): 1 + Σ_i rate_i, vLLM's "Mean acceptance length"."""
    return 1.0 + sum(position_rates)


def speculative_round_s(draft_step_s, verify_step_s, draft_tokens: int, first_draft_s=None):
    """One round's seconds: k draft steps, then one verification, k * t_draft + t_verify;
    with `first_draft_s` the first draft step takes that instead (the simulator's first runs
    the k + 1 positions the last verification settled): t_first + (k - 1) * t_draft + t_verify.
    Floats, or numpy arrays of a decode span's steps."""
    if first_draft_s is None:
        first_draft_s = draft_step_s
    return first_draft_s + (draft_tokens - 1) * draft_step_s + verify_step_s


def speculative_overlap_round_s(
    draft_step_s,
    verify_step_s,
    draft_tokens: int,
    first_draft_s,
    host_s,
    exposed_host_s,
):
    """One round's seconds when the host's work for the next round overlaps this round's GPU
    work (SGLang's spec v2 beside the overlap scheduler), all GPU seconds: the GPU runs the
    k - 1 draft steps, the verification, then the first draft step of the next round (the
    draft extend over the verified positions, t_first); the host, which spends `host_s` a
    round, waits for the verification before the `exposed_host_s` of it that prepares the next
    round, which then overlaps only t_first:
        max(host_s, (k - 1) * t_draft + t_verify + max(t_first, exposed_host_s)).
    With exposed_host_s = 0 and host_s below the GPU's, the serial round's GPU part
    (speculative_round_s). Floats, or numpy arrays of a decode span's steps."""
    import numpy as np

    gpu_before_s = (draft_tokens - 1) * draft_step_s + verify_step_s
    return np.maximum(host_s, gpu_before_s + np.maximum(first_draft_s, exposed_host_s))


def speculative_time_per_token_s(
    draft_step_s: float, verify_step_s: float, draft_tokens: int, acceptance: float
) -> float:
    """Time per output token of one sequence: a round (k draft steps, then one verification)
    divided by the tokens it yields, (k * t_draft + t_verify) / E[tokens per round]."""
    round_s = speculative_round_s(draft_step_s, verify_step_s, draft_tokens)
    return round_s / expected_tokens_per_round(draft_tokens, acceptance)


def speculative_pool_blocks(
    num_blocks: int,
    available_bytes: float,
    draft_weight_bytes: float,
    target_kv_bytes_per_token: float,
    draft_kv_bytes_per_token: float,
) -> int:
    """Blocks of a KV pool that also holds a draft: the draft's weights come out of the
    memory the pool had, and every block holds the draft's layers beside the target's (vLLM
    registers the draft's attention layers in the same KV cache groups; SGLang's draft pool
    has as many tokens as the target's):
    floor(N x (A - W_draft) / A x KV_target / (KV_target + KV_draft))."""
    if available_bytes <= draft_weight_bytes:
        return 0
    memory = (available_bytes - draft_weight_bytes) / available_bytes
    split = target_kv_bytes_per_token / (target_kv_bytes_per_token + draft_kv_bytes_per_token)
    return math.floor(num_blocks * memory * split)
