"""FLOP counts of a forward pass: 2 FLOP per active parameter per token for the projections and
MLP, plus attention counted per layer with its real heads, head widths and window.

Notation: P_m = active parameters that take part in matmuls (the input-embedding table is a
lookup, not a matmul), H_q query heads, d_qk / d_v per-head widths, W window, s context, n tokens.
"""

from kvplan.anatomy.model import Attention, CacheKind, ModelSpec, distinct_layers
from kvplan.formulas.kv import compressed_read_bytes


def matmul_params(spec: ModelSpec) -> int:
    """P_m: active parameters used in matmuls per token (excludes the embedding lookup table)."""
    return spec.params_active - spec.embedding_lookup_params


def _decode_flop_per_key(attn: Attention) -> int:
    """FLOPs per query token per attended key in one layer: 2*H_q*(d_qk + d_v) for QK^T and AV.
    MLA decode runs absorbed (FlashMLA, vLLM): scores and outputs over the latent,
    2*H_q*((kv_lora + rope) + kv_lora)."""
    if attn.kind is CacheKind.MLA:
        return 2 * attn.num_q_heads * (2 * attn.mla_kv_lora_rank + attn.mla_rope_dim)
    return 2 * attn.num_q_heads * (attn.qk_head_dim + attn.v_head_dim)


def attention_flops_per_decode_token(spec: ModelSpec, context_len: int) -> int:
    """Attention FLOPs for one new token attending to `context_len` cached positions (the keys
    held, and a DeepSeek-V4 layer's compressed entries it attends: decode_keys_attended)."""
    return sum(
        _decode_flop_per_key(layer.attention)
        * decode_keys_attended(layer.attention, context_len)
        * count
        for layer, count in distinct_layers(spec.layers)  # each kind of layer once, times its count
        if layer.attention is not None
    )


def decode_keys_attended(attn: Attention, context_len: int) -> int:
    """Keys one decode's query attends in a layer: those held (tokens_held) and, on a
    DeepSeek-V4 compressed layer, the compressed entries it reads (compressed_read_bytes of one
    byte each: a CSA layer's top-k, an HCA layer's every one)."""
    keys = attn.tokens_held(context_len)
    if attn.compress_ratio:
        entries = attn.compressed_entries(context_len)
        keys += compressed_read_bytes(entries, attn.compressed_topk, 1, 0)
    return keys


def flops_per_decode_token(spec: ModelSpec, context_len: int) -> int:
    """f(s) = 2*P_m + attention FLOPs at context s (the seed's 2P + 4*L*d_model*s for MHA/GQA)."""
    return 2 * matmul_params(spec) + attention_flops_per_decode_token(spec, context_len)


def causal_keys_attended(num_tokens: int, window: int | None, chunked: bool = False) -> int:
    """Sum over query positions t = 1..n of the keys each attends to under a causal mask:
    n(n+1)/2 in full; capped at W for a sliding window; restarted every W tokens when chunked."""
    n = num_tokens
    if window is None:
        return n * (n + 1) // 2
    w = window
    if chunked:
        full, rest = divmod(n, w)
        return full * w * (w + 1) // 2 + rest * (rest + 1) // 2
    if n <= w:
        return n * (n + 1) // 2
    return w * (w + 1) // 2 + (n - w) * w


def prefill_flops(spec: ModelSpec, num_tokens: int) -> int:
    """FLOPs to prefill `num_tokens`: 2*(P_m - P_head)*n + 2*P_head + causal attention (what
    FlashAttention computes, skipping masked tiles): the head computes the logits of the last
    position only, the one sampled (vLLM's logits_indices, SGLang's LogitsProcessor). Prefill MLA
    runs un-absorbed: per-head d_qk = nope + rope, d_v."""
    head = spec.head_params if num_tokens else 0
    total = 2 * (matmul_params(spec) - head) * num_tokens + 2 * head
    for attn in spec.attention_layers():
        keys = causal_keys_attended(
            num_tokens,
            attn.window if attn.kind.windowed else None,
            chunked=attn.kind is CacheKind.CHUNKED,
        )
        total += 2 * attn.num_q_heads * (attn.qk_head_dim + attn.v_head_dim) * keys
    return total
