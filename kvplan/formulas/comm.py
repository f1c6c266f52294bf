"""Communication formulas for tensor parallelism, pipelines and disaggregated serving.

The alpha-beta model: a message of M bytes over a link of one-way bandwidth B and per-message
latency a takes a + M / B. A ring all-reduce over N ranks moves 2(N-1)/N x M bytes per rank in
2(N-1) steps. Link bandwidths in profiles are datasheet figures for both directions together;
one direction is half.
"""

from __future__ import annotations

from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence

ACTIVATION_BYTES = 2  # bf16 activations on the wire
ALLREDUCES_PER_LAYER = 2  # Megatron TP: after attention's output projection and the MLP's down


def p2p_time_s(message_bytes: float, one_way_bytes_per_s: float, latency_s: float) -> float:
    """One point-to-point message: a + M / B."""
    return latency_s + message_bytes / one_way_bytes_per_s


def ring_allreduce_time_s(
    message_bytes: float, ranks: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """Ring all-reduce: 2(N-1)/N x M / B + 2(N-1) x a (reduce-scatter then all-gather)."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps / ranks * message_bytes / one_way_bytes_per_s + steps * latency_s


def tp_allreduce_bytes(spec: ModelSpec, batch_size: int) -> int:
    """One TP all-reduce in a decode step: batch x hidden activations."""
    return batch_size * spec.hidden_size * ACTIVATION_BYTES


def tp_comm_time_per_decode_step_s(
    spec: ModelSpec, batch_size: int, tp: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """All layers' all-reduces of one decode step (not overlapped with compute)."""
    count = ALLREDUCES_PER_LAYER * spec.num_layers
    return count * ring_allreduce_time_s(
        tp_allreduce_bytes(spec, batch_size), tp, one_way_bytes_per_s, latency_s
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


def dcp_allgather_time_s(
    message_bytes: float, dcp: int, one_way_bytes_per_s: float, latency_s: float
) -> float:
    """One ring all-gather over dcp ranks: the received bytes / B + (dcp - 1) x a."""
    if dcp <= 1:
        return 0.0
    return message_bytes / one_way_bytes_per_s + (dcp - 1) * latency_s


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
