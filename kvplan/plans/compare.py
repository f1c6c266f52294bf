"""`kvplan capacity MODEL --gpu A --gpu B` (or `--gpu all`): GPU kinds side by side, each on the
deployment kvplan chooses for it (or on the one --tp/--pp/--dp-attention fixes for all), normalised
per GPU, with a one-line verdict.

Per GPU kind: the deployment, sequences of the context one replica holds and per GPU, the decode
ceiling BW/(s·k) of one sequence, the TPOT floor (kvplan.plans.roofline: 100% of bandwidth and
peak), and the TPOT and tokens/s per GPU with the replica full priced by the step model `plan` and
`simulate` use (kvplan.formulas.batch_step.StepModel: each kernel family's measured fraction of
the datasheet, host and launch costs, all-reduces, the API server's streaming pace), GPUs needed
for `users`, and, where a price is known (hardware_profiles/prices.yaml or --price), USD per hour
and per million output tokens at that TPOT. A kind that cannot hold one sequence says why.

The quick mode of `plan`: one decode step at the steady-state batch the layout holds (every seat
of the replica taken, each sequence at the context), no traffic simulated. Without --users or a
fixed layout, each kind runs on its best layout: of the fewest-GPU layout and the wider TPs within
a node, the one with the most tokens/s per GPU by that model (the fewest-GPU layout is often the
worst per GPU: the weights leave it room for few sequences). With --users, the layout serving them
on the fewest GPUs (kvplan.plans.capacity).
"""

from __future__ import annotations

import math

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.batch_step import CUDA_GRAPH_MAX_TOKENS, BatchShape
from kvplan.inputs.hardware import GpuProfile
from kvplan.inputs.prices import price_for
from kvplan.notes import Note, note, unique
from kvplan.plans.capacity import CapacityRequest, CapacityResult, capacity
from kvplan.plans.deployment import (
    Deployment,
    deployment_of,
    gpus_per_node,
    layout_text,
    valid_tps,
)
from kvplan.plans.roofline import decode_floor
from kvplan.record import NamedTuple
from kvplan.simulate.frontend import Frontend
from kvplan.simulate.setup import ServeOptions, parallel_layout, step_model

MAX_GPU_KINDS = 64
# Two kinds whose $/M tokens differ by less than this are a tie: the step model's median
# throughput error over the published runs is 11.7% (docs/simulate.md, scripts/sim_accuracy.py),
# so a smaller difference is not a ranking; latency targets decide (kvplan plan --slo).
TIE = 0.10


class CompareRequest(NamedTuple):
    context_len: int = 8192
    kv_dtype: str = "auto"
    weights_dtype: str = "auto"
    gpu_mem_util: float = 0.9
    users: int | None = None  # sequences to serve: GPUs needed is computed for it
    prices: dict = {}  # profile key -> USD per GPU-hour (overrides)
    # a layout every kind runs ("we have 4-GPU nodes"); None for all: each kind's own choice
    tp: int | None = None
    pp: int | None = None
    dp_attention: int | None = None


class CompareRow(NamedTuple):
    gpu: str
    gpu_key: str
    fits: bool
    why_not: str | None  # the reason a kind holds not one sequence
    layout: str | None  # "TP 4", "TP 8 x PP 2", "DP attention 16 + EP 16"
    tp: int | None
    pp: int | None
    dp_attention: int | None
    gpus_per_replica: int | None
    nodes_per_replica: int | None
    users_per_replica: int
    users_per_gpu: float
    ceiling_tokens_per_s: float | None  # one sequence, BW / (s x k)
    tpot_floor_s: float | None  # the replica full, at 100% of bandwidth and peak
    tokens_per_s_per_gpu_floor: float | None  # the replica full, at the TPOT floor
    batch: int | None  # sequences in the priced step: the replica's seats, at most max_num_seqs
    tpot_s: float | None  # the replica full, plan's step model
    tokens_per_s_per_user: float | None  # 1 / tpot_s
    tokens_per_s_per_gpu: float | None  # the replica full, plan's step model
    layouts_weighed: tuple[str, ...]  # the layouts the best one was chosen from
    priced_by: str | None  # "step": plan's step model; "floor": DP attention, no link figure
    replicas_needed: int | None  # for CompareRequest.users
    gpus_needed: int | None
    usd_per_gpu_hour: float | None
    price_source: str | None
    usd_per_hour: float | None  # the GPUs needed (one replica without --users)
    usd_per_million_output_tokens: float | None  # at the full replica's step-model TPOT


