"""vLLM 0.32's KV cache for DeepSeek-V4's compressed attention, read from vLLM 0.32.0's own source
(the `vllm-0.32.0` wheel, `vllm/_version.py` commit g5df63a720; paths below are in that tree).

Every layer registers its caches in this order, each a spec of its own (`get_kv_cache_spec`):

- CSA layers (compress ratio 4) first build their indexer (`models/deepseek_v4/attention.py`
  `DeepseekV4Indexer`): its key cache `DeepseekV4IndexerCache` (an `MLAAttentionSpec` of the
  engine block size, `tokens_per_state` 4, one 132-byte row per state: 128 fp8 values and one
  fp32 scale per 128, attention.py:1008-1016, 907-921) and its compressor's state
  (`CompressorStateCache`, below, `index_head_dim` wide);
- every layer, a sliding-window cache `DeepseekV4SWACache` (`v1/attention/backends/mla/
  sparse_swa.py:74-140`): a `SlidingWindowMLASpec` of 64-token blocks, window `sliding_window`,
  584 bytes a token in the fp8_ds_mla layout (448 fp8 NoPE values, 64 bf16 RoPE values, 8 bytes
  of scales), pages padded to a multiple of 576 bytes;
- compressed layers (ratio 4 or 128), the compressed entries (`DeepseekV4Attention.
  get_kv_cache_spec`, attention.py:856-879): an `MLAAttentionSpec` of the engine block size,
  `tokens_per_state` = the ratio, 584 bytes an entry, padded to 576; the uncompressed layers
  (ratio 0) return None here (their window is the cache above);
- compressed layers, the compressor's state (`CompressorStateCache`, `models/deepseek_v4/
  compressor.py:145-195`): fp32, `2 x coff x head_dim` values a token (coff 2 at ratio 4, 1 at
  128), blocks of 4 tokens (ratio 4) or 8 (ratio 128), a sliding window of `coff x ratio`
  tokens, pages padded to a multiple of 576 in the fp8_ds_mla layout.

A page holds `block_size // tokens_per_state` states (`KVCacheSpec.num_states`) of their row
bytes, rounded up to the alignment (`_apply_alignment_padding`, `v1/kv_cache_interface.py:676`).
The engine block size is 256: the only kernel block FLASHMLA_SPARSE_DSV4 and the V4 indexer take
(`models/deepseek_v4/sparse_mla.py:60`, `v1/attention/backends/mla/indexer.py:354`), chosen by
`Platform._preferred_block_size_for_backends` (`platforms/interface.py:700`).

Grouping is `_get_packed_kv_cache_groups` (`v1/core/kv_cache_utils.py:1860-1994`): the layers
go into buckets of one spec type (same block size; full attention, or sliding with one window,
`UniformTypeKVCacheSpecs.is_uniform_type`), each bucket's layers by page size; a bucket whose page
sizes hold equally many layers is "balanced", the largest multi-size balanced bucket sets the
least pattern repeats a group holds, `_approximate_gcd` picks the repeats that pad least, and a
balanced bucket is cut into `ceil(max layers per page size / repeats)` groups. One block of the
shared pool holds every group's layers side by side, so its bytes are the widest group's pages
summed (`_get_kv_cache_bytes_per_block`, line 1520); `num_blocks = available // that`. A request
takes, per group, the most pages any of its layers needs (`UniformTypeKVCacheSpecs.
max_memory_usage_pages`): `ceil(max_model_len / block)` for full specs,
`ceil(min(window - 1 + in-flight tokens, max_model_len) / block) + 1` for sliding ones
(`SlidingWindowSpec.max_admission_blocks_per_request`), where the in-flight tokens are
`max_concurrent_batches x max_num_batched_tokens` (`VllmConfig.max_in_flight_tokens`,
`config/vllm.py:577-598`: 2 batches with async scheduling, on by default at PP 1;
`kvplan.engines.vllm_schedule.window_in_flight_tokens`).
"""

from __future__ import annotations

from collections import Counter

from kvplan.anatomy.model import Attention, ModelSpec
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

ENGINE_BLOCK_SIZE = 256  # FLASHMLA_SPARSE_DSV4 and DEEPSEEK_V4_INDEXER kernel blocks
SWA_BLOCK_SIZE = 64  # DeepseekV4SWACache(block_size=64)
FP8_DS_MLA_STATE_BYTES = 584  # 448 fp8 NoPE + 64 bf16 RoPE + 8 B of UE8M0 scales
FP8_DS_MLA_ALIGNMENT = 576  # pages padded to a multiple of this (FlashMLA's packing stride)
HEAD_DIM = 512  # the only head size FLASHMLA_SPARSE_DSV4 takes (get_supported_head_sizes)
ROPE_DIM = 64  # of it RoPE: the 584-byte row is 448 fp8 NoPE + 64 bf16 RoPE + 8 B of scales
COMPRESSOR_BLOCK_SIZE = {4: 4, 128: 8}  # CompressorStateCache: the only ratios it takes
COMPRESSOR_STATE_BYTES = 4  # fp32 kv and score states
INDEXER_RATIO = 4  # only C4A layers run the sparse indexer
INDEXER_QUANT_BLOCK = 128  # the indexer key's values per fp32 scale
INDEXER_SCALE_BYTES = 4


