"""What a model_type adds to a config's structure: the class defaults a config may omit, the layer
pattern when the config lists no layer types, and the details of its blocks (biases, norms, MLP
shape) that decide the parameter count. Data, one row per family (transformers 5.24 classes).

A model_type that is not here is sized from structure alone (kvplan.inputs.architectures.build):
what the config declares, never a guess for what it declares and kvplan did not read."""

from kvplan.record import NamedTuple


class Family(NamedTuple):
    label: str
    # class defaults for fields a real config may omit
    kv_heads: int | str = "heads"  # "heads": num_key_value_heads = num_attention_heads
    head_dim: int | None = None  # None: hidden / heads
    head_dim_rule: str = "explicit"  # explicit | derived (always hidden/heads) | double (2h/heads)
    global_head_dim: int | None = None  # full-attention layers' head_dim when the key is absent
    window: int | None = None  # sliding_window when the key is absent
    window_switch: str | None = None  # a bool field that must be true for the window to apply
    tie: bool = False
    vocab: int | None = None
    max_positions: int | None = None
    pattern: int | None = None  # sliding_window_pattern default
    layer_rule: str = "uniform"  # how layer kinds follow when the config lists none
    # block details
    mlp: str = "gated"  # gated (gate, up, down) | plain (up, down)
    mlp_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    bias_field: str | None = "attention_bias"  # a bool field switching q/k/v/o biases on
    bias_default: bool = False  # the field's class default
    qkv_bias_field_only: bool = False  # the field biases q/k/v only (GLM)
    mlp_bias_field: str | None = "mlp_bias"
    mlp_bias_default: bool = False
    q_lora_default: int | None = None  # MLA: q_lora_rank when the key is absent
    mixer_norm_default: bool = True  # a Mamba-2 mixer's gated RMSNorm (mamba_rms_norm)
    mamba1_inner_norms: bool = True  # Jamba's dt/B/C layernorms inside a Mamba-1 mixer
    layer_mlp: bool = True  # False: layers have no MLP of their own (Zamba2's shared blocks)
    final_norms: int = 1
    qk_norm: str | None = None  # head (RMSNorm over head_dim) | full (over all heads)
    qk_norm_field: str | None = None  # a bool field switching qk_norm on
    # the full q/k norm's sums of squares all-reduced over attention TP in every layer, as both
    # engines run it (Attention.qk_norm_allreduce: SGLang and vLLM minimax_m2.py)
    qk_norm_allreduce: bool = False
    q_gate: bool = False  # q_proj doubled: an output gate (Qwen3-Next, Qwen3.5)
    sinks: bool = False  # one learned logit per head (gpt-oss)
    # MiMo-V2-Flash: sinks only where add_swa_attention_sink_bias / add_full_... say (sliding
    # layers by default), values v_head_dim wide, sliding layers with their own heads (swa_*)
    swa_fields: bool = False
    norm_per_part: bool = False  # a norm before each part a layer has (DeciLM: none if no_op)
    sparse_config: bool = False  # MiniMax-M3's sparse_attention_config: a GQA indexer key
    shared_experts_field: str | None = None  # a count of routed-width shared experts
    head_gate: bool = False  # a hidden x heads output gate per layer (Step-3.x g_proj, `gating`)
    norms_per_layer: int = 2
    norm_bias: bool = False  # LayerNorm with a bias (weights and biases both counted)
    lm_head_bias: bool = False
    learned_positions: int | None = None  # extra rows beyond max positions (gpt2 0, opt 2)
    expert_bias: bool = False  # experts and router with biases (gpt-oss)
    shared_expert_gate: bool = False  # a hidden x 1 gate on the shared expert (Qwen MoE)
    llama4_shared: bool = False  # one shared expert of intermediate_size per MoE layer
    rope_local: bool = False  # sliding layers use a second, unscaled rotary table (Gemma-3)
    # `enable_moe_block`: an expert block beside every layer's dense MLP, with its router (a
    # scale per hidden unit and per expert) and three more norms (Gemma-4 26B-A4B)
    moe_block: bool = False


