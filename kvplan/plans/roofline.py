"""`kvplan roofline`: prefill and decode on the device's roofline, throughput ceilings."""

from __future__ import annotations

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, distinct_layers
from kvplan.dtypes import ELEMENT_BYTES, KvFormat, resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.comm import (
    p2p_time_s,
    pipeline_bubble_fraction,
    tp_allreduce_bytes,
    tp_comm_time_per_decode_step_s,
)
from kvplan.formulas.expert_parallel import (
    dp_attention_batch_equal_reads,
    dp_attention_decode_step,
    dp_attention_prefill_step,
    ep_alltoall_time_s,
    ep_alltoall_two_link_time_s,
)
from kvplan.formulas.kv import kv_bytes_per_sequence, kv_read_bytes_per_decode
from kvplan.formulas.roofline import (
    asymptotic_intensity,
    batch_equal_reads,
    ceiling_tokens_per_s,
    compute_dtype,
    critical_context_len,
    ridge_flop_per_byte,
)
from kvplan.formulas.step_time import (
    Rates,
    bound,
    decode_ops,
    decode_step,
    layer_shape,
    prefill_step,
    time_floor_s,
)
from kvplan.inputs.hardware import GpuProfile, Interconnect, inter_node_link
from kvplan.notes import Note, note, unique
from kvplan.plans.common import checkpoint_kv_note, model_notes
from kvplan.plans.deployment import (
    Deployment,
    check_deployment,
    choose_deployment,
    gpus_per_node,
    rank_budget,
    replica_sequences,
)
from kvplan.record import NamedTuple


class RooflineRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192,)
    batches: tuple[int, ...] = (1, 8, 64)
    kv_dtype: str = "auto"
    weights_dtype: str = "auto"
    # None for all three: the deployment kvplan chooses for the longest context
    # (kvplan.plans.deployment); any one given fixes the layout
    tp: int | None = None
    kv_group_size: int = 32
    pp: int | None = None
    dp_attention: int | None = None
    gpu_mem_util: float = 0.9
    ops: bool = False  # also each operator of the decode step (dense attention + MLP models)


class GpuPoint(NamedTuple):
    name: str
    ridge_flop_per_byte: float
    peak_flop_per_s: float
    memory_bandwidth_bytes_per_s: float


class ModelRef(NamedTuple):
    name: str
    params_total: int
    params_active: int


class PrefillPoint(NamedTuple):
    context_len: int
    flops: float
    bytes: float
    arithmetic_intensity_flop_per_byte: float
    time_floor_s: float
    bound: str


class DecodeRow(NamedTuple):
    batch_size: int
    context_len: int
    flops: float
    bytes: float
    arithmetic_intensity_flop_per_byte: float
    time_floor_s: float  # memory/compute floor plus communication
    compute_or_memory_s: float
    comm_s: float
    tokens_per_s: float
    bound: str
    fits: bool  # the batch's cache fits beside the weights on this deployment
    max_batch: int  # sequences of this context the deployment holds


class OpRow(NamedTuple):
    """One operator of a decode step, summed over the layers, per GPU: what it moves and
    computes, its intensity, and its floor on the device's datasheet roofline."""

    batch_size: int
    context_len: int
    name: str  # norms, qkv, attention, o, gate_up (or up), activation, down
    layers: int
    flops: float
    weight_bytes: float
    kv_bytes: float
    activation_bytes: float
    bytes: float
    arithmetic_intensity_flop_per_byte: float | None
    time_floor_s: float
    bound: str
    share: float  # of the summed floors of the step's operators


class ContextRow(NamedTuple):
    context_len: int
    kv_bytes_per_sequence: int
    asymptotic_intensity_flop_per_byte: float | None
    ceiling_tokens_per_s: float | None
    batch_equal_reads: float | None  # B_read


class RooflineResult(NamedTuple):
    kvplan_version: str
    model: ModelRef
    gpu: GpuPoint
    tp: int
    pp: int
    dp_attention: int
    deployment_chosen_by: str
    weights_dtype: str
    kv_dtype: str
    compute_dtype: str
    link_name: str | None  # the intra-node link (None: one GPU without one)
    # the link between nodes that a TP group above `gpus_per_node` GPUs (the sweep's, or the
    # layout's) also runs on (comm.tp_allreduce_time_s): the profile's network, else assumed
    network_name: str | None
    gpus_per_node: int
    prefill: PrefillPoint
    decode: list[DecodeRow]
    per_context: list[ContextRow]
    asymptotic_intensity_flop_per_byte: float | None
    critical_context_len: int | None
    ceiling_tokens_per_s: float | None
    batch_equal_reads: float | None
    tp_where_comm_dominates: int | None
    comm_batch_size: int
    notes: tuple[Note, ...]
    operators: list[OpRow] | None = None