class CompareResult(NamedTuple):
    kvplan_version: str
    model: str
    context_len: int
    kv_dtype: str
    weights_dtype: str
    users: int | None
    rows: list[CompareRow]
    verdict: Note
    notes: tuple[Note, ...]
    pricing_model: str = "step"  # tokens/s and $/M: plan's step model at the full replica


def _serve_defaults(gpu) -> tuple[int, int]:
    """`vllm serve`'s (max_num_seqs, max_num_batched_tokens) on this GPU at simulate's default
    release."""
    from kvplan.engines.vllm import serve_batch_defaults

    return serve_batch_defaults(gpu, ServeOptions().vllm_version)


def compare(spec: ModelSpec, gpus: list[GpuProfile], request: CompareRequest) -> CompareResult:
    """The Python twin of `kvplan capacity MODEL --gpu A --gpu B ...`."""
    if not gpus:
        raise KvplanError("compare needs at least one --gpu")
    if len(gpus) > MAX_GPU_KINDS:
        raise KvplanError(f"at most {MAX_GPU_KINDS} GPU kinds in one comparison")
    if request.users is not None and not 1 <= request.users <= 1 << 30:
        raise KvplanError("--users must be between 1 and 1,073,741,824")
    rows, notes = [], []
    kinds_seen: tuple[str, str] | None = None
    for gpu in gpus:
        row, kinds, row_notes = _row(spec, gpu, request)
        rows.append(row)
        notes += row_notes
        if kinds:
            kinds_seen = kinds
    kv_dtype, weights_dtype = kinds_seen or (request.kv_dtype, request.weights_dtype)
    fixed = (request.tp, request.pp, request.dp_attention) != (None, None, None)
    layout = Deployment(request.tp or 1, request.pp or 1, request.dp_attention or 1)
    notes.append(
        note("compare-columns", context_len=request.context_len, layout=layout if fixed else None)
    )
    if any(r.usd_per_gpu_hour is not None for r in rows):
        notes.append(note("compare-prices"))
    return CompareResult(
        __version__,
        spec.name,
        request.context_len,
        kv_dtype,
        weights_dtype,
        request.users,
        rows,
        verdict(rows, request.context_len, request.users),
        unique(notes),
    )


