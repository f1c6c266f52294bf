"""`kvplan capacity`: how many concurrent sequences fit, engine-free.

budget per GPU = memory the device reports x utilization - weights per GPU - reserve;
max concurrency = floor(budget / paged bytes per sequence), on the most loaded pipeline stage.
"""

from __future__ import annotations

from typing import Any

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.dtypes import KvFormat, resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.comm import kv_transfer_bytes, kv_transfer_requests_per_s, kv_transfer_time_s
from kvplan.formulas.kv import kv_bytes_per_token
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile, choose_link
from kvplan.notes import Note, note, unique
from kvplan.plans.common import budget_note, checkpoint_kv_note, model_notes, require_cache
from kvplan.plans.deployment import (
    Deployment,
    DeploymentChoice,
    choose_deployment,
    fallback_on_gpus,
    layout_text,
    rank_budget,
    replica_sequences,
)
from kvplan.plans.pool import max_context_at_batch
from kvplan.record import NamedTuple

WHAT_IF_KV_DTYPES = ("bf16", "fp8", "int8", "int4")
# Weights formats the what-if table and the remedies weigh (where narrower than the plan's):
# fp8 both engines make from a bf16 checkpoint at load time; int4 is an AWQ/GPTQ checkpoint
WHAT_IF_WEIGHTS_DTYPES = ("fp8", "int4")


class CapacityRequest(NamedTuple):
    context_len: int = 32768
    batch_sizes: tuple[int, ...] = (1,)
    num_gpus: int | None = None
    # None for all three: kvplan chooses the deployment (kvplan.plans.deployment); any one given
    # fixes the layout (the others default to 1)
    tp: int | None = None
    pp: int | None = None
    dp_attention: int | None = None
    users_target: int | None = None  # serve this many sequences: replicas of the layout that
    # needs the fewest GPUs in all (with no layout or --num-gpus given)
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


class WhatIfRow(NamedTuple):
    kind: str  # kv_dtype | weights_dtype | half_context | double_context | prefix | contiguous | paged
    kv_dtype: str
    context_len: int
    max_concurrency: int
    prefix_tokens: int = 0
    weights_dtype: str | None = None  # a weights_dtype row's format (others: the plan's)


class Remedy(NamedTuple):
    """One change that makes a plan holding no sequence hold at least one (the rest as planned).
    kind: layout (more GPUs: the fewest that fit), weights_dtype, kv_dtype, context (the longest
    one sequence fits at)."""

    kind: str
    tp: int
    pp: int
    dp_attention: int
    num_gpus: int  # one replica's
    weights_dtype: str
    kv_dtype: str
    context_len: int
    max_concurrency: int


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
    memory_context_len: int  # what the memory alone holds (may exceed the model's positions)
    limited_by: str  # memory | positions (the model's max_position_embeddings)


class CapacityResult(NamedTuple):
    kvplan_version: str
    model: dict
    gpu: str
    memory_reported: bool
    tp: int
    pp: int
    dp_attention: int
    deployment_chosen_by: str  # given | none-fits | kvplan.plans.deployment's choices
    gpus_per_node: int
    nodes_per_replica: int
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
    remedies: list[Remedy]  # empty when the plan fits
    notes: tuple[Note, ...]


def validate(request: CapacityRequest) -> None:
    if not 0.05 <= request.gpu_mem_util <= 1.0:
        raise KvplanError(f"--gpu-mem-util {request.gpu_mem_util} must be between 0.05 and 1")
    if not 1 <= request.block_size <= 4096:
        raise KvplanError(f"--block-size {request.block_size} must be between 1 and 4096")
    if not request.batch_sizes or min(request.batch_sizes) < 1:
        raise KvplanError("--batch must be at least 1")
    if request.prefix_tokens < 0 or request.prefix_tokens > request.context_len:
        raise KvplanError("--prefix-tokens must be between 0 and --ctx")
    if request.mean_len is not None and not 1 <= request.mean_len <= request.context_len:
        raise KvplanError("--mean-len must be between 1 and --ctx")
    if request.reserve_bytes is not None and not 0 <= request.reserve_bytes < 2**60:
        raise KvplanError("--reserve must be a size between 0 and 1 EiB")


