"""config.json -> ModelSpec, one builder per architecture family.

Rules (class defaults, layer-type patterns, legacy names) follow transformers 5.24 and vLLM 0.19 as
summarised in docs/model-configs.md. Each builder reads only validated fields (kvplan.inputs.fields) and
never executes anything from the config.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kvplan.anatomy.model import Attention, CacheKind, Layer, ModelSpec, MoE, State, StateKind
from kvplan.errors import KvplanError
from kvplan.formulas.dtypes import model_dtype_name
from kvplan.inputs.fields import REQUIRED, Fields
from kvplan.notes import note

LAYER_TYPE_ALIASES = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "mamba": "linear",
}

# Per-class defaults that matter for the cache (transformers 5.24, probed by instantiating each
# config class without the field). kv: "heads" means num_key_value_heads = num_attention_heads.
CLASS_DEFAULTS: dict[str, dict] = {
    "llama": {"kv": "heads", "tie": False, "vocab": 32000},
    "mistral": {"kv": 8, "window": 4096, "tie": False, "vocab": 32000},
    "mixtral": {"kv": 8, "tie": False, "vocab": 32000},
    "qwen2": {"kv": 32, "window": 4096, "tie": False, "vocab": 151936},
    "qwen3": {"kv": 32, "head_dim": 128, "window": 4096, "tie": False, "vocab": 151936},
    "qwen3_moe": {"kv": 4, "window": 4096, "tie": False, "vocab": 151936},
    "phi3": {"kv": "heads", "tie": False, "vocab": 32064},
    "cohere": {"kv": "heads", "tie": True, "vocab": 256000},
    "cohere2": {"kv": "heads", "window": 4096, "tie": True, "vocab": 256000, "pattern": 4},
    "gemma": {"kv": 16, "head_dim": 256, "tie": True, "vocab": 256000},
    "gemma2": {"kv": 4, "head_dim": 256, "window": 4096, "tie": True, "vocab": 256000},
    "gemma3_text": {
        "kv": 4,
        "head_dim": 256,
        "window": 4096,
        "tie": True,
        "vocab": 262208,
        "pattern": 6,
        "max_pos": 131072,
    },
    "gpt_oss": {"kv": 8, "head_dim": 64, "window": 128, "tie": False},
    "llama4_text": {"kv": 8, "head_dim": 128, "tie": False},
}

FAMILY_LABELS = {
    "llama": "dense (GQA/MHA)",
    "mistral": "dense (GQA)",
    "mixtral": "MoE (GQA)",
    "qwen2": "dense (GQA)",
    "qwen3": "dense (GQA)",
    "qwen3_moe": "MoE (GQA)",
    "phi3": "dense",
    "cohere": "dense",
    "cohere2": "dense, local/global hybrid",
    "gemma": "dense",
    "gemma2": "dense, local/global hybrid",
    "gemma3_text": "dense, local/global hybrid",
    "gpt_oss": "MoE, local/global hybrid",
    "llama4_text": "MoE, chunked/global hybrid",
    "deepseek_v2": "MoE (MLA)",
    "deepseek_v3": "MoE (MLA)",
    "falcon": "dense (MQA/GQA)",
    "nemotron_h": "Mamba-2 hybrid",
    "qwen3_next": "MoE, Gated DeltaNet hybrid",
    "jamba": "MoE, Mamba-1 hybrid",
    "mamba2": "Mamba-2 (attention-free)",
    "gpt2": "dense (MHA)",
    "gpt_neox": "dense (MHA)",
}

TEXT_CONFIG_KEYS = ("text_config", "decoder", "generator", "text_encoder")


def text_config(raw: dict, source: str) -> tuple[dict, dict]:
    """(text config, top-level config). Multimodal wrappers keep the LM in `text_config`."""
    if not isinstance(raw, dict):
        raise KvplanError(f"{source}: config is not a JSON object")
    nested = [k for k in TEXT_CONFIG_KEYS if isinstance(raw.get(k), dict)]
    if len(nested) > 1:
        raise KvplanError(f"{source}: config has several text configs ({', '.join(nested)})")
    if nested:
        return raw[nested[0]], raw
    return raw, raw


def build_model(raw: dict, name: str, source: str | None = None) -> ModelSpec:
    """The one entry point: a parsed config.json (dict) -> ModelSpec."""
    source = source or name
    text, top = text_config(raw, source)
    model_type = text.get("model_type") or top.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise KvplanError(f"{source}: config has no model_type")
    if model_type in ("RefinedWeb", "RefinedWebModel"):
        builder, canonical = _falcon, "falcon"
    elif model_type in ("llama4", "gemma3") and text is top:
        raise KvplanError(f"{source}: {model_type} config has no text_config")
    else:
        canonical = {"llama4": "llama4_text", "gemma3": "gemma3_text"}.get(model_type, model_type)
        builder = BUILDERS.get(canonical)
    notes: list[str] = []
    if builder is None:
        builder = _decoder
        notes.append(note("generic-rule", model_type=model_type))
    fields = Fields(text, source, parent=top)
    declared_dtype = next(
        (c[k] for c in (text, top) for k in ("torch_dtype", "dtype") if c.get(k) is not None), None
    )
    if declared_dtype is None:
        notes.append(note("no-dtype"))
    parts: dict = {
        "notes": notes,
        "model_type": canonical,
        "raw_model_type": model_type,
        "dtype": model_dtype_name(declared_dtype),
    }
    spec = builder(fields, top, parts)
    return _finish(spec, name, fields, top, parts)


# --------------------------------------------------------------------------------------------
# Shared pieces


def _tie(fields: Fields, top: dict, default: bool) -> bool:
    for cfg in (fields.data, top):
        value = cfg.get("tie_word_embeddings")
        if value is not None:
            if not isinstance(value, bool):
                raise KvplanError(f"{fields.source}: tie_word_embeddings must be true or false")
            return value
    return default


def _heads(fields: Fields, model_type: str) -> tuple[int, int]:
    heads = fields.int("num_attention_heads", "n_head", "num_heads", why="attention heads")
    default = CLASS_DEFAULTS.get(model_type, {}).get("kv", "heads")
    kv = fields.int(
        "num_key_value_heads",
        "n_head_kv",
        "num_kv_heads",
        "multi_query_group_num",
        default=heads if default == "heads" else default,
    )
    if kv > heads or heads % kv:
        raise KvplanError(
            f"{fields.source}: {heads} query heads cannot be grouped over {kv} KV heads"
        )
    return heads, kv


def _head_dim(fields: Fields, model_type: str, hidden: int, heads: int) -> int:
    if model_type == "cohere2":
        return hidden // heads  # cohere2 always derives it
    explicit = fields.opt_int("head_dim", "attention_head_dim")
    if explicit is not None:
        return explicit
    default = CLASS_DEFAULTS.get(model_type, {}).get("head_dim")
    if default is not None:
        return default
    if hidden % heads:
        raise KvplanError(
            f"{fields.source}: hidden_size {hidden} is not a multiple of {heads} heads and "
            "no head_dim is given"
        )
    return hidden // heads


def _layer_kinds(fields: Fields, num_layers: int, default: Callable[[int], str]) -> list[str]:
    """Per-layer cache kinds: `layer_types` when present (legacy names remapped), else `default`."""
    declared = fields.str_list("layer_types", length=num_layers)
    if declared is None:
        return [default(i) for i in range(num_layers)]
    kinds = []
    for value in declared:
        kind = LAYER_TYPE_ALIASES.get(value)
        if kind is None:
            raise KvplanError(
                f"{fields.source}: layer_types value {value!r} is not one kvplan can size "
                f"(known: {', '.join(sorted(LAYER_TYPE_ALIASES))})"
            )
        kinds.append(kind)
    return kinds


def _attention_params(
    h, heads, kv, hd, *, qkv_bias=False, o_bias=False, qk_norm=False, q_factor=1, sinks=False
) -> int:
    q = h * heads * hd * q_factor + (heads * hd * q_factor if qkv_bias else 0)
    k = v = h * kv * hd + (kv * hd if qkv_bias else 0)
    o = heads * hd * h + (h if o_bias else 0)
    return q + k + v + o + (2 * hd if qk_norm else 0) + (heads if sinks else 0)


def _embeddings(parts: Counter, vocab: int, hidden: int, tied: bool) -> None:
    parts["embedding"] += vocab * hidden
    if not tied:
        parts["lm_head"] += vocab * hidden


def _std_attention(kind: str, heads: int, kv: int, hd: int, window: int | None) -> Attention:
    kind = CacheKind(kind)
    return Attention(
        kind=kind,
        num_q_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        head_dim_v=hd,
        qk_head_dim=hd,
        v_head_dim=hd,
        window=window if kind.windowed else None,
    )


# --------------------------------------------------------------------------------------------
# Dense and MoE decoders with standard (GQA/MQA/MHA) attention


def _decoder(f: Fields, top: dict, ctx: dict) -> dict:
    mt = ctx["model_type"]
    defaults = CLASS_DEFAULTS.get(mt, {})
    hidden = f.int("hidden_size", "n_embd", "d_model", why="the parameter count")
    num_layers = f.int("num_hidden_layers", "n_layer", "num_layers", why="the layer count")
    heads, kv = _heads(f, mt)
    hd = _head_dim(f, mt, hidden, heads)
    vocab = f.int("vocab_size", default=defaults.get("vocab", REQUIRED), why="the parameter count")
    tied = _tie(f, top, defaults.get("tie", False))

    window = f.window("sliding_window", default=defaults.get("window"))
    chunk = f.opt_int("attention_chunk_size")
    if mt in ("qwen2", "qwen3", "qwen3_moe") and not f.bool("use_sliding_window", False):
        window = None  # real Qwen configs carry a window value with use_sliding_window: false
    if mt in ("qwen2", "qwen3", "qwen3_moe") and window:
        first = f.int("max_window_layers", default=28, minimum=0)
        default_kind = lambda i: "sliding" if i >= first else "full"  # noqa: E731
    elif mt == "gemma2":
        default_kind = lambda i: "sliding" if (i + 1) % 2 else "full"  # noqa: E731
    elif mt in ("gemma3_text", "cohere2"):
        pattern = f.int("sliding_window_pattern", default=defaults["pattern"])
        default_kind = lambda i: "sliding" if (i + 1) % pattern else "full"  # noqa: E731
    elif mt == "gpt_oss":
        default_kind = lambda i: "sliding" if i % 2 == 0 else "full"  # noqa: E731
    elif mt == "llama4_text":
        interval = f.int("no_rope_layer_interval", default=4)
        no_rope = f.int_list("no_rope_layers", length=num_layers) or [
            int((i + 1) % interval != 0) for i in range(num_layers)
        ]
        default_kind = lambda i: "chunked" if no_rope[i] else "full"  # noqa: E731
    else:  # transformers' generic rule: one type for every layer
        uniform = "sliding" if window else "chunked" if chunk else "full"
        default_kind = lambda i: uniform  # noqa: E731
    kinds = _layer_kinds(f, num_layers, default_kind)

    layers = []
    for kind in kinds:
        if kind == "linear":
            raise KvplanError(f"{f.source}: linear_attention layers need a hybrid model_type")
        size = window if kind == "sliding" else chunk if kind == "chunked" else None
        if kind != "full" and not size:
            raise KvplanError(f"{f.source}: {kind} layers but no window size in the config")
        layers.append(Layer(attention=_std_attention(kind, heads, kv, hd, size)))

    # ---- parameters
    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    attn_bias = f.bool("attention_bias", False)
    per_layer_attn = _attention_params(
        hidden,
        heads,
        kv,
        hd,
        qkv_bias=attn_bias or mt == "qwen2",
        o_bias=attn_bias,
        qk_norm=mt in ("qwen3", "qwen3_moe", "gemma3_text")
        or f.bool("use_qk_norm", False)
        and mt == "cohere",
        sinks=mt == "gpt_oss",
    )
    norms_per_layer = {"gemma2": 4, "gemma3_text": 4, "cohere": 1, "cohere2": 1}.get(mt, 2)
    moe = None
    intermediate = f.int("intermediate_size", why="the MLP parameter count")
    num_experts = f.opt_int("num_local_experts", "num_experts", "n_routed_experts")
    if mt in ("llama4_text", "mixtral", "qwen3_moe", "gpt_oss") and num_experts is None:
        raise KvplanError(f"{f.source}: MoE config lacks num_local_experts")
    top_k = f.opt_int("num_experts_per_tok", "experts_per_token") if num_experts else None
    if num_experts and (top_k is None or top_k > num_experts):
        raise KvplanError(f"{f.source}: num_experts_per_tok missing or above {num_experts}")

    if num_experts:
        moe_layers = _moe_layer_mask(f, mt, num_layers)
        expert_i = (
            f.int("moe_intermediate_size", default=intermediate)
            if mt == "qwen3_moe"
            else intermediate
        )
        if mt == "gpt_oss":  # fused gate_up with biases, down with bias
            per_expert = hidden * 2 * expert_i + 2 * expert_i + expert_i * hidden + hidden
            router = num_experts * hidden + num_experts
        else:
            per_expert = 3 * hidden * expert_i
            router = num_experts * hidden
        shared = 3 * hidden * intermediate if mt == "llama4_text" else 0
        dense_i = (
            f.int("intermediate_size_mlp", default=intermediate)
            if mt == "llama4_text"
            else intermediate
        )
        n_moe = sum(moe_layers)
        parts["experts"] += n_moe * num_experts * per_expert
        parts["router"] += n_moe * router
        parts["shared_experts"] += n_moe * shared
        parts["mlp"] += (num_layers - n_moe) * 3 * hidden * dense_i
        moe = MoE(num_experts, top_k, per_expert, n_moe, expert_i, intermediate if shared else 0)
        dense_width = dense_i if n_moe < num_layers else None
    else:
        parts["mlp"] += num_layers * 3 * hidden * intermediate
        dense_width = intermediate
    parts["attention"] += num_layers * per_layer_attn
    parts["norms"] += num_layers * norms_per_layer * hidden + hidden

    if mt == "llama4_text":
        ctx["notes"].append(note("llama4-chunked"))
        if top.get("vision_config") is None:
            ctx["notes"].append(note("vision-absent"))
    if top.get("vision_config") is not None:
        ctx["notes"].append(note("vision-excluded"))
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=moe,
        tied=tied,
        intermediate=dense_width,
    )


def _moe_layer_mask(f: Fields, mt: str, num_layers: int) -> list[bool]:
    if mt == "qwen3_moe":
        step = f.int("decoder_sparse_step", default=1)
        dense = set(f.int_list("mlp_only_layers") or [])
        return [i not in dense and (i + 1) % step == 0 for i in range(num_layers)]
    if mt == "llama4_text":
        explicit = f.int_list("moe_layers")
        if explicit is not None:
            return [i in set(explicit) for i in range(num_layers)]
        step = f.int("interleave_moe_layer_step", default=1)
        return [i in set(range(step - 1, num_layers, step)) for i in range(num_layers)]
    return [True] * num_layers


# --------------------------------------------------------------------------------------------
# MLA (DeepSeek-V2/V3/R1)


def _deepseek(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    num_layers = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_attention_heads", why="attention heads")
    kv_lora = f.int("kv_lora_rank", why="the MLA latent width")
    rope = f.int("qk_rope_head_dim", why="the MLA latent width")
    nope = f.int("qk_nope_head_dim", why="the MLA parameter count")
    v_dim = f.int("v_head_dim", why="the MLA parameter count")
    q_lora = f.opt_int("q_lora_rank") if "q_lora_rank" in f.data else 1536
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, False)
    latent = kv_lora + rope
    attn = Attention(
        kind=CacheKind.MLA,
        num_q_heads=heads,
        num_kv_heads=1,
        head_dim=latent,
        head_dim_v=0,
        qk_head_dim=nope + rope,
        v_head_dim=v_dim,
        mla_kv_lora_rank=kv_lora,
        mla_rope_dim=rope,
    )
    layers = [Layer(attention=attn) for _ in range(num_layers)]

    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    if q_lora:
        q = hidden * q_lora + q_lora + q_lora * heads * (nope + rope)
    else:
        q = hidden * heads * (nope + rope)
    kv = hidden * latent + kv_lora + kv_lora * heads * (nope + v_dim)
    o = heads * v_dim * hidden
    parts["attention"] += num_layers * (q + kv + o)
    parts["norms"] += num_layers * 2 * hidden + hidden

    intermediate = f.int("intermediate_size", why="the MLP parameter count")
    experts = f.int("n_routed_experts", why="the MoE parameter count")
    top_k = f.int("num_experts_per_tok", why="the active parameter count")
    if top_k > experts:
        raise KvplanError(f"{f.source}: num_experts_per_tok {top_k} exceeds {experts} experts")
    moe_i = f.int("moe_intermediate_size", why="the MoE parameter count")
    shared = f.int("n_shared_experts", default=0, minimum=0)
    first_dense = f.int("first_k_dense_replace", default=0, minimum=0)
    freq = f.int("moe_layer_freq", default=1)
    n_moe = sum(1 for i in range(num_layers) if i >= first_dense and i % freq == 0)
    per_expert = 3 * hidden * moe_i
    parts["mlp"] += (num_layers - n_moe) * 3 * hidden * intermediate
    parts["experts"] += n_moe * experts * per_expert
    parts["shared_experts"] += n_moe * shared * per_expert
    # e_score_correction_bias is a buffer in transformers and not in the published counts.
    parts["router"] += n_moe * experts * hidden

    mtp = f.int("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        ctx["notes"].append(note("mtp-excluded", layers=mtp))
    ctx["notes"].append(
        note(
            "mla-latent",
            kv_lora_rank=kv_lora,
            rope=rope,
            heads=heads,
            decompressed=heads * (nope + rope + v_dim),
        )
    )
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=MoE(experts, top_k, per_expert, n_moe, moe_i, shared * moe_i),
        tied=tied,
        intermediate=intermediate if n_moe < num_layers else None,
    )


# --------------------------------------------------------------------------------------------
# Falcon (native and legacy RefinedWeb)


def _falcon(f: Fields, top: dict, ctx: dict) -> dict:
    raw_type = ctx["raw_model_type"]
    hidden = f.int("hidden_size", "n_embd", why="the parameter count")
    num_layers = f.int("num_hidden_layers", "n_layer", why="the layer count")
    heads = f.int("num_attention_heads", "n_head", why="attention heads")
    new_arch = f.bool("new_decoder_architecture", raw_type == "RefinedWeb")
    multi_query = f.bool("multi_query", raw_type == "RefinedWebModel" or not new_arch)
    if new_arch:
        kv = f.int("num_kv_heads", "n_head_kv", default=heads)
    elif multi_query:
        kv = 1
    else:
        kv = heads
    if heads % kv:
        raise KvplanError(f"{f.source}: {heads} heads cannot be grouped over {kv} KV heads")
    if hidden % heads:
        raise KvplanError(f"{f.source}: hidden_size {hidden} is not a multiple of {heads} heads")
    hd = hidden // heads
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, True)
    layers = [Layer(attention=_std_attention("full", heads, kv, hd, None))] * num_layers
    ffn = f.int("ffn_hidden_size", default=4 * hidden)
    bias = f.bool("bias", False)
    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    qkv = hidden * (heads + 2 * kv) * hd + ((heads + 2 * kv) * hd if bias else 0)
    dense = hidden * hidden + (hidden if bias else 0)
    parts["attention"] += num_layers * (qkv + dense)
    parts["mlp"] += num_layers * (2 * hidden * ffn + ((ffn + hidden) if bias else 0))
    norms_per_layer = 2 if new_arch else 1  # ln_attn + ln_mlp, or one input_layernorm
    parts["norms"] += num_layers * norms_per_layer * 2 * hidden + 2 * hidden  # weight + bias
    if new_arch and kv < heads:
        ctx["notes"].append(note("falcon-broadcast", kv_heads=kv, heads=heads))
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=None,
        tied=tied,
        intermediate=ffn,
    )


# --------------------------------------------------------------------------------------------
# GPT-2 and GPT-NeoX (legacy names, MHA)


def _gpt2(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("n_embd", "hidden_size", why="the parameter count")
    num_layers = f.int("n_layer", "num_hidden_layers", why="the layer count")
    heads = f.int("n_head", "num_attention_heads", why="attention heads")
    if hidden % heads:
        raise KvplanError(f"{f.source}: n_embd {hidden} is not a multiple of {heads} heads")
    vocab = f.int("vocab_size", default=50257)
    positions = f.int("n_positions", "max_position_embeddings", default=1024)
    inner = f.int("n_inner", default=4 * hidden)
    layers = [Layer(attention=_std_attention("full", heads, heads, hidden // heads, None))]
    parts: Counter = Counter()
    parts["embedding"] += vocab * hidden + positions * hidden
    parts["attention"] += num_layers * (hidden * 3 * hidden + 3 * hidden + hidden * hidden + hidden)
    parts["mlp"] += num_layers * (2 * hidden * inner + inner + hidden)
    parts["norms"] += num_layers * 4 * hidden + 2 * hidden
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers * num_layers,
        parts=parts,
        moe=None,
        tied=True,
        intermediate=inner,
    )


def _gpt_neox(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    num_layers = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_attention_heads", why="attention heads")
    if hidden % heads:
        raise KvplanError(f"{f.source}: hidden_size {hidden} is not a multiple of {heads} heads")
    vocab = f.int("vocab_size", why="the parameter count")
    inner = f.int("intermediate_size", default=4 * hidden)
    tied = _tie(f, top, False)
    layers = [Layer(attention=_std_attention("full", heads, heads, hidden // heads, None))]
    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    parts["attention"] += num_layers * (hidden * 3 * hidden + 3 * hidden + hidden * hidden + hidden)
    parts["mlp"] += num_layers * (2 * hidden * inner + inner + hidden)
    parts["norms"] += num_layers * 4 * hidden + 2 * hidden
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers * num_layers,
        parts=parts,
        moe=None,
        tied=tied,
        intermediate=inner,
    )


# --------------------------------------------------------------------------------------------
# Hybrids with a recurrent state


def _mamba2_state(
    f: Fields,
    intermediate: int,
    heads: int,
    head_dim: int,
    state: int,
    groups: int,
    kernel: int,
    dtype: str,
) -> State:
    if heads * head_dim != intermediate:
        raise KvplanError(
            f"{f.source}: Mamba-2 heads x head_dim = {heads * head_dim} != intermediate "
            f"{intermediate}"
        )
    if heads % groups:
        raise KvplanError(f"{f.source}: {heads} Mamba heads cannot be split over {groups} groups")
    ssm_dtype = _state_dtype(f, dtype)
    return State(
        StateKind.MAMBA2,
        kernel,
        intermediate=intermediate,
        state_size=state,
        num_heads=heads,
        head_dim=head_dim,
        num_groups=groups,
        conv_dtype=dtype,
        ssm_dtype=ssm_dtype,
    )


def _state_dtype(f: Fields, dtype: str) -> str:
    named = f.string("mamba_ssm_cache_dtype") or f.string("mamba_ssm_dtype")
    return model_dtype_name(named) if named else dtype


def _mamba2_params(hidden: int, st: State, conv_bias: bool) -> int:
    conv_dim = st.intermediate + 2 * st.num_groups * st.state_size
    in_proj = hidden * (2 * st.intermediate + 2 * st.num_groups * st.state_size + st.num_heads)
    conv = conv_dim * st.conv_kernel + (conv_dim if conv_bias else 0)
    return in_proj + conv + 3 * st.num_heads + st.intermediate + st.intermediate * hidden


def _nemotron_h(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    pattern = f.string("hybrid_override_pattern")
    if not pattern:
        raise KvplanError(f"{f.source}: nemotron_h config lacks hybrid_override_pattern")
    bad = set(pattern) - set("M*-E")
    if bad:
        raise KvplanError(f"{f.source}: hybrid_override_pattern has unknown layer codes {bad}")
    heads, kv = _heads(f, "nemotron_h")
    hd = f.int("head_dim", "attention_head_dim", default=128)
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, False)
    dtype = ctx["dtype"]
    m_heads = f.int("mamba_num_heads", why="the Mamba-2 state")
    m_hd = f.int("mamba_head_dim", why="the Mamba-2 state")
    state = _mamba2_state(
        f,
        m_heads * m_hd,
        m_heads,
        m_hd,
        f.int("ssm_state_size"),
        f.int("n_groups", default=8),
        f.int("conv_kernel", default=4),
        dtype,
    )
    intermediate = f.int("intermediate_size", why="the MLP parameter count")
    attn = _std_attention("full", heads, kv, hd, None)
    layers, parts, moe = [], Counter(), None
    _embeddings(parts, vocab, hidden, tied)
    for code in pattern:
        parts["norms"] += hidden
        if code == "M":
            layers.append(Layer(state=state))
            parts["mixer"] += _mamba2_params(hidden, state, f.bool("use_conv_bias", True))
        elif code == "*":
            layers.append(Layer(attention=attn))
            parts["attention"] += _attention_params(hidden, heads, kv, hd)
        elif code == "-":
            layers.append(Layer())
            parts["mlp"] += 2 * hidden * intermediate  # squared-ReLU MLP, not gated
        else:
            layers.append(Layer())
            experts = f.int("n_routed_experts", why="the MoE layers")
            moe_i = f.int("moe_intermediate_size", why="the MoE layers")
            shared_i = f.int("moe_shared_expert_intermediate_size", default=moe_i)
            per_expert = 2 * hidden * moe_i
            parts["experts"] += experts * per_expert
            parts["shared_experts"] += 2 * hidden * shared_i * f.int("n_shared_experts", default=1)
            parts["router"] += experts * hidden
            n_moe = (moe.num_layers if moe else 0) + 1
            shared_width = shared_i * f.int("n_shared_experts", default=1)
            moe = MoE(experts, f.int("num_experts_per_tok"), per_expert, n_moe, moe_i, shared_width)
    parts["norms"] += hidden
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=moe,
        tied=tied,
        intermediate=intermediate if "-" in pattern else None,
    )


def _qwen3_next(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    num_layers = f.int("num_hidden_layers", why="the layer count")
    heads, kv = _heads(f, "qwen3_next")
    hd = f.int("head_dim", default=256)
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, False)
    interval = f.int("full_attention_interval", default=4)
    kinds = _layer_kinds(f, num_layers, lambda i: "full" if (i + 1) % interval == 0 else "linear")
    key_heads = f.int("linear_num_key_heads", why="the Gated DeltaNet state")
    key_dim = f.int("linear_key_head_dim", why="the Gated DeltaNet state")
    value_heads = f.int("linear_num_value_heads", why="the Gated DeltaNet state")
    value_dim = f.int("linear_value_head_dim", why="the Gated DeltaNet state")
    kernel = f.int("linear_conv_kernel_dim", default=4)
    dtype = ctx["dtype"]
    state = State(
        StateKind.GATED_DELTANET,
        kernel,
        num_heads=value_heads,
        head_dim=value_dim,
        key_heads=key_heads,
        key_dim=key_dim,
        conv_dtype=dtype,
        ssm_dtype=_state_dtype(f, dtype),
    )
    attn = _std_attention("full", heads, kv, hd, None)
    layers = [Layer(attention=attn) if k == "full" else Layer(state=state) for k in kinds]
    if any(k not in ("full", "linear") for k in kinds):
        raise KvplanError(f"{f.source}: qwen3_next layer_types must be full or linear attention")

    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    n_full = kinds.count("full")
    n_linear = num_layers - n_full
    parts["attention"] += n_full * _attention_params(
        hidden, heads, kv, hd, qk_norm=True, q_factor=2
    )
    conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
    linear = (
        hidden * (2 * key_heads * key_dim + 2 * value_heads * value_dim)  # in_proj_qkvz
        + hidden * 2 * value_heads  # in_proj_ba
        + conv_dim * kernel  # depthwise conv, no bias
        + 2 * value_heads  # dt_bias, A_log
        + value_dim  # gated RMSNorm
        + value_heads * value_dim * hidden  # out_proj
    )
    parts["mixer"] += n_linear * linear
    experts = f.int("num_experts", why="the MoE parameter count")
    top_k = f.int("num_experts_per_tok", why="the active parameter count")
    moe_i = f.int("moe_intermediate_size", why="the MoE parameter count")
    shared_i = f.int("shared_expert_intermediate_size", default=0, minimum=0)
    step = f.int("decoder_sparse_step", default=1)
    dense = set(f.int_list("mlp_only_layers") or [])
    n_moe = sum(1 for i in range(num_layers) if i not in dense and (i + 1) % step == 0)
    per_expert = 3 * hidden * moe_i
    parts["experts"] += n_moe * experts * per_expert
    parts["shared_experts"] += n_moe * (3 * hidden * shared_i + hidden if shared_i else 0)
    parts["router"] += n_moe * experts * hidden
    parts["mlp"] += (
        (num_layers - n_moe) * 3 * hidden * f.int("intermediate_size", default=0, minimum=0)
    )
    parts["norms"] += num_layers * 2 * hidden + hidden
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=MoE(experts, top_k, per_expert, n_moe, moe_i, shared_i),
        tied=tied,
        intermediate=f.int("intermediate_size", default=0, minimum=0) or None
        if n_moe < num_layers
        else None,
    )


def _jamba(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    num_layers = f.int("num_hidden_layers", why="the layer count")
    heads, kv = _heads(f, "jamba")
    hd = _head_dim(f, "jamba", hidden, heads)
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, False)
    period = f.int("attn_layer_period", default=8)
    offset = f.int("attn_layer_offset", default=4, minimum=0)
    e_period = f.int("expert_layer_period", default=2)
    e_offset = f.int("expert_layer_offset", default=1, minimum=0)
    expand = f.int("mamba_expand", default=2)
    d_state = f.int("mamba_d_state", default=16)
    d_conv = f.int("mamba_d_conv", default=4)
    inner = expand * hidden
    dt_rank = (
        f.int("mamba_dt_rank", default=-(-hidden // 16))
        if f.raw("mamba_dt_rank") != "auto"
        else -(-hidden // 16)
    )
    dtype = ctx["dtype"]
    state = State(
        StateKind.MAMBA1,
        d_conv,
        intermediate=inner,
        state_size=d_state,
        conv_dtype=dtype,
        ssm_dtype=_state_dtype(f, dtype),
    )
    layer_types = f.str_list("layers_block_type", length=num_layers)
    is_attn = [
        (t == "attention") if layer_types else (i % period == offset)
        for i, t in enumerate(layer_types or [""] * num_layers)
    ]
    attn = _std_attention("full", heads, kv, hd, None)
    layers = [Layer(attention=attn) if a else Layer(state=state) for a in is_attn]
    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    n_attn = sum(is_attn)
    parts["attention"] += n_attn * _attention_params(hidden, heads, kv, hd)
    mamba = (
        hidden * 2 * inner
        + inner * d_conv
        + inner
        + inner * (dt_rank + 2 * d_state)
        + dt_rank * inner
        + inner
        + inner * d_state
        + inner
        + inner * hidden
        + dt_rank
        + 2 * d_state
    )  # dt/B/C layernorms
    parts["mixer"] += (num_layers - n_attn) * mamba
    experts = f.int("num_experts", "num_local_experts", default=16)
    top_k = f.int("num_experts_per_tok", default=2)
    intermediate = f.int("intermediate_size", why="the MLP parameter count")
    is_moe = [experts > 1 and i % e_period == e_offset for i in range(num_layers)]
    n_moe = sum(is_moe)
    per_expert = 3 * hidden * intermediate
    parts["experts"] += n_moe * experts * per_expert
    parts["router"] += n_moe * experts * hidden
    parts["mlp"] += (num_layers - n_moe) * per_expert
    parts["norms"] += num_layers * 2 * hidden + hidden
    moe = MoE(experts, top_k, per_expert, n_moe, intermediate) if n_moe else None
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=layers,
        parts=parts,
        moe=moe,
        tied=tied,
        intermediate=intermediate if n_moe < num_layers else None,
    )


def _mamba2(f: Fields, top: dict, ctx: dict) -> dict:
    hidden = f.int("hidden_size", why="the parameter count")
    num_layers = f.int("num_hidden_layers", why="the layer count")
    heads = f.int("num_heads", why="the Mamba-2 state")
    head_dim = f.int("head_dim", default=64)
    expand = f.int("expand", default=2)
    vocab = f.int("vocab_size", why="the parameter count")
    tied = _tie(f, top, False)
    state = _mamba2_state(
        f,
        expand * hidden,
        heads,
        head_dim,
        f.int("state_size", default=128),
        f.int("n_groups", default=1),
        f.int("conv_kernel", default=4),
        ctx["dtype"],
    )
    parts: Counter = Counter()
    _embeddings(parts, vocab, hidden, tied)
    parts["mixer"] += num_layers * _mamba2_params(hidden, state, f.bool("use_conv_bias", True))
    parts["norms"] += num_layers * hidden + hidden
    ctx["notes"].append(note("attention-free-head-dim"))
    return dict(
        hidden=hidden,
        vocab=vocab,
        layers=[Layer(state=state)] * num_layers,
        parts=parts,
        moe=None,
        tied=tied,
    )


BUILDERS: dict[str, Callable] = {
    **{mt: _decoder for mt in CLASS_DEFAULTS},
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "falcon": _falcon,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "nemotron_h": _nemotron_h,
    "qwen3_next": _qwen3_next,
    "jamba": _jamba,
    "mamba2": _mamba2,
}


# --------------------------------------------------------------------------------------------


def _quantization(top: dict, text: dict) -> str | None:
    """The weights' quantization method from `quantization_config` (fp8 block scales, mxfp4, ...)."""
    qc = top.get("quantization_config") or text.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = qc.get("quant_method")
    return str(method)[:40] if method else None


