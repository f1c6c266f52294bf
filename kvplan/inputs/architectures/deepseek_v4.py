"""DeepSeek-V4 (model_type deepseek_v4): shared-KV MQA over a sliding window on every layer, with
compressed attention on most layers (compressed sparse attention, CSA, at `compress_ratios` 4 with
a compressed indexer key; heavily compressed attention, HCA, at 128), hyper-connections, grouped
low-rank output projections and hash-routed first layers.

Built as transformers 5.24's DeepseekV4ForCausalLM builds it (models/deepseek_v4/
modeling_deepseek_v4.py): DeepseekV4Attention (q_a/q_b low-rank queries, one `kv_proj` of
`head_dim` whose output is both K and V, grouped o_a/o_b output, one sink per head),
DeepseekV4CSACompressor / DeepseekV4HCACompressor and DeepseekV4Indexer, DeepseekV4HyperConnection
(attn_hc and ffn_hc per layer) and DeepseekV4HyperHead. The cache per layer is
DeepseekV4HCACache / DeepseekV4CSACache: the sliding window's K=V (one copy), one compressed entry
per `compress_ratio` tokens and, on CSA layers, the indexer's compressed key at the same ratio;
the compressor's buffer of fewer than `compress_ratio` tokens is not counted (a note says so).
"""

from collections import Counter

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, MoE
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.structure import CONFIG_METADATA
from kvplan.inputs.fields import Fields
from kvplan.inputs.quantization import read_quantization
from kvplan.notes import note

FAMILY = "MoE, compressed sparse attention (CSA/HCA) beside sliding windows"
DEFAULT_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
# Fields that change nothing kvplan counts: the router's scoring, clamps, rope of the compressed
# branch, Sinkhorn iterations
READ_AS_BENIGN = (
    "scoring_func",
    "swiglu_limit",
    "compress_rope_theta",
    "hc_sinkhorn_iters",
    "hc_eps",
    "routed_scaling_factor",
    "topk_method",
    "norm_topk_prob",
    "num_nextn_predict_layers",
    "expert_dtype",
    "attention_bias",
    "n_group",
    "topk_group",
)


# Fields of the hub file and of transformers' write-back that carry no size: ids, numerics of the
# norms and initialisers, training-only switches, the saving library's own keys
METADATA = CONFIG_METADATA | frozenset(("partial_rotary_factor",))

RATIO_TYPES = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}


def layer_types(f: Fields, n: int) -> list[str]:
    """Each layer's attention as transformers' DeepseekV4Config reads it: `layer_types` (the
    form transformers 5.x writes back), else the hub file's `compress_ratios` (0, 4 or 128 per
    layer, the MTP layers' after the first num_hidden_layers), else two HCA layers and CSA/HCA
    alternating."""
    types = f.str_list("layer_types")
    if types is not None:
        f.has("compress_ratios")  # the hub form of the same list
    else:
        given = f.int_list("compress_ratios")
        if given is not None:
            bad = sorted({r for r in given if r not in RATIO_TYPES})
            if bad:
                raise KvplanError(
                    f"{f.source}: compress_ratios value {bad[0]} is not one transformers' "
                    "DeepseekV4Config maps to a layer type (0, 4, 128)"
                )
            types = [RATIO_TYPES[r] for r in given]
        else:
            rest = [
                "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
                for i in range(max(n - 2, 0))
            ]
            types = ["heavily_compressed_attention"] * min(n, 2) + rest
    if len(types) < n:
        raise KvplanError(f"{f.source}: the layer list has {len(types)} entries for {n} layers")
    types = types[:n]
    unknown = sorted({str(t)[:40] for t in types if t not in RATIO_TYPES.values()})
    if unknown:
        raise KvplanError(
            f"{f.source}: layer_types value {unknown[0]!r} is not one kvplan can size for "
            f"deepseek_v4 (known: {', '.join(RATIO_TYPES.values())})"
        )
    return types


def compress_rates(f: Fields) -> dict[str, int]:
    """The compression ratio of each compressed layer type: `compress_rates`, the legacy
    `compress_rate_csa` / `compress_rate_hca`, else 4 and 128 (DeepseekV4Config)."""
    rates = dict(DEFAULT_RATES)
    given = f.raw("compress_rates")
    if given is not None:
        if not isinstance(given, dict) or set(given) - set(DEFAULT_RATES):
            raise KvplanError(
                f"{f.source}: compress_rates must map {' and '.join(DEFAULT_RATES)} to ratios"
            )
        rates.update(given)
    for key, legacy in (
        ("compressed_sparse_attention", "compress_rate_csa"),
        ("heavily_compressed_attention", "compress_rate_hca"),
    ):
        if f.has(legacy):
            rates[key] = f.int(legacy, minimum=2)
    for key, value in rates.items():
        if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= 1 << 20:
            raise KvplanError(f"{f.source}: compress_rates[{key!r}] must be an integer from 2")
    return rates