def capacity(
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, *, brief: bool = False
) -> CapacityResult:
    """The Python twin of `kvplan capacity MODEL --gpu GPU` (engine-free). `brief`: a plan that
    fits leaves longest_context and what_if empty, paging and kv_transfer None, and no note of
    the KV transfer (the comparison of GPU kinds, kvplan.plans.compare, reads none of them and
    sizes over a hundred layouts); everything else is the same."""
    require_cache(spec, "concurrency")
    validate(request)
    wdtype, wnotes = resolve_weights_dtype(spec, request.weights_dtype)
    fmt = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    choice = resolve_deployment(spec, gpu, request, wdtype, fmt)
    d = choice.deployment
    tp = 1 if d.dp_attention > 1 else d.tp  # a rank's TP
    pp, blk = d.pp, request.block_size
    stages = pp_stages(spec, pp)
    plan = choice.budget  # _rank_budget of d, as the choice weighed it
    pool = max(0.0, plan.pool_bytes)
    gpus = request.num_gpus
    if gpus is not None and gpus % d.gpus and choice.chosen_by == "given":
        raise KvplanError(
            f"--num-gpus {gpus} is not a multiple of the {d.gpus} GPUs of one replica "
            f"({layout_text(d)})"
        )
    ctx = request.context_len
    if gpus is None and request.users_target and choice.users:
        replicas = -(-request.users_target // choice.users)
    else:
        replicas = max(1, (gpus or d.gpus) // d.gpus)

    def concurrency(fmt_: KvFormat, context_len: int, prefix: int = 0) -> int:
        return replica_sequences(spec, d, pool, context_len, fmt_, blk, prefix) * replicas

    per_token = max(kv_bytes_per_token(st, fmt, tp) for st in stages)
    kv_tokens = int(pool // (per_token * blk)) * blk if per_token else None
    max_conc = choice.users * replicas  # concurrency(fmt, ctx), as the choice counted it
    positions = spec.max_position_embeddings
    fits = plan.pool_bytes > 0 and max_conc >= 1
    full = not (brief and fits)  # the parts a brief plan leaves out
    longest = []
    for b in request.batch_sizes if full else ():
        per_rank = -(-b // d.dp_attention)  # DP-attention ranks share the batch
        memory = max_context_at_batch(stages, pool, per_rank, fmt, tp, blk)
        capped = min(memory, positions) if positions else memory
        longest.append(
            LongestContext(b, capped, memory, "positions" if capped < memory else "memory")
        )

    notes: list[Note | None] = [*model_notes(spec, tp), *wnotes]
    notes.append(fmt.note)
    notes.append(checkpoint_kv_note(spec, fmt.name))
    notes.append(
        budget_note(
            gpu, request.gpu_mem_util, plan.reserve_bytes, request.reserve_bytes is not None
        )
    )
    notes.append(note("capacity-paged", block_size=blk))
    if gpu.memory_reported_basis == "estimated":
        notes.append(note("memory-estimated", gpu=gpu.name, source=gpu.memory_reported_source))
    notes += choice.notes
    if pp > 1:
        notes.append(note("capacity-pp", pp=pp))
    if gpus is not None and gpus > replicas * d.gpus:
        notes.append(note("gpus-idle", num_gpus=gpus, used=replicas * d.gpus, layout=d))
    if replicas > 1:
        notes.append(
            note(
                "capacity-replicas",
                num_gpus=replicas * d.gpus,  # --users sizes the replicas with no --num-gpus
                replicas=replicas,
                layout=d,
            )
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
    for name in WHAT_IF_KV_DTYPES if full else ():
        alt = resolve_kv_format(name, spec.dtype, request.kv_group_size)
        what_if.append(WhatIfRow("kv_dtype", alt.name, ctx, concurrency(alt, ctx)))
    for name in narrower_weights(spec, wdtype) if full else ():
        held = weights_concurrency(spec, gpu, request, d, name, fmt, ctx) * replicas
        what_if.append(WhatIfRow("weights_dtype", fmt.name, ctx, held, weights_dtype=name))
    for kind, factor in (("half_context", 0.5), ("double_context", 2)) if full else ():
        c = max(1, int(ctx * factor))
        what_if.append(WhatIfRow(kind, fmt.name, c, concurrency(fmt, c)))
    if request.prefix_tokens and full:
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
    if request.mean_len and full:
        contiguous = concurrency(fmt, ctx)  # reserves --ctx per sequence
        paged = concurrency(fmt, request.mean_len)
        paging = Paging(
            request.mean_len, contiguous, paged, paged / contiguous if contiguous else None
        )
        what_if.append(WhatIfRow("contiguous", fmt.name, ctx, contiguous))
        what_if.append(WhatIfRow("paged", fmt.name, request.mean_len, paged))

    remedies = [] if fits else fit_remedies(spec, gpu, request, d, replicas, wdtype, fmt, what_if)
    if not fits:  # the longest context of one sequence: the batch-1 row's search where there is one
        single = next((row.memory_context_len for row in longest if row.batch_size == 1), None)
        if single is None:
            single = max_context_at_batch(stages, pool, 1, fmt, tp, blk)
        one = min(single, positions or ctx)
        if 0 < one < ctx:
            remedies.append(
                Remedy(
                    "context", d.tp, d.pp, d.dp_attention, d.gpus, wdtype, fmt.name, one, replicas
                )
            )
    return CapacityResult(
        kvplan_version=__version__,
        model={"name": spec.name},
        gpu=gpu.name,
        memory_reported=bool(gpu.memory_reported_bytes),
        tp=tp,
        pp=pp,
        dp_attention=d.dp_attention,
        deployment_chosen_by=choice.chosen_by,
        gpus_per_node=choice.gpus_per_node,
        nodes_per_replica=choice.nodes,
        num_gpus=replicas * d.gpus,
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
        kv_transfer=kv_transfer(spec, gpu, request._replace(tp=tp), fmt, notes) if full else None,
        remedies=remedies,
        notes=unique(notes),
    )


def capacity_for_launch(
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, engine: str, block_given: bool
) -> CapacityResult:
    """The plan a launch command carries. vLLM's MLA backends page in blocks of their own
    (FlashMLA 64, CUTLASS MLA 128, FlashInfer MLA 32 or 64: get_supported_kernel_block_sizes in
    vllm/v1/attention/backends/mla/), so with no --block-size given the launch leaves vLLM its
    default (kvplan.engines.vllm.default_block_size) and the plan is counted in that block."""
    result = capacity(spec, gpu, request)
    if engine == "sglang" and result.fits:
        return _sglang_seats(spec, gpu, result, block_given)
    if engine != "vllm" or not result.fits:
        return result
    if block_given or not spec.has_kind(CacheKind.MLA):
        return _engine_seats(spec, gpu, request, result, block_given)
    from kvplan.engines.vllm import default_block_size  # the engine's rule, one home

    block = default_block_size(spec, result.kv_dtype, gpu, result.tp)
    if block == result.block_size:
        return _engine_seats(spec, gpu, request, result, block_given)
    fixed = request._replace(
        block_size=block,
        tp=result.tp if result.dp_attention == 1 else None,
        pp=result.pp,
        dp_attention=result.dp_attention if result.dp_attention > 1 else None,
        num_gpus=result.num_gpus if request.num_gpus is not None else None,
    )
    return _engine_seats(spec, gpu, fixed, capacity(spec, gpu, fixed), block_given)


def _sglang_seats(
    spec: ModelSpec, gpu: GpuProfile, result: CapacityResult, block_given: bool
) -> CapacityResult:
    """An SGLang launch's memory as SGLang allocates it for the launch's own flags
    (kvplan.engines.sglang.sglang_allocation, what `kvplan simulate --engine sglang` and `kvplan
    plan --emit sglang` size its pool by): free memory before loading x --mem-fraction-static
    (the plan's --gpu-mem-util) - the weights as SGLang loads them (under --enable-dp-attention
    the dense MLPs, shared experts and head split over the whole group and the embedding whole on
    every GPU, models/deepseek_v2.py; not vLLM's -dp rule of the engine-free plan). The launch
    carries SGLang's weights, pool and whole max-length requests per rank; a pool that holds none
    is refused as SGLang would admit none."""
    from kvplan.engines import EngineRequest
    from kvplan.engines.sglang import sglang_allocation, with_launch_mamba_strategy
    from kvplan.plans.launch import KV_CACHE_DTYPE, launch_kv_dtype

    kv = KV_CACHE_DTYPE["sglang"].get(launch_kv_dtype(result.kv_dtype, spec))
    if kv is None:
        return result  # the launch refuses the KV dtype in SGLang's words (plans.launch)
    dp = result.dp_attention
    mla = spec.has_kind(CacheKind.MLA)
    engine = EngineRequest(
        engine="sglang",
        max_model_len=result.context_len,
        kv_cache_dtype=kv,
        block_size=None if mla and not block_given else result.block_size,
        tp=result.tp,  # a DP-attention rank's (1)
        pp=result.pp,
        mem_fraction_static=result.gpu_mem_util,
        weights_dtype=result.weights_dtype,
        expert_ranks=dp if dp > 1 else None,
        dp_attention=dp,
        # a context past the model's derived limit is the launch's to refuse or allow
        # (plans.launch.check_launch, --allow-long-max-model-len)
        allow_long_max_model_len=True,
    )
    try:
        alloc = sglang_allocation(spec, gpu, with_launch_mamba_strategy(spec, gpu, engine))
    except KvplanError as exc:
        refused = note("deployment-none-fits", reason=str(exc), gpus=result.num_gpus)
        return result._replace(max_concurrency=0, fits=False, notes=result.notes + (refused,))
    pages = -(-result.context_len // alloc.block_size)
    held = alloc.num_blocks // pages if alloc.fits else 0
    capped: tuple[Note, ...] = ()
    if alloc.max_mamba_cache_size is not None and dp == 1 and alloc.max_running_requests < held:
        # a hybrid's state pool caps SGLang's running requests below what its KV pool holds
        capped = (
            note(
                "launch-sglang-state-cap",
                planned=held,
                held=alloc.max_running_requests,
                states=alloc.max_mamba_cache_size,
            ),
        )
        held = alloc.max_running_requests
    assert alloc.free_before_load_bytes is not None and alloc.weights_bytes is not None
    pool = next(n for n in alloc.notes if n.id == "sglang-pool")
    return result._replace(
        usable_bytes_per_gpu=alloc.free_before_load_bytes * alloc.mem_fraction_static,
        weights_bytes_per_gpu=alloc.weights_bytes,
        reserve_bytes_per_gpu=0.0,
        kv_pool_bytes_per_gpu=float(alloc.pool_bytes),
        kv_tokens=alloc.kv_cache_tokens,
        max_concurrency=held * dp * result.replicas,
        fits=held >= 1,
        notes=result.notes + (pool, *capped),
    )


# kvplan's KV names -> vLLM's --kv-cache-dtype (others cannot be launched: the launch refuses)
_VLLM_KV = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}


def _engine_seats(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: CapacityRequest,
    result: CapacityResult,
    block_given: bool,
) -> CapacityResult:
    """A vLLM launch's seats, checked against vLLM's own allocation of the same flags
    (kvplan.engines.vllm: its page layouts, e.g. an fp8 cache of a DSA model stored as
    fp8_ds_mla, 656 B a token where the engine-free fp8 latent is 576): where vLLM holds fewer
    max_model_len requests than the plan counted, the launch carries vLLM's count (and none, a
    refusal). TP/PP layouts only: kvplan's vLLM model has no DP-attention ranks."""
    if result.dp_attention > 1:
        return result
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import vllm_allocation
    from kvplan.plans.launch import launch_kv_dtype

    kv = _VLLM_KV.get(launch_kv_dtype(result.kv_dtype, spec))
    wdtype = result.weights_dtype
    checkpoint = spec.weights_quantization or spec.dtype
    if kv is None or wdtype not in ("checkpoint", checkpoint, "fp8", spec.dtype):
        return result
    quantization = "fp8" if wdtype == "fp8" and checkpoint != "fp8" else None
    per_replica = result.max_concurrency // result.replicas
    engine = EngineRequest(
        max_model_len=result.context_len,
        kv_cache_dtype=kv,
        block_size=None if spec.has_kind(CacheKind.MLA) and not block_given else result.block_size,
        max_num_batched_tokens=request.max_num_batched_tokens,
        tp=result.tp,
        pp=result.pp,
        gpu_mem_util=result.gpu_mem_util,
        quantization=quantization,
        max_num_seqs=max(1, per_replica),
    )
    try:
        alloc = vllm_allocation(spec, gpu, engine)
    except KvplanError:
        return result  # a layout vLLM's model does not take: the plan stands
    held = int(alloc.max_concurrency) if alloc.fits else 0
    if held >= per_replica:
        return result
    seats = note(
        "launch-engine-seats",
        planned=per_replica,
        held=held,
        layout=Deployment(result.tp, result.pp),
    )
    return result._replace(
        max_concurrency=held * result.replicas,
        fits=held >= 1,
        notes=result.notes + (seats,),
    )


def narrower_weights(spec: ModelSpec, wdtype: str) -> list[str]:
    """The what-if weights formats that store the weights in fewer bytes than `wdtype`."""
    current = weight_bytes(spec, wdtype)
    return [w for w in WHAT_IF_WEIGHTS_DTYPES if w != wdtype and weight_bytes(spec, w) < current]


def weights_concurrency(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: CapacityRequest,
    d: Deployment,
    wdtype: str,
    fmt: KvFormat,
    context_len: int,
) -> int:
    """Sequences one replica of `d` holds with the weights in `wdtype` (the reserve as planned)."""
    plan = _rank_budget(spec, gpu, wdtype, d, request)
    if plan.pool_bytes <= 0:
        return 0
    return replica_sequences(spec, d, plan.pool_bytes, context_len, fmt, request.block_size)


def fit_remedies(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: CapacityRequest,
    d: Deployment,
    replicas: int,
    wdtype: str,
    fmt: KvFormat,
    what_if: list[WhatIfRow],
) -> list[Remedy]:
    """What would make a plan that holds no sequence hold one: the fewest GPUs that fit with the
    same dtypes (a larger layout), narrower weights or an fp8 cache on the same layout."""
    out = []
    ctx = request.context_len
    try:
        wider = choose_deployment(
            spec,
            gpu,
            wdtype,
            fmt,
            ctx,
            request.gpu_mem_util,
            block_size=request.block_size,
            reserve_bytes=request.reserve_bytes,
            max_num_batched_tokens=request.max_num_batched_tokens,
        )
        if wider.deployment != d and wider.users >= 1:
            w = wider.deployment
            out.append(
                Remedy(
                    "layout", w.tp, w.pp, w.dp_attention, w.gpus, wdtype, fmt.name, ctx, wider.users
                )
            )
    except KvplanError:
        pass  # no layout holds one sequence with these dtypes
    for row in what_if:
        if row.kind == "weights_dtype" and row.weights_dtype and row.max_concurrency >= 1:
            out.append(
                Remedy(
                    "weights_dtype",
                    d.tp,
                    d.pp,
                    d.dp_attention,
                    d.gpus,
                    row.weights_dtype,
                    fmt.name,
                    ctx,
                    row.max_concurrency,
                )
            )
    fp8 = next((r for r in what_if if r.kind == "kv_dtype" and r.kv_dtype == "fp8"), None)
    if fp8 is not None and fp8.kv_dtype != fmt.name and fp8.max_concurrency >= 1:
        out.append(
            Remedy(
                "kv_dtype",
                d.tp,
                d.pp,
                d.dp_attention,
                d.gpus,
                wdtype,
                "fp8",
                ctx,
                fp8.max_concurrency,
            )
        )
    return out


def resolve_deployment(
    spec: ModelSpec, gpu: GpuProfile, request: CapacityRequest, wdtype: str, fmt: KvFormat
) -> DeploymentChoice:
    """The layout the request fixes, or the one kvplan chooses for its context; when no layout
    holds one sequence, one GPU, with the reason as a note (the answer is then 0)."""
    kwargs: dict[str, Any] = dict(
        block_size=request.block_size,
        reserve_bytes=request.reserve_bytes,
        max_num_batched_tokens=request.max_num_batched_tokens,
    )
    fixed = any(x is not None for x in (request.tp, request.pp, request.dp_attention))
    on_gpus = None if fixed else request.num_gpus
    try:
        return choose_deployment(
            spec,
            gpu,
            wdtype,
            fmt,
            request.context_len,
            request.gpu_mem_util,
            tp=request.tp,
            pp=request.pp,
            dp_attention=request.dp_attention,
            users_target=request.users_target if request.num_gpus is None else None,
            num_gpus=on_gpus,
            **kwargs,
        )
    except KvplanError as exc:
        if fixed:
            raise
        shown = 1 if on_gpus is None else fallback_on_gpus(spec, gpu, on_gpus).tp
        one = choose_deployment(
            spec, gpu, wdtype, fmt, request.context_len, request.gpu_mem_util, tp=shown, **kwargs
        )
        fallback = note("deployment-none-fits", reason=str(exc), gpus=one.deployment.gpus)
        return one._replace(chosen_by="none-fits", notes=one.notes + (fallback,))


def kv_transfer(
    spec: ModelSpec,
    gpu: GpuProfile,
    request: CapacityRequest,
    fmt: KvFormat,
    notes: list[Note | None],
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
    assert tp is not None, "the caller gives the deployment's TP"
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
    """Max concurrent sequences per context, one series per KV dtype (for the plot); contexts
    past the model's maximum positions are left out (they cannot happen)."""
    validate(request)
    wdtype, _ = resolve_weights_dtype(spec, request.weights_dtype)
    fmt0 = resolve_kv_format(request.kv_dtype, spec.dtype, request.kv_group_size)
    d = resolve_deployment(spec, gpu, request, wdtype, fmt0).deployment
    plan = _rank_budget(spec, gpu, wdtype, d, request)
    replicas = (request.num_gpus or d.gpus) // d.gpus
    positions = spec.max_position_embeddings
    usable = [c for c in contexts if not positions or c <= positions]
    series = {}
    for name in WHAT_IF_KV_DTYPES:
        fmt = resolve_kv_format(name, spec.dtype, request.kv_group_size)
        series[name] = [
            (
                c,
                replicas * replica_sequences(spec, d, plan.pool_bytes, c, fmt, request.block_size),
            )
            for c in usable
        ]
    return series


def _rank_budget(
    spec: ModelSpec, gpu: GpuProfile, wdtype: str, d: Deployment, request: CapacityRequest
):
    """One rank's memory budget of `d` at the request's memory share, reserve and token budget."""
    return rank_budget(
        spec,
        gpu,
        wdtype,
        d,
        request.gpu_mem_util,
        request.reserve_bytes,
        request.max_num_batched_tokens,
    )