DENSE = "dense (GQA/MHA)"
GEMMA3 = Family(
    "dense, local/global hybrid",
    kv_heads=4,
    head_dim=256,
    window=4096,
    tie=True,
    vocab=262208,
    max_positions=131072,
    pattern=6,
    layer_rule="pattern",
    qk_norm="head",
    norms_per_layer=4,
    rope_local=True,
)

FAMILIES: dict[str, Family] = {
    "llama": Family(DENSE, vocab=32000),
    "granite": Family(DENSE, vocab=32000),
    "mistral": Family("dense (GQA)", kv_heads=8, window=4096, vocab=32000),
    "mixtral": Family("MoE (GQA)", kv_heads=8, vocab=32000),
    "granitemoe": Family("MoE (GQA)", vocab=32000),
    "qwen2": Family(
        "dense (GQA)",
        kv_heads=32,
        window=4096,
        window_switch="use_sliding_window",
        vocab=151936,
        qkv_bias=True,
        layer_rule="qwen",
    ),
    "qwen2_moe": Family(
        "MoE (GQA)",
        kv_heads=16,
        window=4096,
        window_switch="use_sliding_window",
        vocab=151936,
        qkv_bias=True,
        bias_field="qkv_bias",
        qkv_bias_field_only=True,
        layer_rule="qwen",
        shared_expert_gate=True,
    ),
    "qwen3": Family(
        "dense (GQA)",
        kv_heads=32,
        head_dim=128,
        window=4096,
        window_switch="use_sliding_window",
        vocab=151936,
        qk_norm="head",
        layer_rule="qwen",
    ),
    "qwen3_moe": Family(
        "MoE (GQA)",
        kv_heads=4,
        window=4096,
        window_switch="use_sliding_window",
        vocab=151936,
        qk_norm="head",
        layer_rule="qwen",
    ),
    "qwen3_next": Family(
        "MoE, Gated DeltaNet hybrid",
        kv_heads=2,
        head_dim=256,
        qk_norm="head",
        q_gate=True,
        layer_rule="interval_full",
        shared_expert_gate=True,
    ),
    "qwen3_5_text": Family(
        "dense, Gated DeltaNet hybrid",
        kv_heads=4,
        head_dim=256,
        qk_norm="head",
        q_gate=True,
        layer_rule="interval_full",
        shared_expert_gate=True,
    ),
    "qwen3_5_moe_text": Family(
        "MoE, Gated DeltaNet hybrid",
        kv_heads=2,
        head_dim=256,
        qk_norm="head",
        q_gate=True,
        layer_rule="interval_full",
        shared_expert_gate=True,
    ),
    "phi3": Family("dense", vocab=32064),
    "phi": Family(
        "dense (MHA), 2-matrix MLP, parallel blocks",
        vocab=51200,
        mlp="plain",
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        bias_field=None,
        norms_per_layer=1,
        norm_bias=True,
        lm_head_bias=True,
    ),
    "starcoder2": Family(
        "dense (GQA), 2-matrix MLP",
        kv_heads=2,
        tie=True,
        vocab=49152,
        mlp="plain",
        bias_field="use_bias",
        bias_default=True,
        mlp_bias_field="use_bias",
        mlp_bias_default=True,
        norm_bias=True,
    ),
    "cohere": Family(
        "dense",
        tie=True,
        vocab=256000,
        norms_per_layer=1,
        qk_norm="full",
        qk_norm_field="use_qk_norm",
    ),
    "cohere2": Family(
        "dense, local/global hybrid",
        head_dim_rule="derived",
        window=4096,
        tie=True,
        vocab=256000,
        pattern=4,
        layer_rule="pattern",
        norms_per_layer=1,
    ),
    "gemma": Family("dense", kv_heads=16, head_dim=256, tie=True, vocab=256000),
    "gemma2": Family(
        "dense, local/global hybrid",
        kv_heads=4,
        head_dim=256,
        window=4096,
        tie=True,
        vocab=256000,
        layer_rule="alternate",
        norms_per_layer=4,
    ),
    "gemma3_text": GEMMA3,
    # Gemma-4: Gemma-3's blocks, full-attention layers 512 wide by default, a 512-token window
    "gemma4_text": GEMMA3._replace(global_head_dim=512, window=512, vocab=262144, moe_block=True),
    "gpt_oss": Family(
        "MoE, local/global hybrid",
        kv_heads=8,
        head_dim=64,
        window=128,
        layer_rule="even_sliding",
        sinks=True,
        expert_bias=True,
    ),
    "llama4_text": Family(
        "MoE, chunked/global hybrid",
        kv_heads=8,
        head_dim=128,
        layer_rule="llama4",
        llama4_shared=True,
    ),
    "minimax_m2": Family(
        "MoE (GQA)", kv_heads=8, head_dim=128, qk_norm="full", qk_norm_allreduce=True
    ),
    "glm4_moe": Family(
        "MoE (GQA)",
        kv_heads=8,
        qkv_bias_field_only=True,
        qk_norm="head",
        qk_norm_field="use_qk_norm",
    ),
    "deepseek_v2": Family("MoE (MLA)", q_lora_default=1536),
    "deepseek_v3": Family("MoE (MLA)", q_lora_default=1536),
    "deepseek_v32": Family("MoE (MLA), sparse attention indexer", q_lora_default=1536),
    "glm4_moe_lite": Family("MoE (MLA)", q_lora_default=768),
    "glm_moe_dsa": Family("MoE (MLA), sparse attention indexer", q_lora_default=2048),
    "falcon": Family(
        "dense (MQA/GQA)",
        tie=True,
        mlp="plain",
        bias_field="bias",
        mlp_bias_field="bias",
        norm_bias=True,
    ),
    "gpt2": Family(
        "dense (MHA)",
        tie=True,
        vocab=50257,
        learned_positions=0,
        mlp="plain",
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        bias_field=None,
        norm_bias=True,
    ),
    "gpt_neox": Family(
        "dense (MHA)",
        mlp="plain",
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        bias_field=None,
        norm_bias=True,
    ),
    "opt": Family(
        "dense (MHA), 2-matrix MLP",
        tie=True,
        vocab=50272,
        mlp="plain",
        bias_field="enable_bias",
        bias_default=True,
        mlp_bias_field="enable_bias",
        mlp_bias_default=True,
        norm_bias=True,
        learned_positions=2,
    ),
    "nemotron_h": Family(
        "Mamba-2 hybrid", kv_heads=8, head_dim=128, mlp="plain", norms_per_layer=1
    ),
    "jamba": Family("MoE, Mamba-1 hybrid", kv_heads=8, layer_rule="period"),
    "mamba2": Family("Mamba-2 (attention-free)", norms_per_layer=1),
    "mamba": Family("Mamba-1 (attention-free)", norms_per_layer=1, mamba1_inner_norms=False),
    "falcon_h1": Family("Mamba-2 parallel hybrid", kv_heads=8, mixer_norm_default=False),
    "zamba2": Family(
        "Mamba-2 hybrid, shared attention",
        tie=True,
        head_dim_rule="double",
        layer_mlp=False,
        norms_per_layer=1,
    ),
    "granitemoehybrid": Family("MoE, Mamba-2 hybrid", vocab=32000),
    # LFM2 / LFM2.5: gated short-convolution layers ("conv") among attention layers with
    # per-head q/k norms; no biases; tied (tie_embedding)
    "lfm2": Family(
        "dense, convolution/attention hybrid",
        kv_heads=8,
        tie=True,
        vocab=65536,
        qk_norm="head",
        bias_field=None,
        mlp_bias_field=None,
        layer_rule="lfm2",
    ),
    # MiMo-V2-Flash: 1 full : 5 sliding layers (hybrid_layer_pattern), the sliding ones with
    # twice the KV heads and attention sinks, values 128 wide beside 192-wide keys; dense first
    # layer then MoE (moe_layer_freq); a window of sliding_window_size + 1 tokens
    "mimo_v2_flash": Family(
        "MoE, local/global hybrid",
        kv_heads=4,
        head_dim=192,
        window=129,
        vocab=152576,
        layer_rule="mimo_v2",
        swa_fields=True,
    ),
    # Step-3.7-Flash: per-head q/k norms and a per-head output gate, one shared expert of
    # share_expert_dim, a router bias (a buffer: use_moe_router_bias), MTP layers outside
    "step3p7": Family(
        "MoE, local/global hybrid",
        kv_heads=8,
        head_dim=128,
        vocab=128815,
        qk_norm="head",
        head_gate=True,
    ),
    # Llama-3.x-Nemotron Super/Ultra (DeciLM): Llama blocks, per layer from block_configs
    "nemotron-nas": Family(
        "dense, heterogeneous blocks (some without attention)",
        vocab=128256,
        norm_per_part=True,
    ),
    # MiniMax-M3: GQA with per-head q/k norms; a key-only lightning-indexer cache on the sparse
    # layers; first layers dense (dense_intermediate_size), then 128 experts plus a shared one
    "minimax_m3": Family(
        "MoE (GQA), sparse attention indexer",
        kv_heads=4,
        head_dim=128,
        vocab=200064,
        qk_norm="head",  # MiniMaxM3VLAttention always has them (the hub's use_qk_norm: true)
        sparse_config=True,
    ),
    # SmolLM3: Llama blocks; no_rope_layers says which layers skip RoPE (no cache change)
    "smollm3": Family(
        DENSE,
        kv_heads=4,
        window_switch="use_sliding_window",
        tie=True,
        vocab=128256,
        layer_rule="smollm3",
    ),
    # EXAONE-4.0: post-norms only (after attention and MLP), per-head q/k norms, a 3:1
    # local/global pattern (a number, or letters "LLLG")
    "exaone4": Family(
        "dense, local/global hybrid",
        kv_heads=32,
        window=4096,
        vocab=102400,
        pattern=4,
        layer_rule="pattern",
        qk_norm="head",
    ),
    # OLMo-3: post-norms, q/k norms over all heads (q_norm heads x head_dim wide), every 4th
    # layer global
    "olmo3": Family(
        "dense, local/global hybrid",
        window=4096,
        vocab=50304,
        pattern=4,
        layer_rule="pattern",
        qk_norm="full",
    ),
}

