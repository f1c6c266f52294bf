"""Each dense GEMM of a step at its own shape, timed from the GPU's GEMM table.

At a few tokens a dense GEMM takes far more than its weights over the achieved bandwidth: the
GPU's tables (aiconfigurator-core 0.12.0, `kernel_tables/gemm/`, scripts/derive_achieved.py
gemm_grid) time a 4-16 MB bf16 GEMM at one token in 5.9 us on a B200 under SGLang 0.5.14, 1.5 of
its 8 TB/s. `dense_gemm_calls` lists the dense GEMMs one rank runs in a forward, per layer as the
engines shard them under tensor parallelism (qkv and o; MLA's fused q_a|kv_a, q_b and o; gate|up
and down; each MoE layer's router and shared expert; the head), and `gemm_calls_s` sums their
measured times at the step's tokens, any number of them (`gemm_call_s`: bilinear in log n and
log k between the four grid shapes around each call; log-log in tokens between the two grid
token counts around the step's, 1 to 32,768 by powers of two; linear in tokens past the last,
`along_tokens_s`). MLA's two absorbed BMMs (kv_b split into the key and value halves, batched
over the heads) are no GEMM of that table: the GPU's mla_bmm table times them (`mla_bmm_calls`,
`mla_bmm_calls_s`: bf16 checkpoints; other formats keep their floor, batch_step._Floors).

The mla_bmm table times one slice, DeepSeek's: pre = q_nope [heads, m, 128] x [heads, 128, 512],
post = [heads, m, 512] x [heads, 512, 128], at 1-128 heads. A model of other widths runs the
same batched GEMM with per-head matrices of nope x latent (pre) and latent x v (post) elements:
it is priced as the slice at its equivalent heads, heads x (its matrix / the slice's), the
weights and FLOPs being those of that many slice heads (aiconfigurator-core's own mla_bmm query
scales by the head ratio likewise): GLM-4.7-Flash's 20 heads of 192 x 512 and 512 x 256 are 30
and 40 slice heads. Between the table's head counts: linear in heads; past 128: 128's time x
heads / 128; in tokens as gemm_call_s (along_tokens_s) over the grid counts the op's rows time
(from one token up: to 8,192 or 16,384 on the B200's SGLang table, whose rows stop at 20,480),
linear past the last.
"""

from __future__ import annotations

import math
from bisect import bisect_left

from kvplan.anatomy.model import CacheKind, ModelSpec, distinct_layers
from kvplan.inputs.architectures.params import indexer_params
from kvplan.inputs.kernel_tables import GemmGrid
from kvplan.record import NamedTuple