class PeakRow(NamedTuple):
    dtype: str
    peak_flop_per_s: float
    ridge_flop_per_byte: float


class DeviceResult(NamedTuple):
    kvplan_version: str
    gpu: GpuPoint
    vendor: str
    memory_bytes: float
    memory_reported_bytes: float | None
    source: str
    peaks: list[PeakRow]


def rates(gpu: GpuProfile, dtype: str) -> Rates:
    """A profile's datasheet rates for matmuls in `dtype`."""
    return Rates(gpu.memory_bandwidth_bytes_per_s, gpu.peak(dtype))


def gpu_point(gpu: GpuProfile, dtype: str = "bf16") -> GpuPoint:
    peak, bandwidth = gpu.peak(dtype), gpu.memory_bandwidth_bytes_per_s
    return GpuPoint(gpu.name, ridge_flop_per_byte(peak, bandwidth), peak, bandwidth)


def device(gpu: GpuProfile) -> DeviceResult:
    """The Python twin of `kvplan roofline --gpu GPU` (no model)."""
    peaks = [
        PeakRow(dtype, peak, ridge_flop_per_byte(peak, gpu.memory_bandwidth_bytes_per_s))
        for dtype, peak in gpu.peak_flop_per_s.items()
    ]
    return DeviceResult(
        __version__,
        gpu_point(gpu),
        gpu.vendor,
        gpu.memory_bytes,
        gpu.memory_reported_bytes,
        gpu.source,
        peaks,
    )


def tp_where_comm_dominates(
    spec: ModelSpec,
    gpu: GpuProfile,
    batch_size: int,
    context_len: int,
    wdtype: str,
    fmt: KvFormat,
    node: int,
) -> int:
    """The smallest valid TP degree at which a decode step's all-reduces take longer than its
    memory/compute floor (0 when none up to 64 does), each TP's all-reduces priced as
    simulate prices them (comm.tp_allreduce_time_s): within a node of `node` GPUs on the
    interconnect, above it in two levels over the inter-node network."""
    link = gpu.interconnect
    assert link is not None, "asked only of a GPU with an interconnect (roofline)"
    network, _ = inter_node_link(gpu)
    device_rates = rates(gpu, compute_dtype(wdtype))
    for tp in (2, 4, 8, 16, 32, 64):
        try:
            spec.check_tp(tp)
        except KvplanError:
            continue
        floor = decode_step(spec, device_rates, batch_size, context_len, wdtype, fmt, tp)
        comm = tp_comm_time_per_decode_step_s(
            spec,
            batch_size,
            tp,
            link.one_way_bytes_per_s,
            link.latency_s,
            node,
            network.one_way_bytes_per_s,
            network.latency_s,
        )
        if comm > floor.total_s:
            return tp
    return 0