def indexer_key_bytes(width: int) -> int:
    """The fp8 indexer key of the DSA/DeepSeek-V4 indexer caches: `width` fp8 values and one fp32
    scale per 128 (132 B for a 128-wide key; 0 without one)."""
    return width + width // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES if width else 0


def check_row_layout(spec: ModelSpec, attn: Attention, engine: str) -> None:
    """The engines' DeepSeek-V4 rows are 584 bytes (448 fp8 NoPE values, 64 bf16 RoPE values,
    8 B of scales): vLLM hard-codes it (attention.py:876-878) and FLASHMLA_SPARSE_DSV4 takes
    head_dim 512 only; SGLang 0.5.14 asserts it (DeepSeekV4SingleKVPool.create_buffer)."""
    if (attn.head_dim, attn.compressed_rope_dim) != (HEAD_DIM, ROPE_DIM) or attn.window is None:
        raise KvplanError(
            f"{spec.name}: {engine}'s DeepSeek-V4 cache rows hold head_dim {HEAD_DIM} with "
            f"{ROPE_DIM} RoPE values beside a sliding window (584 B: 448 fp8, {ROPE_DIM} bf16, "
            f"8 B of scales), not head_dim {attn.head_dim} with {attn.compressed_rope_dim}"
        )


def padded_page_bytes(block_size: int, tokens_per_state: int, state_bytes: int) -> int:
    """One page: block_size // tokens_per_state states, rounded up to the fp8_ds_mla alignment."""
    raw = block_size // tokens_per_state * state_bytes
    return -(-raw // FP8_DS_MLA_ALIGNMENT) * FP8_DS_MLA_ALIGNMENT


class LayerCache(NamedTuple):
    """One cache spec vLLM registers for a DeepSeek-V4 layer (per rank: every one is replicated,
    max_tp_shards 1)."""

    layer: int
    role: str
    block_size: int  # tokens a block covers (uncompressed tokens)
    window: int | None  # None: full attention (a block for every block_size tokens)
    page_bytes: int

    def pages_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        if self.window is None:
            return -(-max_model_len // self.block_size)
        tokens = min(self.window - 1 + in_flight_tokens, max_model_len)
        return -(-tokens // self.block_size) + 1


def layer_caches(spec: ModelSpec) -> list[LayerCache]:
    """Every cache spec of the model's layers, in the order vLLM registers them; refused where
    vLLM 0.32 would not build the model (a head size or ratio its kernels do not take)."""
    caches = []
    for i, layer in enumerate(spec.layers):
        attn = layer.attention
        if attn is None:
            continue
        ratio = attn.compress_ratio
        check_row_layout(spec, attn, "vLLM 0.32")
        if ratio and ratio not in COMPRESSOR_BLOCK_SIZE:
            raise KvplanError(
                f"{spec.name}: compress ratio {ratio}: vLLM 0.32's DeepSeek-V4 compressor takes "
                f"ratios {' and '.join(map(str, COMPRESSOR_BLOCK_SIZE))} only (CompressorStateCache)"
            )
        if bool(attn.compressed_indexer_dim) != (ratio == INDEXER_RATIO):
            raise KvplanError(
                f"{spec.name}: vLLM 0.32 runs DeepSeek-V4's indexer on the 1/{INDEXER_RATIO} "
                "layers exactly; this config puts one elsewhere"
            )
        if ratio == INDEXER_RATIO:
            width = attn.compressed_indexer_dim
            key = indexer_key_bytes(width)
            caches.append(
                LayerCache(
                    i,
                    "indexer key",
                    ENGINE_BLOCK_SIZE,
                    None,
                    padded_page_bytes(ENGINE_BLOCK_SIZE, ratio, key),
                )
            )
            caches.append(_compressor_state(i, "indexer compressor state", ratio, width))
        caches.append(
            LayerCache(
                i,
                "sliding window",
                SWA_BLOCK_SIZE,
                attn.window,
                padded_page_bytes(SWA_BLOCK_SIZE, 1, FP8_DS_MLA_STATE_BYTES),
            )
        )
        if ratio:
            caches.append(
                LayerCache(
                    i,
                    f"compressed 1/{ratio}",
                    ENGINE_BLOCK_SIZE,
                    None,
                    padded_page_bytes(ENGINE_BLOCK_SIZE, ratio, FP8_DS_MLA_STATE_BYTES),
                )
            )
            caches.append(_compressor_state(i, "compressor state", ratio, attn.head_dim))
    return caches


def _compressor_state(layer: int, role: str, ratio: int, head_dim: int) -> LayerCache:
    """CompressorStateCache: 2 x coff x head_dim fp32 values a token (kv and score states, the
    ratio-4 compressor overlapping two windows), one state a token."""
    coff = 1 + (ratio == 4)
    block = COMPRESSOR_BLOCK_SIZE[ratio]
    row = 2 * coff * head_dim * COMPRESSOR_STATE_BYTES
    return LayerCache(layer, role, block, coff * ratio, padded_page_bytes(block, 1, row))


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's _approximate_gcd: the d in [lower_bound, max] that pads the values least when each
    is rounded up to a multiple of d (ties: the larger d)."""
    best_d, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best_d, best_pad = d, pad
    return best_d


class PackedGroup(NamedTuple):
    """One KV-cache group of the packed layout: layers of one spec type sharing a block table."""

    kind: str  # "full" or "sliding"
    window: int | None
    block_size: int
    layers: int
    page_bytes: int  # this group's pages in one block, summed
    pages_per_request: int
    label: str


def _bucket_key(cache: LayerCache) -> tuple[int, int | None]:
    return cache.block_size, cache.window


def packed_groups(
    caches: list[LayerCache], max_model_len: int, in_flight_tokens: int
) -> list[PackedGroup]:
    """_get_packed_kv_cache_groups: buckets of one spec type, cut into groups that repeat the
    layer pattern (no Mamba or ring-buffer specs in DeepSeek-V4)."""
    buckets: dict[tuple[int, int | None], list[LayerCache]] = {}
    for cache in caches:
        buckets.setdefault(_bucket_key(cache), []).append(cache)
    described = []
    for members in buckets.values():
        by_page: dict[int, list[LayerCache]] = {}
        for cache in members:
            by_page.setdefault(cache.page_bytes, []).append(cache)
        balanced = len({len(v) for v in by_page.values()}) == 1
        described.append((members, by_page, balanced))

    def most_per_page(by_page: dict[int, list[LayerCache]]) -> int:
        return max(len(v) for v in by_page.values())

    floor = max(
        (most_per_page(p) for _, p, balanced in described if balanced and len(p) > 1),
        default=0,
    )
    repeats = (
        approximate_gcd([most_per_page(p) for _, p, balanced in described if balanced], floor)
        if floor
        else None
    )

    def groups_for(by_page: dict[int, list[LayerCache]], balanced: bool) -> int:
        return -(-most_per_page(by_page) // repeats) if balanced and repeats else 1

    def widest(by_page: dict[int, list[LayerCache]], n: int) -> int:
        return sum(-(-len(v) // n) * page for page, v in by_page.items())

    def state_bucket(members: list[LayerCache]) -> bool:
        return repeats is None and members[0].window is not None

    anchor = max(
        widest(p, len(m) if state_bucket(m) else groups_for(p, balanced))
        for m, p, balanced in described
    )
    groups = []
    for members, by_page, balanced in described:
        n = groups_for(by_page, balanced)
        if state_bucket(members):
            n = max(n, -(-len(members) // max(anchor // members[0].page_bytes, 1)))
        if n == 1:
            parts = [members]
        else:
            pattern = list(zip(*by_page.values(), strict=False))
            parts = [[c for repeat in pattern[i::n] for c in repeat] for i in range(n)]
        for part in parts:
            first = part[0]
            roles = Counter(c.role for c in part)
            pages = {c.role: c.page_bytes for c in part}
            groups.append(
                PackedGroup(
                    "full" if first.window is None else "sliding",
                    first.window,
                    first.block_size,
                    len(part),
                    sum(c.page_bytes for c in part),
                    max(c.pages_per_request(max_model_len, in_flight_tokens) for c in part),
                    " + ".join(f"{k} {role} ({pages[role]:,} B)" for role, k in roles.items()),
                )
            )
    return groups


class CompressedAllocation(NamedTuple):
    groups: list[PackedGroup]
    bytes_per_block: int  # the widest group's pages: one block of the shared pool
    num_blocks: int
    blocks_per_request: int  # every group's pages for one max_model_len request
    required_bytes: int  # _max_memory_usage_bytes_from_groups


def allocate_compressed(
    caches: list[LayerCache], available_bytes: int, max_model_len: int, in_flight_tokens: int
) -> CompressedAllocation:
    groups = packed_groups(caches, max_model_len, in_flight_tokens)
    block = max(g.page_bytes for g in groups)  # every layer's block-stride alignment is 1 here
    per_request = sum(g.pages_per_request for g in groups)
    return CompressedAllocation(
        groups, block, available_bytes // block, per_request, block * per_request
    )


def compressed_max_model_len(
    caches: list[LayerCache], check_bytes: int, max_model_len: int, in_flight_tokens: int
) -> int:
    """_estimate_max_model_len_from_groups: the longest length in 1..max_model_len whose request
    fits `check_bytes` (0 if one token does not)."""

    def fits(length: int) -> bool:
        return (
            allocate_compressed(caches, 0, length, in_flight_tokens).required_bytes <= check_bytes
        )

    if not fits(1):
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
