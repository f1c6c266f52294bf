"""FLOP counts of a forward pass: 2 FLOP per active parameter per token for the projections and
MLP, plus attention counted per layer with its real heads, head widths and window.

Notation: P_m = active parameters that take part in matmuls (the input-embedding table is a
lookup, not a matmul), H_q query heads, d_qk / d_v per-head widths, W window, s context, n tokens.
"""

from kvplan.anatomy.model import Attention, CacheKind, ModelSpec, distinct_layers
from kvplan.formulas.kv import block_topk_tokens, compressed_read_bytes, topk_read_bytes


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
    held, and a DeepSeek-V4 layer's compressed entries it attends: decode_keys_attended), and
    a sparse indexer scoring its keys (decode_indexer_flops: DeepSeek-V4's compressed ones,
    DSA's every cached one)."""
    return sum(
        (
            _decode_flop_per_key(layer.attention)
            * decode_keys_attended(layer.attention, context_len)
            + decode_indexer_flops(layer.attention, context_len)
        )
        * count
        for layer, count in distinct_layers(spec.layers)  # each kind of layer once, times its count
        if layer.attention is not None
    )


def decode_keys_attended(attn: Attention, context_len: int) -> int:
    """Keys one decode's query attends in a layer: those held (tokens_held), a DSA layer's
    top-k of them (topk_read_bytes of one byte each, min(s, index_topk): vLLM's sparse MLA
    attends the indexer's picks alone), a MiniMax-M3 sparse layer's top-k blocks
    (block_topk_tokens) and, on a DeepSeek-V4 compressed layer, the compressed
    entries it reads (compressed_read_bytes of one byte each: a CSA layer's top-k, an HCA
    layer's every one)."""
    keys = attn.tokens_held(context_len)
    if attn.indexer_topk:
        keys = topk_read_bytes(keys, attn.indexer_topk, 1, 0)
    if attn.sparse_topk_blocks:  # MiniMax-M3: the top-k blocks' tokens
        keys = block_topk_tokens(keys, attn.sparse_block_size, attn.sparse_topk_blocks)
    if attn.compress_ratio:
        entries = attn.compressed_entries(context_len)
        keys += compressed_read_bytes(entries, attn.compressed_topk, 1, 0)
    return keys


def indexer_flop_per_key(attn: Attention) -> int:
    """FLOPs a sparse-attention indexer spends on one key for one query token:
    2 * index heads * index head dim, its heads' q.k scores. DeepSeek-V4's CSA layer scores its
    compressed keys (transformers' DeepseekV4IndexerScorer, q [B, S, H, d] @ compressed_kv^T ->
    [B, S, H, T]; vLLM 0.32's SparseAttnIndexer, fp8_fp4_mqa_logits / fp8_fp4_paged_mqa_logits
    of index_n_heads x index_head_dim, models/deepseek_v4/attention.py:948-949); DeepSeek-V3.2's
    DSA (and GLM-5's) every cached token's key (DeepSeek-V3.2-Exp's reference
    inference/model.py Indexer.forward, index_score = fp8_index(q_fp8, weights, k_cache[:bsz,
    :end_pos], ...), q [b, m, index_n_heads, index_head_dim] . k [b, n, index_head_dim]; vLLM's
    layers/sparse_attn_indexer.py, the same two DeepGEMM kernels over each query's keys);
    MiniMax-M3's sparse layers every cached token's key too (sparse_num_index_heads, its KV
    heads, score each token's index key, and the top-k picks blocks by their largest score,
    sparse_score_type "max": AMD ATOM's models/minimax_m3.py, minimax_m3_index_topk and
    minimax_m3_index_topk_decode over index_cache at every prefill and decode). The heads'
    weighting and the top-k add a few FLOPs per key, not counted. 0 for a layer without its own
    indexer."""
    if attn.compressed_topk:
        return 2 * attn.indexer_num_heads * attn.compressed_indexer_dim
    if attn.indexer_head_dim:
        return 2 * attn.indexer_num_heads * attn.indexer_head_dim
    return 0


def decode_indexer_flops(attn: Attention, context_len: int) -> int:
    """FLOPs of the indexer for one decode at `context_len`. DeepSeek-V4's scores every
    compressed entry, unless the entries are no more than its top-k and it is skipped (vLLM 0.32
    models/deepseek_v4/attention.py:1084-1105, max_seq_len // compress_ratio <= topk_tokens):
    compressed_read_bytes of indexer_flop_per_key per indexed key, as the step reads their keys.
    DSA's (and MiniMax-M3's) scores every cached token, the decode's own included, at any
    context (vLLM's sparse_attn_indexer runs fp8_fp4_paged_mqa_logits over seq_lens for every
    decode)."""
    per_key = indexer_flop_per_key(attn)
    if not per_key:
        return 0
    if not attn.compress_ratio:
        return per_key * context_len
    entries = attn.compressed_entries(context_len)
    return compressed_read_bytes(entries, attn.compressed_topk, 0, per_key)


def prefill_indexer_flops(
    attn: Attention,
    new_tokens: int,
    cached_tokens: int,
    batch_end: int = 0,
    batch_decodes: int = 0,
) -> int:
    """FLOPs of the indexer over a prefill chunk of `new_tokens` after `cached_tokens`:
    indexer_flop_per_key for each key it scores. DeepSeek-V4's: the keys prefill_indexed_keys
    counts. DSA's: the token at position p (1-based) scores p keys, causally (vLLM's
    sparse_attn_indexer, fp8_fp4_mqa_logits over [cu_seqlen_ks, cu_seqlen_ke)), unless the
    step is prefills alone (`batch_decodes` 0) that all end within DSA's top-k (the longest at
    `batch_end`, this chunk's end if longer): then vLLM prefills with dense MHA and skips the
    indexer's scoring (layers/attention/sparse_mla_attention.py, use_dense_mha =
    prefill_max_seq_len <= topk_tokens; models/deepseek_v32/attention.py's
    enable_short_prefill_scoring_skip, its num_decode_tokens == 0 guard; MiniMax-M3 scores
    every chunk)."""
    per_key = indexer_flop_per_key(attn)
    if not per_key:
        return 0
    end = cached_tokens + new_tokens
    if not attn.compress_ratio:
        if attn.indexer_topk and not batch_decodes and max(end, batch_end) <= attn.indexer_topk:
            return 0
        return per_key * (
            causal_keys_attended(end, None) - causal_keys_attended(cached_tokens, None)
        )
    return per_key * prefill_indexed_keys(
        attn.compress_ratio, attn.compressed_topk, new_tokens, cached_tokens
    )


def prefill_indexed_keys(ratio: int, topk: int, new_tokens: int, cached_tokens: int) -> int:
    """Compressed keys DeepSeek-V4's indexer scores over a prefill chunk: the token at position
    p (1-based) scores floor(p / ratio) (vLLM 0.32 v1/attention/backends/mla/indexer.py:
    217-229, balanced_prefill_row_shard's cost of a row, (first_key + row) // compress_ratio);
    none where the chunk ends within `topk` entries (models/deepseek_v4/attention.py:1084-1105
    skips the indexer)."""
    end = cached_tokens + new_tokens
    if end // ratio <= topk:
        return 0
    return _through(end, ratio) - _through(cached_tokens, ratio)


def _through(n: int, ratio: int) -> int:
    """The sum of p // ratio for p = 1..n."""
    q, rest = divmod(n, ratio)
    return ratio * q * (q - 1) // 2 + q * (rest + 1)


def prefill_compressed_keys(ratio: int, topk: int, new_tokens: int, cached_tokens: int) -> int:
    """Compressed entries a DeepSeek-V4 layer's prefill chunk attends, summed over its tokens
    (beside the window's keys): the token at position p (1-based) holds p // ratio entries
    (vLLM 0.32 models/deepseek_v4 sparse_mla.py, _build_c128a_topk_metadata_kernel's
    num_compressed = (position + 1) // compress_ratio, its prefill rows too); an HCA layer
    attends every one, a CSA layer the `compressed_topk` its indexer picks, all while they are
    no more (the reference's per-token attention over cat(window, compressed[topk])). 0 for a
    layer that is not compressed (`ratio` 0)."""
    if not ratio:
        return 0

    def attended(n: int) -> int:  # the sum of min(p // ratio, topk) for p = 1..n
        if not topk or n < topk * ratio:
            return _through(n, ratio)
        last = topk * ratio - 1  # the last position below the cap
        return _through(last, ratio) + topk * (n - last)

    return attended(cached_tokens + new_tokens) - attended(cached_tokens)


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
    runs un-absorbed: per-head d_qk = nope + rope, d_v. A DeepSeek-V4 layer's tokens attend its
    compressed entries too (prefill_compressed_keys); a sparse indexer scores each token's keys
    (prefill_indexer_flops: DeepSeek-V4's compressed ones, DSA's every cached one)."""
    head = spec.head_params if num_tokens else 0
    total = 2 * (matmul_params(spec) - head) * num_tokens + 2 * head
    for attn in spec.attention_layers():
        keys = causal_keys_attended(
            num_tokens,
            attn.window if attn.kind.windowed else None,
            chunked=attn.kind is CacheKind.CHUNKED,
        )
        keys += prefill_compressed_keys(attn.compress_ratio, attn.compressed_topk, num_tokens, 0)
        total += 2 * attn.num_q_heads * (attn.qk_head_dim + attn.v_head_dim) * keys
        total += prefill_indexer_flops(attn, num_tokens, 0)
    return total
