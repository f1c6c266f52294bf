"""`kvplan explore`: the four-act cache explorer as one self-contained HTML page for any model and
GPU profiles. Every number is computed here, by kvplan's formulas, over the grid of slider
positions, and embedded as data; the page's JavaScript only looks values up and formats them."""

from __future__ import annotations

from kvplan import __version__
from kvplan.anatomy.model import CacheKind, ModelSpec
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import resolve_kv_format
from kvplan.formulas.kv import cache_groups, kv_bytes_per_sequence, kv_bytes_per_token
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import GpuProfile
from kvplan.notes import note
from kvplan.plans.common import model_notes, require_cache
from kvplan.plans.deployment import choose_deployment, rank_budget, replica_sequences

ACT1_MAX_PROMPT = 4096
ACT1_MAX_GENERATE = 256
USER_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
CONTEXT_GRID = tuple(2**k for k in range(10, 21))  # 1k .. 1m
QUANT = ("bf16", "fp8", "int8", "int4")


def explore_data(spec: ModelSpec, gpus: list[GpuProfile]) -> dict:
    require_cache(spec, "concurrency")
    if not gpus:
        raise KvplanError("explore needs at least one --gpu")
    base = resolve_kv_format("auto", spec.dtype)
    groups = cache_groups(spec, base)
    max_t = ACT1_MAX_PROMPT + ACT1_MAX_GENERATE
    act1 = {
        "tokens_max": max_t,
        "groups": [
            {
                "label": g.label,
                "layers": g.num_layers,
                "kind": g.kind,
                "heads": g.num_kv_heads,
                "state_bytes": g.state_bytes_per_layer * g.num_layers,
            }
            for g in groups
        ],
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
    attn = [a for a in spec.attention_layers()]
    mla = any(a.kind is CacheKind.MLA for a in attn)
    heads_q = attn[0].num_q_heads if attn else 0
    act2 = {
        "applies": bool(attn) and not mla,
        "mla": mla,
        "query_heads": heads_q,
        "current_kv_heads": spec.num_kv_heads,
        "context": 8192,
        "options": [],
        "hybrid": len({g.kind for g in groups}) > 1,
    }
    if act2["applies"]:

        def with_heads(heads: int) -> ModelSpec:
            return spec._replace(
                layers=tuple(
                    layer._replace(attention=layer.attention._replace(num_kv_heads=heads))
                    if layer.attention is not None
                    else layer
                    for layer in spec.layers
                )
            )

        mha = kv_bytes_per_sequence(with_heads(heads_q), 8192, base)
        for heads in [h for h in range(1, heads_q + 1) if heads_q % h == 0]:
            model = with_heads(heads)
            per_seq = kv_bytes_per_sequence(model, 8192, base)
            act2["options"].append(
                {
                    "kv_heads": heads,
                    "bytes_per_token": kv_bytes_per_token(model, base),
                    "bytes_per_sequence": per_seq,
                    "reduction_vs_mha": mha / per_seq,
                    "label": "MQA" if heads == 1 else "MHA" if heads == heads_q else "GQA",
                }
            )
    if mla:
        a = attn[0]
        act2["mla_latent"] = a.head_dim
        act2["mla_bytes_per_token"] = kv_bytes_per_token(spec, base)
        act2["mla_mha_bytes_per_token"] = spec.mha_equivalent_bytes_per_token(base)
    contexts = [
        c
        for c in CONTEXT_GRID
        if not spec.max_position_embeddings or c <= max(spec.max_position_embeddings, 8192)
    ]
    act3 = {"contexts": contexts, "users": list(USER_GRID), "gpus": []}
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    for gpu in gpus:
        d = choose_deployment(spec, gpu, wdtype, base, 1024).deployment
        tp = 1 if d.dp_attention > 1 else d.tp
        plan = rank_budget(spec, gpu, wdtype, d, 0.9)
        entry = {
            "name": gpu.name,
            "tp": tp,
            "pp": d.pp,
            "dp_attention": d.dp_attention,
            "gpus": d.gpus,
            "usable_bytes": plan.usable_bytes,
            "weights_bytes": plan.weights_bytes,
            "reserve_bytes": plan.reserve_bytes,
            "pool_bytes": plan.pool_bytes,
            "max_users": {},
            "cache_bytes": {},
            "free_bytes": {},
            "quant": {},
        }
        for dtype in QUANT:
            fmt = resolve_kv_format(dtype, spec.dtype)
            rows = {
                "max_users": [],
                "bytes_per_token": kv_bytes_per_token(spec, fmt, tp),
                "shrink_vs_bf16": kv_bytes_per_token(
                    spec, resolve_kv_format("bf16", spec.dtype), tp
                )
                / kv_bytes_per_token(spec, fmt, tp)
                if attn
                else 1.0,
            }
            for c in contexts:
                rows["max_users"].append(replica_sequences(spec, d, plan.pool_bytes, c, fmt))
            entry["quant"][dtype] = rows
        for c in contexts:
            per_seq = kv_bytes_per_sequence(spec, c, base, tp)
            entry["max_users"][c] = replica_sequences(spec, d, plan.pool_bytes, c, base)
            entry["cache_bytes"][c] = [u * per_seq for u in USER_GRID]
            entry["free_bytes"][c] = [plan.pool_bytes - u * per_seq for u in USER_GRID]
        act3["gpus"].append(entry)
    return {
        "kvplan_version": __version__,
        "model": {
            "name": spec.name,
            "family": spec.family,
            "dtype": spec.dtype,
            "layers": spec.num_layers,
            "kv_bytes_per_token": kv_bytes_per_token(spec, base),
        },
        "act1": act1,
        "act2": act2,
        "act3": act3,
        "act4": {"dtypes": list(QUANT)},
        "notes": model_notes(spec, 1) + [note("explore-capacity"), note("explore-cache-bytes")],
    }