# K-EXAONE (exaone_moe): EXAONE-4.0's blocks with DeepSeek-style experts (num_shared_experts
# shared experts as wide as the routed ones, a router bias buffer), dense first layers.
FAMILIES["exaone_moe"] = FAMILIES["exaone4"]._replace(
    label="MoE, local/global hybrid", kv_heads=32, shared_experts_field="num_shared_experts"
)

# Qwen3-VL's language models are Qwen3 / Qwen3-MoE blocks (per-head q/k norms) with their own
# class defaults (Qwen3VLMoeTextConfig: 16 KV heads, head_dim 128).
FAMILIES["qwen3_vl_text"] = FAMILIES["qwen3"]
FAMILIES["qwen3_vl_moe_text"] = FAMILIES["qwen3_moe"]._replace(kv_heads=16, head_dim=128)

# MiMo-7B (remote code MiMoForCausalLM; vLLM's MiMoForCausalLM is Qwen2's model): Qwen2 blocks,
# q/k/v biases whatever attention_bias says, no output-projection bias; MTP layers outside.
FAMILIES["mimo"] = FAMILIES["qwen2"]._replace(bias_field=None)

# Wrappers whose language model sits in a nested config, and model_types that are another
# family under a different name (read exactly as that family).
ALIASES = {
    "llama4": "llama4_text",
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "kimi_k2": "deepseek_v3",
    "RefinedWeb": "falcon",
    "RefinedWebModel": "falcon",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "mistral3": "mistral",
    "qwen3_vl": "qwen3_vl_text",
    "step3p5": "step3p7",  # Step3p7Config's text model (transformers 5.x writes this type)
    "minimax_m3_vl_text": "minimax_m3",  # MiniMaxM3VLTextConfig: MiniMax-M3's language model
    "qwen3_vl_moe": "qwen3_vl_moe_text",
}
