"""Communication formulas for tensor parallelism, pipelines and disaggregated serving.

The alpha-beta model: a message of M bytes over a link of one-way bandwidth B and per-message
latency a takes a + M / B. A ring all-reduce over N ranks moves 2(N-1)/N x M bytes per rank in
2(N-1) steps. Link bandwidths in profiles are datasheet figures for both directions together;
one direction is half.
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec, distinct_layers
from kvplan.dtypes import ELEMENT_BYTES, KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence

ACTIVATION_BYTES = ELEMENT_BYTES["bf16"]  # hidden states cross every link in bf16
ALLREDUCES_PER_LAYER = 2  # Megatron TP: after attention's output projection and the MLP's down
# the vocab-parallel input embedding: each rank looks up the rows of its share of the vocabulary
# and one all-reduce sums them (vLLM's and SGLang's VocabParallelEmbedding at TP > 1)
EMBEDDING_ALLREDUCES = 1
# the vocab-parallel head's logits cross the TP all-gather in the head's dtype, cast to fp32 only
# after (SGLang's LogitsProcessor._get_logits, vLLM's LogitsProcessor._gather_logits)
LOGIT_GATHER_BYTES = ELEMENT_BYTES["bf16"]
QK_NORM_SUM_BYTES = 4  # a q/k norm's partial sum of squares, fp32 (qk_norm_allreduce_bytes)


def p2p_time_s(message_bytes: float, one_way_bytes_per_s: float, latency_s: float) -> float:
    """One point-to-point message: a + M / B."""
    return latency_s + message_bytes / one_way_bytes_per_s


def host_copy_time_s(num_blocks: int, block_bytes: float, one_way_bytes_per_s: float) -> float:
    """Copying KV blocks between GPU and host memory one way (vLLM V0's swap out or in):
    blocks x block bytes / the host link's one-way bandwidth."""
    return p2p_time_s(num_blocks * block_bytes, one_way_bytes_per_s, 0.0)


def ring_allreduce_time_s(
    message_bytes: float, ranks: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """Ring all-reduce: 2(N-1)/N x M / B + 2(N-1) x a (reduce-scatter then all-gather)."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps / ranks * message_bytes / one_way_bytes_per_s + steps * latency_s


def tp_allreduce_time_s(
    message_bytes: float,
    ranks: int,
    node_gpus: int | None,
    intra_one_way_bytes_per_s: float,
    intra_latency_s: float,
    inter_one_way_bytes_per_s: float = 0.0,
    inter_latency_s: float = 0.0,
) -> float:
    """One TP all-reduce of `message_bytes` over `ranks` GPUs placed node by node, `node_gpus`
    to a node (None: all on one node), the price simulate, roofline, capacity's comparison and
    the TP sweep all use. Within one node (ranks <= node_gpus) the ring over the intra-node
    link (ring_allreduce_time_s). Spanning n = ceil(ranks / g) nodes of g = node_gpus GPUs, in
    two levels (the hierarchical all-reduce of Jia et al. 2018, arXiv:1807.11205 section 3.3;
    NCCL's rings and trees across nodes move the same bytes over the network): a ring
    reduce-scatter and all-gather among the node's g ranks over the intra-node link
    (ring_allreduce_time_s of M at g ranks), and between them a ring all-reduce of each rank's
    1/g shard among the n ranks that hold the same shard, each over its own network link
    (ring_allreduce_time_s of M / g at n ranks):

        t = 2(g-1)/g x M / B_intra + 2(g-1) x a_intra + 2(n-1)/n x (M/g) / B_inter + 2(n-1) x a_inter

    `intra_latency_s` and `inter_latency_s` are per message (per ring step)."""
    if node_gpus is None or ranks <= node_gpus:
        return ring_allreduce_time_s(
            message_bytes, ranks, intra_one_way_bytes_per_s, intra_latency_s
        )
    nodes = -(-ranks // node_gpus)
    intra = ring_allreduce_time_s(
        message_bytes, node_gpus, intra_one_way_bytes_per_s, intra_latency_s
    )
    return intra + ring_allreduce_time_s(
        message_bytes / node_gpus, nodes, inter_one_way_bytes_per_s, inter_latency_s
    )


def two_level_allgather_time_s(
    received_bytes: float,
    ranks: int,
    ranks_per_node: int,
    gpus_per_node: int,
    intra_one_way_bytes_per_s: float,
    intra_latency_s: float,
    inter_one_way_bytes_per_s: float,
    inter_latency_s: float,
) -> float:
    """A ring all-gather (or reduce-scatter) in which each of `ranks` ranks receives
    `received_bytes` (the other ranks' (ranks - 1) equal shares), the ranks `ranks_per_node` to
    a node: the shares of the node's own ranks over the intra-node link, (ranks_per_node - 1)
    shares and as many latencies; the other nodes' shares enter the node once and are spread
    over its `gpus_per_node` network links (every GPU of a node holds its rank's data, and each
    has its own link), (ranks - ranks_per_node) shares / gpus_per_node per link, one latency per
    other node; then forwarded within the node (counted in the intra part's rate). One node:
    the plain ring, received_bytes / B + (ranks - 1) x a."""
    if ranks <= 1:
        return 0.0
    share = received_bytes / (ranks - 1)
    local = max(1, min(ranks_per_node, ranks))
    if local >= ranks:
        return received_bytes / intra_one_way_bytes_per_s + (ranks - 1) * intra_latency_s
    nodes = -(-ranks // local)
    intra = (local - 1) * share / intra_one_way_bytes_per_s + (local - 1) * intra_latency_s
    inter = (ranks - local) * share / max(1, gpus_per_node) / inter_one_way_bytes_per_s
    return intra + inter + (nodes - 1) * inter_latency_s


def tp_allreduces_per_forward(spec: ModelSpec) -> int:
    """The TP all-reduces of one forward: two per layer and the input embedding's."""
    return ALLREDUCES_PER_LAYER * spec.num_layers + EMBEDDING_ALLREDUCES


def qk_norm_allreduces_per_forward(spec: ModelSpec) -> int:
    """The all-reduces of one forward's q/k norms over all heads (Attention.qk_norm_allreduce),
    one per such layer: SGLang's MiniMaxM2QKRMSNorm (python/sglang/srt/models/minimax_m2.py,
    _forward_naive: rms_sumsq_serial, attn_tp_all_reduce(sum_sq), rms_apply_serial) and vLLM's
    MiniMaxText01RMSNormTP.forward_qk (the q and k variances concatenated, one
    tensor_model_parallel_all_reduce) each reduce q's and k's sums together in one call."""
    return sum(
        count
        for layer, count in distinct_layers(spec.layers)
        if layer.attention is not None and layer.attention.qk_norm_allreduce
    )


def qk_norm_allreduce_bytes(num_tokens: int) -> int:
    """One q/k-norm all-reduce (qk_norm_allreduces_per_forward): q's and k's sum of squares per
    token, two fp32 (SGLang pads the buffer to a multiple of four floats for its custom
    all-reduce; at the sizes a step runs that is one call's latency either way)."""
    return num_tokens * 2 * QK_NORM_SUM_BYTES


def logits_allgather_bytes(num_sampled: int, vocab_size: int, tp: int) -> float:
    """Bytes one rank receives in the TP all-gather of the head's logits: each rank computed
    its vocab / tp columns for every sampled position, and receives the others',
    sampled x vocab x 2 bytes x (tp - 1) / tp."""
    if tp <= 1:
        return 0.0
    return num_sampled * vocab_size * LOGIT_GATHER_BYTES * (tp - 1) / tp


def tp_allreduce_bytes(spec: ModelSpec, batch_size: int) -> int:
    """One TP all-reduce in a decode step: batch x hidden activations."""
    return batch_size * spec.hidden_size * ACTIVATION_BYTES


def tp_comm_time_per_decode_step_s(
    spec: ModelSpec,
    batch_size: int,
    tp: int,
    one_way_bytes_per_s: float,
    latency_s: float,
    node_gpus: int | None = None,
    inter_one_way_bytes_per_s: float = 0.0,
    inter_latency_s: float = 0.0,
) -> float:
    """The all-reduces of one decode step (every layer's and the embedding's; not overlapped
    with compute), each priced
    by tp_allreduce_time_s: within a node on the intra-node link, over nodes of `node_gpus`
    GPUs in two levels with the network's rate and latency."""
    count = tp_allreduces_per_forward(spec)
    links = (node_gpus, one_way_bytes_per_s, latency_s, inter_one_way_bytes_per_s, inter_latency_s)
    return count * tp_allreduce_time_s(
        tp_allreduce_bytes(spec, batch_size), tp, *links
    ) + qk_norm_allreduces_per_forward(spec) * tp_allreduce_time_s(
        qk_norm_allreduce_bytes(batch_size), tp, *links
    )


LSE_BYTES = 4  # the log-sum-exp of each query head's partial attention, fp32


def dcp_allgather_bytes(
    num_decodes: int, num_heads: int, head_dim: int, dcp: int, dtype_bytes: int = ACTIVATION_BYTES
) -> float:
    """Bytes one rank receives in one attention layer's DCP all-gather of the partial outputs
    and their LSEs: B x H x (d x dtype + LSE) x (dcp - 1) / dcp, B the decodes, H the query
    heads the DCP group attends together, d the output width per head (MLA: the latent)."""
    if dcp <= 1:
        return 0.0
    return num_decodes * num_heads * (head_dim * dtype_bytes + LSE_BYTES) * (dcp - 1) / dcp


def ring_allgather_time_s(
    received_bytes: float, ranks: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """One ring all-gather over `ranks` ranks (DCP's partial outputs, the head's logits): the
    bytes each rank receives / B + (ranks - 1) x a."""
    if ranks <= 1:
        return 0.0
    return received_bytes / one_way_bytes_per_s + (ranks - 1) * latency_s


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """GPipe/1F1B bubble: (p - 1) / (m + p - 1) of a step is idle."""
    return (stages - 1) / (microbatches + stages - 1)


def kv_transfer_bytes(spec: ModelSpec, context_len: int, fmt: KvFormat, decode_tp: int) -> int:
    """KV bytes one request moves from the prefill pool to the decode pool: what every decode rank
    must hold, summed over ranks. Sharded KV heads sum to the whole cache; replicated KV (MLA's
    latent, or H_kv < TP) is sent once per rank that needs it."""
    return decode_tp * kv_bytes_per_sequence(spec, context_len, fmt, decode_tp)


def kv_transfer_time_s(
    transfer_bytes: float, ranks: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """Each of `ranks` decode GPUs receives its share over its own link, in parallel."""
    return p2p_time_s(transfer_bytes / ranks, one_way_bytes_per_s, latency_s)


def kv_transfer_requests_per_s(
    transfer_bytes: float, ranks: int, one_way_bytes_per_s: float
) -> float:
    """Requests per second the links sustain when busy with nothing else."""
    return ranks * one_way_bytes_per_s / transfer_bytes


def ring_allreduce_reduce_time_s(
    message_bytes: float, ranks: int, reduce_bytes_per_s: float
) -> float:
    """The arithmetic of a ring all-reduce where the reduction runs on the host (gloo on CPUs):
    each rank adds (N-1)/N x M bytes into its buffer (N-1 chunks of M/N), at the rate the host
    adds two buffers. NCCL reduces on the GPU, overlapped with the transfer: no such term."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) / ranks * message_bytes / reduce_bytes_per_s
