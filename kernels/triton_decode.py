"""Triton paged decode attention for CUDA: split-KV, two stages, GQA-grouped, tl.dot.

Stage 1, grid (batch, num_kv_heads, num_splits): one program takes one KV head, the G query heads
that share it (padded to 16 rows, the smallest tl.dot tile) and one split of the sequence; it walks
the split BLOCK_N tokens at a time through the block table, computes scores and the weighted sum
of V with tl.dot, keeps an online softmax in fp32, and writes a partial output and its
log-sum-exp. Stage 2, grid (batch, num_q_heads): merges the splits.

Designed for HBM bandwidth: at batch 1 there are only num_kv_heads programs per split, so the KV
is split until there are about two programs per SM (a decode step reads every KV byte once; idle
SMs would cap the bandwidth). Every input is addressed through its own strides (the query, K and V
each, head_dim included), so any view the API accepts is read correctly; a sequence of length 0
gives zeros. Caches may be fp32, bf16, fp16, fp8 e4m3 (a scale per tensor or per KV head) or int8
(per-token scales).

Tested against an independent float64 reference under TRITON_INTERPRET=1 on a CPU
(tests/test_kernels.py), natively on CUDA.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kvplan.kernels.paged_inputs import check_inputs

MIN_DOT_ROWS = 16  # tl.dot needs M, N, K >= 16


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
    split_len,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_kn,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vn,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_tb,
    stride_tn,
    stride_sn,
    stride_st,
    stride_sh,
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
    SCALE_MODE: tl.constexpr,  # 0 none, 1 per tensor, 2 per KV head, 3 per token and head
    HAS_WINDOW: tl.constexpr,
    HALF_DOT: tl.constexpr,  # bf16/fp16 caches: tensor-core dots in the cache's dtype
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    lo = split * split_len
    if HAS_WINDOW:
        lo = tl.maximum(lo, seq_len - window)
    hi = tl.minimum((split + 1) * split_len, seq_len)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    q_heads = h * GROUP + offs_g
    q = tl.load(
        q_ptr + b * stride_qb + q_heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    q = q * sm_scale
    if HALF_DOT:
        q = q.to(k_ptr.dtype.element_ty)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    k_scale = 1.0
    v_scale = 1.0
    if SCALE_MODE == 1:
        k_scale = tl.load(ks_ptr)
        v_scale = tl.load(vs_ptr)
    if SCALE_MODE == 2:
        k_scale = tl.load(ks_ptr + h)
        v_scale = tl.load(vs_ptr + h)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        n_mask = pos < hi
        block = tl.load(
            table_ptr + b * stride_tb + (pos // BLOCK_SIZE) * stride_tn, mask=n_mask, other=0
        ).to(tl.int64)
        offset = (pos % BLOCK_SIZE).to(tl.int64)
        k = tl.load(  # K^T: [BLOCK_D, BLOCK_N]
            k_ptr
            + block[None, :] * stride_kn
            + offset[None, :] * stride_kt
            + h * stride_kh
            + offs_d[:, None] * stride_kd,
            mask=d_mask[:, None] & n_mask[None, :],
            other=0.0,
        )
        v = tl.load(  # V: [BLOCK_N, BLOCK_D]
            v_ptr
            + block[:, None] * stride_vn
            + offset[:, None] * stride_vt
            + h * stride_vh
            + offs_d[None, :] * stride_vd,
            mask=n_mask[:, None] & d_mask[None, :],
            other=0.0,
        )
        if HALF_DOT:
            scores = tl.dot(q, k)
        else:
            k = k.to(tl.float32) * k_scale
            if SCALE_MODE == 3:
                s_off = block * stride_sn + offset * stride_st + h * stride_sh
                k = k * tl.load(ks_ptr + s_off, mask=n_mask, other=0.0)[None, :]
            scores = tl.dot(q, k, input_precision="ieee")
        scores = tl.where(n_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if HALF_DOT:
            pv = tl.dot(p.to(v.dtype), v)
        else:
            v = v.to(tl.float32) * v_scale
            if SCALE_MODE == 3:
                s_off = block * stride_sn + offset * stride_st + h * stride_sh
                v = v * tl.load(vs_ptr + s_off, mask=n_mask, other=0.0)[:, None]
            pv = tl.dot(p, v, input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    out = acc / tl.maximum(l_i, 1e-30)[:, None]
    out_offs = b * stride_ob + q_heads[:, None] * stride_oh + split * stride_os + offs_d[None, :]
    tl.store(out_ptr + out_offs, out, mask=g_mask[:, None] & d_mask[None, :])
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
    # a sequence of length 0 has no split with weight: its output is zeros, never 0 / 0
    safe_m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.where(s_mask & (lse > float("-inf")), tl.exp(lse - safe_m), 0.0)
    parts = tl.load(
        part_ptr + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    total = tl.sum(w, axis=0)
    out = tl.sum(parts * w[:, None], axis=0) / tl.maximum(total, 1e-30)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out, mask=offs_d < HEAD_DIM)


def _programs_wanted(device) -> int:
    """About two programs per SM keep every SM streaming; the CPU interpreter needs few."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


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
    max_seq_len=None,
    block_n=None,
):
    """Shapes as `kvplan.kernels.paged_decode_attention`. With `max_seq_len` (a host-side bound
    of seq_lens) nothing here waits for the device."""
    batch, num_q_heads, num_kv_heads, head_dim = check_inputs(
        query, key_cache, value_cache, block_table, seq_lens, max_seq_len
    )
    block_size = key_cache.shape[1]
    group = num_q_heads // num_kv_heads
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    device = query.device
    out = torch.zeros(batch, num_q_heads, head_dim, dtype=torch.float32, device=device)
    max_len = max_seq_len if max_seq_len is not None else int(seq_lens.max()) if batch else 0
    if batch == 0 or max_len == 0:
        return out.to(query.dtype)
    if key_cache.dtype == torch.int8 and (k_scale is None or torch.as_tensor(k_scale).dim() != 3):
        raise ValueError("int8 caches need per-token scales [num_blocks, block_size, Hkv]")
    mode, ks, vs = 0, torch.ones(1, device=device), torch.ones(1, device=device)
    scale_strides: tuple[int, ...] = (0, 0, 0)
    if k_scale is not None:
        ks = torch.as_tensor(k_scale, dtype=torch.float32, device=device)
        vs = torch.as_tensor(v_scale, dtype=torch.float32, device=device)
        if ks.shape != vs.shape:
            raise ValueError("k_scale and v_scale must have the same shape")
        mode = {0: 1, 1: 2, 3: 3}[ks.dim()]
        ks, vs = ks.contiguous(), vs.contiguous()
        if mode == 3:
            scale_strides = ks.stride()
    half_dot = mode == 0 and key_cache.dtype in (torch.bfloat16, torch.float16)
    block_n = block_n or (64 if head_dim <= 128 else 32)
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_g = max(MIN_DOT_ROWS, triton.next_power_of_2(group))
    # split the KV until about two programs per SM (at batch 1 there are only Hkv otherwise)
    splits = max(1, -(-_programs_wanted(device) // (batch * num_kv_heads)))
    splits = min(splits, -(-max_len // block_n))
    per_split = -(-max_len // splits)
    split_len = -(-per_split // block_n) * block_n  # whole BLOCK_N tiles per split
    splits = -(-max_len // split_len)
    parts = torch.empty(batch, num_q_heads, splits, head_dim, dtype=torch.float32, device=device)
    lse = torch.empty(batch, num_q_heads, splits, dtype=torch.float32, device=device)
    table = block_table.to(torch.int32)
    lens = seq_lens.to(device=device, dtype=torch.int32)
    _split_kernel[(batch, num_kv_heads, splits)](
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
        split_len,
        *query.stride(),
        *key_cache.stride(),
        *value_cache.stride(),
        *table.stride(),
        *scale_strides,
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
        SCALE_MODE=mode,
        HAS_WINDOW=sliding_window is not None,
        HALF_DOT=half_dot,
    )
    _merge_kernel[(batch, num_q_heads)](
        parts,
        lse,
        out,
        splits,
        parts.stride(0),
        parts.stride(1),
        parts.stride(2),
        lse.stride(0),
        lse.stride(1),
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_S=max(2, triton.next_power_of_2(splits)),
    )
    return out.to(query.dtype)
