"""`kvplan capacity`: how many concurrent sequences fit, engine-free.

budget per GPU = memory the device reports x utilization - weights per GPU - reserve;
max concurrency = floor(budget / paged bytes per sequence), on the most loaded pipeline stage.
"""

from __future__ import annotations

from typing import NamedTuple

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec, pp_stages
from kvplan.errors import KvplanError
from kvplan.formulas.comm import kv_transfer_bytes, kv_transfer_requests_per_s, kv_transfer_time_s
from kvplan.formulas.dtypes import KvFormat, resolve_kv_format
from kvplan.formulas.kv import kv_bytes_per_token, paged_bytes_per_sequence
from kvplan.formulas.memory import runtime_reserve_bytes
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile, choose_link
from kvplan.plans.size import model_notes
from kvplan.present.view import (
    Column,
    Report,
    Table,
    fmt_int,
    fmt_text,
    unique_notes,
)
from kvplan.units import parse_bytes

WHAT_IF_KV_DTYPES = ("bf16", "fp8", "int8", "int4")


class CapacityRequest(NamedTuple):
    context_len: int = 32768
    batch_size: int = 1
    num_gpus: int | None = None
    tp: int = 1
    pp: int = 1
    gpu_mem_util: float = 0.9
    weights_dtype: str = "auto"
    kv_dtype: str = "auto"
    block_size: int = 16
    reserve: str = "auto"
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


def validate(request: CapacityRequest) -> None:
    if not 0.05 <= request.gpu_mem_util <= 1.0:
        raise KvplanError(f"--gpu-mem-util {request.gpu_mem_util} must be between 0.05 and 1")
    if not 1 <= request.block_size <= 4096:
        raise KvplanError(f"--block-size {request.block_size} must be between 1 and 4096")
    if request.pp < 1 or request.pp > 1024:
        raise KvplanError(f"--pp {request.pp} must be between 1 and 1024")
    if request.batch_size < 1:
        raise KvplanError("--batch must be at least 1")
    if request.prefix_tokens < 0 or request.prefix_tokens > request.context_len:
        raise KvplanError("--prefix-tokens must be between 0 and --ctx")
    if request.mean_len is not None and not 1 <= request.mean_len <= request.context_len:
        raise KvplanError("--mean-len must be between 1 and --ctx")
    gpus = request.num_gpus
    if gpus is not None and (gpus < 1 or gpus % (request.tp * request.pp)):
        raise KvplanError(
            f"--num-gpus {gpus} is not a multiple of tp x pp = {request.tp * request.pp}"
        )