def _row(spec: ModelSpec, gpu: GpuProfile, request: CompareRequest):
    price = price_for(gpu, request.prices)
    usd = price.usd_per_gpu_hour if price else None
    empty = CompareRow(
        gpu.name, gpu.key, False, None, None, None, None, None, None, None, 0, 0.0,
        None, None, None, None, None, None, None, (), None, None, None, usd,
        price.source if price else None, None, None,
    )  # fmt: skip
    base = _base_request(request)
    try:
        cap = capacity(spec, gpu, base, brief=True)
    except KvplanError as exc:
        return empty._replace(why_not=str(exc)), None, []
    if not cap.fits:
        reasons = [n.value("reason") for n in cap.notes if n.id == "deployment-none-fits"]
        layout = layout_text(deployment_of(cap))
        why = reasons[0] if reasons else f"not one {request.context_len:,}-token sequence fits"
        if not reasons and cap.deployment_chosen_by == "given":
            why += f" on {layout}"
        return empty._replace(why_not=why), None, []
    model_notes: list[Note] = []
    # (layout, its step-model pricing, its Priced or None, tokens/s per GPU)
    tried: list[tuple[CapacityResult, tuple[int, float] | None, Priced | None, float]] = []
    for c in layouts(spec, gpu, cap, base, request):
        stepped = _stepped(spec, gpu, c, request, model_notes)
        # the floor is priced for the row's layout alone, and for one the step model cannot
        # price (it ranks such a layout); every layout is priced by the same rule either way
        if stepped is None:
            floored = _priced(spec, gpu, c, request, None)
            tried.append((c, None, floored, floored.tokens_per_s_per_gpu))
        else:
            tried.append((c, stepped, None, _step_per_gpu(c, stepped)))
    # the most tokens/s per GPU; of equals, the fewest GPUs (the first tried)
    cap, stepped, full, _ = max(tried, key=lambda t: t[3])
    priced = full or _priced(spec, gpu, cap, request, stepped)
    d_gpus = cap.num_gpus // cap.replicas  # one replica
    per_replica = cap.max_concurrency // cap.replicas
    replicas = math.ceil(request.users / per_replica) if request.users and per_replica else None
    gpus_needed = replicas * d_gpus if replicas else None
    billed = gpus_needed or d_gpus
    per_gpu_tps = priced.tokens_per_s_per_gpu
    row = empty._replace(
        fits=cap.fits,
        layout=layout_text(deployment_of(cap)),
        tp=cap.tp,
        pp=cap.pp,
        dp_attention=cap.dp_attention,
        gpus_per_replica=d_gpus,
        nodes_per_replica=cap.nodes_per_replica,
        users_per_replica=per_replica,
        users_per_gpu=per_replica / d_gpus,
        ceiling_tokens_per_s=priced.ceiling_tokens_per_s,
        tpot_floor_s=priced.tpot_floor_s,
        tokens_per_s_per_gpu_floor=priced.tokens_per_s_per_gpu_floor,
        batch=priced.batch,
        tpot_s=priced.tpot_s,
        tokens_per_s_per_user=1.0 / priced.tpot_s,
        tokens_per_s_per_gpu=per_gpu_tps,
        layouts_weighed=tuple(layout_text(deployment_of(c)) for c, *_ in tried),
        priced_by=priced.priced_by,
        replicas_needed=replicas,
        gpus_needed=gpus_needed,
        usd_per_hour=usd * billed if usd is not None else None,
        usd_per_million_output_tokens=usd / (per_gpu_tps * 3600) * 1e6 if usd else None,
    )
    keep = (
        "deployment-chosen",
        "deployment-for-users",
        "node-size-assumed",
        "memory-estimated",
        "tp-crosses-nodes",
    )
    notes = [n for n in cap.notes if n.id in keep]
    if len(tried) > 1:  # the fewest-GPU layout's note no longer describes the row
        notes = [n for n in notes if n.id != "deployment-chosen"]
        notes.append(
            note(
                "compare-best-layout",
                gpu=gpu.name,
                layout=deployment_of(cap),
                weighed=[deployment_of(c) for c, *_ in tried],
                tokens_per_s_per_gpu=[per_gpu for *_, per_gpu in tried],
            )
        )
    # a kind without kernel tables of its own runs at another GPU's: say whose
    borrowed = [
        n for n in model_notes if n.id == "sim-kernel-tables" and n.value("evidence") != "own"
    ]
    notes += borrowed[:1]
    if priced.network_note is not None:
        notes.append(priced.network_note)
    return row, (cap.kv_dtype, cap.weights_dtype), notes


class Priced(NamedTuple):
    """One layout's full replica: the floor and plan's step model."""

    batch: int
    ceiling_tokens_per_s: float | None
    tpot_floor_s: float
    tokens_per_s_per_gpu_floor: float
    tpot_s: float
    tokens_per_s_per_gpu: float
    priced_by: str  # "step": plan's step model; "floor": 100% of bandwidth and peak
    network_note: Note | None = None  # node-network-assumed (the floor's, roofline.decode_floor)


def _base_request(request: CompareRequest) -> CapacityRequest:
    return CapacityRequest(
        context_len=request.context_len,
        gpu_mem_util=request.gpu_mem_util,
        weights_dtype=request.weights_dtype,
        kv_dtype=request.kv_dtype,
        users_target=request.users,
        tp=request.tp,
        pp=request.pp,
        dp_attention=request.dp_attention,
    )


def layouts(spec, gpu, cap, base: CapacityRequest, request: CompareRequest) -> list:
    """The capacity results of the layouts a kind is weighed on: `cap` (kvplan's choice) and,
    unless a layout is fixed or --users sizes one, the wider TPs within a node that fit."""
    out = [cap]
    fixed = (request.tp, request.pp, request.dp_attention) != (None, None, None)
    if fixed or request.users is not None or cap.pp > 1 or cap.dp_attention > 1:
        return out
    if gpu.interconnect is None:  # no link figure: the step model cannot price a wider TP
        return out
    for tp in wider_tps(spec, gpu, cap.tp):
        try:
            wider = capacity(spec, gpu, base._replace(tp=tp), brief=True)
        except KvplanError:
            continue
        if wider.fits:
            out.append(wider)
    return out


