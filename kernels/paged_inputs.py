"""The paged decode inputs every implementation takes (kvplan.kernels.paged_attention's layouts:
query [batch, num_q_heads, head_dim], caches [num_blocks, block_size, num_kv_heads, head_dim],
block_table int32 [batch, max_blocks_per_seq], seq_lens int32 [batch]) and their one check, shared
by the torch implementations and the Triton kernel (kvplan.kernels.triton_decode)."""

from __future__ import annotations


def check_inputs(query, key_cache, value_cache, block_table, seq_lens, max_seq_len=None):
    """Validate shapes (any strides are accepted); returns (batch, Hq, Hkv, head_dim).
    `max_seq_len`, when given, is checked against the block table's capacity on the host; without
    it the sequence lengths themselves are read (a device->host copy on a GPU)."""
    if query.dim() != 3 or key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError("expected query [B, Hq, D] and caches [blocks, block_size, Hkv, D]")
    if key_cache.dtype != value_cache.dtype:
        raise ValueError("key and value caches must have the same dtype")
    batch, num_q_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    if key_cache.shape[3] != head_dim:
        raise ValueError("query and cache head_dim differ")
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads are not a multiple of {num_kv_heads}")
    if block_table.dim() != 2 or block_table.shape[0] != batch or seq_lens.shape != (batch,):
        raise ValueError("block_table [B, blocks] and seq_lens [B] need one row per query")
    capacity = block_table.shape[1] * key_cache.shape[1]
    longest = max_seq_len if max_seq_len is not None else host_max_len(seq_lens)
    if longest > capacity:
        raise ValueError(f"a sequence of {longest} tokens exceeds the block table ({capacity})")
    if max_seq_len is None and batch and int(seq_lens.min()) < 0:
        raise ValueError("sequence lengths must be >= 0")
    return batch, num_q_heads, num_kv_heads, head_dim


def host_max_len(seq_lens) -> int:
    return int(seq_lens.max()) if seq_lens.numel() else 0