class GemmCall(NamedTuple):
    """One dense GEMM a rank runs: `n` output by `k` input features, in kernel-table format
    `fmt` ("bf16", "fp8", "int8"), `times` times a forward, on the step's tokens (or, `head`,
    on the sampled positions only); `gathered`: on the rows gathered over SGLang's DP-attention
    group (its MLPs, router and head: dense_gemm_calls' `group_tp`)."""

    n: int
    k: int
    fmt: str
    times: int
    head: bool = False
    gathered: bool = False


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def dense_gemm_calls(
    spec: ModelSpec,
    fmt: str,
    quantized: frozenset,
    tp: int,
    group_tp: int | None = None,
    *,
    local_head: bool = False,
    local_dense_mlp: bool = False,
    dsa_module: bool = False,
) -> tuple[GemmCall, ...] | None:
    """The dense GEMMs of one forward on one of `tp` ranks, as SGLang and vLLM shard them:
    column-parallel q|k|v, q_b and gate|up by output features (KV heads at max(1, Hkv / tp)),
    row-parallel o and down by input features, MLA's fused q_a|kv_a and the MoE router
    replicated, the head by vocabulary. The parts in `quantized` run in `fmt`, the rest (the
    router, the head, unquantized parts) in bf16. None where a layer holds matrices these widths
    do not lay out exactly (recurrent and linear-attention mixers, DSA's indexer, compressed or
    gated attention, a parameter count the widths miss): the caller keeps the pooled term.

    `group_tp` (SGLang's DP attention: the whole group's GPUs; None: `tp`): the dense MLPs and
    shared experts column/row-parallel over that many GPUs, the router and the head too, all on
    the rows gathered over the group (`gathered` calls; sglang/srt/layers/communicator.py runs
    every layer's MLP in ScatterMode FULL, models/deepseek_v2.py shards the dense MLP and the
    shared experts over the whole TP group, logits_processor.py gathers the sampled rows before
    the vocab-parallel head). Under it, `local_head` (SGLang's --enable-dp-lm-head): the head
    by vocabulary over the `tp` attention ranks on the rank's own sampled rows;
    `local_dense_mlp` (--moe-dense-tp-size 1, at attention TP 1): the dense layers' MLPs whole
    on the rank's own rows.

    `dsa_module` (the step model adds the engine's DSA module less its MLA module: batch_step.
    _DsaModule): a DSA layer's MLA projections laid out as a dense MLA layer's, the indexer's
    own matrices (wq_b, wk, weights_proj: params.indexer_params) left to that difference, which
    times them with the indexer; without it such a layer is not laid out."""
    h = spec.hidden_size
    mlp_tp = tp if group_tp is None else group_tp
    gathered = group_tp is not None
    calls: list[GemmCall] = []

    def part_fmt(part: str) -> str:
        return fmt if part in quantized else "bf16"

    for layer, count in distinct_layers(spec.layers):
        parts = dict(layer.params)
        attn = layer.attention
        if attn is None or layer.state is not None:
            return None
        if set(parts) - {"attention", "mlp", "experts", "shared_experts", "router", "norms"}:
            return None
        if attn.compress_ratio or attn.sparse_block_size:
            return None
        dsa = bool(attn.indexer_head_dim) and attn.kind is CacheKind.MLA
        if attn.indexer_head_dim and not (dsa and dsa_module):
            return None
        heads = _ceil_div(attn.num_q_heads, tp)
        a = part_fmt("attention")
        if attn.kind is CacheKind.MLA:
            latent, rope = attn.mla_kv_lora_rank, attn.mla_rope_dim
            q_lora = attn.mla_q_lora_rank
            if not latent or not q_lora:
                return None
            nope = attn.qk_head_dim - rope
            whole = (
                h * (q_lora + latent + rope)
                + q_lora * attn.num_q_heads * attn.qk_head_dim
                + latent * attn.num_q_heads * (nope + attn.v_head_dim)
                + attn.num_q_heads * attn.v_head_dim * h
                + (indexer_params(attn, h) if dsa else 0)  # the DSA module's (`dsa_module`)
            )
            matrices = list(mla_projection_calls(attn, h, tp, a, count))
        else:
            kv_heads = max(1, attn.num_kv_heads // tp) if tp > 1 else attn.num_kv_heads
            kv_width = attn.head_dim + (0 if attn.shared_kv_proj else attn.head_dim_v)
            whole = (
                h * attn.num_q_heads * attn.qk_head_dim
                + h * attn.num_kv_heads * kv_width
                + attn.num_q_heads * attn.v_head_dim * h
            )
            matrices = [
                GemmCall(heads * attn.qk_head_dim + kv_heads * kv_width, h, a, count),
                GemmCall(h, heads * attn.v_head_dim, a, count),
            ]
        # the attention part holds these matrices and a few widths more (norms, biases, sinks)
        if not 0 <= parts.get("attention", 0) - whole <= 8 * (h + attn.num_q_heads * 256):
            return None
        calls += matrices
        if "mlp" in parts:
            width = spec.intermediate_size
            if not width:
                return None
            gated = parts["mlp"] >= 3 * h * width
            if abs(parts["mlp"] - (3 if gated else 2) * h * width) > 8 * (h + width):
                return None
            own = gathered and local_dense_mlp  # whole, on the rank's own rows
            w, m = _ceil_div(width, 1 if own else mlp_tp), part_fmt("mlp")
            calls += [
                GemmCall((2 if gated else 1) * w, h, m, count, gathered=gathered and not own),
                GemmCall(h, w, m, count, gathered=gathered and not own),
            ]
        if "experts" in parts:
            moe = spec.moe
            if moe is None:
                return None
            # the router, replicated
            calls.append(GemmCall(moe.num_experts, h, "bf16", count, gathered=gathered))
            if parts.get("shared_experts"):
                width = moe.shared_intermediate_size
                if not width or abs(parts["shared_experts"] - 3 * h * width) > 8 * (h + width):
                    return None
                w, s = _ceil_div(width, mlp_tp), part_fmt("shared_experts")
                calls += [
                    GemmCall(2 * w, h, s, count, gathered=gathered),
                    GemmCall(h, w, s, count, gathered=gathered),
                ]
    local = gathered and local_head
    head = GemmCall(
        _ceil_div(spec.vocab_size, tp if local else mlp_tp),
        h,
        "bf16",
        1,
        head=True,
        gathered=gathered and not local,
    )
    calls.append(head)
    return tuple(calls)


def mla_projection_calls(
    attn, hidden: int, tp: int, fmt: str, count: int = 1
) -> tuple[GemmCall, ...]:
    """An MLA layer's projections on one of `tp` ranks, `count` layers of them: the fused q_a|
    kv_a (replicated), q_b by heads (column-parallel), o by heads (row-parallel); kv_b runs as
    the absorbed BMMs (mla_bmm_calls). A DSA layer's indexer matrices are not among them."""
    heads = _ceil_div(attn.num_q_heads, tp)
    q_lora, latent, rope = attn.mla_q_lora_rank, attn.mla_kv_lora_rank, attn.mla_rope_dim
    return (
        GemmCall(q_lora + latent + rope, hidden, fmt, count),
        GemmCall(heads * attn.qk_head_dim, q_lora, fmt, count),
        GemmCall(hidden, heads * attn.v_head_dim, fmt, count),
    )


def gemm_call_s(grid: GemmGrid, fmt: str, tokens: int, n: int, k: int) -> float | None:
    """Seconds of one `n` x `k` GEMM over `tokens` rows in format `fmt`, from the GPU's table:
    at each grid token count, bilinear in log n and log k between the four grid shapes around
    (n, k), over those of them the table timed (weights renormalised); a call wider than the
    grid's widest n (or k) is that many widest calls: time x n / n_max (a head of 154,880 rows).
    Across tokens, `along_tokens_s`. None: a format or shape the table did not time."""
    profile = call_profile(grid, fmt, n, k)
    return None if profile is None else along_tokens_s(grid.m, profile, tokens)


def call_profile(grid: GemmGrid, fmt: str, n: int, k: int) -> tuple[float, ...] | None:
    """Seconds of one `n` x `k` GEMM at each of the grid's token counts (gemm_call_s; None: not
    timed at one of them)."""
    if fmt not in grid.us:
        return None
    profile = []
    for i in range(len(grid.m)):
        s = _at(grid, fmt, i, n, k)
        if s is None:
            return None
        profile.append(s)
    return tuple(profile)


def along_tokens_s(m: tuple[int, ...], profile: tuple[float, ...], tokens: int) -> float:
    """A call's seconds at `tokens` from its seconds at the grid's token counts `m`: log-log
    between the two grid counts around it (a power law in tokens, as the time goes from flat at
    a few tokens to linear once compute binds); at or below the first, the first; past the
    last (32,768 in aiconfigurator's tables), linear in tokens from the last (compute-bound)."""
    if tokens <= m[0]:
        return profile[0]
    if tokens >= m[-1]:
        return profile[-1] * tokens / m[-1]
    i = bisect_left(m, tokens)
    if m[i] == tokens:
        return profile[i]
    lo, hi = profile[i - 1], profile[i]
    w = math.log(tokens / m[i - 1]) / math.log(m[i] / m[i - 1])
    return lo * (hi / lo) ** w


def _bracket(v: int, axis: tuple) -> tuple[int, int, float, float]:
    """(index below, index above, weight of the one above, scale past the last)."""
    if v <= axis[0]:
        return 0, 0, 0.0, 1.0
    if v >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0, v / axis[-1]
    hi = next(j for j, x in enumerate(axis) if x >= v)
    lo = hi - 1
    w = (math.log(v) - math.log(axis[lo])) / (math.log(axis[hi]) - math.log(axis[lo]))
    return lo, hi, w, 1.0


def _at(grid: GemmGrid, fmt: str, mi: int, n: int, k: int) -> float | None:
    n0, n1, wn, sn = _bracket(n, grid.n)
    k0, k1, wk, sk = _bracket(k, grid.k)
    block = grid.us[fmt][mi]
    total = weight = 0.0
    for ni, kj, wt in (
        (n0, k0, (1 - wn) * (1 - wk)),
        (n1, k0, wn * (1 - wk)),
        (n0, k1, (1 - wn) * wk),
        (n1, k1, wn * wk),
    ):
        us = block[ni][kj]
        if us is not None and wt > 0:
            total, weight = total + wt * us, weight + wt
    if weight == 0.0:
        return None
    return total / weight * sn * sk * 1e-6


class PricedCalls(NamedTuple):
    """A rank's dense GEMMs with each call's seconds at the grid's token counts, looked up once
    (priced_calls): `calls` ((times, head, gathered, profile), ...) over the token axis `m`."""

    m: tuple[int, ...]
    calls: tuple[tuple[int, bool, bool, tuple[float, ...]], ...]


def priced_calls(grid: GemmGrid, calls: tuple[GemmCall, ...]) -> PricedCalls | None:
    """`calls` priced on `grid` at its token counts (call_profile); None where any call is not
    timed."""
    out = []
    for call in calls:
        profile = call_profile(grid, call.fmt, call.n, call.k)
        if profile is None:
            return None
        out.append((call.times, call.head, call.gathered, profile))
    return PricedCalls(grid.m, tuple(out))


def priced_calls_s(
    priced: PricedCalls,
    tokens: int,
    sampled: int,
    gathered_tokens: int | None = None,
    gathered_sampled: int | None = None,
) -> float:
    """Seconds of the priced calls over a step of `tokens` tokens, `sampled` of which reach the
    head: the sum of each call's time at its own rows (along_tokens_s); a `gathered` call over
    the group's `gathered_tokens` (its head over `gathered_sampled`; None: the rank's own)."""
    group_tokens = tokens if gathered_tokens is None else gathered_tokens
    group_sampled = sampled if gathered_sampled is None else gathered_sampled
    total = 0.0
    for times, head, gathered, profile in priced.calls:
        if gathered:
            rows = group_sampled if head else group_tokens
        else:
            rows = sampled if head else tokens
        total += times * along_tokens_s(priced.m, profile, rows)
    return total


def gemm_calls_s(
    grid: GemmGrid,
    calls: tuple[GemmCall, ...],
    tokens: int,
    sampled: int,
    gathered_tokens: int | None = None,
    gathered_sampled: int | None = None,
) -> float | None:
    """Seconds of `calls` over a step of `tokens` tokens, `sampled` of which reach the head: the
    sum of each call's measured time (gemm_call_s); a `gathered` call over the group's
    `gathered_tokens` (its head over `gathered_sampled`; None: the rank's own). None where any
    call is not timed."""
    priced = priced_calls(grid, calls)
    if priced is None:
        return None
    return priced_calls_s(priced, tokens, sampled, gathered_tokens, gathered_sampled)


# the slice the mla_bmm tables time (aiconfigurator's collector: DeepSeek's widths)
MLA_BMM_SLICE_NOPE = 128
MLA_BMM_SLICE_LATENT = 512
MLA_BMM_SLICE_V = 128


class MlaBmmCall(NamedTuple):
    """One of MLA's absorbed BMMs a rank runs: `op` "pre" (q_nope into the latent) or "post"
    (the latent out to v), at `heads` equivalent heads of the table's slice, `times` a forward."""

    op: str
    heads: float
    times: int


def mla_bmm_calls(spec: ModelSpec, tp: int) -> tuple[MlaBmmCall, ...]:
    """The absorbed BMMs of one forward on one of `tp` ranks: two per MLA layer over its
    ceil(Hq / tp) heads, as equivalent heads of the table's slice (module docstring)."""
    calls: list[MlaBmmCall] = []
    for layer, count in distinct_layers(spec.layers):
        attn = layer.attention
        if attn is None or attn.kind is not CacheKind.MLA or not attn.mla_kv_lora_rank:
            continue
        heads = _ceil_div(attn.num_q_heads, tp)
        latent, nope = attn.mla_kv_lora_rank, attn.qk_head_dim - attn.mla_rope_dim
        slice_pre = MLA_BMM_SLICE_NOPE * MLA_BMM_SLICE_LATENT
        slice_post = MLA_BMM_SLICE_LATENT * MLA_BMM_SLICE_V
        calls += [
            MlaBmmCall("pre", heads * nope * latent / slice_pre, count),
            MlaBmmCall("post", heads * latent * attn.v_head_dim / slice_post, count),
        ]
    return tuple(calls)


def mla_bmm_call_s(grid: GemmGrid, fmt: str, op: str, tokens: int, heads: float) -> float | None:
    """Seconds of one absorbed BMM `op` over `tokens` rows at `heads` equivalent slice heads in
    format `fmt`, from the GPU's mla_bmm rows (module docstring's rule). None: no such rows."""
    by_op = (grid.bmm_us or {}).get(fmt)
    if not by_op or op not in by_op or not grid.bmm_heads:
        return None
    rows = by_op[op]

    def at(mi: int) -> float | None:
        axis = grid.bmm_heads
        row = rows[mi]
        if heads >= axis[-1]:
            last = row[-1]
            return None if last is None else last * heads / axis[-1]
        hi = next(j for j, h in enumerate(axis) if h >= heads)
        if hi == 0 or axis[hi] == heads:
            return row[hi]
        lo_us, hi_us = row[hi - 1], row[hi]
        if lo_us is None or hi_us is None:
            return None
        w = (heads - axis[hi - 1]) / (axis[hi] - axis[hi - 1])
        return lo_us + (hi_us - lo_us) * w

    ms: list[int] = []
    profile: list[float] = []
    for i, m in enumerate(grid.m):  # the grid's token counts the table timed, from the first
        us = at(i)
        if us is None:
            break
        ms.append(m)
        profile.append(us * 1e-6)
    return along_tokens_s(tuple(ms), tuple(profile), tokens) if ms else None


def mla_bmm_calls_s(
    grid: GemmGrid, calls: tuple[MlaBmmCall, ...], fmt: str, tokens: int
) -> float | None:
    """Seconds of the absorbed BMMs `calls` over a step of `tokens` tokens (mla_bmm_call_s).
    None where any call is not timed."""
    total = 0.0
    for call in calls:
        s = mla_bmm_call_s(grid, fmt, call.op, tokens, call.heads)
        if s is None:
            return None
        total += call.times * s
    return total
