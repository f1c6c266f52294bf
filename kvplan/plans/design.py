"""`kvplan report`: the numbers of a design-doc section for one model over GPU options and
contexts: cache anatomy, KV table, capacity, roofline, the decision order's inputs."""

from __future__ import annotations

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec
from kvplan.dtypes import resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.kv import gqa_saving_factor, kv_bytes_per_sequence, kv_bytes_per_token
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, unique
from kvplan.plans.capacity import (
    CapacityRequest,
    KvTransfer,
    Paging,
    capacity,
    concurrency_curve,
)
from kvplan.plans.common import model_notes, require_cache
from kvplan.plans.compare import CompareRequest, CompareResult, compare
from kvplan.plans.deployment import DeploymentChoice, choose_deployment
from kvplan.plans.roofline import RooflineRequest, RooflineResult, roofline
from kvplan.record import NamedTuple


class DesignRequest(NamedTuple):
    contexts: tuple[int, ...] = (8192, 32768, 131072)
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")
    # None for all three: the deployment kvplan chooses for the longest context, per GPU
    tp: int | None = None
    pp: int | None = None
    dp_attention: int | None = None
    gpu_mem_util: float = 0.9
    prefix_tokens: int = 2048
    plots: bool = False  # also compute what the report's two charts draw


class DesignModel(NamedTuple):
    name: str
    family: str
    params_total: int
    params_active: int
    weights_bytes: int
    weights_dtype: str
    layers: dict[str, int]
    kv_bytes_per_token: int
    mha_equivalent_bytes_per_token: int
    gqa_saving: float | None


class KvRow(NamedTuple):
    context_len: int
    kv_dtype: str
    kv_bytes_per_sequence: int
    kv_to_weights: float


class ContextPlan(NamedTuple):
    context_len: int
    max_sequences: dict[str, int]  # per KV dtype
    kv_tokens: int | None
    kv_pool_bytes_per_gpu: float
    limited_by: str  # weights | KV memory | none
    ttft_floor_s: float
    tpot_floor_s: float
    tokens_per_s_at_max_batch: float
    ceiling_tokens_per_s: float | None
    batch_equal_reads: float | None
    what_if: dict[str, int]  # kv_<dtype>, weights_<dtype>, half_context, double_context, prefix
    paging: Paging | None
    kv_transfer: KvTransfer | None


class DesignOption(NamedTuple):
    gpu: str
    tp: int
    pp: int
    dp_attention: int
    gpus: int  # one replica
    nodes: int
    deployment_chosen_by: str
    per_context: list[ContextPlan]


class DesignResult(NamedTuple):
    kvplan_version: str
    model: DesignModel
    kv_dtypes: list[str]
    kv_table: list[KvRow]
    options: list[DesignOption]
    prefix_tokens: int
    gpu_mem_util: float
    notes: tuple[Note, ...]
    # What the charts draw (with DesignRequest.plots): the first option's roofline at the
    # report's contexts, and its sequences-vs-context curve per KV dtype.
    plot_roofline: RooflineResult | None = None
    plot_capacity: dict[str, list[tuple[int, int]]] | None = None
    # The GPU options side by side at the longest context, each on its own deployment (per GPU),
    # with the verdict (kvplan.plans.compare); None when the layout is fixed
    comparison: CompareResult | None = None