def roofline(spec: ModelSpec, gpu: GpuProfile, request: RooflineRequest) -> RooflineResult:
    """The Python twin of `kvplan roofline MODEL --gpu GPU`."""
    if not request.contexts or not request.batches:
        raise KvplanError("roofline needs at least one context and one batch size")
    if len(request.contexts) * len(request.batches) > 10_000:
        raise KvplanError("roofline: at most 10,000 decode rows (contexts x batches)")
    wdtype, wnotes = resolve_weights_dtype_checked(spec, request.weights_dtype)
    fmt = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    fixed = any(x is not None for x in (request.tp, request.pp, request.dp_attention))
    try:
        choice = choose_deployment(
            spec,
            gpu,
            wdtype,
            fmt,
            max(request.contexts),
            request.gpu_mem_util,
            tp=request.tp,
            pp=request.pp,
            dp_attention=request.dp_attention,
        )
    except KvplanError:
        if fixed:
            raise
        # nothing holds one sequence: the physics of one GPU, every row marked as not fitting
        choice = choose_deployment(spec, gpu, wdtype, fmt, 1, request.gpu_mem_util, tp=1)
    d = choice.deployment
    dp = d.dp_attention
    tp, pp = (1 if dp > 1 else d.tp), d.pp
    node = choice.gpus_per_node
    link = gpu.interconnect
    if d.gpus > 1 and link is None:
        raise KvplanError(f"{gpu.name}'s profile has no interconnect figure for TP/PP")
    links, network_note = (
        _links(gpu, node, tp, pp, dp, d.gpus) if link is not None else (None, None)
    )
    cdtype = gpu.tensor_dtype(compute_dtype(wdtype))
    device_rates = rates(gpu, cdtype)
    ridge = ridge_flop_per_byte(gpu.peak(cdtype), gpu.memory_bandwidth_bytes_per_s)
    bw = gpu.memory_bandwidth_bytes_per_s
    pool = rank_budget(spec, gpu, wdtype, d, request.gpu_mem_util).pool_bytes
    prefill_len = request.contexts[0]
    if dp > 1:
        pre = dp_attention_prefill_step(spec, device_rates, prefill_len, wdtype, fmt, dp)
    else:
        pre = prefill_step(spec, device_rates, prefill_len, wdtype, fmt, tp)
    decode_rows = []
    for context_len in request.contexts:
        holds = replica_sequences(spec, d, pool, context_len, fmt) if pool > 0 else 0
        for batch_size in request.batches:
            step, comm = _decode_step_comm(
                spec, device_rates, batch_size, context_len, wdtype, fmt, tp, pp, dp, links
            )
            total = step.total_s + comm
            flops, num_bytes = step.counts()
            decode_rows.append(
                DecodeRow(
                    batch_size,
                    context_len,
                    flops,
                    num_bytes,
                    step.intensity,
                    total,
                    step.total_s,
                    comm,
                    batch_size / total,
                    "communication" if comm > step.total_s else step.bound,
                    batch_size <= holds,
                    holds,
                )
            )
    per_context = []
    for context_len in request.contexts:
        kv = kv_bytes_per_sequence(spec, context_len, fmt, tp)
        per_context.append(
            ContextRow(
                context_len,
                kv,
                asymptotic_intensity(spec, context_len, fmt, tp) if kv else None,
                ceiling_tokens_per_s(bw, kv_read_bytes_per_decode(spec, context_len, fmt, tp))
                if kv
                else None,
                (
                    dp_attention_batch_equal_reads(spec, context_len, wdtype, fmt, dp)
                    if dp > 1
                    else batch_equal_reads(spec, context_len, wdtype, fmt, tp)
                )
                if kv
                else None,
            )
        )
    s_star = (
        critical_context_len(spec, ridge, fmt, tp) if per_context[0].kv_bytes_per_sequence else None
    )
    comm_dominates_tp = None
    if link is not None:
        comm_dominates_tp = tp_where_comm_dominates(
            spec, gpu, request.batches[-1], request.contexts[0], wdtype, fmt, node
        )
    operators = None
    if request.ops:
        if dp > 1:
            raise KvplanError("roofline --ops: DP attention is not laid out per operator; use --tp")
        operators = operator_rows(spec, device_rates, request, wdtype, fmt, tp)
    notes = model_notes(spec, tp) + wnotes + list(choice.notes)
    notes += [n for n in (checkpoint_kv_note(spec, fmt.name),) if n is not None]
    if network_note is not None:
        notes.append(network_note)
    if operators is not None:
        notes.append(note("roofline-ops", tp=tp))
    notes += [
        note(
            "roofline-peaks",
            dtype=cdtype,
            peak_flop_per_s=gpu.peak(cdtype),
            bandwidth_bytes_per_s=bw,
        ),
        note("roofline-decode-reads"),
        note("roofline-prefill-causal"),
        note("roofline-batch-equal-reads"),
        note("roofline-terms"),
        fmt.note,
    ]
    if spec.moe is not None:
        notes.append(note("roofline-moe", experts=spec.moe.num_experts, top_k=spec.moe.top_k))
    if spec.has_kind(CacheKind.STATE):
        notes.append(note("roofline-state"))
    if tp > 1 or dp > 1:
        assert links is not None, "more than one GPU has an interconnect (checked above)"
        across = (  # the network's part where the group spans nodes
            {
                "node_gpus": node,
                "network": links.network.name,
                "network_one_way_bytes_per_s": links.network.one_way_bytes_per_s,
                "network_latency_s": links.network.latency_s,
            }
            if max(tp, dp) > node
            else {}
        )
        notes.append(
            note(
                "roofline-tp",
                tp=max(tp, dp),
                link=links.intra.name,
                one_way_bytes_per_s=links.intra.one_way_bytes_per_s,
                latency_s=links.intra.latency_s,
                **across,
            )
        )
    if any(not row.fits for row in decode_rows):
        notes.append(note("roofline-rows-overflow", gpus=d.gpus, gpu=gpu.name))
    if pp > 1:
        notes.append(note("roofline-pp", pp=pp, bubble=pipeline_bubble_fraction(pp, pp)))
    summary = per_context[0]
    return RooflineResult(
        kvplan_version=__version__,
        model=ModelRef(spec.name, spec.params_total, spec.params_active),
        gpu=gpu_point(gpu, cdtype),
        tp=tp,
        pp=pp,
        dp_attention=dp,
        deployment_chosen_by=choice.chosen_by,
        weights_dtype=wdtype,
        kv_dtype=fmt.name,
        compute_dtype=cdtype,
        link_name=links.intra.name if links is not None else None,
        network_name=links.network.name if links is not None else None,
        gpus_per_node=node,
        prefill=PrefillPoint(prefill_len, *pre.counts(), pre.intensity, pre.total_s, pre.bound),
        decode=decode_rows,
        per_context=per_context,
        asymptotic_intensity_flop_per_byte=summary.asymptotic_intensity_flop_per_byte,
        critical_context_len=s_star,
        ceiling_tokens_per_s=summary.ceiling_tokens_per_s,
        batch_equal_reads=summary.batch_equal_reads,
        tp_where_comm_dominates=comm_dominates_tp,
        comm_batch_size=request.batches[-1],
        notes=unique(notes),
        operators=operators,
    )


