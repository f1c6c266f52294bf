"""Builders for paged-cache test data: shuffled physical blocks, NaN in every unused block."""

from __future__ import annotations

import math

import torch


def build_paged(
    seq_lens, num_kv_heads, head_dim, block_size, dtype=torch.float32, seed=0, spare_blocks=3
):
    """Random K/V per sequence, scattered over a shuffled pool; returns (caches, table, dense)."""
    gen = torch.Generator().manual_seed(seed)
    need = [math.ceil(n / block_size) for n in seq_lens]
    pool = sum(need) + spare_blocks
    key_cache = torch.full((pool, block_size, num_kv_heads, head_dim), float("nan"))
    value_cache = torch.full_like(key_cache, float("nan"))
    order = torch.randperm(pool, generator=gen)
    table = torch.full((len(seq_lens), max(need) + 2), 2_147_480_000, dtype=torch.int32)
    dense, used = [], 0
    for b, n in enumerate(seq_lens):
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen)
        dense.append((k, v))
        for j in range(need[b]):
            block = int(order[used])
            used += 1
            table[b, j] = block
            piece = slice(j * block_size, min(n, (j + 1) * block_size))
            count = piece.stop - piece.start
            key_cache[block, :count] = k[piece]
            value_cache[block, :count] = v[piece]
    return key_cache.to(dtype), value_cache.to(dtype), table, dense


def naive_attention(q, k, v, window=None):
    """Independent dense oracle for one sequence: q [Hq, D], k/v [n, Hkv, D] (fp64)."""
    n = k.shape[0]
    if window is not None:
        k, v = k[max(0, n - window) :], v[max(0, n - window) :]
    group = q.shape[0] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,thd->ht", q.double(), k) / math.sqrt(q.shape[-1])
    return torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v)
