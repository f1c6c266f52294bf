"""`kvplan capacity`: how many concurrent sequences fit, engine-free.

budget per GPU = memory the device reports x utilization - weights per GPU - reserve;
max concurrency = floor(budget / paged bytes per sequence), on the most loaded pipeline stage.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.errors import KvplanError
from kvplan.formulas.comm import kv_transfer_bytes, kv_transfer_requests_per_s, kv_transfer_time_s
from kvplan.formulas.dtypes import KvFormat, resolve_kv_format
from kvplan.formulas.kv import kv_bytes_per_token, paged_bytes_per_sequence, sequences_in_pool
from kvplan.formulas.memory import runtime_reserve_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile, choose_link
from kvplan.notes import Note, note, unique
from kvplan.plans.common import model_notes, require_cache

WHAT_IF_KV_DTYPES = ("bf16", "fp8", "int8", "int4")


class CapacityRequest(NamedTuple):
    context_len: int = 32768
    batch_sizes: tuple[int, ...] = (1,)
    num_gpus: int | None = None
    tp: int = 1
    pp: int = 1
    gpu_mem_util: float = 0.9
    weights_dtype: str = "auto"
    kv_dtype: str = "auto"
    block_size: int = 16
    reserve_bytes: float | None = None  # None: the activation and runtime estimate (auto)
    prefix_tokens: int = 0
    mean_len: int | None = None
    kv_group_size: int = 32
    max_num_batched_tokens: int = 8192
    link: str = "network"  # for the disaggregated KV transfer: interconnect or network
    network_gbps: float | None = None


class Budget(NamedTuple):
    usable_bytes: float  # reported memory x utilization
    weights_bytes: float  # per GPU
    reserve_bytes: float
    pool_bytes: float  # what is left for the KV cache, per GPU (negative: weights do not fit)


class WhatIfRow(NamedTuple):
    kind: str  # kv_dtype | context | prefix | contiguous | paged
    kv_dtype: str
    context_len: int
    max_concurrency: int
    prefix_tokens: int = 0


class Paging(NamedTuple):
    mean_len: int
    contiguous_sequences: int
    paged_sequences: int
    gain: float | None


class KvTransfer(NamedTuple):
    link: str
    bytes_per_request: int
    time_s: float
    requests_per_s: float


class LongestContext(NamedTuple):
    batch_size: int
    max_context_len: int  # 0 when not even one token per sequence fits


class CapacityResult(NamedTuple):
    kvplan_version: str
    model: dict
    gpu: str
    memory_reported: bool
    tp: int
    pp: int
    num_gpus: int
    replicas: int
    context_len: int
    kv_dtype: str
    weights_dtype: str
    block_size: int
    gpu_mem_util: float
    reserve_given: bool
    usable_bytes_per_gpu: float
    weights_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_tokens: int | None
    max_concurrency: int
    longest_context: list[LongestContext]
    fits: bool
    what_if: list[WhatIfRow]
    paging: Paging | None
    kv_transfer: KvTransfer | None
    notes: tuple[Note, ...]


def validate(request: CapacityRequest) -> None:
    if not 0.05 <= request.gpu_mem_util <= 1.0:
        raise KvplanError(f"--gpu-mem-util {request.gpu_mem_util} must be between 0.05 and 1")
    if not 1 <= request.block_size <= 4096:
        raise KvplanError(f"--block-size {request.block_size} must be between 1 and 4096")
    if request.pp < 1 or request.pp > 1024:
        raise KvplanError(f"--pp {request.pp} must be between 1 and 1024")
    if not request.batch_sizes or min(request.batch_sizes) < 1:
        raise KvplanError("--batch must be at least 1")
    if request.prefix_tokens < 0 or request.prefix_tokens > request.context_len:
        raise KvplanError("--prefix-tokens must be between 0 and --ctx")
    if request.mean_len is not None and not 1 <= request.mean_len <= request.context_len:
        raise KvplanError("--mean-len must be between 1 and --ctx")
    if request.reserve_bytes is not None and not 0 <= request.reserve_bytes < 2**60:
        raise KvplanError("--reserve must be a size between 0 and 1 EiB")
    gpus = request.num_gpus
    if gpus is not None and (gpus < 1 or gpus % (request.tp * request.pp)):
        raise KvplanError(
            f"--num-gpus {gpus} is not a multiple of tp x pp = {request.tp * request.pp}"
        )


def budget(spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, wdtype: str) -> Budget:
    usable = gpu.usable_memory_bytes * request.gpu_mem_util
    weights = weights_bytes_per_gpu(spec, wdtype, request.tp, request.pp)
    if request.reserve_bytes is None:
        reserve = runtime_reserve_bytes(spec, request.max_num_batched_tokens, request.tp)
    else:
        reserve = request.reserve_bytes
    return Budget(usable, weights, reserve, usable - weights - reserve)


def max_sequences(
    stages: list[ModelSpec],
    pool: float,
    context_len: int,
    fmt: KvFormat,
    tp: int,
    block_size: int,
    prefix_tokens: int = 0,
) -> int:
    """Whole sequences of `context_len` the pool holds on every stage. A shared prefix is stored
    once, in its whole blocks (a partial block is private to each sequence)."""
    best = None
    # Only whole blocks are shared, and a sequence's last block is always its own (engines
    # compute the last token of a fully cached prompt, and generation writes after it).
    shared_tokens = min(prefix_tokens, context_len - 1) // block_size * block_size
    for stage in stages:
        per_seq = paged_bytes_per_sequence(stage, context_len, fmt, tp, block_size)
        if per_seq == 0:
            continue
        shared = 0
        if shared_tokens:
            shared = paged_bytes_per_sequence(stage, shared_tokens, fmt, tp, block_size)
            shared -= _state_bytes(stage, fmt, tp)
            per_seq -= shared
        count = sequences_in_pool(pool - shared, per_seq)
        best = count if best is None else min(best, count)
    return max(0, best or 0)


def _state_bytes(stage: ModelSpec, fmt: KvFormat, tp: int) -> int:
    return paged_bytes_per_sequence(
        stage._replace(layers=tuple(layer._replace(attention=None) for layer in stage.layers)),
        1,
        fmt,
        tp,
    )


def max_context_at_batch(
    stages: list[ModelSpec], pool: float, batch_size: int, fmt: KvFormat, tp: int, block_size: int
) -> int:
    """The longest context at which `batch_size` sequences fit (0 if none)."""

    def fits(s: int) -> bool:
        return all(
            batch_size * paged_bytes_per_sequence(st, s, fmt, tp, block_size) <= pool
            for st in stages
        )

    if pool <= 0 or not fits(1):
        return 0
    lo, hi = 1, 1 << 34
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def capacity(spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest) -> CapacityResult:
    """The Python twin of `kvplan capacity MODEL --gpu GPU` (engine-free)."""
    require_cache(spec, "concurrency")
    validate(request)
    spec.check_tp(request.tp)
    tp, pp, blk = request.tp, request.pp, request.block_size
    stages = pp_stages(spec, pp)
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    fmt = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    plan = budget(spec, gpu, request, wdtype)
    pool = max(0.0, plan.pool_bytes)
    replicas = (request.num_gpus or tp * pp) // (tp * pp)
    ctx = request.context_len

    def concurrency(fmt_: KvFormat, context_len: int, prefix: int = 0) -> int:
        return max_sequences(stages, pool, context_len, fmt_, tp, blk, prefix) * replicas

    per_token = max(kv_bytes_per_token(st, fmt, tp) for st in stages)
    kv_tokens = int(pool // (per_token * blk)) * blk if per_token else None
    max_conc = concurrency(fmt, ctx)
    longest = [
        LongestContext(b, max_context_at_batch(stages, pool, b, fmt, tp, blk))
        for b in request.batch_sizes
    ]
    fits = plan.pool_bytes > 0 and max_conc >= 1

    notes = model_notes(spec, tp) + wnotes
    notes.append(fmt.note)
    notes.append(
        note(
            "capacity-budget",
            gpu=gpu.name,
            reported=bool(gpu.memory_reported_bytes),
            usable_memory_bytes=gpu.usable_memory_bytes,
            gpu_mem_util=request.gpu_mem_util,
            reserve_bytes=plan.reserve_bytes,
            reserve_given=request.reserve_bytes is not None,
        )
    )
    notes.append(note("capacity-paged", block_size=blk))
    if gpu.memory_reported_basis == "estimated":
        notes.append(note("memory-estimated", gpu=gpu.name, source=gpu.memory_reported_source))
    if pp > 1:
        notes.append(note("capacity-pp", pp=pp))
    if replicas > 1:
        notes.append(
            note("capacity-replicas", num_gpus=request.num_gpus, replicas=replicas, tp=tp, pp=pp)
        )
    if plan.pool_bytes <= 0:
        notes.append(
            note(
                "capacity-no-room",
                weights_bytes=plan.weights_bytes,
                usable_bytes=plan.usable_bytes,
            )
        )
    if spec.max_position_embeddings and ctx > spec.max_position_embeddings:
        notes.append(
            note("ctx-beyond-positions", context_len=ctx, positions=spec.max_position_embeddings)
        )

    what_if = []
    for name in WHAT_IF_KV_DTYPES:
        alt = resolve_kv_format(name, spec.dtype, request.kv_group_size)
        what_if.append(WhatIfRow("kv_dtype", alt.name, ctx, concurrency(alt, ctx)))
    for kind, factor in (("half_context", 0.5), ("double_context", 2)):
        c = max(1, int(ctx * factor))
        what_if.append(WhatIfRow(kind, fmt.name, c, concurrency(fmt, c)))
    if request.prefix_tokens:
        what_if.append(
            WhatIfRow(
                "prefix",
                fmt.name,
                ctx,
                concurrency(fmt, ctx, request.prefix_tokens),
                request.prefix_tokens,
            )
        )
    paging = None
    if request.mean_len:
        contiguous = concurrency(fmt, ctx)  # reserves --ctx per sequence
        paged = concurrency(fmt, request.mean_len)
        paging = Paging(
            request.mean_len, contiguous, paged, paged / contiguous if contiguous else None
        )
        what_if.append(WhatIfRow("contiguous", fmt.name, ctx, contiguous))
        what_if.append(WhatIfRow("paged", fmt.name, request.mean_len, paged))

    return CapacityResult(
        kvplan_version=__version__,
        model={"name": spec.name},
        gpu=gpu.name,
        memory_reported=bool(gpu.memory_reported_bytes),
        tp=tp,
        pp=pp,
        num_gpus=replicas * tp * pp,
        replicas=replicas,
        context_len=ctx,
        kv_dtype=fmt.name,
        weights_dtype=wdtype,
        block_size=blk,
        gpu_mem_util=request.gpu_mem_util,
        reserve_given=request.reserve_bytes is not None,
        usable_bytes_per_gpu=plan.usable_bytes,
        weights_bytes_per_gpu=plan.weights_bytes,
        reserve_bytes_per_gpu=plan.reserve_bytes,
        kv_pool_bytes_per_gpu=plan.pool_bytes,
        kv_tokens=kv_tokens,
        max_concurrency=max_conc,
        longest_context=longest,
        fits=fits,
        what_if=what_if,
        paging=paging,
        kv_transfer=kv_transfer(spec, gpu, request, fmt, notes),
        notes=unique(notes),
    )


def smallest_fitting_tp(
    spec: ModelSpec,
    gpu: GpuProfile,
    context_len: int,
    gpu_mem_util: float = 0.9,
    choices: tuple[int, ...] = (1, 2, 4, 8, 16),
) -> int:
    """The smallest valid TP degree at which one sequence of `context_len` fits beside the
    weights (what report and explore plan with when no TP is given)."""
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    fmt = resolve_kv_format("auto", spec.dtype)
    for tp in choices:
        try:
            spec.check_tp(tp)
        except KvplanError:
            continue
        plan = budget(spec, gpu, CapacityRequest(tp=tp, gpu_mem_util=gpu_mem_util), wdtype)
        if (
            plan.pool_bytes > 0
            and max_sequences(pp_stages(spec, 1), plan.pool_bytes, context_len, fmt, tp, 16) >= 1
        ):
            return tp
    raise KvplanError(f"{spec.name} does not fit on up to {choices[-1]} x {gpu.name}")


def kv_transfer(
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, fmt: KvFormat, notes: list[Note]
) -> KvTransfer | None:
    """Disaggregated prefill/decode: one request's KV moved to a decode replica of TP ranks."""
    try:
        link = choose_link(gpu, request.link, request.network_gbps)
    except KvplanError as exc:
        if request.network_gbps is not None or request.link != "network":
            raise
        notes.append(note("transfer-no-link", reason=str(exc)))
        return None
    tp = request.tp
    moved = kv_transfer_bytes(spec, request.context_len, fmt, tp)
    whole = kv_transfer_bytes(spec, request.context_len, fmt, 1)
    if moved > whole:
        what = "MLA latent" if spec.has_kind(CacheKind.MLA) else "replicated KV heads"
        notes.append(note("transfer-replication", tp=tp, what=what, factor=moved / whole))
    notes.append(
        note(
            "transfer-link",
            link=link.name,
            one_way_bytes_per_s=link.one_way_bytes_per_s,
            latency_s=link.latency_s,
        )
    )
    return KvTransfer(
        link.name,
        moved,
        kv_transfer_time_s(moved, tp, link.one_way_bytes_per_s, link.latency_s),
        kv_transfer_requests_per_s(moved, tp, link.one_way_bytes_per_s),
    )


def concurrency_curve(
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, contexts: list[int]
) -> dict[str, list[tuple[int, int]]]:
    """Max concurrent sequences per context, one series per KV dtype (for the plot)."""
    validate(request)
    stages = pp_stages(spec, request.pp)
    wdtype, _ = resolve_weights_dtype(spec, request.weights_dtype)
    pool = max(0.0, budget(spec, gpu, request, wdtype).pool_bytes)
    replicas = (request.num_gpus or request.tp * request.pp) // (request.tp * request.pp)
    series = {}
    for name in WHAT_IF_KV_DTYPES:
        fmt = resolve_kv_format(name, spec.dtype, request.kv_group_size)
        series[name] = [
            (c, replicas * max_sequences(stages, pool, c, fmt, request.tp, request.block_size))
            for c in contexts
        ]
    return series