def budget(spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, wdtype: str) -> Budget:
    usable = gpu.usable_memory_bytes * request.gpu_mem_util
    weights = weight_bytes(spec, wdtype) / (request.tp * request.pp)
    if request.reserve == "auto":
        reserve = runtime_reserve_bytes(spec, request.max_num_batched_tokens, request.tp)
    else:
        reserve = (
            parse_bytes(request.reserve, what="--reserve")
            if not _is_number(request.reserve)
            else float(request.reserve) * 2**30
        )
    return Budget(usable, weights, reserve, usable - weights - reserve)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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
    shared_tokens = prefix_tokens // block_size * block_size
    for stage in stages:
        per_seq = paged_bytes_per_sequence(stage, context_len, fmt, tp, block_size)
        if per_seq == 0:
            continue
        shared = 0
        if shared_tokens:
            shared = paged_bytes_per_sequence(stage, shared_tokens, fmt, tp, block_size)
            shared -= _state_bytes(stage, fmt, tp)
            per_seq -= shared
        count = int((pool - shared) // per_seq) if pool > shared else 0
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


def capacity(spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest) -> Report:
    """The Python twin of `kvplan capacity MODEL --gpu GPU` (engine-free)."""
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
    max_ctx = max_context_at_batch(stages, pool, request.batch_size, fmt, tp, blk)
    fits = plan.pool_bytes > 0 and max_conc >= 1

    notes = model_notes(spec, tp) + wnotes
    if fmt.note:
        notes.append(fmt.note)
    notes.append(
        f"Budget per GPU: {gpu.name} "
        + ("reports" if gpu.memory_reported_bytes else "nominal")
        + f" {gpu.usable_memory_bytes / 2**30:,.2f} GiB x {request.gpu_mem_util} utilization, "
        f"minus weights, minus a reserve of {plan.reserve_bytes / 2**30:,.2f} GiB "
        + (
            "(activation peak of an 8192-token forward and the sampler, plus 0.25 GiB non-torch; "
            "see kvplan.formulas.memory)"
            if request.reserve == "auto"
            else "(given)"
        )
        + "."
    )
    notes.append(
        f"Paged in blocks of {blk} tokens: each sequence wastes under one block per "
        "layer group; counts are whole sequences."
    )
    if pp > 1:
        notes.append(
            f"PP {pp}: layers split as vLLM does; the most loaded stage sets capacity. "
            "Pipeline bubbles are not modelled."
        )
    if replicas > 1:
        notes.append(
            f"{request.num_gpus} GPUs = {replicas} replicas of TP {tp} x PP {pp}; "
            "concurrency summed over replicas."
        )
    if plan.pool_bytes <= 0:
        notes.append(
            f"The weights ({plan.weights_bytes / 2**30:,.2f} GiB per GPU) and reserve do not fit "
            f"in {plan.usable_bytes / 2**30:,.2f} GiB: raise --tp/--pp, quantize the weights or "
            "use a larger GPU."
        )
    if spec.max_position_embeddings and ctx > spec.max_position_embeddings:
        notes.append(
            f"--ctx {ctx:,} exceeds the model's {spec.max_position_embeddings:,} positions."
        )

    what_if = []
    for name in WHAT_IF_KV_DTYPES:
        alt = resolve_kv_format(name, spec.dtype, request.kv_group_size)
        what_if.append(
            {
                "scenario": f"KV {alt.name}",
                "context_len": ctx,
                "max_concurrency": concurrency(alt, ctx),
            }
        )
    for factor, label in ((0.5, "half context"), (2, "double context")):
        c = max(1, int(ctx * factor))
        what_if.append(
            {"scenario": label, "context_len": c, "max_concurrency": concurrency(fmt, c)}
        )
    if request.prefix_tokens:
        what_if.append(
            {
                "scenario": f"{request.prefix_tokens:,}-token shared prefix",
                "context_len": ctx,
                "max_concurrency": concurrency(fmt, ctx, request.prefix_tokens),
            }
        )
    paging = None
    if request.mean_len:
        contiguous = concurrency(fmt, ctx)  # reserves --ctx per sequence
        paged = concurrency(fmt, request.mean_len)
        paging = {
            "mean_len": request.mean_len,
            "contiguous_sequences": contiguous,
            "paged_sequences": paged,
            "gain": paged / contiguous if contiguous else None,
        }
        what_if.append(
            {
                "scenario": f"contiguous, reserving {ctx:,} per sequence",
                "context_len": ctx,
                "max_concurrency": contiguous,
            }
        )
        what_if.append(
            {
                "scenario": f"paged, {request.mean_len:,} tokens actually used",
                "context_len": request.mean_len,
                "max_concurrency": paged,
            }
        )

    transfer = kv_transfer(spec, gpu, request, fmt, notes)
    facts = [
        (
            "model / GPU",
            f"{spec.name} on {gpu.name}, TP {tp} x PP {pp}"
            + (f", {replicas} replicas" if replicas > 1 else ""),
        ),
        ("dtypes", f"weights {wdtype}, KV {fmt.name}"),
        (
            "memory per GPU",
            f"{plan.usable_bytes / 2**30:,.2f} GiB usable - "
            f"{plan.weights_bytes / 2**30:,.2f} weights - {plan.reserve_bytes / 2**30:,.2f} reserve"
            f" = {plan.pool_bytes / 2**30:,.2f} GiB KV pool",
        ),
        ("fits", "yes" if fits else "NO"),
        (
            "KV tokens per GPU",
            "—"
            if kv_tokens is None
            else f"{kv_tokens:,} (every attention layer holding every token)",
        ),
        (f"max sequences at {ctx:,}", f"{max_conc:,}"),
        (f"longest context at batch {request.batch_size}", f"{max_ctx:,} tokens"),
    ]
    if paging:
        facts.append(
            (
                "paging vs contiguous",
                f"{paging['paged_sequences']:,} vs "
                f"{paging['contiguous_sequences']:,} sequences at mean length "
                f"{request.mean_len:,}",
            )
        )
    if transfer:
        facts.append(
            (
                "disaggregated KV transfer",
                f"{transfer['bytes_per_request'] / 2**30:,.2f} GiB per {ctx:,}-token request "
                f"over {transfer['link']}: {transfer['time_s'] * 1e3:,.1f} ms, at most "
                f"{transfer['requests_per_s']:,.1f} requests/s",
            )
        )
    table = Table(
        "what if",
        [
            Column("scenario", "scenario", fmt_text, "left"),
            Column("context_len", "context (tokens)", fmt_int),
            Column("max_concurrency", "max sequences", fmt_int),
        ],
        what_if,
    )
    notes = unique_notes(notes)
    data = {
        "kvplan_version": __version__,
        "model": {"name": spec.name},
        "gpu": gpu.name,
        "tp": tp,
        "pp": pp,
        "num_gpus": replicas * tp * pp,
        "context_len": ctx,
        "kv_dtype": fmt.name,
        "weights_dtype": wdtype,
        "block_size": blk,
        "usable_bytes_per_gpu": plan.usable_bytes,
        "weights_bytes_per_gpu": plan.weights_bytes,
        "reserve_bytes_per_gpu": plan.reserve_bytes,
        "kv_pool_bytes_per_gpu": plan.pool_bytes,
        "kv_tokens": kv_tokens,
        "max_concurrency": max_conc,
        "max_context_len_at_batch": max_ctx,
        "batch_size": request.batch_size,
        "fits": fits,
        "what_if": what_if,
        "paging": paging,
        "kv_transfer": transfer,
        "notes": notes,
    }
    return Report(f"Capacity of {spec.name} on {gpu.name}", facts, [table], notes, data)


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
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, fmt: KvFormat, notes: list[str]
) -> dict | None:
    """Disaggregated prefill/decode: one request's KV moved to a decode replica of TP ranks."""
    try:
        link = choose_link(gpu, request.link, request.network_gbps)
    except KvplanError as exc:
        if request.network_gbps is not None or request.link != "network":
            raise
        notes.append(f"No disaggregated KV transfer figure: {exc}.")
        return None
    tp = request.tp
    moved = kv_transfer_bytes(spec, request.context_len, fmt, tp)
    whole = kv_transfer_bytes(spec, request.context_len, fmt, 1)
    if moved > whole:
        what = (
            "MLA latent"
            if any(a.kind == "mla" for a in spec.attention_layers())
            else ("replicated KV heads")
        )
        notes.append(
            f"KV transfer counts replication honestly: each of the {tp} decode ranks receives "
            f"the {what} it needs, {moved / whole:.0f}x the cache itself."
        )
    notes.append(
        f"KV transfer over {link.name}: {link.one_way_bytes_per_s / 1e9:,.0f} GB/s one way per "
        f"GPU and {link.latency_s * 1e6:.0f} us latency, each decode rank on its own link, the "
        "link doing nothing else."
    )
    return {
        "link": link.name,
        "bytes_per_request": moved,
        "time_s": kv_transfer_time_s(moved, tp, link.one_way_bytes_per_s, link.latency_s),
        "requests_per_s": kv_transfer_requests_per_s(moved, tp, link.one_way_bytes_per_s),
    }


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


def vllm_flags(spec: ModelSpec, request: CapacityRequest, max_concurrency: int) -> str:
    """The `vllm serve` command matching this plan."""
    kv = request.kv_dtype if request.kv_dtype in ("auto", "fp8") else "auto"
    parts = [
        f"vllm serve {spec.name}",
        f"--max-model-len {request.context_len}",
        f"--kv-cache-dtype {kv}",
        f"--max-num-seqs {max(1, max_concurrency)}",
        f"--gpu-memory-utilization {request.gpu_mem_util}",
        f"--tensor-parallel-size {request.tp}",
    ]
    if request.pp > 1:
        parts.append(f"--pipeline-parallel-size {request.pp}")
    parts.append(f"--block-size {request.block_size}")
    return " \\\n  ".join(parts) + "\n"
