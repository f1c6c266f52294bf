"""`kvplan explore`: the cache explorer as one self-contained HTML page for any model and GPU
profiles. Every number the page shows is computed here, by kvplan's formulas, over the grid of
its controls (prompt length, KV heads, GPU, GPU count, context, users, cache dtype) and embedded
as data; the page's JavaScript only looks values up, places them and puts them into words.

The deployment each GPU opens on is the one kvplan chooses (kvplan.plans.deployment) for one
conversation of the long context (128k, or the model's maximum positions when shorter): the fewest
GPUs that hold it, TP within a node, pipeline stages across nodes or DP attention for MoE models.
Every TP degree within the node stays one click away, with its per-GPU weights and cache.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec, pp_stages
from kvplan.dtypes import ELEMENT_BYTES, KvFormat, resolve_kv_format
from kvplan.errors import KvplanError
from kvplan.formulas.kv import (
    cache_groups,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    paged_bytes_of_groups,
    sequences_in_pool,
)
from kvplan.formulas.weights import resolve_weights_dtype, weights_bytes_per_gpu
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import Note, note, unique
from kvplan.plans.common import attention_summary, model_notes, require_cache
from kvplan.plans.deployment import (
    Deployment,
    candidates,
    choose_deployment,
    gpus_per_node,
    rank_budget,
)
from kvplan.record import NamedTuple

ACT1_MAX_PROMPT = 4096
ACT1_MAX_GENERATE = 256
USER_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
CONTEXT_GRID = tuple(2**k for k in range(10, 21))  # 1k .. 1m
QUANT = ("bf16", "fp8", "int8", "int4")
BLOCK_SIZE = 16  # tokens per paged block, as vLLM and SGLang default
GPU_MEM_UTIL = 0.9  # the share of reported memory an engine budgets (vLLM's default)
LONG_CONTEXT = 131072  # the conversation the opening deployment must hold (capped by the model)
QUIZ_CONTEXT = 32768
OPENING_CONTEXT = 8192  # Act 3 opens at 8k context and 8 users
OPENING_USERS = 8
STRIP_TOKENS = 4096  # Act 1's "recompute avoided" example in the quiz


class GroupRow(NamedTuple):
    """One kind of layer, with the terms of its bytes-per-token formula (the model's dtype)."""

    label: str
    kind: str  # full | sliding | chunked | mla | state
    layers: int
    kv_heads: int  # 0 for a state group; 1 for MLA (one latent)
    head_dim: int  # K width, or the latent width for MLA
    head_dim_v: int  # V width (0 for MLA)
    window: int | None
    element_bytes: int | None  # bytes per stored value in the cache's dtype (None: block formats)
    bytes_per_token_per_layer: int
    bytes_per_token: int  # all layers of the group
    state_bytes: int  # all layers of the group, per sequence


class HeadOption(NamedTuple):
    kv_heads: int
    group_size: int  # query heads sharing one KV head
    label: str  # MQA | GQA | MHA
    bytes_per_token: int
    bytes_per_sequence: int  # at Act 2's context
    reduction_vs_mha: float


class DeployOption(NamedTuple):
    """One deployment of the model on one GPU kind; every byte figure is per GPU (the most loaded
    pipeline stage for the cache)."""

    tp: int
    pp: int
    dp_attention: int  # > 1: attention data-parallel over that many GPUs, experts spread (EP)
    num_gpus: int
    nodes: int
    usable_bytes: float  # reported memory x utilization: the wall
    weights_bytes: float
    reserve_bytes: float
    pool_bytes: float  # usable - weights - reserve (negative: the weights alone overflow)
    kv_heads_per_gpu: int  # of the first attention layer (1 for an MLA latent; 0 without)
    kv_head_copies: int  # GPUs holding each KV head (or the latent); 1 when split cleanly
    kv_bytes_per_token: dict[str, int]  # per QUANT dtype
    shrink_vs_bf16: dict[str, float]
    kv_bytes_per_sequence: list[int]  # per context, paged, the model's dtype
    max_users: dict[str, list[int]]  # per QUANT dtype, per context
    max_users_model_dtype: list[int]  # per context
    cache_bytes: list[list[int]]  # [context][users]: users x bytes per sequence
    spare_bytes: list[list[int]]  # [context][users]: pool - cache, floored (negative: overflow)
    holds_long_context: bool  # one conversation of the long context fits


class GpuDeploy(NamedTuple):
    name: str
    memory_bytes: float  # what the device reports (or its nominal memory)
    gpu_mem_util: float
    gpus_per_node: int
    gpus_per_node_stated: bool  # False: the default of 8
    options: list[DeployOption]
    chosen: int  # index into options
    reason: str  # smallest-tp | pipeline | dp-attention | none-fits


class QuizChoice(NamedTuple):
    key: str  # what the value is (the page words each key)
    value: float | None
    correct: bool


class QuizQuestion(NamedTuple):
    id: str  # why-cache | sequence-bytes | what-caps | fp8-users
    values: dict
    choices: list[QuizChoice]


class ExploreResult(NamedTuple):
    kvplan_version: str
    model: dict
    hook: dict
    act1: dict
    act2: dict
    deploy: dict
    quiz: list[QuizQuestion]
    notes: tuple[Note, ...]


def explore_data(spec: ModelSpec, gpus: list[GpuProfile]) -> ExploreResult:
    """The Python twin of `kvplan explore MODEL --gpu ... --format json`."""
    require_cache(spec, "concurrency")
    if not gpus:
        raise KvplanError("explore needs at least one --gpu")
    base = resolve_kv_format("auto", spec.dtype)
    wdtype, wnotes = resolve_weights_dtype(spec, "auto")
    summary = attention_summary(spec)
    contexts = [
        c
        for c in CONTEXT_GRID
        if not spec.max_position_embeddings or c <= max(spec.max_position_embeddings, 8192)
    ]
    long_ctx = _long_context(spec, contexts)
    weights_total = weights_bytes_per_gpu(spec, wdtype, 1, 1)
    per_seq = _PerSequence(spec, contexts)
    deploys = [_gpu_deploy(spec, gpu, wdtype, base, contexts, long_ctx, per_seq) for gpu in gpus]
    model = {
        "name": spec.name,
        "family": spec.family,
        "dtype": spec.dtype,
        "kv_dtype": base.name,
        "weights_dtype": wdtype,
        "weights_bytes": weights_total,
        "layers": spec.num_layers,
        "layout": summary.layout,  # MHA | GQA | MQA | MLA | None (no attention)
        "query_heads": summary.num_q_heads,
        "kv_heads": summary.num_kv_heads,
        "max_positions": spec.max_position_embeddings,
        "kv_bytes_per_token": kv_bytes_per_token(spec, base),
        "attention_layers": len(spec.attention_layers()),
        "state_layers": len(spec.state_layers()),
        "windowed": any(a.kind.windowed for a in spec.attention_layers()),
    }
    hook_seq = kv_bytes_per_sequence(spec, long_ctx, base)
    hook = {
        "context_len": long_ctx,
        "kv_bytes_per_sequence": hook_seq,
        "weights_bytes": weights_total,
        "cache_to_weights": hook_seq / weights_total if weights_total else None,
    }
    notes: list[Note | None] = [*model_notes(spec, 1), *wnotes]
    notes += [
        note("explore-capacity", gpu_mem_util=GPU_MEM_UTIL, block_size=BLOCK_SIZE),
        note("explore-deployment", context_len=long_ctx),
        note("explore-cache-bytes"),
    ]
    if spec.has_kind(CacheKind.MLA):
        notes.append(note("explore-mla-replicated"))
    notes += [resolve_kv_format(name, spec.dtype).note for name in QUANT]  # Act 4's formats
    act1 = _act1(spec, base)
    return ExploreResult(
        kvplan_version=__version__,
        model=model,
        hook=hook,
        act1=act1,
        act2=_act2(spec, base),
        deploy={
            "contexts": contexts,
            "users": list(USER_GRID),
            "dtypes": list(QUANT),
            "long_context": long_ctx,
            "opening_context": OPENING_CONTEXT if OPENING_CONTEXT in contexts else contexts[0],
            "opening_users": OPENING_USERS,
            "block_size": BLOCK_SIZE,
            "int4_group_size": resolve_kv_format("int4", spec.dtype).group_size,
            "gpus": deploys,
        },
        quiz=_quiz(spec, base, weights_total, act1, deploys[0], contexts, long_ctx),
        notes=unique(notes),
    )


def _long_context(spec: ModelSpec, contexts: list[int]) -> int:
    cap = min(LONG_CONTEXT, spec.max_position_embeddings or LONG_CONTEXT)
    fitting = [c for c in contexts if c <= cap]
    return fitting[-1] if fitting else contexts[0]


def _act1(spec: ModelSpec, base: KvFormat) -> dict:
    groups = cache_groups(spec, base)
    max_t = ACT1_MAX_PROMPT + ACT1_MAX_GENERATE
    return {
        "tokens_max": max_t,
        "prompt_max": ACT1_MAX_PROMPT,
        "block_size": BLOCK_SIZE,
        "groups": [_group_row(spec, g, base) for g in groups],
        # K and V vectors stored per group at t tokens: layers x heads x 2 (MLA: 1 latent)
        "vectors": [
            [
                g.num_layers
                * g.num_kv_heads
                * (1 if g.kind is CacheKind.MLA else 2)
                * g.tokens_held(t)
                for t in range(max_t + 1)
            ]
            for g in groups
        ],
        # one pass over the layers (cache_groups), then per token count: linear in layers
        "bytes": [
            sum(g.bytes_per_sequence(t) for g in groups) if t else 0 for t in range(max_t + 1)
        ],
        # without a cache, step i recomputes K/V for all i tokens: sum i = t(t+1)/2 vs t
        "recompute_ratio": [(t + 1) / 2 if t else 1.0 for t in range(max_t + 1)],
    }


def _group_row(spec: ModelSpec, g, base: KvFormat) -> GroupRow:
    """The group's formula terms; d_v from the group's first layer (it differs from d_k in some
    families)."""
    head_dim_v = 0
    if g.kind not in (CacheKind.MLA, CacheKind.STATE):
        head_dim_v = next(
            a.head_dim_v
            for a in spec.attention_layers()
            if a.label() == g.label
            and a.head_dim == g.head_dim
            and a.num_kv_heads == g.num_kv_heads
        )
    return GroupRow(
        label=g.label,
        kind=g.kind.value,
        layers=g.num_layers,
        kv_heads=g.num_kv_heads,
        head_dim=g.head_dim,
        head_dim_v=head_dim_v,
        window=g.window,
        element_bytes=ELEMENT_BYTES.get(base.name),
        bytes_per_token_per_layer=g.bytes_per_token_per_layer,
        bytes_per_token=g.bytes_per_token_per_layer * g.num_layers,
        state_bytes=g.state_bytes_per_layer * g.num_layers,
    )


def _with_kv_heads(spec: ModelSpec, heads: int) -> ModelSpec:
    return spec._replace(
        layers=tuple(
            layer._replace(attention=layer.attention._replace(num_kv_heads=heads))
            if layer.attention is not None
            else layer
            for layer in spec.layers
        )
    )


def _act2(spec: ModelSpec, base: KvFormat) -> dict:
    attn = spec.attention_layers()
    mla = any(a.kind is CacheKind.MLA for a in attn)
    heads_q = attn[0].num_q_heads if attn else 0
    kinds = {g.kind for g in cache_groups(spec, base)}
    act2: dict[str, Any] = {
        "applies": bool(attn) and not mla,
        "mla": mla,
        "query_heads": heads_q,
        "current_kv_heads": spec.num_kv_heads,
        "context": 8192,
        "options": [],
        "hybrid": len(kinds) > 1,
    }
    if act2["applies"]:
        mha = kv_bytes_per_sequence(_with_kv_heads(spec, heads_q), 8192, base)
        for heads in [h for h in range(1, heads_q + 1) if heads_q % h == 0]:
            model = _with_kv_heads(spec, heads)
            seq = kv_bytes_per_sequence(model, 8192, base)
            act2["options"].append(
                HeadOption(
                    kv_heads=heads,
                    group_size=heads_q // heads,
                    label="MQA" if heads == 1 else "MHA" if heads == heads_q else "GQA",
                    bytes_per_token=kv_bytes_per_token(model, base),
                    bytes_per_sequence=seq,
                    reduction_vs_mha=mha / seq,
                )
            )
    if mla:
        a = next(a for a in attn if a.kind is CacheKind.MLA)
        act2["mla_latent"] = a.head_dim
        act2["mla_kv_lora_rank"] = a.mla_kv_lora_rank
        act2["mla_rope_dim"] = a.mla_rope_dim
        act2["mla_indexer_dim"] = a.indexer_head_dim
        act2["mla_bytes_per_token"] = kv_bytes_per_token(spec, base)
        act2["mla_mha_bytes_per_token"] = spec.mha_equivalent_bytes_per_token(base)
        act2["mla_bytes_per_sequence"] = kv_bytes_per_sequence(spec, 8192, base)
        act2["mla_reduction_vs_mha"] = act2["mla_mha_bytes_per_token"] / act2["mla_bytes_per_token"]
    return act2


class _PerSequence:
    """Paged bytes per sequence per GPU, for each (tp, pp, dtype) and context: the cache groups of
    each pipeline stage are built once (one pass over the layers), then every context is cheap.
    Shared by every GPU kind (the cache does not depend on the GPU)."""

    def __init__(self, spec: ModelSpec, contexts: list[int]):
        self.spec, self.contexts = spec, contexts
        self.cache: dict = {}

    def bytes(self, tp: int, pp: int, fmt: KvFormat) -> list[int]:
        key = (tp, pp, fmt)
        if key not in self.cache:
            stages = [cache_groups(stage, fmt, tp) for stage in pp_stages(self.spec, pp)]
            self.cache[key] = [
                max(paged_bytes_of_groups(groups, c, BLOCK_SIZE) for groups in stages)
                for c in self.contexts
            ]
        return self.cache[key]

    def per_token(self, tp: int, pp: int, fmt: KvFormat) -> int:
        key = ("per_token", tp, pp, fmt)
        if key not in self.cache:
            stages = pp_stages(self.spec, pp)
            self.cache[key] = max(kv_bytes_per_token(stage, fmt, tp) for stage in stages)
        return self.cache[key]


def _gpu_deploy(
    spec: ModelSpec,
    gpu: GpuProfile,
    wdtype: str,
    base: KvFormat,
    contexts: list[int],
    long_ctx: int,
    per_seq: _PerSequence,
) -> GpuDeploy:
    """The buttons of Act 3 for one GPU kind: every TP degree within a node, and the deployment
    kvplan chooses for a long conversation (kvplan.plans.deployment) when it is not one of them:
    pipeline stages across nodes, or DP attention for an MoE model."""
    node, _ = gpus_per_node(gpu)
    layouts = [d for d in candidates(spec, node, node) if d.pp == 1 and d.dp_attention == 1]
    try:
        choice = choose_deployment(spec, gpu, wdtype, base, long_ctx, GPU_MEM_UTIL)
        chosen = choice.deployment
        weighed = [c.deployment for c in choice.weighed]  # the same size, other layouts
    except KvplanError:  # nothing holds one conversation: open on the largest, overflowing
        chosen, weighed = None, []
    for d in [chosen, *weighed]:
        if d is not None and d not in layouts:
            layouts.append(d)
    if not layouts:
        layouts = [Deployment()]
    options = [_option(spec, gpu, wdtype, base, contexts, long_ctx, per_seq, d) for d in layouts]
    if chosen is None:
        index, reason = len(options) - 1, "none-fits"
    else:
        index = layouts.index(chosen)
        reason = (
            "dp-attention"
            if chosen.dp_attention > 1
            else "pipeline"
            if chosen.pp > 1
            else "smallest-tp"
        )
    return GpuDeploy(
        name=gpu.name,
        memory_bytes=gpu.usable_memory_bytes,
        gpu_mem_util=GPU_MEM_UTIL,
        gpus_per_node=node,
        gpus_per_node_stated=gpu.gpus_per_node is not None,
        options=options,
        chosen=index,
        reason=reason,
    )


def _option(
    spec: ModelSpec,
    gpu: GpuProfile,
    wdtype: str,
    base: KvFormat,
    contexts: list[int],
    long_ctx: int,
    per_seq: _PerSequence,
    d: Deployment,
) -> DeployOption:
    plan = rank_budget(spec, gpu, wdtype, d, GPU_MEM_UTIL)
    dp = d.dp_attention
    tp = 1 if dp > 1 else d.tp  # a DP-attention rank runs at TP 1, one stage
    formats = {name: resolve_kv_format(name, spec.dtype) for name in QUANT}
    per_token = {name: per_seq.per_token(tp, d.pp, fmt) for name, fmt in formats.items()}
    seq = per_seq.bytes(tp, d.pp, base)
    # the cache one GPU holds for `users` conversations: under DP attention each GPU holds its
    # own share of them
    cache = [[-(-users // dp) * s for users in USER_GRID] for s in seq]
    attn = spec.attention_layers()
    heads_per_gpu = attn[0].kv_heads_per_rank(tp) if attn else 0
    copies = 1
    if attn:
        stored = 1 if attn[0].kind is CacheKind.MLA else attn[0].num_kv_heads
        copies = tp * heads_per_gpu // stored if stored else 1

    def users(pool_seq: list[int]) -> list[int]:
        return [dp * sequences_in_pool(plan.pool_bytes, s) for s in pool_seq]

    users_base = users(seq)
    return DeployOption(
        tp=tp,
        pp=d.pp,
        dp_attention=dp,
        num_gpus=d.gpus,
        nodes=-(-d.gpus // gpus_per_node(gpu)[0]),
        usable_bytes=plan.usable_bytes,
        weights_bytes=plan.weights_bytes,
        reserve_bytes=plan.reserve_bytes,
        pool_bytes=plan.pool_bytes,
        kv_heads_per_gpu=heads_per_gpu,
        kv_head_copies=max(1, copies),
        kv_bytes_per_token=per_token,
        shrink_vs_bf16={
            name: per_token["bf16"] / per_token[name] if per_token[name] else 1.0 for name in QUANT
        },
        kv_bytes_per_sequence=seq,
        max_users={name: users(per_seq.bytes(tp, d.pp, formats[name])) for name in QUANT},
        max_users_model_dtype=users_base,
        cache_bytes=cache,
        spare_bytes=[[math.floor(plan.pool_bytes - c) for c in row] for row in cache],
        holds_long_context=users_base[contexts.index(long_ctx)] >= 1,
    )


def _choices(values: list[tuple[str, float | None]], correct: str) -> list[QuizChoice]:
    """Distinct values, smallest first; a value two keys share is one choice (the correct key
    wins)."""
    out: dict[float, QuizChoice] = {}
    for key, value in values:
        if value is None:
            continue
        if value not in out or key == correct:
            out[value] = QuizChoice(key, value, key == correct)
    return [out[value] for value in sorted(out)]  # the values are distinct


def _quiz(
    spec: ModelSpec,
    base: KvFormat,
    weights_total: float,
    act1: dict,
    deploy: GpuDeploy,
    contexts: list[int],
    long_ctx: int,
) -> list[QuizQuestion]:
    ctx = min(QUIZ_CONTEXT, long_ctx)
    per_token = kv_bytes_per_token(spec, base)
    seq = kv_bytes_per_sequence(spec, ctx, base)
    mha = spec.mha_equivalent_bytes_per_token(base) * ctx if spec.attention_layers() else None
    every_token = per_token * ctx if spec.attention_layers() else None
    option = deploy.options[deploy.chosen]
    ci = contexts.index(long_ctx)
    strip = min(STRIP_TOKENS, act1["tokens_max"])
    return [
        QuizQuestion(
            "why-cache",
            {"tokens": strip, "recompute_ratio": act1["recompute_ratio"][strip]},
            [
                QuizChoice("weights", None, False),
                QuizChoice("reuse", None, True),
                QuizChoice("history", None, False),
            ],
        ),
        QuizQuestion(
            "sequence-bytes",
            {"context_len": ctx, "kv_bytes_per_token": per_token},
            _choices(
                [
                    ("per-token", per_token or None),
                    ("correct", seq),
                    ("every-layer-every-token", every_token if every_token != seq else None),
                    ("multi-head", mha if mha != seq else None),
                    ("weights", weights_total),
                ],
                "correct",
            ),
        ),
        QuizQuestion(
            "what-caps",
            {
                "gpu": deploy.name,
                "tp": option.tp,
                "pp": option.pp,
                "num_gpus": option.num_gpus,
                "context_len": long_ctx,
                "weights_bytes": option.weights_bytes,
                "pool_bytes": option.pool_bytes,
                "kv_bytes_per_sequence": option.kv_bytes_per_sequence[ci],
                "max_users": option.max_users_model_dtype[ci],
            },
            [
                QuizChoice("compute", None, False),
                QuizChoice("heads", None, False),
                QuizChoice("memory", None, True),
            ],
        ),
        QuizQuestion(
            "fp8-users",
            {
                "gpu": deploy.name,
                "tp": option.tp,
                "pp": option.pp,
                "num_gpus": option.num_gpus,
                "context_len": long_ctx,
                "users": {name: option.max_users[name][ci] for name in QUANT},
            },
            _choices(
                [
                    ("bf16", option.max_users["bf16"][ci]),
                    ("fp8", option.max_users["fp8"][ci]),
                    ("int4", option.max_users["int4"][ci]),
                ],
                "fp8",
            ),
        ),
    ]