def choose(spec: ModelSpec, gpu: GpuProfile, request: DesignRequest, wdtype: str, fmt):
    """The deployment the report plans on for this GPU (given, or chosen for the longest
    context)."""
    return choose_deployment(
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


def _what_if_key(row) -> str:
    if row.kind == "weights_dtype":
        return f"weights_{row.weights_dtype}"
    return f"kv_{row.kv_dtype}" if row.kind == "kv_dtype" else row.kind


def design_report(spec: ModelSpec, gpus: list[GpuProfile], request: DesignRequest) -> DesignResult:
    """The Python twin of `kvplan report`: every number of the report, typed."""
    require_cache(spec, "concurrency")
    if not gpus:
        raise KvplanError("report needs at least one --gpu")
    formats = [resolve_kv_format(d, spec.dtype) for d in dict.fromkeys(request.kv_dtypes)]
    base = formats[0]
    wdtype, wnotes = resolve_weights_dtype(spec, "auto")
    weights = weight_bytes(spec, wdtype)
    kv_table = [
        KvRow(
            c,
            fmt.name,
            kv_bytes_per_sequence(spec, c, fmt),
            kv_bytes_per_sequence(spec, c, fmt) / weights,
        )
        for c in request.contexts
        for fmt in formats
    ]
    options = []
    notes = model_notes(spec, 1) + wnotes
    for gpu in gpus:
        choice: DeploymentChoice = choose(spec, gpu, request, wdtype, base)
        d = choice.deployment
        notes += list(choice.notes)
        per_context = []
        for c in request.contexts:
            per_dtype = {
                fmt.name: capacity(
                    spec,
                    gpu,
                    CapacityRequest(
                        context_len=c,
                        tp=d.tp,
                        pp=d.pp,
                        dp_attention=d.dp_attention,
                        gpu_mem_util=request.gpu_mem_util,
                        kv_dtype=fmt.name,
                        prefix_tokens=min(request.prefix_tokens, c),
                        mean_len=max(1, c // 4),
                    ),
                )
                for fmt in formats
            }
            first = per_dtype[base.name]
            roof = roofline(
                spec,
                gpu,
                RooflineRequest(
                    contexts=(c,),
                    batches=(max(1, first.max_concurrency),),
                    kv_dtype=base.name,
                    tp=d.tp,
                    pp=d.pp,
                    dp_attention=d.dp_attention if d.dp_attention > 1 else None,
                    gpu_mem_util=request.gpu_mem_util,
                ),
            )
            if not first.fits:
                limit = "weights"
            elif first.max_concurrency < 4096:
                limit = "KV memory"
            else:
                limit = "none"
            per_context.append(
                ContextPlan(
                    context_len=c,
                    max_sequences={k: v.max_concurrency for k, v in per_dtype.items()},
                    kv_tokens=first.kv_tokens,
                    kv_pool_bytes_per_gpu=first.kv_pool_bytes_per_gpu,
                    limited_by=limit,
                    ttft_floor_s=roof.prefill.time_floor_s,
                    tpot_floor_s=roof.decode[0].time_floor_s,
                    tokens_per_s_at_max_batch=roof.decode[0].tokens_per_s,
                    ceiling_tokens_per_s=roof.ceiling_tokens_per_s,
                    batch_equal_reads=roof.batch_equal_reads,
                    what_if={_what_if_key(r): r.max_concurrency for r in first.what_if},
                    paging=first.paging,
                    kv_transfer=first.kv_transfer,
                )
            )
            notes += list(first.notes) + list(roof.notes)
        options.append(
            DesignOption(
                gpu.name,
                d.tp,
                d.pp,
                d.dp_attention,
                d.gpus,
                choice.nodes,
                choice.chosen_by,
                per_context,
            )
        )
    model = DesignModel(
        name=spec.name,
        family=spec.family,
        params_total=spec.params_total,
        params_active=spec.params_active,
        weights_bytes=weights,
        weights_dtype=wdtype,
        layers=dict(spec.layer_kind_counts()),
        kv_bytes_per_token=kv_bytes_per_token(spec, base),
        mha_equivalent_bytes_per_token=spec.mha_equivalent_bytes_per_token(base),
        gqa_saving=gqa_saving_factor(spec, base),
    )
    plot_roofline = plot_capacity = None
    if request.plots:
        first_gpu, o = gpus[0], options[0]
        dp = o.dp_attention if o.dp_attention > 1 else None
        plot_roofline = roofline(
            spec,
            first_gpu,
            RooflineRequest(
                contexts=request.contexts, batches=(1, 8, 64), tp=o.tp, pp=o.pp, dp_attention=dp
            ),
        )
        plot_capacity = concurrency_curve(
            spec,
            first_gpu,
            CapacityRequest(tp=o.tp, pp=o.pp, dp_attention=dp),
            [2**k for k in range(10, 19)],
        )
    comparison = None
    if request.tp is None and request.pp is None and request.dp_attention is None:
        comparison = compare(
            spec,
            gpus,
            CompareRequest(
                context_len=max(request.contexts),
                kv_dtype=base.name,
                gpu_mem_util=request.gpu_mem_util,
            ),
        )
        if len(gpus) > 1:
            keep = ("compare-columns", "compare-prices")
            notes += [n for n in comparison.notes if n.id in keep]
    return DesignResult(
        __version__,
        model,
        [fmt.name for fmt in formats],
        kv_table,
        options,
        request.prefix_tokens,
        request.gpu_mem_util,
        unique(notes),
        plot_roofline,
        plot_capacity,
        comparison,
    )
