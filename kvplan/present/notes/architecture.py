"""The words of the model as read from its config: its dtype, vision tower, multi-token-prediction
layers, MLA latent, indexers, tied head, and the structure read from a model_type kvplan does not
know. Made in kvplan/inputs/architectures/."""

from kvplan.present.notes.registry import text

text("no-dtype")(lambda: "config names no torch_dtype: the model dtype is taken as bf16.")
text("llama4-chunked")(
    lambda: (
        "Llama 4 chunked layers are sized by their chunk, as vLLM's hybrid KV-cache manager "
        "stores them (on for chunked attention by default since vllm#29627; "
        "kvplan engine --no-hybrid-chunked models it off)."
    )
)
text("vision-absent")(lambda: "Vision tower not in this config; parameter counts are text-only.")
text("vision-excluded")(lambda: "Vision tower excluded from the parameter count.")
text("compressed-attention")(
    lambda layers, window, ratios, indexer: (
        f"DeepSeek-V4 compressed attention: all {layers} layers keep a sliding window of "
        f"{window:,} tokens (K and V one shared vector); {ratios} compressed layers also keep one "
        f"compressed entry per that many tokens, the 1/4 (CSA) layers with an indexer key of "
        f"{indexer} beside it. The compressor's buffer (under one window of tokens) is not "
        "counted."
    )
)
text("expert-dtype-unpriced")(
    lambda expert_dtype, format: (
        f"expert_dtype {expert_dtype}: the routed experts are stored as {expert_dtype}, the rest "
        f"as {format}; kvplan prices every quantized part as {format}, so the weights bytes "
        "overstate the experts (use --weights-dtype to price them another way)."
    )
)
text("mtp-excluded")(
    lambda layers: (
        f"{layers} multi-token-prediction layer(s) excluded (not in num_hidden_layers; vLLM "
        "allocates them only with MTP speculative decoding)."
    )
)
text("mla-latent")(
    lambda kv_lora_rank, rope, heads, decompressed: (
        f"MLA caches one latent of {kv_lora_rank}+{rope} = {kv_lora_rank + rope} values per token "
        f"per layer (vLLM; transformers >= 5.15). transformers <= 5.14 cached decompressed K and V "
        f"for all {heads} heads ({decompressed} values per token per layer)."
    )
)
text("falcon-broadcast")(
    lambda kv_heads, heads: (
        f"transformers broadcasts Falcon's {kv_heads} KV heads to all {heads} query heads before "
        f"caching, so it stores {heads // kv_heads}x what vLLM (and kvplan) count."
    )
)
text("attention-free-head-dim")(
    lambda: "Attention-free: the config's head_dim is the Mamba head width."
)
text("structure-read")(
    lambda model_type, decided: (
        f"model_type {model_type!r} is not one kvplan knows: sized from its structure — "
        + "; ".join(f"{part}: {fields}" for part, fields in decided)
        + ". Every structural-looking field was read, but blocks a config does not announce "
        "(an extra gate, a bias, a different norm) cannot be seen from it: the parameter count "
        "is the common layout's, so check it against the model's card."
    )
)
text("structure-unread")(
    lambda fields: (
        "Structural fields kvplan did not read (they may change the cache or the parameter "
        f"count): {', '.join(fields)}."
    )
)
text("gqa-indexer-cache")(
    lambda width, layers, of: (
        f"Lightning indexer: {layers} of the {of} layers also cache one {width}-value key per "
        "token beside K and V (MiniMax-M3; transformers' sparse cache layer holds it as "
        "idx_keys), counted in the KV bytes per token."
    )
)
text("indexer-cache")(
    lambda width, layers=None, of=None: (
        "Sparse-attention indexer: "
        + (
            "every layer also caches"
            if layers == of
            else f"{layers} of the {of} layers (the others reuse their selection) also cache"
        )
        + f" one {width}-value key per token beside the latent (transformers: in the "
        "model dtype; vLLM stores it as fp8 plus a scale)."
    )
)
text("tie-wrapper-wins")(
    lambda wrapper, tied: (
        f"text_config and the {wrapper} wrapper disagree on tie_word_embeddings; the wrapper's "
        f"model holds the output head, so its value decides: "
        f"{'tied' if tied else 'a separate lm_head'} (as transformers builds it)."
    )
)
text("tie-wrapper-default")(
    lambda wrapper: (
        f"The config does not say whether the output head is tied; the {wrapper} class defaults "
        "to tied, but its checkpoints store a separate lm_head (transformers unties weights a "
        "checkpoint holds twice), so it is counted untied."
    )
)
