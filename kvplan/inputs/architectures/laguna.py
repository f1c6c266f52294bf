"""Laguna (model_type laguna, poolside): GQA with a per-layer query-head count
(`num_attention_heads_per_layer`), full and sliding layers, per-head q/k norms, a softplus
output gate (`g_proj`), MoE with one shared expert after dense first layers.

Built as transformers 5.24's LagunaForCausalLM builds it (models/laguna/modeling_laguna.py:
LagunaAttention, LagunaSparseMoeBlock, LagunaTopKRouter, whose e_score_correction_bias is a
parameter there, not a buffer). The cache is plain K and V of num_key_value_heads x head_dim on
every layer, the sliding layers holding `sliding_window` tokens.
"""

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, MoE
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.structure import CONFIG_METADATA, summed_parts
from kvplan.inputs.fields import Fields
from kvplan.inputs.quantization import read_quantization
from kvplan.notes import note

FAMILY = "MoE, local/global hybrid, per-layer query heads"
METADATA = CONFIG_METADATA | frozenset(
    (
        "moe_routed_scaling_factor",
        "moe_apply_router_weight_on_input",
        "moe_router_logit_softcapping",
        "rope_parameters",
        "rope_scaling",
        "rope_theta",
        "partial_rotary_factor",
        "max_position_embeddings",
        "norm_topk_prob",
    )
)


