"""Steps of a replica that runs attention data-parallel over N ranks with the routed experts spread
over the same ranks (DP attention + EP), at their floor, per rank.

Each rank runs attention, the dense layers and the shared experts for its own ceil(B / N)
sequences (its own cache, whole: TP 1), and the routed experts it holds for every token of the
batch that is routed to them: 1/N of the expert FLOPs and of the experts the batch touches. Two
all-to-alls per MoE layer move each token's hidden state to its top-k experts' ranks and back.

>>> from kvplan.inputs.sources import load_model
>>> from kvplan.dtypes import resolve_kv_format
>>> from kvplan.formulas.step_time import Rates
>>> spec = load_model("deepseek-v3")
>>> fmt = resolve_kv_format("auto", spec.dtype)
>>> one = dp_attention_decode_step(spec, Rates(3.35e12, 989e12), 16, 8192, "fp8", fmt, 16)
>>> one.batch_size  # each of the 16 ranks holds one of the 16 sequences
1
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.comm import ACTIVATION_BYTES, two_level_allgather_time_s
from kvplan.formulas.roofline import MAX_BATCH_SEARCH
from kvplan.formulas.step_time import Op, Rates, StepTime, floor_step, floor_sums, step_ops


def without_routed_experts(spec: ModelSpec) -> ModelSpec:
    """The model a DP-attention rank runs whole: everything but the routed experts."""
    parts = {k: v for k, v in spec.param_parts.items() if k != "experts"}
    return spec._replace(moe=None, param_parts=parts)


def _dp_attention_floor(
    own: list[tuple[list[Op], int]], batch: list[tuple[list[Op], int]], ranks: int
) -> tuple[float, float]:
    """(FLOPs, bytes) of a DP-attention rank: every operator but the routed experts over its
    own sequences (`own`), and 1/N of the routed experts' over the whole batch's (`batch`)."""
    flops, num_bytes = floor_sums(_routed(own, False))
    routed = floor_sums(_routed(batch, True))
    return flops + routed[0] / ranks, num_bytes + routed[1] / ranks


def _routed(groups: list[tuple[list[Op], int]], routed: bool) -> list[tuple[list[Op], int]]:
    """The operators of `groups` that are (`routed`) or are not the routed experts, in order."""
    return [([op for op in ops if (op.name == "experts") == routed], n) for ops, n in groups]


def _decode_ops(
    spec: ModelSpec,
    weights_dtype: str,
    fmt: KvFormat,
    sequences: int,
    context_len: int,
    moe_tokens: int | None = None,
) -> list[tuple[list[Op], int]]:
    """A whole model's decode of `sequences` at `context_len` (step_ops), the routed experts
    touched by `moe_tokens` tokens (default: the sequences')."""
    return step_ops(
        spec,
        weights_dtype,
        fmt,
        num_decodes=sequences,
        decode_context=context_len,
        num_sampled=sequences,
        whole_model=True,
        moe_tokens=moe_tokens,
    )


def dp_attention_decode_step(
    spec: ModelSpec,
    rates: Rates,
    batch_size: int,
    context_len: int,
    weights_dtype: str,
    fmt: KvFormat,
    ranks: int,
) -> StepTime:
    """One decode step of `batch_size` sequences spread over `ranks`, on the busiest rank."""
    own = -(-batch_size // ranks)
    flops, num_bytes = _dp_attention_floor(
        _decode_ops(spec, weights_dtype, fmt, own, context_len),
        _decode_ops(spec, weights_dtype, fmt, batch_size, context_len),
        ranks,
    )
    return floor_step(own, context_len, flops, num_bytes, rates)


def dp_attention_prefill_step(
    spec: ModelSpec, rates: Rates, num_tokens: int, weights_dtype: str, fmt: KvFormat, ranks: int
) -> StepTime:
    """Prefill of one sequence on its rank; its tokens' expert work is spread over the ranks,
    the head runs over its last position (prefill_step)."""
    ops = step_ops(
        spec,
        weights_dtype,
        fmt,
        prefill_chunks=((num_tokens, 0),),
        num_sampled=1,
        whole_model=True,
    )
    flops, num_bytes = _dp_attention_floor(ops, ops, ranks)
    return floor_step(1, num_tokens, flops, num_bytes, rates)


def ep_alltoall_bytes(spec: ModelSpec, tokens: int) -> int:
    """Bytes one rank sends per step for `tokens` of its own: each token's hidden state (bf16) to
    its top-k experts and back, in every MoE layer."""
    if spec.moe is None:
        return 0
    return 2 * spec.moe.num_layers * tokens * spec.moe.top_k * spec.hidden_size * ACTIVATION_BYTES


def ep_alltoall_time_s(
    spec: ModelSpec, tokens: int, ranks: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """The all-to-alls of one step: the share of the bytes bound for other ranks over the link,
    plus one message latency per all-to-all (dispatch and combine per MoE layer)."""
    if spec.moe is None or ranks <= 1:
        return 0.0
    remote = ep_alltoall_bytes(spec, tokens) * (1 - 1 / ranks)
    return remote / one_way_bytes_per_s + 2 * spec.moe.num_layers * latency_s


def ep_alltoall_bytes_by_link(
    spec: ModelSpec, tokens: int, ranks: int, ranks_per_node: int
) -> tuple[float, float]:
    """(bytes over the intra-node link, bytes over the network) one rank sends per step for
    `tokens` of its own (ep_alltoall_bytes) when the `ranks` EP ranks sit `ranks_per_node` to a
    node: routing spreads each token's top-k copies evenly over the ranks, so (ranks_per_node
    - 1) / ranks of them go to the rank's node-mates and (ranks - ranks_per_node) / ranks to
    ranks on other nodes, one copy per (token, expert): no per-node deduplication (DeepEP's
    normal kernels send a token once per node; kvplan does not model that)."""
    if spec.moe is None or ranks <= 1:
        return 0.0, 0.0
    total = ep_alltoall_bytes(spec, tokens)
    local = max(1, min(ranks_per_node, ranks))
    return total * (local - 1) / ranks, total * (ranks - local) / ranks


def ep_alltoall_two_link_time_s(
    spec: ModelSpec,
    tokens: int,
    ranks: int,
    ranks_per_node: int,
    intra_one_way_bytes_per_s: float,
    inter_one_way_bytes_per_s: float,
    inter_latency_s: float,
) -> float:
    """The all-to-alls of one step when the EP ranks span nodes: each rank's bytes to its
    node-mates over the intra-node link and to other nodes over its own network link at once
    (ep_alltoall_bytes_by_link), the slower of the two, plus one network latency per all-to-all
    (dispatch and combine per MoE layer). One node: ep_alltoall_time_s."""
    if spec.moe is None or ranks <= 1:
        return 0.0
    intra, inter = ep_alltoall_bytes_by_link(spec, tokens, ranks, ranks_per_node)
    seconds = max(intra / intra_one_way_bytes_per_s, inter / inter_one_way_bytes_per_s)
    return seconds + 2 * spec.moe.num_layers * inter_latency_s


def dp_attention_batch_equal_reads(
    spec: ModelSpec, context_len: int, weights_dtype: str, fmt: KvFormat, ranks: int
) -> float:
    """B_read for one DP-attention rank: the sequences per rank at which its KV reads equal its
    weight reads (its dense weights, and its share of the experts the whole batch touches),
    from the sums of the step's operators (step_ops): the KV bytes of one sequence's decode,
    and per rank the weights of every operator but the routed experts over its own sequences
    plus 1/N of the routed experts the whole batch's tokens touch."""
    one = _decode_ops(spec, weights_dtype, fmt, 1, context_len)
    kv = sum(n * op.kv_bytes for group, n in one for op in group)
    read: dict[int, float] = {}

    def weights(per_rank: int) -> float:
        if per_rank not in read:
            ops = _decode_ops(spec, weights_dtype, fmt, per_rank, context_len, per_rank * ranks)
            own = sum(n * op.weight_bytes for group, n in _routed(ops, False) for op in group)
            routed = sum(n * op.weight_bytes for group, n in _routed(ops, True) for op in group)
            read[per_rank] = own + routed / ranks
        return read[per_rank]

    lo, hi = 0.0, float(MAX_BATCH_SEARCH)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if weights(max(1, round(mid))) > mid * kv else (lo, mid)
    return (lo + hi) / 2


def sglang_dp_max_len(tokens: list[int], extend: bool) -> bool:
    """Whether SGLang's DP-attention gather pads every rank's rows to the largest rank's
    (DpPaddingMode.MAX_LEN: all_gather_into_tensor of ranks x max rows) rather than summing
    them (SUM_LEN: all-reduce of sum rows), from each rank's `tokens` (0 for an idle rank,
    prepare_mlp_sync_batch_raw) and whether any rank runs a prefill (is_extend_in_batch):
    dp_attention.DpPaddingMode.get_dp_padding_mode, MAX_LEN where 2 x sum > ranks x max."""
    return not extend and 2 * sum(tokens) > len(tokens) * max(tokens)


def dp_gather_collective_bytes(spec: ModelSpec, own_tokens: int, ranks: int) -> int:
    """Bytes one DP-attention rank receives in one all-gather (or sends in one reduce-scatter)
    of a MoE layer's hidden states (bf16): the other ranks' `own_tokens` each."""
    return (ranks - 1) * own_tokens * spec.hidden_size * ACTIVATION_BYTES


def dp_gather_bytes(spec: ModelSpec, own_tokens: int, ranks: int, layers: int | None = None) -> int:
    """Bytes one DP-attention rank receives and sends per step when its MoE layers run on the
    gathered batch without EP: the other ranks' hidden states (bf16) all-gathered before each
    gathered layer, and their share of its output reduce-scattered back after it. `layers`:
    the layers whose MLP runs on the gathered batch (None: the MoE layers, vLLM's; SGLang
    gathers before every layer's MLP, dense ones included)."""
    if spec.moe is None or ranks <= 1:
        return 0
    count = spec.moe.num_layers if layers is None else layers
    return 2 * count * dp_gather_collective_bytes(spec, own_tokens, ranks)


def dp_gather_time_s(
    spec: ModelSpec,
    own_tokens: int,
    ranks: int,
    one_way_bytes_per_s: float,
    latency_s: float,
    layers: int | None = None,
) -> float:
    """The all-gathers and reduce-scatters of one step (a ring of `ranks`): the bytes over the
    link plus (ranks - 1) message latencies per collective, two per gathered layer (`layers`,
    dp_gather_bytes)."""
    if spec.moe is None or ranks <= 1:
        return 0.0
    count = spec.moe.num_layers if layers is None else layers
    hops = 2 * count * (ranks - 1)
    return dp_gather_bytes(spec, own_tokens, ranks, count) / one_way_bytes_per_s + hops * latency_s


def dp_gather_two_level_time_s(
    spec: ModelSpec,
    own_tokens: int,
    ranks: int,
    ranks_per_node: int,
    gpus_per_node: int,
    intra_one_way_bytes_per_s: float,
    intra_latency_s: float,
    inter_one_way_bytes_per_s: float,
    inter_latency_s: float,
    layers: int | None = None,
) -> float:
    """dp_gather_time_s when the DP ranks span nodes, `ranks_per_node` of them to a node of
    `gpus_per_node` GPUs: each collective (two per gathered layer, dp_gather_bytes) in two
    levels (comm.two_level_allgather_time_s)."""
    if spec.moe is None or ranks <= 1:
        return 0.0
    return (
        2
        * (spec.moe.num_layers if layers is None else layers)
        * two_level_allgather_time_s(
            dp_gather_collective_bytes(spec, own_tokens, ranks),
            ranks,
            ranks_per_node,
            gpus_per_node,
            intra_one_way_bytes_per_s,
            intra_latency_s,
            inter_one_way_bytes_per_s,
            inter_latency_s,
        )
    )