def _decode_step_comm(
    spec, device_rates, batch_size, context_len, wdtype, fmt, tp, pp, dp, links: _Links | None
):
    """One decode step's memory/compute floor and its communication time (all-reduces,
    all-to-alls, stage hand-offs) on a replica of TP `tp` x PP `pp` or DP attention `dp`, each
    collective whose group spans nodes priced on both links as simulate prices it: the TP
    all-reduces by comm.tp_allreduce_time_s, the EP all-to-alls split by destination
    (expert_parallel.ep_alltoall_two_link_time_s)."""
    comm = 0.0
    if dp > 1:
        step = dp_attention_decode_step(
            spec, device_rates, batch_size, context_len, wdtype, fmt, dp
        )
        own = step.batch_size  # the busiest rank's sequences
        assert own is not None and links is not None, "a floor step over linked GPUs"
        intra, network = links.intra, links.network
        if dp > links.node:
            comm = ep_alltoall_two_link_time_s(
                spec,
                own,
                dp,
                links.node,
                intra.one_way_bytes_per_s,
                network.one_way_bytes_per_s,
                network.latency_s,
            )
        else:
            comm = ep_alltoall_time_s(spec, own, dp, intra.one_way_bytes_per_s, intra.latency_s)
    else:
        step = decode_step(spec, device_rates, batch_size, context_len, wdtype, fmt, tp)
    if tp > 1:
        assert links is not None, "TP over GPUs that have an interconnect"
        comm = tp_comm_time_per_decode_step_s(
            spec,
            batch_size,
            tp,
            links.intra.one_way_bytes_per_s,
            links.intra.latency_s,
            links.node,
            links.network.one_way_bytes_per_s,
            links.network.latency_s,
        )
    if pp > 1:  # each stage boundary passes the batch's activations once per token
        assert links is not None, "PP over GPUs that have an interconnect"
        comm += (pp - 1) * p2p_time_s(
            tp_allreduce_bytes(spec, batch_size),
            links.stage.one_way_bytes_per_s,
            links.stage.latency_s,
        )
    return step, comm


class DecodeFloor(NamedTuple):
    time_floor_s: float  # memory/compute floor plus communication
    tokens_per_s: float
    ceiling_tokens_per_s: float | None  # one sequence, BW / (s x k)
    # node-network-assumed where traffic between nodes is priced on the assumed network
    network_note: Note | None = None


def decode_floor(
    spec: ModelSpec,
    gpu: GpuProfile,
    context_len: int,
    batch_size: int,
    kv_dtype: str,
    weights_dtype: str,
    tp: int,
    pp: int,
    dp_attention: int | None,
) -> DecodeFloor:
    """The figures of `roofline()` at one context and one batch on a given layout that
    `kvplan capacity --gpu` prices with, without the rest of its result (prefill, notes,
    s*, B_read, the pool): its decode row's floor and tokens/s and its one-sequence ceiling.
    The same numbers and the same errors as that roofline() call."""
    wdtype, _ = resolve_weights_dtype_checked(spec, weights_dtype)
    fmt = resolve_kv_format(kv_dtype, spec.dtype, RooflineRequest._field_defaults["kv_group_size"])
    d = Deployment(tp or 1, pp or 1, dp_attention or 1)
    check_deployment(spec, d)
    node, _ = gpus_per_node(gpu)
    dp = d.dp_attention
    tp, pp = (1 if dp > 1 else d.tp), d.pp
    if d.gpus > 1 and gpu.interconnect is None:
        raise KvplanError(f"{gpu.name}'s profile has no interconnect figure for TP/PP")
    links, network_note = (
        _links(gpu, node, tp, pp, dp, d.gpus) if gpu.interconnect is not None else (None, None)
    )
    device_rates = rates(gpu, gpu.tensor_dtype(compute_dtype(wdtype)))
    step, comm = _decode_step_comm(
        spec, device_rates, batch_size, context_len, wdtype, fmt, tp, pp, dp, links
    )
    total = step.total_s + comm
    kv = kv_bytes_per_sequence(spec, context_len, fmt, tp)
    read = kv_read_bytes_per_decode(spec, context_len, fmt, tp) if kv else 0
    ceiling = ceiling_tokens_per_s(gpu.memory_bandwidth_bytes_per_s, read) if read else None
    return DecodeFloor(total, batch_size / total, ceiling, network_note)


