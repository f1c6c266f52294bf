"""The KV-cache formulas, each written once.

Notation (docs/formulas.md): L layers, Hkv KV heads, d head_dim, p bytes per element, s context
tokens, B batch. For a full-attention layer stack: bytes_per_token = 2 * L * Hkv * d * p.
"""

from kvplan.anatomy.model import KEPT, Attention, CacheKind, ModelSpec, distinct_layers
from kvplan.dtypes import KvFormat
from kvplan.record import NamedTuple


class CacheGroup(NamedTuple):
    """Layers that hold the same kind of cache, as one row of a breakdown."""

    label: str
    kind: CacheKind
    num_layers: int
    num_kv_heads: int  # per rank; 0 for state groups
    head_dim: int
    window: int | None
    bytes_per_token_per_layer: int  # per rank; 0 for state groups
    state_bytes_per_layer: int  # per rank; 0 for attention groups
    # A sub-byte cache keeps its sink and recent tokens in full precision (KvFormat); 0: none.
    full_precision_tokens: int = 0
    full_precision_bytes_per_token_per_layer: int = 0
    # DeepSeek-V4 compressed layers: one entry of these bytes per `compress_ratio` tokens
    compress_ratio: int = 0
    compressed_bytes_per_entry_per_layer: int = 0

    def compressed_bytes(self, context_len: int) -> int:
        """compressed_bytes_per_layer = floor(s / ratio) * entry bytes (0 when not compressed)."""
        if not self.compress_ratio:
            return 0
        return (context_len // self.compress_ratio) * self.compressed_bytes_per_entry_per_layer

    def tokens_held(self, context_len: int) -> int:
        if self.kind.windowed:
            assert self.window is not None, "a windowed group has a window"
            return min(context_len, self.window)
        return 0 if self.kind is CacheKind.STATE else context_len

    def full_precision_extra_bytes(self, context_len: int) -> int:
        """What the tokens kept in full precision add per layer over their quantized size:
        min(held, kept) * (full bytes per token - quantized bytes per token)."""
        kept = min(self.tokens_held(context_len), self.full_precision_tokens)
        return kept * (
            self.full_precision_bytes_per_token_per_layer - self.bytes_per_token_per_layer
        )

    def bytes_per_sequence(self, context_len: int) -> int:
        """kv_group_bytes = layers * (tokens_held(s) * bytes_per_token_per_layer + state_bytes
        + compressed_bytes(s)), plus the full-precision tokens' extra bytes of a sub-byte
        format."""
        return self.num_layers * (
            self.tokens_held(context_len) * self.bytes_per_token_per_layer
            + self.full_precision_extra_bytes(context_len)
            + self.state_bytes_per_layer
            + self.compressed_bytes(context_len)
        )


def compressed_read_bytes(entries, topk: int, kv_bytes: float, index_bytes: float, minimum=min):
    """Bytes one decode reads of a DeepSeek-V4 compressed layer's `entries` (beside its window),
    as vLLM 0.32 runs it: an HCA layer (`topk` 0) attends every entry (models/deepseek_v4/
    sparse_mla.py:405, num_compressed = (position + 1) // compress_ratio); a CSA layer's indexer
    scores every entry's compressed key, and the attention reads the `topk` it picks
    (attention.py:947 topk_tokens = index_topk; nvidia/flashmla.py:193-262, extra_k_cache with
    extra_topk_length) — unless the entries are no more than `topk`, when the indexer is skipped
    and every entry is attended (attention.py:1086-1105). `entries` and the result a float or an
    array (with np.minimum) alike."""
    if not topk:
        return entries * kv_bytes
    return minimum(entries, topk) * kv_bytes + (entries > topk) * entries * index_bytes


def topk_read_bytes(tokens, topk: int, kv_bytes: float, index_bytes: float, minimum=min):
    """Bytes one decode reads of a DSA layer's `tokens` cached tokens (DeepSeek-V3.2, GLM-5), as
    vLLM runs it: its indexer scores every cached token's key (layers/sparse_attn_indexer.py,
    fp8_fp4_paged_mqa_logits over seq_lens), and the sparse MLA reads only the latents of the
    `topk` tokens it picks (v1/attention/backends/mla/flashmla_sparse.py: flash_mla_with_kvcache
    with indices=topk_indices, index_topk of them per query token, -1 padding where the sequence
    holds fewer): min(tokens, topk) x kv_bytes + tokens x index_bytes. `tokens` and the result a
    float or an array (with np.minimum) alike."""
    return minimum(tokens, topk) * kv_bytes + tokens * index_bytes


def block_topk_tokens(tokens, block: int, topk: int, minimum=min):
    """Tokens a MiniMax-M3 sparse layer's query attends of the `tokens` it may: the `topk`
    blocks of `block` tokens its indexer picks, its own (local, partial) block forced among them
    (vLLM's models/minimax_m3/common/ops/index_topk.py, _topk_index_kernel: valid_blocks =
    ceil(causal_len / block), the local block pinned to 1e29 and the init blocks to 1e30 inside
    the top-k, min(valid_blocks, topk) ids stored): every token while ceil(s / block) <= topk,
    else (topk - 1) full blocks and the tail. `tokens` a float or an array (with np.minimum)
    alike."""
    tail = tokens - block * (-(-tokens // block) - 1)  # the local block's tokens, 1..block
    return minimum(tokens, (topk - 1) * block + tail)


def decode_read_excess_bytes(attn: Attention, fmt: KvFormat, context_len: int, tp: int = 1) -> int:
    """What one decode reads of a layer's cache less what the layer holds (0 but for a sparse
    layer; negative where it reads fewer than it holds): a DeepSeek-V4 compressed layer's entries
    as compressed_read_bytes reads them, a DSA layer's latents as topk_read_bytes reads them, a
    MiniMax-M3 sparse layer's K and V of the blocks block_topk_tokens counts (its indexer key of
    every token, as held)."""
    if attn.sparse_topk_blocks:
        held = attn.tokens_held(context_len)
        kv = attn.kv_bytes_per_token(fmt, tp) - attn.indexer_bytes_per_token(fmt)
        picked = block_topk_tokens(held, attn.sparse_block_size, attn.sparse_topk_blocks)
        return (picked - held) * kv
    if attn.compress_ratio:
        entries = attn.compressed_entries(context_len)
        parts = attn.compressed_entry_parts(fmt)
        return compressed_read_bytes(entries, attn.compressed_topk, *parts) - entries * sum(parts)
    if attn.indexer_topk:
        held = attn.tokens_held(context_len)
        latent = fmt.head_vector_bytes(attn.head_dim)
        return topk_read_bytes(held, attn.indexer_topk, latent, 0) - held * latent
    return 0


def kv_read_bytes_per_decode(spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1) -> int:
    """KV bytes one decode reads of its sequence's cache at `context_len` on one rank: what the
    sequence holds (kv_bytes_per_sequence), a sparse layer's as a decode reads them rather than
    as held (decode_read_excess_bytes: a DeepSeek-V4 compressed layer's entries, a DSA layer's
    top-k latents, a MiniMax-M3 sparse layer's top-k blocks; the step's operator list reads the
    same)."""
    held = kv_bytes_per_sequence(spec, context_len, fmt, tp)
    return held + sum(
        count * decode_read_excess_bytes(layer.attention, fmt, context_len, tp)
        for layer, count in distinct_layers(spec.layers)
        if layer.attention is not None
        and (
            layer.attention.compress_ratio
            or layer.attention.indexer_topk
            or layer.attention.sparse_topk_blocks
        )
    )


# A model's groups depend on its layers, the format and tp alone, and `capacity --gpu all` asks
# for one model's about 7,000 times (every layout, GPU, context and pipeline stage): the last
# KEPT are kept, each with the layer tuple it came from (immutable; holding it keeps its id from
# being reused).
_GROUPS: dict[tuple, tuple] = {}


def cache_groups(spec: ModelSpec, fmt: KvFormat, tp: int = 1) -> list[CacheGroup]:
    """Group the layers by what they cache; a hybrid layer (KV + state) appears in two groups."""
    return list(_kept(spec, fmt, tp)[1])


def _kept(spec: ModelSpec, fmt: KvFormat, tp: int) -> tuple:
    """(layers, their groups, {(context, block size): paged bytes per sequence, "per-token":
    kv_bytes_per_token})."""
    key = (id(spec.layers), fmt, tp)
    kept = _GROUPS.get(key)
    if kept is None or kept[0] is not spec.layers:
        if len(_GROUPS) >= KEPT:
            del _GROUPS[next(iter(_GROUPS))]
        kept = _GROUPS[key] = (spec.layers, _group_layers(spec.layers, fmt, tp), {})
    return kept


def _group_layers(layers: tuple, fmt: KvFormat, tp: int) -> tuple[CacheGroup, ...]:
    groups: dict[tuple, list] = {}
    repeats = distinct_layers(layers)  # one key per kind of layer rather than one per layer
    for layer, count in repeats:  # once per distinct layer: setdefault's list is cheap
        if layer.attention is not None:
            a = layer.attention
            # the indexer's key (MiniMax-M3's sparse layers) is part of what a layer holds per
            # token: layers with and without one are two groups
            key = (
                "attn",
                a.label(),
                a.kv_heads_per_rank(tp),
                a.head_dim,
                a.head_dim_v,
                a.indexer_head_dim,
            )
            entry = groups.setdefault(
                key,
                [
                    a.label(),
                    a.kind,
                    0,
                    a.kv_heads_per_rank(tp),
                    a.head_dim,
                    a.window,
                    a.kv_bytes_per_token(fmt, tp),
                    0,
                    fmt.full_precision_tokens,
                    a.kv_bytes_per_token(fmt.full_precision, tp)
                    if fmt.full_precision_tokens
                    else 0,
                    a.compress_ratio,
                    a.compressed_bytes_per_entry(fmt),
                ],
            )
            entry[2] += count
        if layer.state is not None:
            st = layer.state
            state_key = ("state", st.label(), st)
            entry = groups.setdefault(
                state_key,
                [st.label(), CacheKind.STATE, 0, 0, 0, None, 0, st.bytes_per_sequence(tp)],
            )
            entry[2] += count
    return tuple(CacheGroup(*values) for values in groups.values())


def kv_bytes_per_sequence(spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1) -> int:
    """Bytes one sequence holds at `context_len` on one rank: every layer's KV (windows capped)
    plus every fixed-size state."""
    return sum(g.bytes_per_sequence(context_len) for g in cache_groups(spec, fmt, tp))


def kv_bytes_per_token(spec: ModelSpec, fmt: KvFormat, tp: int = 1) -> int:
    """Bytes per token if every attention layer held every token (windows ignored, no state):
    2 * L * Hkv * d * p for a plain GQA stack; L * (kv_lora_rank + rope) * p for MLA. Kept
    with the groups (the same sum, once per stack, format and tp)."""
    paged = _kept(spec, fmt, tp)[2]
    found = paged.get("per-token")
    if found is None:
        found = paged["per-token"] = sum(
            layer.attention.kv_bytes_per_token(fmt, tp)
            for layer in spec.layers
            if layer.attention is not None
        )
    return found


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1) -> int:
    """The fixed part of a sequence's cache: recurrent states, independent of context."""
    return sum(layer.state.bytes_per_sequence(tp) for layer in spec.layers if layer.state)


def gqa_saving_factor(spec: ModelSpec, fmt: KvFormat) -> float | None:
    """Multi-head-equivalent bytes per token / actual bytes per token (Hq/Hkv for plain GQA)."""
    actual = kv_bytes_per_token(spec, fmt)
    if actual == 0:
        return None
    return spec.mha_equivalent_bytes_per_token(fmt) / actual


def paged_tokens_held(group: CacheGroup, context_len: int, block_size: int) -> int:
    """Token slots a paged allocator gives one sequence in this group: whole blocks. A sliding
    window can start mid-block, so it may span one block more than ceil(W / block)."""
    if group.kind is CacheKind.STATE:
        return 0
    blocks = -(-context_len // block_size)
    if group.kind is CacheKind.SLIDING:
        assert group.window is not None, "a windowed group has a window"
        blocks = min(blocks, -(-group.window // block_size) + 1)
    elif group.kind is CacheKind.CHUNKED:
        assert group.window is not None, "a windowed group has a window"
        blocks = min(blocks, -(-group.window // block_size))
    return blocks * block_size


def paged_bytes_per_sequence(
    spec: ModelSpec, context_len: int, fmt: KvFormat, tp: int = 1, block_size: int = 16
) -> int:
    """Bytes one sequence occupies under paging: whole blocks per layer group, plus its state.
    The waste against kv_bytes_per_sequence is under one block per sequence per group. Kept
    with the groups: `capacity --gpu all` asks the same of every GPU."""
    _, groups, paged = _kept(spec, fmt, tp)
    found = paged.get((context_len, block_size))
    if found is None:
        found = paged[context_len, block_size] = paged_bytes_of_groups(
            groups, context_len, block_size
        )
    return found


def paged_bytes_of_groups(groups: list[CacheGroup], context_len: int, block_size: int = 16) -> int:
    """paged_bytes_per_sequence on groups already built (one pass over the layers serves many
    context lengths): sum over groups of layers * (paged tokens * bytes per token + state)."""
    return sum(
        g.num_layers
        * (
            paged_tokens_held(g, context_len, block_size) * g.bytes_per_token_per_layer
            + g.full_precision_extra_bytes(context_len)
            + g.state_bytes_per_layer
            + paged_compressed_entries(g, context_len, block_size)
            * g.compressed_bytes_per_entry_per_layer
        )
        for g in groups
    )


def paged_compressed_entries(group: CacheGroup, context_len: int, block_size: int) -> int:
    """Entry slots of a compressed layer's pages: floor(s / ratio) entries in whole blocks of
    `block_size` entries (0 for a layer that is not compressed)."""
    if not group.compress_ratio:
        return 0
    entries = context_len // group.compress_ratio
    return -(-entries // block_size) * block_size


def sequences_in_pool(pool_bytes: float, bytes_per_sequence: int) -> int:
    """Whole sequences a KV pool holds: floor(pool / bytes per sequence); 0 for an empty pool."""
    if pool_bytes <= 0 or bytes_per_sequence <= 0:
        return 0
    return int(pool_bytes // bytes_per_sequence)
