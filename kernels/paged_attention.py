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

from kvplan.kernels.paged_inputs import check_inputs, host_max_len

FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_MAX = 448.0
MIN_CHUNK_TOKENS = 64  # per sequence: shorter chunks cost more in per-chunk work than they save
CHUNK_BYTES = 2 << 20  # gathered K per chunk: fits a 2 MB L2 (measured best on this CPU)


def available_impls() -> list[str]:
    """The implementations this machine can run (listing "native" builds it on first call)."""
    from kvplan.kernels import native_decode

    impls = ["reference", "torch"]
    if native_decode.status().available:
        impls.append("native")
    if torch.cuda.is_available():
        try:
            import triton  # noqa: F401

            impls.append("triton")
        except ImportError:
            pass
    return impls


def _dequantize(values, scale):
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
    max_seq_len=None,
):
    """The oracle: for each sequence, gather its blocks, then softmax(q k^T * scale) v in fp32.
    A sequence of length 0 attends to nothing: its output is zeros."""
    batch, num_q_heads, num_kv_heads, head_dim = check_inputs(
        query, key_cache, value_cache, block_table, seq_lens, max_seq_len
    )
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    group = num_q_heads // num_kv_heads
    block_size = key_cache.shape[1]
    out = torch.zeros(batch, num_q_heads, head_dim, dtype=torch.float32, device=query.device)
    for b in range(batch):
        n = int(seq_lens[b])
        if n == 0:
            continue
        blocks = block_table[b, : -(-n // block_size)].long()
        k = _dequantize(key_cache[blocks], _per_token_scale(k_scale, blocks))
        v = _dequantize(value_cache[blocks], _per_token_scale(v_scale, blocks))
        k = k.reshape(-1, num_kv_heads, head_dim)[:n]  # [n, Hkv, D]
        v = v.reshape(-1, num_kv_heads, head_dim)[:n]
        if sliding_window is not None:
            k, v = k[max(0, n - sliding_window) :], v[max(0, n - sliding_window) :]
        q = query[b].float().reshape(num_kv_heads, group, head_dim)
        scores = torch.einsum("hgd,thd->hgt", q, k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[b] = torch.einsum("hgt,thd->hgd", probs, v).reshape(num_q_heads, head_dim)
    return out.to(query.dtype)


_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _chunk_attention(q, k, v, mask, scale):
    """One chunk: q [B, Hkv, G, D] against k/v [B, Hkv, T, D] (strided views), an additive mask
    [B, 1, 1, T] or None -> (output [B, Hkv, G, D], log-sum-exp [B, Hkv, G]). The query heads of a
    group are the rows of one GEMM (grouped-query attention folded into the query length). On a
    CPU, torch's fused flash kernel; elsewhere two batched GEMMs and a softmax."""
    if _CPU_FLASH is not None and q.device.type == "cpu":
        return _CPU_FLASH(q, k, v, attn_mask=mask, scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse).unsqueeze(-1))
    return torch.matmul(probs, v), lse


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
    max_seq_len=None,
    chunk_tokens=None,
):
    """Fast path on any device: walks the block tables a chunk of blocks at a time for the whole
    batch. Each chunk's blocks are gathered with index_select (any cache strides), attended with
    the query heads of a KV group as the rows of one GEMM (fused flash kernel on a CPU), and
    merged into the running output by log-sum-exp. A few large operations per chunk, never one
    per sequence: small operations each wait for every thread, which a loaded machine punishes."""
    batch, num_q_heads, num_kv_heads, head_dim = check_inputs(
        query, key_cache, value_cache, block_table, seq_lens, max_seq_len
    )
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    group = num_q_heads // num_kv_heads
    block_size = key_cache.shape[1]
    device = query.device
    out = torch.zeros(batch, num_kv_heads, group, head_dim, dtype=torch.float32, device=device)
    max_len = max_seq_len if max_seq_len is not None else host_max_len(seq_lens)
    if batch == 0 or max_len == 0:
        return out.reshape(batch, num_q_heads, head_dim).to(query.dtype)
    lens = seq_lens.to(device=device, dtype=torch.long)
    q = query.float().reshape(batch, num_kv_heads, group, head_dim).contiguous()
    lse = torch.full((batch, num_kv_heads, group), -math.inf, device=device)
    start_block = 0
    if sliding_window is not None and max_seq_len is None:  # host values known: skip early blocks
        start_block = int((lens - sliding_window).clamp(min=0).min()) // block_size
    if chunk_tokens is None:  # ~2 MB of K per chunk (it stays in cache), at least 64 tokens
        row_bytes = batch * num_kv_heads * head_dim * 4
        chunk_tokens = min(4096, max(MIN_CHUNK_TOKENS, block_size, CHUNK_BYTES // row_bytes))
    chunk_blocks = max(1, chunk_tokens // block_size)
    table = block_table.to(device=device, dtype=torch.long)
    end_block = -(-max_len // block_size)
    gather_k = _Gather(key_cache, batch * chunk_blocks)
    gather_v = _Gather(value_cache, batch * chunk_blocks)
    for first in range(start_block, end_block, chunk_blocks):
        last = min(first + chunk_blocks, end_block)
        tokens = (last - first) * block_size
        positions = torch.arange(first * block_size, last * block_size, device=device)
        valid = positions.unsqueeze(0) < lens.unsqueeze(1)  # [B, T]
        if sliding_window is not None:
            valid &= positions.unsqueeze(0) >= (lens - sliding_window).unsqueeze(1)
        ids = table[:, first:last]
        # entries past a sequence's length may hold anything: read block 0 instead (masked)
        block_valid = valid.view(batch, last - first, block_size).any(-1)
        ids = torch.where(block_valid, ids, 0).reshape(-1)
        k = gather_k(ids, k_scale, batch, tokens)  # [B, T, Hkv, D]
        v = gather_v(ids, v_scale, batch, tokens)
        mask = None
        # a chunk every sequence fills needs no mask (on a CPU the check is free; on a GPU it
        # would synchronise, so the mask is always applied there)
        if device.type != "cpu" or not bool(valid.all()):
            # unused slots may hold NaN: zero them so that 0 * NaN cannot leak through a GEMM
            k = torch.where(valid[:, :, None, None], k, 0.0)
            v = torch.where(valid[:, :, None, None], v, 0.0)
            mask = torch.where(valid, 0.0, -math.inf)[:, None, None, :]
        part, part_lse = _chunk_attention(q, k.transpose(1, 2), v.transpose(1, 2), mask, scale)
        row_valid = valid.any(-1)[:, None, None]  # a row masked out entirely contributes nothing
        part_lse = torch.where(row_valid, part_lse, -math.inf)
        merged = torch.logaddexp(lse, part_lse)
        finite = torch.isfinite(merged)
        keep = torch.where(finite, torch.exp(lse - merged), 0.0)
        take = torch.where(finite, torch.exp(part_lse - merged), 0.0)
        out = out * keep.unsqueeze(-1) + torch.nan_to_num(part) * take.unsqueeze(-1)
        lse = merged
    return out.reshape(batch, num_q_heads, head_dim).to(query.dtype)


class _Gather:
    """Gathers blocks of one cache [blocks, block_size, Hkv, D] into a buffer reused across
    chunks. A cache whose blocks are each contiguous is gathered as rows of a [blocks, -1] view
    (a memcpy per block; index_select on the 4-D view is ~20x slower on a CPU); any other strides
    through the 4-D view."""

    def __init__(self, cache, rows: int):
        self.cache = cache
        try:
            self.flat = cache.view(cache.shape[0], -1)
        except RuntimeError:  # blocks not contiguous (a permuted or sliced cache)
            self.flat = None
        width = cache[0].numel()
        self.buf = (
            torch.empty(rows, width, dtype=cache.dtype, device=cache.device)
            if self.flat is not None
            else None
        )

    def __call__(self, ids, scale, batch: int, tokens: int):
        """The blocks `ids` as fp32 [B, T, Hkv, D], dequantized with their scales."""
        if self.buf is not None:  # set with self.flat
            raw = torch.index_select(self.flat, 0, ids, out=self.buf[: ids.numel()])
        else:
            raw = torch.index_select(self.cache, 0, ids)  # contiguous [n, block_size, Hkv, D]
        chunk = raw.view(batch, tokens, *self.cache.shape[2:])
        if chunk.dtype != torch.float32 or scale is not None:
            chunk = _dequantize(chunk, _chunk_scale(scale, ids, batch, tokens))
        return chunk


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
    max_seq_len=None,
    impl="auto",
):
    """Decode attention of one new token per sequence over its paged KV cache.

    Every impl accepts any strides of the query and the caches (K and V independently), and
    gives zeros for a sequence of length 0. `max_seq_len` (an upper bound of seq_lens known on the
    host, as a scheduler knows it) spares the device->host read of the lengths: with it a CUDA
    call never synchronises.

    impl: "reference" (the oracle), "torch" (chunked, any device), "native" (the C kernel reading
    the blocks in place on a CPU; fp32/bf16/fp16 caches), "triton" (CUDA split-KV kernel; CPU
    under TRITON_INTERPRET=1), or "auto": triton on CUDA when available; on a CPU native when it
    built and takes the inputs (not quantized caches, not KVPLAN_NATIVE_DECODE=0); else torch."""
    kwargs = dict(
        scale=scale,
        sliding_window=sliding_window,
        k_scale=k_scale,
        v_scale=v_scale,
        max_seq_len=max_seq_len,
    )
    if sliding_window is not None and sliding_window < 1:
        raise ValueError("sliding_window must be positive")
    if max_seq_len is not None and max_seq_len < 0:
        raise ValueError("max_seq_len must be >= 0")
    if impl == "auto":
        impl = _auto_impl(query, key_cache, value_cache, k_scale, v_scale)
    if impl == "reference":
        return reference_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    if impl == "torch":
        return torch_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    if impl == "native":
        return _native(query, key_cache, value_cache, block_table, seq_lens, **kwargs)
    if impl == "triton":
        from kvplan.kernels.triton_decode import triton_decode_attention

        return triton_decode_attention(
            query, key_cache, value_cache, block_table, seq_lens, **kwargs
        )
    raise ValueError(f"unknown impl {impl!r}; choose from auto, {', '.join(available_impls())}")


def _auto_impl(query, key_cache, value_cache, k_scale, v_scale) -> str:
    if query.is_cuda:
        return "triton" if "triton" in available_impls() else "torch"
    from kvplan.kernels import native_decode

    if native_decode.unsupported(query, key_cache, value_cache, k_scale, v_scale) is None:
        if native_decode.status().available:
            return "native"
    return "torch"


def _native(
    query,
    key_cache,
    value_cache,
    block_table,
    seq_lens,
    *,
    scale,
    sliding_window,
    k_scale,
    v_scale,
    max_seq_len,
):
    from kvplan.kernels import native_decode

    reason = native_decode.unsupported(query, key_cache, value_cache, k_scale, v_scale)
    if reason is not None:
        raise ValueError(f"impl='native' cannot take {reason}; use impl='torch'")
    batch, _, num_kv_heads, head_dim = check_inputs(
        query, key_cache, value_cache, block_table, seq_lens, max_seq_len
    )
    out = native_decode.native_decode_attention(
        query,
        key_cache,
        value_cache,
        block_table,
        seq_lens,
        batch=batch,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        scale=scale if scale is not None else 1.0 / math.sqrt(head_dim),
        sliding_window=sliding_window,
    )
    return out.to(query.dtype)


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