def _vision_params(top: dict) -> int:
    """A ViT/SigLIP vision tower from `vision_config` (an estimate: attention and MLP with biases,
    two LayerNorms per layer, patch and position embeddings, a linear projector to the LM)."""
    vc = top.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    try:
        f = Fields(vc, "vision_config")
        h = f.int("hidden_size")
        inter = f.int("intermediate_size")
        layers = f.int("num_hidden_layers", "depth")
        patch = f.int("patch_size", default=14)
        image = f.int("image_size", default=224)
        channels = f.int("num_channels", default=3)
    except KvplanError:
        return 0
    per_layer = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h
    text = top.get("text_config") or {}
    text_hidden = text.get("hidden_size") if isinstance(text.get("hidden_size"), int) else h
    return layers * per_layer + embeddings + 2 * h + h * text_hidden + h


def _finish(spec_parts: dict, name: str, f: Fields, top: dict, ctx: dict) -> ModelSpec:
    notes = ctx["notes"]
    quant = _quantization(top, f.data)
    layers = tuple(spec_parts["layers"])
    if not layers:
        raise KvplanError(f"{f.source}: the config describes no layers")
    max_pos = None
    for key in (
        "model_max_length",
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "max_sequence_length",
    ):
        value = f.data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            max_pos = value
            break
    if max_pos is None:
        max_pos = CLASS_DEFAULTS.get(ctx["model_type"], {}).get("max_pos")
    return ModelSpec(
        name=name,
        model_type=ctx["model_type"],
        family=FAMILY_LABELS.get(ctx["model_type"], "unknown (generic rule)"),
        hidden_size=spec_parts["hidden"],
        vocab_size=spec_parts["vocab"],
        layers=layers,
        param_parts={k: v for k, v in spec_parts["parts"].items() if v},
        dtype=ctx["dtype"],
        moe=spec_parts["moe"],
        tied_embeddings=spec_parts["tied"],
        max_position_embeddings=max_pos,
        weights_quantization=quant,
        intermediate_size=spec_parts.get("intermediate"),
        vision_params=_vision_params(top),
        notes=tuple(notes),
    )
