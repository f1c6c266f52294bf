"""Which config fields are structural (they change the cache or the parameter count), so that a
field kvplan did not read is named, never silently ignored."""


# A key is structural when its name says what it is about, and its value is a size, a count, a
# switch or a list (coefficients, names and nulls are not structure).
class _Rule:
    """A key matches when it contains one of `parts` or starts with one of `prefixes` (plain
    string tests: no regular expression to compile at start-up)."""

    def __init__(self, parts: tuple[str, ...], prefixes: tuple[str, ...] = ()):
        self.parts, self.prefixes = parts, prefixes

    def search(self, key: str) -> bool:
        return key.startswith(self.prefixes) or any(part in key for part in self.parts)


# Keys of any config that carry no size: what PretrainedConfig.to_dict() writes for every model
# (transformers 5.x), the generation defaults transformers 4.x wrote into every config, ids, and
# the saving library's own keys. Builders that refuse every field they do not read skip these.
CONFIG_METADATA = frozenset(
    (
        "_name_or_path",
        "architectures",
        "auto_map",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "quantization_config",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "rms_norm_eps",
        "hidden_act",
        "use_cache",
        "attention_dropout",
        "output_router_logits",
        "router_aux_loss_coef",
        "router_jitter_noise",
        "chunk_size_feed_forward",
        "id2label",
        "label2id",
        "is_encoder_decoder",
        "is_decoder",
        "output_attentions",
        "output_hidden_states",
        "problem_type",
        "return_dict",
        "add_cross_attention",
        "bad_words_ids",
        "begin_suppress_tokens",
        "cross_attention_hidden_size",
        "diversity_penalty",
        "do_sample",
        "early_stopping",
        "encoder_no_repeat_ngram_size",
        "exponential_decay_length_penalty",
        "finetuning_task",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "length_penalty",
        "max_length",
        "min_length",
        "no_repeat_ngram_size",
        "num_beam_groups",
        "num_beams",
        "num_return_sequences",
        "output_scores",
        "prefix",
        "pruned_heads",
        "remove_invalid_values",
        "repetition_penalty",
        "return_dict_in_generate",
        "suppress_tokens",
        "task_specific_params",
        "temperature",
        "tf_legacy_loss",
        "tie_encoder_decoder",
        "tokenizer_class",
        "top_k",
        "top_p",
        "torchscript",
        "typical_p",
        "use_bfloat16",
    )
)

CATEGORIES = {
    "experts": _Rule(
        (
            "expert",
            "_moe_",
            "first_k_dense",
            "mlp_only_layers",
            "decoder_sparse_step",
            "shared_intermediate",
        ),
        ("moe_", "n_routed"),
    ),
    "latent attention": _Rule(
        ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")
    ),
    "windows": _Rule(("sliding_window", "attention_chunk", "window_size", "chunk_size")),
    "indexer": _Rule(("indexer", "sparse_attention"), ("index_",)),
    "recurrent state": _Rule(
        (
            "mamba",
            "_ssm_",
            "state_size",
            "conv_kernel",
            "d_conv",
            "d_state",
            "time_step_rank",
            "n_groups",
        ),
        ("ssm_", "linear_num", "linear_key", "linear_value", "linear_conv"),
    ),
    # per-layer-kind attention and block shapes beyond the common fields (Gemma-3n/4: wider
    # global layers, per-layer input embeddings, layers reusing another layer's KV)
    "attention shapes": _Rule(
        (
            "global_head_dim",
            "global_key_value",
            "k_eq_v",
            "kv_shared",
            "per_layer_input",
            "double_wide",
            "heads_per_layer",
        )
    ),
    "layer types": _Rule(
        (
            "layer_types",
            "block_type",
            "override_pattern",
            "attn_type",
            "no_rope_layers",
            "attention_interval",
            "attn_layer_",
            "window_pattern",
            "moe_layers",
            "block_configs",
            "per_layer_config",
            "attn_idxs",
            "layer_pattern",
            "layer_freq",
        )
    ),
}

# Structural-looking names that never change sizes.
BENIGN = {
    "moe_router_topk_scaling_factor",
    "moe_aux_loss_coeff",
    "router_aux_loss_coef",
    "output_router_logits",
    "router_jitter_noise",
    "moe_router_dtype",
    "moe_layer_freq_policy",
    "num_experts_per_tok",  # read with the experts; listed here so a dense config may carry it
    "mamba_chunk_size",
    "chunk_size_feed_forward",
    "mamba_ssm_cache_dtype",
    "mamba_ssm_dtype",
    "use_mamba_kernels",
    "mamba_dt_init",
    "mamba_dt_scale",
    "mamba_dt_min",
    "mamba_dt_max",
    "mamba_dt_init_floor",
    "mamba_norm_before_gate",
    "ssm_multipliers",
    "ssm_in_multiplier",
    "ssm_out_multiplier",
    "time_step_limit",
    "time_step_min",
    "time_step_max",
    "time_step_floor",
    "index_topk",  # which tokens are attended, not what is stored
    "index_share_for_mtp_iteration",  # the multi-token-prediction layer's reuse, not built
    "indexer_rope_interleave",
    "mtp_layers_block_type",  # multi-token-prediction layers are not built
    "mtp_hybrid_override_pattern",  # the same in the legacy letters (Nemotron-3-Super)
    "sliding_window_size",  # Gemma-2's legacy duplicate of sliding_window
    "chunk_size",  # Mamba-2's chunked-scan length, a kernel setting
    "time_step_rank",  # Mamba-1's dt rank; Mamba-2 configs carry it unused
}


# Block features kvplan does not build: declared (non-zero, true), they stop the build with a
# message naming them rather than a count that leaves them out.
UNBUILT = {
    "hidden_size_per_layer_input": "per-layer input embeddings (Gemma-3n/4 PLE)",
    "num_kv_shared_layers": "layers that reuse an earlier layer's KV (Gemma-3n/4)",
    "use_double_wide_mlp": "double-width MLPs on the KV-sharing layers (Gemma-4)",
    "enable_moe_block": "an expert block beside each layer's dense MLP (Gemma-4 MoE)",
}


def unbuilt_features(config: dict, built: tuple[str, ...] = ()) -> list[str]:
    """The UNBUILT features a config declares, as 'field: what it is' (less those its family
    builds, `built`)."""
    return [
        f"{key} {config[key]!r}: {what}"
        for key, what in UNBUILT.items()
        if key not in built and _meaningful(key, config.get(key))
    ]


def _meaningful(key: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value > 0
    if isinstance(value, (list, dict)):  # per-layer lists and maps (per_layer_config)
        return len(value) > 0
    if isinstance(value, str):  # names (activations, dtypes) are not sizes; patterns are
        return "pattern" in key and len(value) > 0
    return False


def unread_structure(config: dict, read: set[str]) -> list[str]:
    """Structural fields of `config` that no reader looked at, as 'field (category)'."""
    out = []
    for key, value in config.items():
        if key in read or key in BENIGN or not _meaningful(key, value):
            continue
        for category, pattern in CATEGORIES.items():
            if pattern.search(key):
                out.append(f"{key} ({category})")
                break
    return out


def summed_parts(layers, vocab: int, hidden: int, tied: bool) -> dict:
    """Parameters by part: the embedding, the final norm, the output layer unless tied, and
    every layer's own parts (the builders of per-layer heterogeneous models share it)."""
    from collections import Counter

    parts: Counter = Counter({"embedding": vocab * hidden, "norms": hidden})
    if not tied:
        parts["lm_head"] = vocab * hidden
    for layer in layers:
        for part, count in layer.params:
            parts[part] += count
    return parts
