"""Triton paged decode attention for CUDA: split-KV, two stages, GQA-grouped.

Stage 1, grid (batch, num_kv_heads, num_splits): one program takes one KV head, all G query heads
that share it, and one split of the sequence; it walks the split BLOCK_N tokens at a time through
the block table, keeps an online softmax in fp32, and writes a partial output and its
log-sum-exp. Stage 2, grid (batch, num_q_heads): merges the splits. Caches may be fp32, bf16,
fp16, fp8 e4m3 (scale per tensor or per KV head) or int8 (per-token scales).

Tested on CPU with TRITON_INTERPRET=1 where triton is installed (tests/test_kernels.py).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    table_ptr,
    lens_ptr,
    ks_ptr,
    vs_ptr,
    out_ptr,
    lse_ptr,
    sm_scale,
    window,
    stride_qb,
    stride_qh,
    stride_kn,
    stride_kt,
    stride_kh,
    stride_tb,
    stride_sn,
    stride_st,
    stride_ob,
    stride_oh,
    stride_os,
    stride_lb,
    stride_lh,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_TOKENS: tl.constexpr,
    SCALE_MODE: tl.constexpr,  # 0 none, 1 per tensor, 2 per KV head, 3 per token and head
    HAS_WINDOW: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    lo = split * SPLIT_TOKENS
    if HAS_WINDOW:
        lo = tl.maximum(lo, seq_len - window)
    hi = tl.minimum((split + 1) * SPLIT_TOKENS, seq_len)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    q_heads = h * GROUP + offs_g
    q = tl.load(
        q_ptr + b * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    q = q * sm_scale
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_head_scale = 1.0
    v_head_scale = 1.0
    if SCALE_MODE == 1:
        k_head_scale = tl.load(ks_ptr)
        v_head_scale = tl.load(vs_ptr)
    if SCALE_MODE == 2:
        k_head_scale = tl.load(ks_ptr + h)
        v_head_scale = tl.load(vs_ptr + h)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        n_mask = pos < hi
        block = tl.load(table_ptr + b * stride_tb + pos // BLOCK_SIZE, mask=n_mask, other=0)
        slot = block.to(tl.int64) * stride_kn + (pos % BLOCK_SIZE) * stride_kt + h * stride_kh
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_ptr + slot[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + slot[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        k = k.to(tl.float32) * k_head_scale
        v = v.to(tl.float32) * v_head_scale
        if SCALE_MODE == 3:
            s_off = block.to(tl.int64) * stride_sn + (pos % BLOCK_SIZE) * stride_st + h
            k = k * tl.load(ks_ptr + s_off, mask=n_mask, other=0.0)[:, None]
            v = v * tl.load(vs_ptr + s_off, mask=n_mask, other=0.0)[:, None]
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [BLOCK_G, BLOCK_N]
        scores = tl.where(n_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out_offs = b * stride_ob + q_heads[:, None] * stride_oh + split * stride_os + offs_d[None, :]
    tl.store(
        out_ptr + out_offs,
        acc / tl.maximum(l_i, 1e-30)[:, None],
        mask=g_mask[:, None] & d_mask[None, :],
    )
    lse = tl.where(l_i > 0, m_i + tl.log(tl.maximum(l_i, 1e-30)), float("-inf"))
    tl.store(lse_ptr + b * stride_lb + q_heads * stride_lh + split, lse, mask=g_mask)


@triton.jit
def _merge_kernel(
    part_ptr,
    lse_ptr,
    out_ptr,
    num_splits,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_lb,
    stride_lh,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < num_splits
    lse = tl.load(
        lse_ptr + b * stride_lb + h * stride_lh + offs_s, mask=s_mask, other=float("-inf")
    )
    m = tl.max(lse, axis=0)
    w = tl.where(s_mask & (lse > float("-inf")), tl.exp(lse - m), 0.0)
    parts = tl.load(
        part_ptr + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    out = tl.sum(parts * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out, mask=offs_d < HEAD_DIM)


def triton_decode_attention(
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
    split_tokens=512,
    block_n=32,
):
    batch, num_q_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads, _ = key_cache.shape
    group = num_q_heads // num_kv_heads
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    device = query.device
    if key_cache.dtype == torch.int8 and (k_scale is None or torch.as_tensor(k_scale).dim() != 3):
        raise ValueError("int8 caches need per-token scales [num_blocks, block_size, Hkv]")
    mode, ks, vs = 0, torch.ones(1, device=device), torch.ones(1, device=device)
    if k_scale is not None:
        ks = torch.as_tensor(k_scale, dtype=torch.float32, device=device)
        vs = torch.as_tensor(v_scale, dtype=torch.float32, device=device)
        mode = {0: 1, 1: 2, 3: 3}[ks.dim()]
        ks, vs = ks.contiguous(), vs.contiguous()
    max_len = int(seq_lens.max())
    num_splits = max(1, -(-max_len // split_tokens))
    parts = torch.empty(
        batch, num_q_heads, num_splits, head_dim, dtype=torch.float32, device=device
    )
    lse = torch.empty(batch, num_q_heads, num_splits, dtype=torch.float32, device=device)
    table = block_table.to(torch.int32).contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    block_d = triton.next_power_of_2(head_dim)
    block_g = max(1, triton.next_power_of_2(group))
    s_n, s_t = (ks.stride(0), ks.stride(1)) if mode == 3 else (0, 0)
    _split_kernel[(batch, num_kv_heads, num_splits)](
        query,
        key_cache,
        value_cache,
        table,
        lens,
        ks,
        vs,
        parts,
        lse,
        scale,
        sliding_window or 0,
        query.stride(0),
        query.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        table.stride(0),
        s_n,
        s_t,
        parts.stride(0),
        parts.stride(1),
        parts.stride(2),
        lse.stride(0),
        lse.stride(1),
        GROUP=group,
        BLOCK_G=block_g,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        SPLIT_TOKENS=split_tokens,
        SCALE_MODE=mode,
        HAS_WINDOW=sliding_window is not None,
    )
    out = torch.empty(batch, num_q_heads, head_dim, dtype=torch.float32, device=device)
    _merge_kernel[(batch, num_q_heads)](
        parts,
        lse,
        out,
        num_splits,
        parts.stride(0),
        parts.stride(1),
        parts.stride(2),
        lse.stride(0),
        lse.stride(1),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_S=triton.next_power_of_2(num_splits),
    )
    return out.to(query.dtype)