def build_deepseek_v4(f: Fields, top: dict, name: str, hint: str, dtype_name) -> ModelSpec:
    """`dtype_name` turns the declared torch dtype into kvplan's name (kvplan.dtypes)."""
    h = f.int("hidden_size", why="the parameter count")
    n = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_attention_heads", why="attention heads")
    kv = f.int("num_key_value_heads", default=1)
    if kv != 1:
        raise KvplanError(
            f"{f.source}: deepseek_v4 with num_key_value_heads {kv}: its attention is one shared "
            "K=V head (transformers' DeepseekV4Attention); kvplan will not guess another"
        )
    d = f.int("head_dim", why="attention heads")
    rope = f.int("qk_rope_head_dim", why="attention heads")
    q_lora = f.int("q_lora_rank", why="the queries' low-rank projection")
    o_groups = f.int("o_groups", why="the grouped output projection")
    o_lora = f.int("o_lora_rank", why="the grouped output projection")
    if (heads * d) % o_groups:
        raise KvplanError(f"{f.source}: {heads} heads x {d} do not split into {o_groups} o_groups")
    window = f.int("sliding_window", why="the sliding window")
    idx_heads = f.int("index_n_heads", why="the indexer")
    idx_dim = f.int("index_head_dim", why="the indexer")
    # the compressed entries a CSA query attends (what a decode reads, not what is stored)
    idx_topk = f.int("index_topk", why="the entries a compressed sparse attention layer reads")
    hc = f.int("hc_mult", why="the hyper-connections")
    vocab = f.int("vocab_size", why="the parameter count")
    experts = f.int("n_routed_experts", why="the experts")
    shared = f.int("n_shared_experts", default=1, minimum=0)
    moe_width = f.int("moe_intermediate_size", why="the experts")
    top_k = f.int("num_experts_per_tok", why="the experts")
    f.int("num_hash_layers", default=0, minimum=0)  # hash routers: the same weight, no bias
    tied = f.bool("tie_word_embeddings", False)
    mlp_bias = f.bool("mlp_bias", False)
    for key in READ_AS_BENIGN:
        f.has(key)
    for key in ("rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings"):
        f.has(key)
    types = layer_types(f, n)
    rates = compress_rates(f)
    mlp_types = f.str_list("mlp_layer_types")
    if mlp_types is not None and any(t not in ("hash_moe", "moe") for t in mlp_types):
        raise KvplanError(f"{f.source}: mlp_layer_types values must be hash_moe or moe")
    if shared != 1:
        raise KvplanError(
            f"{f.source}: deepseek_v4 with n_shared_experts {shared}: transformers' "
            "DeepseekV4SparseMoeBlock builds one shared expert of moe_intermediate_size whatever "
            "it says; kvplan will not guess which the checkpoint holds"
        )
    if rope > d:
        raise KvplanError(f"{f.source}: qk_rope_head_dim {rope} is wider than head_dim {d}")

    # DeepseekV4Attention: sinks, q_a (+norm), q_b, kv_proj (+norm), grouped o_a, o_b
    attention_params = (
        heads
        + h * q_lora
        + q_lora
        + q_lora * heads * d
        + h * d
        + d
        + (heads * d // o_groups) * (o_groups * o_lora)
        + o_groups * o_lora * h
    )

    # DeepseekV4HCACompressor: kv_proj, gate_proj (d each), position_bias (ratio x d), kv_norm
    def hca(r: int) -> int:
        return 2 * h * d + r * d + d

    # DeepseekV4CSACompressor: kv_proj, gate_proj (2d each), position_bias (ratio x 2d), kv_norm;
    # its DeepseekV4Indexer: kv/gate (2 x index dim), position_bias, kv_norm, q_b_proj and the
    # scorer's weights_proj
    def csa(r: int) -> int:
        indexer = (
            2 * h * 2 * idx_dim
            + r * 2 * idx_dim
            + idx_dim
            + q_lora * idx_heads * idx_dim
            + h * idx_heads
        )
        return 2 * h * 2 * d + r * 2 * d + d + indexer

    mix = (2 + hc) * hc  # DeepseekV4HyperConnection: fn (mix x hc*h), base (mix), scale (3)
    hyper = 2 * (mix * hc * h + mix + 3)
    # DeepseekV4Experts: gate_up (2I x h) and down (h x I) per expert, no bias; the shared
    # expert is a DeepseekV4MLP of moe_intermediate_size (biased with mlp_bias)
    expert = 3 * h * moe_width
    shared_params = 3 * h * moe_width + ((2 * moe_width + h) if mlp_bias else 0)
    router = experts * h  # TopK and hash routers alike: one experts x hidden weight

    layers = []
    cache: dict = {}
    for kind in types:
        if kind not in cache:
            indexer = kind == "compressed_sparse_attention"
            r = rates.get(kind, 0)
            compressor = (csa(r) if indexer else hca(r)) if r else 0
            a = Attention(
                CacheKind.SLIDING,
                num_q_heads=heads,
                num_kv_heads=1,
                head_dim=d,
                head_dim_v=d,
                qk_head_dim=d,
                v_head_dim=d,
                window=window,
                mla_q_lora_rank=q_lora,
                sinks=True,
                kv_one_copy=True,
                compress_ratio=r,
                compressed_indexer_dim=idx_dim if indexer else 0,
                compressed_topk=idx_topk if indexer else 0,
                compressed_rope_dim=rope,
                indexer_num_heads=idx_heads if indexer else 0,
                output_groups=o_groups,
            )
            params = (
                ("attention", attention_params + compressor),
                ("experts", experts * expert),
                ("shared_experts", shared_params),
                ("router", router),
                ("norms", 2 * h),
                ("mixer", hyper),
            )
            cache[kind] = Layer(a, None, tuple((k, v) for k, v in params if v))
        layers.append(cache[kind])

    parts: Counter = Counter()
    parts["embedding"] = vocab * h
    if not tied:
        parts["lm_head"] = vocab * h
    # the final norm and DeepseekV4HyperHead (hc_fn hc x hc*h, hc_base hc, hc_scale 1)
    parts["norms"] = h
    parts["mixer"] = hc * hc * h + hc + 1
    for layer in layers:
        for part, count in layer.params:
            parts[part] += count
    declared = next(
        (c[k] for c in (f.data, top) for k in ("torch_dtype", "dtype") if c.get(k) is not None),
        None,
    )
    notes = [] if declared is not None else [note("no-dtype")]
    quant = read_quantization(top, f.data, name, hint)
    notes.extend(quant.notes)
    mtp = f.int("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        notes.append(note("mtp-excluded", layers=mtp))
    compressed = [a.compress_ratio for a in (x.attention for x in layers) if a.compress_ratio]
    notes.append(
        note(
            "compressed-attention",
            layers=len(layers),
            window=window,
            ratios=", ".join(f"{c} at 1/{r}" for r, c in sorted(Counter(compressed).items())),
            indexer=idx_dim,
        )
    )
    expert_dtype = f.string("expert_dtype")
    if expert_dtype and quant.format and expert_dtype not in quant.format:
        notes.append(note("expert-dtype-unpriced", expert_dtype=expert_dtype, format=quant.format))
    moe = MoE(
        num_experts=experts,
        top_k=top_k,
        params_per_expert=expert,
        num_layers=n,
        expert_intermediate_size=moe_width,
        shared_intermediate_size=moe_width * shared,
    )
    unknown = sorted(str(k)[:40] for k in f.data if k not in f.read and k not in METADATA)
    if unknown:
        raise KvplanError(
            f"{f.source}: deepseek_v4 config has fields kvplan does not read: "
            f"{', '.join(unknown[:8])}; kvplan will not guess what they change"
        )
    max_positions = f.window("max_position_embeddings")
    return ModelSpec(
        name=name,
        model_type="deepseek_v4",
        family=FAMILY,
        hidden_size=h,
        vocab_size=vocab,
        layers=tuple(layers),
        param_parts={k: v for k, v in parts.items() if v},
        dtype=dtype_name(declared),
        moe=moe,
        tied_embeddings=tied,
        max_position_embeddings=max_positions or None,
        weights_quantization=quant.format,
        checkpoint_kv_cache=quant.kv_cache,
        checkpoint_kv_method=quant.kv_cache_method,
        weights_method=quant.method,
        quantized_parts=quant.parts,
        notes=tuple(notes),
    )
