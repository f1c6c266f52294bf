"""Paged decode attention over a block-table KV cache, and the helpers `kvplan measure` uses.

Layouts (NHD, as vLLM and FlashInfer's "NHD"):
    query        [batch, num_q_heads, head_dim]
    key_cache    [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache  [num_blocks, block_size, num_kv_heads, head_dim]
    block_table  int32 [batch, max_blocks_per_seq]  (entries past a sequence's length ignored)
    seq_lens     int32 [batch]
Scales: fp8 e4m3 caches take `k_scale`/`v_scale` per tensor (a scalar) or per KV head
([num_kv_heads]); int8 caches take per-token scales [num_blocks, block_size, num_kv_heads].
Accumulation is fp32 throughout; the output has the query's dtype.
"""

from __future__ import annotations

import math

import torch

FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_MAX = 448.0
CHUNK_BYTES = 4 << 20  # gathered K per chunk in the fast path (measured best on a 32 MB L3)


def available_impls() -> list[str]:
    impls = ["reference", "torch"]
    if torch.cuda.is_available():
        try:
            import triton  # noqa: F401

            impls.append("triton")
        except ImportError:
            pass
    return impls


def _check(query, key_cache, value_cache, block_table, seq_lens):
    if query.dim() != 3 or key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError("expected query [B, Hq, D] and caches [blocks, block_size, Hkv, D]")
    batch, num_q_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    if key_cache.shape[3] != head_dim:
        raise ValueError("query and cache head_dim differ")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads are not a multiple of {num_kv_heads}")
    if block_table.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError("block_table and seq_lens need one row per query")
    return batch, num_q_heads, num_kv_heads, head_dim


def _dequantize(values, scale, block_ids=None):
    """values [..., Hkv, D] -> fp32. scale: None, scalar, [Hkv], or per token gathered already."""
    out = values.float()
    if scale is None:
        return out
    scale = torch.as_tensor(scale, dtype=torch.float32, device=out.device)
    if scale.dim() == 0:
        return out * scale
    if scale.dim() == 1:  # per KV head
        return out * scale.view(*([1] * (out.dim() - 2)), -1, 1)
    return out * scale.unsqueeze(-1)  # per token and head, already gathered to out's shape


def _per_token_scale(scale, block_ids):
    """Gather per-token scales [num_blocks, block_size, Hkv] for `block_ids`."""
    if scale is None:
        return None
    scale = torch.as_tensor(scale)
    if scale.dim() == 3:
        return scale[block_ids]
    return scale


