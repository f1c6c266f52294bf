"""Builders for paged-cache test data: shuffled physical blocks, NaN in every unused block and an
out-of-range id in every unused table entry (an out-of-range read shows as NaN or a crash); the
awkward inputs of paged decode attention and an independent float64 reference, shared by the
in-process tests and the Triton run under TRITON_INTERPRET=1."""

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


# (sequence lengths, KV heads, GQA ratio, head_dim, block size)
SHAPES = [
    ([1, 15, 17, 300], 2, 4, 64, 16),
    ([5, 0, 40], 1, 7, 80, 3),
    ([33, 1], 2, 1, 96, 1),
    ([70, 300], 1, 4, 256, 256),
    ([129, 2], 4, 7, 128, 16),
    ([0], 2, 4, 64, 16),
]
# (window, scale, layout) on the first two shapes
VARIANTS = [
    (None, None, "contiguous"),
    (20, None, "contiguous"),
    (None, 0.3, "contiguous"),
    (None, None, "strided"),
    (7, 0.05, "strided"),
]


def reference64(q, k, v, window=None, scale=None):
    """softmax(q k^T * scale) v for one sequence in float64: q [Hq, D], k/v [n, Hkv, D]; zeros
    when nothing is attended."""
    n = k.shape[0]
    if window is not None:
        k, v = k[max(0, n - window) :], v[max(0, n - window) :]
    if k.shape[0] == 0:
        return torch.zeros(q.shape, dtype=torch.float64)
    group = q.shape[0] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("hd,thd->ht", q.double(), k) * scale
    return torch.einsum("ht,thd->hd", torch.softmax(scores, -1), v)


def strided_views(q, key_cache, value_cache):
    """The same values through awkward views: the query and K with head_dim stride 2 (every other
    element of a NaN-filled buffer), V stored head-major so its strides differ from K's."""
    q_buf = torch.full((*q.shape[:-1], 2 * q.shape[-1]), math.nan)
    q_buf[..., ::2] = q
    k_buf = torch.full((*key_cache.shape[:-1], 2 * key_cache.shape[-1]), math.nan)
    k_buf[..., ::2] = key_cache
    v_heads_first = value_cache.permute(2, 0, 1, 3).contiguous()  # [Hkv, blocks, bs, D]
    return q_buf[..., ::2], k_buf[..., ::2], v_heads_first.permute(1, 2, 0, 3)


def make_case(lens, num_kv_heads, group, head_dim, block_size, layout="contiguous", seed=0):
    key_cache, value_cache, table, dense = build_paged(
        lens, num_kv_heads, head_dim, block_size, seed=seed
    )
    q = torch.randn(
        len(lens), num_kv_heads * group, head_dim, generator=torch.Generator().manual_seed(seed + 1)
    )
    if layout == "strided":
        q, key_cache, value_cache = strided_views(q, key_cache, value_cache)
    return q, key_cache, value_cache, table, torch.tensor(lens, dtype=torch.int32), dense


def worst_error(attention, case, window=None, scale=None, **kwargs) -> float:
    """The largest |difference| between `attention(...)` and the float64 reference."""
    q, key_cache, value_cache, table, lens, dense = case
    out = attention(
        q, key_cache, value_cache, table, lens, sliding_window=window, scale=scale, **kwargs
    ).cpu()
    worst = 0.0
    for b, (k, v) in enumerate(dense):
        want = reference64(q[b].cpu(), k, v, window, scale)
        worst = max(worst, (out[b].double() - want).abs().max().item())
    return worst


def all_cases():
    """(label, case, window, scale) for every shape, and every variant on the first two."""
    for index, (lens, hkv, group, dim, bs) in enumerate(SHAPES):
        variants = VARIANTS if index < 2 else VARIANTS[:1]
        for window, scale, layout in variants:
            label = f"lens={lens} Hkv={hkv} G={group} d={dim} bs={bs} w={window} s={scale} {layout}"
            yield label, make_case(lens, hkv, group, dim, bs, layout), window, scale