class ParetoPoint(NamedTuple):
    layout: str
    batch: int
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float


def pareto_points(
    spec: ModelSpec, gpus: list[GpuProfile], request: CompareRequest
) -> dict[str, list[ParetoPoint]]:
    """Per GPU kind, tokens/s per GPU against tokens/s per user by plan's step model: every
    layout weighed, at batches 1, 2, 4, ... up to the seats it holds (each sequence at the
    context). Kinds that fit nowhere, or are priced at the floor, have no points."""
    base = _base_request(request)
    out: dict[str, list[ParetoPoint]] = {}
    for gpu in gpus:
        try:
            cap = capacity(spec, gpu, base, brief=True)
        except KvplanError:
            continue
        if not cap.fits:
            continue
        points = []
        for c in layouts(spec, gpu, cap, base, request):
            d_gpus = c.num_gpus // c.replicas
            top = seats_per_rank(gpu, c)
            batches = sorted({1 << k for k in range(top.bit_length()) if 1 << k < top} | {top})
            for b in batches:
                try:
                    tpot = decode_tpot_s(spec, gpu, c, request, b, request.context_len)
                except KvplanError:
                    break
                replica_batch = b * _ranks(c)
                points.append(
                    ParetoPoint(
                        layout_text(deployment_of(c)),
                        replica_batch,
                        1 / tpot,
                        replica_batch / tpot / d_gpus,
                    )
                )
        if points:
            out[gpu.name] = points
    return out


def wider_tps(spec: ModelSpec, gpu: GpuProfile, tp: int) -> list[int]:
    """The TPs above `tp` within one node that the heads allow (powers of two)."""
    return [t for t in valid_tps(spec, gpus_per_node(gpu)[0]) if t > tp]


def seats(gpu: GpuProfile, users_per_replica: int) -> int:
    """Sequences one replica decodes at once: what it holds, at most vLLM's max_num_seqs."""
    return max(1, min(users_per_replica, _serve_defaults(gpu)[0]))


def _ranks(cap) -> int:
    """The DP-attention ranks of a layout (1: none)."""
    return cap.dp_attention if cap.dp_attention > 1 else 1


