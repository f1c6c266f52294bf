"""`kvplan capacity MODEL --gpu A --gpu B` (or `--gpu all`): GPU kinds side by side, each on the
deployment kvplan chooses for it (or on the one --tp/--pp/--dp-attention fixes for all), normalised
per GPU, with a one-line verdict.

Per GPU kind: the deployment (kvplan.plans.deployment), sequences of the context one replica holds
and per GPU, the decode ceiling BW/(s·k) of one sequence, the TPOT floor and tokens/s per GPU with
the replica full (kvplan.plans.roofline, communication included), GPUs needed for `users`, and,
where a price is known (hardware_profiles/prices.yaml or --price), USD per hour and per million
output tokens at that floor. A kind that cannot hold one sequence says why.
"""

from __future__ import annotations

import math

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import GpuProfile
from kvplan.inputs.prices import price_for
from kvplan.notes import Note, note, unique
from kvplan.plans.capacity import CapacityRequest, capacity
from kvplan.plans.deployment import Deployment, deployment_of, layout_text
from kvplan.plans.roofline import RooflineRequest, roofline
from kvplan.record import NamedTuple

MAX_GPU_KINDS = 64


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
    tpot_floor_s: float | None  # the replica full
    tokens_per_s_per_gpu: float | None  # the replica full, at the TPOT floor
    replicas_needed: int | None  # for CompareRequest.users
    gpus_needed: int | None
    usd_per_gpu_hour: float | None
    price_source: str | None
    usd_per_hour: float | None  # the GPUs needed (one replica without --users)
    usd_per_million_output_tokens: float | None  # at the full replica's floor


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


def compare(spec: ModelSpec, gpus: list[GpuProfile], request: CompareRequest) -> CompareResult:
    """The Python twin of `kvplan capacity MODEL --gpu A --gpu B ...`."""
    if not gpus:
        raise KvplanError("compare needs at least one --gpu")
    if len(gpus) > MAX_GPU_KINDS:
        raise KvplanError(f"at most {MAX_GPU_KINDS} GPU kinds in one comparison")
    if request.users is not None and not 1 <= request.users <= 1 << 30:
        raise KvplanError("--users must be between 1 and 1,073,741,824")
    rows, notes = [], []
    kv_dtype = weights_dtype = None
    for gpu in gpus:
        row, kinds, row_notes = _row(spec, gpu, request)
        rows.append(row)
        notes += row_notes
        if kinds:
            kv_dtype, weights_dtype = kinds
    if kv_dtype is None:
        kv_dtype, weights_dtype = request.kv_dtype, request.weights_dtype
    fixed = (request.tp, request.pp, request.dp_attention) != (None, None, None)
    layout = layout_text(Deployment(request.tp or 1, request.pp or 1, request.dp_attention or 1))
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
        None, None, None, None, None, usd, price.source if price else None, None, None,
    )  # fmt: skip
    try:
        cap = capacity(
            spec,
            gpu,
            CapacityRequest(
                context_len=request.context_len,
                gpu_mem_util=request.gpu_mem_util,
                weights_dtype=request.weights_dtype,
                kv_dtype=request.kv_dtype,
                users_target=request.users,
                tp=request.tp,
                pp=request.pp,
                dp_attention=request.dp_attention,
            ),
        )
    except KvplanError as exc:
        return empty._replace(why_not=str(exc)), None, []
    if not cap.fits:
        reasons = [n.value("reason") for n in cap.notes if n.id == "deployment-none-fits"]
        layout = layout_text(deployment_of(cap))
        why = reasons[0] if reasons else f"not one {request.context_len:,}-token sequence fits"
        if not reasons and cap.deployment_chosen_by == "given":
            why += f" on {layout}"
        return empty._replace(why_not=why), None, []
    d_gpus = cap.num_gpus // cap.replicas  # one replica
    dp = cap.dp_attention if cap.dp_attention > 1 else None
    roof = roofline(
        spec,
        gpu,
        RooflineRequest(
            contexts=(request.context_len,),
            batches=(max(1, cap.max_concurrency // cap.replicas),),
            kv_dtype=request.kv_dtype,
            weights_dtype=request.weights_dtype,
            tp=cap.tp,
            pp=cap.pp,
            dp_attention=dp,
            gpu_mem_util=request.gpu_mem_util,
        ),
    )
    step = roof.decode[0]
    per_gpu_tps = step.tokens_per_s / d_gpus
    per_replica = cap.max_concurrency // cap.replicas
    replicas = math.ceil(request.users / per_replica) if request.users and per_replica else None
    gpus_needed = replicas * d_gpus if replicas else None
    billed = gpus_needed or d_gpus
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
        ceiling_tokens_per_s=roof.ceiling_tokens_per_s,
        tpot_floor_s=step.time_floor_s,
        tokens_per_s_per_gpu=per_gpu_tps,
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
    return row, (cap.kv_dtype, cap.weights_dtype), [n for n in cap.notes if n.id in keep]


def verdict(rows: list[CompareRow], context_len: int, users: int | None) -> Note:
    """One line: the kind with the most decode throughput per GPU (its floor with the replica
    full), the cheapest per token where prices are known, the fewest GPUs for --users, and the
    kinds that cannot serve the model at all."""
    fitting = [r for r in rows if r.fits]
    out = [r.gpu for r in rows if not r.fits]
    if not fitting:
        return note("compare-none", context_len=context_len, gpus=out)
    most = max(fitting, key=lambda r: r.tokens_per_s_per_gpu or 0.0)
    priced = [r for r in fitting if r.usd_per_million_output_tokens is not None]
    cheapest = min(priced, key=lambda r: r.usd_per_million_output_tokens) if priced else None
    fewest = min(fitting, key=lambda r: r.gpus_needed) if users else None
    return note(
        "compare-verdict",
        context_len=context_len,
        most=most.gpu,
        most_tokens_per_s_per_gpu=most.tokens_per_s_per_gpu,
        most_users_per_gpu=most.users_per_gpu,
        most_layout=most.layout,
        cheapest=cheapest.gpu if cheapest else None,
        cheapest_usd=cheapest.usd_per_million_output_tokens if cheapest else None,
        fewest=fewest.gpu if fewest else None,
        fewest_gpus=fewest.gpus_needed if fewest else None,
        users=users,
        unfit=out,
    )