def build_laguna(f: Fields, top: dict, name: str, hint: str, dtype_name) -> ModelSpec:
    """`dtype_name` turns the declared torch dtype into kvplan's name (kvplan.dtypes)."""
    h = f.int("hidden_size", why="the parameter count")
    n = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_attention_heads", why="attention heads")
    kv = f.int("num_key_value_heads", why="attention heads")
    d = f.int("head_dim", default=h // heads)
    bias = f.bool("attention_bias", False)
    window = f.int("sliding_window", default=512)
    vocab = f.int("vocab_size", why="the parameter count")
    dense_width = f.int("intermediate_size", why="the dense MLP")
    experts = f.int("num_experts", why="the experts")
    top_k = f.int("num_experts_per_tok", why="the experts")
    moe_width = f.int("moe_intermediate_size", why="the experts")
    shared_width = f.int("shared_expert_intermediate_size", why="the shared expert")
    tied = f.bool("tie_word_embeddings", False)
    if f.bool("use_bidirectional_attention", False):
        raise KvplanError(
            f"{f.source}: use_bidirectional_attention true: an encoder keeps no decode cache"
        )
    gating = f.raw("gating", default=True)
    if gating not in (True, False, "per-head", "per-element"):
        raise KvplanError(f"{f.source}: gating {str(gating)[:20]!r} is not one transformers reads")
    per_layer = f.int_list("num_attention_heads_per_layer", length=n, minimum=1) or [heads] * n
    types = f.str_list("layer_types", length=n) or ["full_attention"] * n
    mlp_types = f.str_list("mlp_layer_types", length=n) or ["dense"] + ["sparse"] * (n - 1)
    for key, values, known in (
        ("layer_types", types, ("full_attention", "sliding_attention")),
        ("mlp_layer_types", mlp_types, ("dense", "sparse")),
    ):
        bad = sorted({str(v)[:40] for v in values if v not in known})
        if bad:
            raise KvplanError(f"{f.source}: {key} value {bad[0]!r} is not one kvplan can size")
    _check_written_twice(f, n, gating, mlp_types)
    for q in per_layer:
        if q % kv:
            raise KvplanError(f"{f.source}: {q} query heads cannot be grouped over {kv} KV heads")
    declared = next(
        (c[k] for c in (f.data, top) for k in ("torch_dtype", "dtype") if c.get(k) is not None),
        None,
    )
    unknown = sorted(str(k)[:40] for k in f.data if k not in f.read and k not in METADATA)
    if unknown:
        raise KvplanError(
            f"{f.source}: laguna config has fields kvplan does not read: "
            f"{', '.join(unknown[:8])}; kvplan will not guess what they change"
        )

    def attention_params(q: int) -> int:
        gate = q if gating in (True, "per-head") else q * d  # gating False builds per-element
        return (
            h * q * d
            + 2 * h * kv * d
            + q * d * h
            + ((q * d + 2 * kv * d + h) if bias else 0)
            + 2 * d  # q_norm, k_norm
            + h * gate
        )

    ffn = {
        "dense": (("mlp", 3 * h * dense_width),),
        "sparse": (
            ("experts", experts * 3 * h * moe_width),
            ("shared_experts", 3 * h * shared_width),
            ("router", experts * h + experts),  # weight and e_score_correction_bias
        ),
    }
    layers, cache = [], {}
    for q, kind, mlp in zip(per_layer, types, mlp_types, strict=True):
        shape = (q, kind, mlp)
        if shape not in cache:
            sliding = kind == "sliding_attention"
            a = Attention(
                CacheKind.SLIDING if sliding else CacheKind.FULL,
                num_q_heads=q,
                num_kv_heads=kv,
                head_dim=d,
                head_dim_v=d,
                qk_head_dim=d,
                v_head_dim=d,
                window=window if sliding else None,
            )
            params = (("attention", attention_params(q)),) + ffn[mlp] + (("norms", 2 * h),)
            cache[shape] = Layer(a, None, tuple((k, v) for k, v in params if v))
        layers.append(cache[shape])
    parts = summed_parts(layers, vocab, h, tied)
    notes = [] if declared is not None else [note("no-dtype")]
    quant = read_quantization(top, f.data, name, hint)
    notes.extend(quant.notes)
    sparse = sum(1 for t in mlp_types if t == "sparse")
    moe = (
        MoE(
            num_experts=experts,
            top_k=top_k,
            params_per_expert=3 * h * moe_width,
            num_layers=sparse,
            expert_intermediate_size=moe_width,
            shared_intermediate_size=shared_width,
        )
        if sparse
        else None
    )
    return ModelSpec(
        name=name,
        model_type="laguna",
        family=FAMILY,
        hidden_size=h,
        vocab_size=vocab,
        layers=tuple(layers),
        param_parts={k: v for k, v in parts.items() if v},
        dtype=dtype_name(declared),
        moe=moe,
        tied_embeddings=tied,
        max_position_embeddings=f.window("max_position_embeddings") or None,
        weights_quantization=quant.format,
        checkpoint_kv_cache=quant.kv_cache,
        checkpoint_kv_method=quant.kv_cache_method,
        weights_method=quant.method,
        quantized_parts=quant.parts,
        notes=tuple(notes),
        intermediate_size=dense_width if "dense" in mlp_types else None,
    )


def _check_written_twice(f: Fields, n: int, gating, mlp_types: list[str]) -> None:
    """Laguna-S-2.1's file also carries `gating_types` (per layer) and Qwen-MoE's
    `decoder_sparse_step` / `mlp_only_layers`, which transformers' LagunaConfig does not read:
    accepted when they say what `gating` and `mlp_layer_types` say, refused otherwise."""
    per_layer_gates = f.str_list("gating_types", length=n)
    if per_layer_gates is not None:
        expected = "per_head" if gating in (True, "per-head") else "per_element"
        if any(g != expected for g in per_layer_gates):
            raise KvplanError(
                f"{f.source}: gating_types disagree with gating {gating!r}, the one transformers "
                "reads; kvplan will not guess which the checkpoint holds"
            )
    if f.has("decoder_sparse_step") or f.has("mlp_only_layers"):
        step = f.int("decoder_sparse_step", default=1)
        dense = set(f.int_list("mlp_only_layers") or [])
        derived = ["dense" if i in dense or (i + 1) % step else "sparse" for i in range(n)]
        if derived != mlp_types:
            raise KvplanError(
                f"{f.source}: decoder_sparse_step / mlp_only_layers disagree with "
                "mlp_layer_types, the one transformers reads"
            )