def reference_decode_attention(
    query,
    key_cache,
    value_cache,
    block_table,
    seq_lens,
    *,
    scale=None,
    sliding_window=None,
    k_scale=None,
    v_scale=None,
):
    """The oracle: for each sequence, gather its blocks, then softmax(q k^T * scale) v in fp32."""
    batch, num_q_heads, num_kv_heads, head_dim = _check(
        query, key_cache, value_cache, block_table, seq_lens
    )
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    group = num_q_heads // num_kv_heads
    block_size = key_cache.shape[1]
    out = torch.empty(batch, num_q_heads, head_dim, dtype=torch.float32, device=query.device)
    for b in range(batch):
        n = int(seq_lens[b])
        blocks = block_table[b, : -(-n // block_size)].long()
        k = _dequantize(key_cache[blocks], _per_token_scale(k_scale, blocks))
        v = _dequantize(value_cache[blocks], _per_token_scale(v_scale, blocks))
        k = k.reshape(-1, num_kv_heads, head_dim)[:n]  # [n, Hkv, D]
        v = v.reshape(-1, num_kv_heads, head_dim)[:n]
        if sliding_window is not None:
            k, v = k[max(0, n - sliding_window) :], v[max(0, n - sliding_window) :]
        q = query[b].float().view(num_kv_heads, group, head_dim)
        scores = torch.einsum("hgd,thd->hgt", q, k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[b] = torch.einsum("hgt,thd->hgd", probs, v).reshape(num_q_heads, head_dim)
    return out.to(query.dtype)


def torch_decode_attention(
    query,
    key_cache,
    value_cache,
    block_table,
    seq_lens,
    *,
    scale=None,
    sliding_window=None,
    k_scale=None,
    v_scale=None,
    chunk_tokens=None,
):
    """Fast path: walks the block tables a chunk of blocks at a time for the whole batch, with an
    online softmax. Each chunk's blocks are gathered with index_select into buffers reused across
    chunks (a few MB, cache-resident), never the whole cache; scores and outputs are per-sequence
    batched GEMMs over strided views, which avoids the permute copies einsum would make."""
    batch, num_q_heads, num_kv_heads, head_dim = _check(
        query, key_cache, value_cache, block_table, seq_lens
    )
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    group = num_q_heads // num_kv_heads
    num_blocks, block_size = key_cache.shape[:2]
    device = query.device
    lens = seq_lens.to(device=device, dtype=torch.long)
    max_len = int(lens.max()) if batch else 0
    q = (query.float() * scale).view(batch, num_kv_heads, group, head_dim)
    acc = torch.zeros(batch, num_kv_heads, group, head_dim, device=device)
    row_max = torch.full((batch, num_kv_heads, group), -math.inf, device=device)
    row_sum = torch.zeros(batch, num_kv_heads, group, device=device)
    start_block = 0
    if sliding_window is not None:
        start_block = int((lens - sliding_window).clamp(min=0).min()) // block_size
    if chunk_tokens is None:  # ~4 MB of K per chunk: stays in the last-level cache
        row_bytes = batch * num_kv_heads * head_dim * key_cache.element_size()
        chunk_tokens = min(1024, max(block_size, CHUNK_BYTES // max(1, row_bytes)))
    chunk_blocks = max(1, chunk_tokens // block_size)
    table = block_table.to(device=device, dtype=torch.long)
    flat_k = key_cache.view(num_blocks, -1)
    flat_v = value_cache.view(num_blocks, -1)
    k_buf = torch.empty(batch * chunk_blocks, flat_k.shape[1], dtype=key_cache.dtype, device=device)
    v_buf = torch.empty_like(k_buf)
    scores_buf = torch.empty(batch, num_kv_heads, group, chunk_blocks * block_size, device=device)
    out_buf = torch.empty(batch, num_kv_heads, group, head_dim, device=device)
    end_block = min(-(-max_len // block_size), table.shape[1])
    for first in range(start_block, end_block, chunk_blocks):
        last = min(first + chunk_blocks, end_block)
        width = last - first
        tokens = width * block_size
        positions = torch.arange(first * block_size, last * block_size, device=device)
        valid = positions.unsqueeze(0) < lens.unsqueeze(1)  # [B, T]
        if sliding_window is not None:
            valid &= positions.unsqueeze(0) >= (lens - sliding_window).unsqueeze(1)
        ids = table[:, first:last]
        partial = not bool(valid.all())
        if partial:  # entries past a sequence's length may hold anything: use its first block
            block_valid = valid.view(batch, width, block_size).any(-1)
            ids = torch.where(block_valid, ids, table[:, :1])
        ids = ids.reshape(-1)
        k_raw = torch.index_select(flat_k, 0, ids, out=k_buf[: batch * width])
        v_raw = torch.index_select(flat_v, 0, ids, out=v_buf[: batch * width])
        k_chunk = k_raw.view(batch, tokens, num_kv_heads, head_dim)
        v_chunk = v_raw.view(batch, tokens, num_kv_heads, head_dim)
        if k_chunk.dtype != torch.float32 or k_scale is not None:
            k_chunk = _dequantize(k_chunk, _chunk_scale(k_scale, ids, batch, tokens))
        if v_chunk.dtype != torch.float32 or v_scale is not None:
            v_chunk = _dequantize(v_chunk, _chunk_scale(v_scale, ids, batch, tokens))
        if partial:  # unused slots may hold NaN: zero them so 0 * NaN cannot leak
            v_chunk = v_chunk.masked_fill(~valid[:, :, None, None], 0.0)
        scores = scores_buf[..., :tokens]
        for b in range(batch):  # [Hkv, G, D] @ [Hkv, D, T] on a strided view of the chunk
            torch.bmm(q[b], k_chunk[b].permute(1, 2, 0), out=scores[b])
        if partial:
            scores.masked_fill_(~valid[:, None, None, :], -math.inf)
        new_max = torch.maximum(row_max, scores.amax(-1))
        safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        probs = torch.exp(scores - safe_max.unsqueeze(-1))
        correction = torch.exp(row_max - safe_max)
        row_sum = row_sum * correction + probs.sum(-1)
        for b in range(batch):  # [Hkv, G, T] @ [Hkv, T, D]
            torch.bmm(probs[b], v_chunk[b].permute(1, 0, 2), out=out_buf[b])
        acc = acc * correction.unsqueeze(-1) + out_buf
        row_max = new_max
    out = acc / row_sum.clamp(min=1e-30).unsqueeze(-1)
    return out.reshape(batch, num_q_heads, head_dim).to(query.dtype)


def _chunk_scale(scale, ids, batch: int, tokens: int):
    """Scales for a gathered chunk: scalars and per-head tensors as they are; per-token scales
    [num_blocks, block_size, Hkv] gathered like the blocks -> [B, T, Hkv]."""
    if scale is None:
        return None
    scale = torch.as_tensor(scale)
    if scale.dim() == 3:
        return scale.index_select(0, ids).reshape(batch, tokens, -1)
    return scale


def paged_decode_attention(
    query,
    key_cache,
    value_cache,
    block_table,
    seq_lens,
    *,
    scale=None,
    sliding_window=None,
    k_scale=None,
    v_scale=None,
    impl="auto",
):
    """Decode attention of one new token per sequence over its paged KV cache.

    impl: "reference" (the oracle), "torch" (chunked online softmax, any device), "triton"
    (CUDA split-KV kernel), or "auto" (triton on CUDA when available, else torch)."""
    kwargs = dict(scale=scale, sliding_window=sliding_window, k_scale=k_scale, v_scale=v_scale)
    if sliding_window is not None and sliding_window < 1:
        raise ValueError("sliding_window must be positive")
    if impl == "auto":
        impl = "triton" if query.is_cuda and "triton" in available_impls() else "torch"
    if impl == "reference":
        return reference_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    if impl == "torch":
        return torch_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    if impl == "triton":
        from kvplan.kernels.triton_decode import triton_decode_attention

        return triton_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    raise ValueError(f"unknown impl {impl!r}; choose from auto, {', '.join(available_impls())}")


def write_kv(
    key, value, key_cache, value_cache, slot_mapping, *, k_scale_cache=None, v_scale_cache=None
):
    """Write a prefill's keys/values [T, Hkv, D] into the cache at `slot_mapping` [T]
    (slot = block_id * block_size + offset). int8 caches get per-token scales written to
    `k_scale_cache`/`v_scale_cache` [num_blocks, block_size, Hkv]; fp8 caches are cast."""
    num_blocks, block_size, heads, dim = key_cache.shape
    slots = slot_mapping.long()
    flat_k = key_cache.view(num_blocks * block_size, heads, dim)
    flat_v = value_cache.view(num_blocks * block_size, heads, dim)
    if key_cache.dtype == torch.int8:
        qk, sk = quantize_int8_per_token(key)
        qv, sv = quantize_int8_per_token(value)
        flat_k[slots], flat_v[slots] = qk, qv
        k_scale_cache.view(-1, heads)[slots] = sk
        v_scale_cache.view(-1, heads)[slots] = sv
        return
    flat_k[slots] = key.to(key_cache.dtype)
    flat_v[slots] = value.to(value_cache.dtype)


def quantize_int8_per_token(x):
    """x [..., Hkv, D] -> (int8 values, fp32 scale per token and head): symmetric, absmax/127."""
    scale = x.float().abs().amax(-1).clamp(min=1e-8) / 127.0
    q = torch.round(x.float() / scale.unsqueeze(-1)).clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_fp8(x, per_head: bool = False):
    """x [..., Hkv, D] -> (fp8 e4m3 values, scale): per tensor, or per KV head ([Hkv])."""
    if FP8 is None:
        raise RuntimeError("this torch has no float8_e4m3fn")
    if per_head:
        amax = x.float().abs().flatten(0, -3).amax(dim=(0, 2))
        scale = (amax / FP8_MAX).clamp(min=1e-12)
        return (x.float() / scale.view(1, -1, 1)).to(FP8), scale
    scale = (x.float().abs().max() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(FP8), scale


def prefill_attention(query, key, value, *, scale=None, sliding_window=None):
    """Causal self-attention of one prompt: query [T, Hq, D], key/value [T, Hkv, D] -> [T, Hq, D].
    torch SDPA (fused flash kernel on CPU and CUDA), GQA by repeating KV heads."""
    tokens, num_q_heads, head_dim = query.shape
    group = num_q_heads // key.shape[1]
    q = query.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
    k = key.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
    v = value.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)
    if sliding_window is None:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:
        pos = torch.arange(tokens, device=query.device)
        mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - sliding_window)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.squeeze(0).transpose(0, 1)