def seats_per_rank(gpu: GpuProfile, cap) -> int:
    """Sequences each engine core of a full replica decodes: what its share of the pool holds,
    at most vLLM's max_num_seqs (a DP-attention rank is an engine core of its own)."""
    ranks = _ranks(cap)
    return seats(gpu, max(1, cap.max_concurrency // cap.replicas // ranks))


def decode_tpot_s(
    spec, gpu, cap, request, batch: int, context_len: int, notes: list | None = None
) -> float:
    """A decode step of `batch` sequences per engine core at `context_len` on the replica `cap`
    lays out, by plan's step model; the API server's streaming pace bounds it, as in the
    simulator. A DP-attention layout runs as vLLM's `--tp 1 -dp N --enable-expert-parallel`:
    each rank attends its own `batch`, the experts run over every rank's tokens (the
    simulator's layout, kvplan.simulate.setup.parallel_layout). The model's notes (whose kernel
    tables it runs at) go to `notes`."""
    ranks = _ranks(cap)
    # a replica past one node spans the nodes the deployment gives it (kvplan.plans.deployment:
    # DP-attention ranks a node's worth to a node, TP within a node and stages across them)
    node = gpus_per_node(gpu)[0]
    gpus = cap.tp * cap.pp * ranks
    options = ServeOptions(
        tp=cap.tp,
        pp=cap.pp,
        data_parallel_size=ranks,
        enable_expert_parallel=ranks > 1,
        data_parallel_size_local=min(ranks, node) if ranks > node else None,
        nnodes=-(-gpus // node) if ranks == 1 and gpus > node else 1,
    )
    seqs = _serve_defaults(gpu)[0]
    model, _ = step_model(
        spec, gpu, options, request.kv_dtype,
        min(2 * seqs, CUDA_GRAPH_MAX_TOKENS, _serve_defaults(gpu)[1]),
        notes if notes is not None else [], weights_dtype=request.weights_dtype,
        layout=parallel_layout(spec, options) if ranks > 1 else None,
    )  # fmt: skip
    step = model.step(BatchShape(batch, batch * context_len, (), batch))
    return max(step.total_s, batch * Frontend().per_token_s)


def _stepped(spec, gpu, cap, request, notes: list | None = None) -> tuple[int, float] | None:
    """(sequences, TPOT) of the full replica `cap` lays out by plan's step model; None for a
    profile without an interconnect figure for its TP/PP/EP (the floor prices it)."""
    try:
        per_rank = seats_per_rank(gpu, cap)
        tpot = decode_tpot_s(spec, gpu, cap, request, per_rank, request.context_len, notes)
    except KvplanError:
        return None
    return per_rank * _ranks(cap), tpot


def _step_per_gpu(cap, stepped: tuple[int, float]) -> float:
    """Tokens/s per GPU of a full replica priced by the step model."""
    batch, tpot = stepped
    return batch / tpot / (cap.num_gpus // cap.replicas)


def _priced(spec, gpu, cap, request, stepped: tuple[int, float] | None) -> Priced:
    """The layout's floor beside its step-model pricing (`stepped`, from _stepped)."""
    d_gpus = cap.num_gpus // cap.replicas
    per_replica = max(1, cap.max_concurrency // cap.replicas)
    dp = cap.dp_attention if cap.dp_attention > 1 else None
    # roofline()'s decode row and ceiling alone, on this layout (its prefill, notes, s* and
    # B_read are not in the table): the same numbers as the full call, a fraction of the work
    floor = decode_floor(
        spec, gpu, request.context_len, per_replica, request.kv_dtype, request.weights_dtype,
        cap.tp, cap.pp, dp,
    )  # fmt: skip
    floor_per_gpu = floor.tokens_per_s / d_gpus
    if stepped is None:
        batch, tpot, by, per_gpu = per_replica, floor.time_floor_s, "floor", floor_per_gpu
    else:
        (batch, tpot), by, per_gpu = stepped, "step", _step_per_gpu(cap, stepped)
    return Priced(
        batch, floor.ceiling_tokens_per_s, floor.time_floor_s, floor_per_gpu, tpot, per_gpu, by,
        floor.network_note,
    )  # fmt: skip


def _deployment(row: CompareRow) -> Deployment:
    """The layout of a row that fits (only a row that fits none has no TP, PP or DP)."""
    assert row.tp is not None and row.pp is not None and row.dp_attention is not None, row.gpu
    return Deployment(row.tp, row.pp, row.dp_attention)


def verdict(rows: list[CompareRow], context_len: int, users: int | None) -> Note:
    """One line: the kind with the most decode throughput per GPU (its floor with the replica
    full), the cheapest per token where prices are known, the fewest GPUs for --users, and the
    kinds that cannot serve the model at all."""
    fitting = [r for r in rows if r.fits]
    out = [r.gpu for r in rows if not r.fits]
    if not fitting:
        return note("compare-none", context_len=context_len, gpus=out)
    most = max(fitting, key=lambda r: r.tokens_per_s_per_gpu or 0.0)
    costs = sorted(
        (
            (r.usd_per_million_output_tokens, r)
            for r in fitting
            if r.usd_per_million_output_tokens is not None
        ),
        key=lambda pair: pair[0],
    )
    cheapest = costs[0][1] if costs else None
    # kinds within TIE of the cheapest: closer than the step model can tell apart
    tied = [r for usd, r in costs if usd <= (1 + TIE) * costs[0][0]]
    # gpus_needed: set on every row where there are users
    fewest = min(fitting, key=lambda r: r.gpus_needed or 0) if users else None
    return note(
        "compare-verdict",
        context_len=context_len,
        most=most.gpu,
        most_tokens_per_s_per_gpu=most.tokens_per_s_per_gpu,
        most_users_per_gpu=most.users_per_gpu,
        most_layout=_deployment(most),
        cheapest=cheapest.gpu if cheapest else None,
        cheapest_usd=cheapest.usd_per_million_output_tokens if cheapest else None,
        tied=[r.gpu for r in tied] if len(tied) > 1 else [],
        tied_usd=[r.usd_per_million_output_tokens for r in tied] if len(tied) > 1 else [],
        priced_by=sorted({r.priced_by for r in fitting}),
        fewest=fewest.gpu if fewest else None,
        fewest_gpus=fewest.gpus_needed if fewest else None,
        users=users,
        unfit=out,
    )