def operator_rows(
    spec: ModelSpec, rates_: Rates, request: RooflineRequest, wdtype: str, fmt: KvFormat, tp: int
) -> list[OpRow]:
    """The decode step's operators at the first context and every batch, summed over layers,
    per GPU at `tp` (weights and FLOPs split evenly; the KV a rank holds, replication included).
    The embedding lookup and the lm_head are outside the layers and not listed."""
    if wdtype not in ELEMENT_BYTES:
        raise KvplanError(
            f"roofline --ops: weights in {wdtype} are not laid out per operator; pass "
            "--weights-dtype bf16 (or fp8) for the plain layout"
        )
    for layer, _ in distinct_layers(spec.layers):
        try:  # the layers the widths lay out matrix by matrix; others only coarsely
            layer_shape(spec, layer)
        except KvplanError as exc:
            raise KvplanError(
                f"roofline --ops: {exc} (dense attention + MLP models only)"
            ) from None
    context_len = request.contexts[0]
    whole = kv_bytes_per_sequence(spec, context_len, fmt, 1)
    kv_share = kv_bytes_per_sequence(spec, context_len, fmt, tp) / whole if whole else 0.0
    rows = []
    for batch_size in request.batches:
        ops = decode_ops(spec, batch_size, context_len, wdtype, fmt)
        summed: dict[str, list] = {}
        for op in ops:
            entry = summed.setdefault(op.name, [0, 0.0, 0.0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += op.flops / tp
            entry[2] += op.weight_bytes / tp
            entry[3] += op.kv_bytes * kv_share
            entry[4] += op.activation_bytes / tp
        floors = {
            name: time_floor_s(w + kv + a, flops, rates_)
            for name, (_, flops, w, kv, a) in summed.items()
        }
        total = sum(floors.values())
        for name, (layers, flops, w, kv, a) in summed.items():
            num_bytes = w + kv + a
            rows.append(
                OpRow(
                    batch_size,
                    context_len,
                    name,
                    layers,
                    flops,
                    w,
                    kv,
                    a,
                    num_bytes,
                    flops / num_bytes if num_bytes else None,
                    floors[name],
                    bound(num_bytes, flops, rates_),
                    floors[name] / total if total else 0.0,
                )
            )
    return rows


class _Links(NamedTuple):
    """The links a replica's collectives run on: `intra` within a node of `node` GPUs, the
    inter-node `network` (the profile's, else the assumed one), `stage` between pipeline
    stages (the network where the replica spans nodes)."""

    intra: Interconnect
    network: Interconnect
    node: int
    stage: Interconnect


def _links(
    gpu: GpuProfile, node: int, tp: int, pp: int, dp: int, gpus: int
) -> tuple[_Links, Note | None]:
    """(the replica's links, a note where traffic priced on the network crosses nodes on a
    profile that states none): the interconnect within a node, the network between nodes
    (inter_node_link: the profile's, else the assumed one that simulate and plan price
    with)."""
    assert gpu.interconnect is not None
    network, assumed = inter_node_link(gpu)
    stage_link = gpu.interconnect if gpus <= node else network
    crosses = tp > node or dp > node or (pp > 1 and gpus > node)
    told = None
    if assumed and crosses:
        told = note(
            "node-network-assumed",
            gpu=gpu.name,
            nodes=-(-gpus // node),
            network=network.name,
            one_way_bytes_per_s=network.one_way_bytes_per_s,
            latency_s=network.latency_s,
        )
    return _Links(gpu.interconnect, network, node, stage_link), told


def resolve_weights_dtype_checked(spec: ModelSpec, name: str):
    from kvplan.formulas.weights import resolve_weights_dtype

    return resolve_weights_dtype(spec, name)
