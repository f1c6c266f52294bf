"""The words every engine shares: the dtype it loads, a max_model_len past the config's. Made in
kvplan/engines/vllm.py, sglang.py and max_len.py."""

from kvplan.present.notes.registry import text

text("engine-long-max-model-len")(
    lambda engine, max_model_len, limit, key, variable: (
        f"{max_model_len:,} tokens is past the {limit:,} {engine} derives from the config "
        f"({key}): {engine} starts with it only under {variable}, and positions past "
        f"{limit:,} may give NaN (RoPE) or out-of-bounds errors (learned positions)."
    )
)
text("engine-default-length")(
    lambda engine, tokens: (
        f"The config states no length key {engine} reads (max_position_embeddings, "
        f"max_seq_len, seq_length, ...) and no --max-model-len was given: {engine} assumes "
        f"{tokens:,} tokens, and so does this run; give --max-model-len for a longer request."
    )
)
text("engine-dtype-downcast")(
    lambda engine, dtype: (
        f"--dtype auto: {engine} does not serve the config's dtype as is; it loads the model in "
        f"{dtype}, and kv-cache-dtype auto follows."
    )
)
text("engine-dtype-cast")(
    lambda config, dtype: (
        f"--dtype {dtype} overrides the config's {config}: the weights load in {dtype} and "
        "kv_cache_dtype auto stores the cache in it too."
    )
)
text("engine-compute-capability")(
    lambda gpu, major: (
        f"{gpu}'s profile states no compute_capability: the engine's attention and MoE backends "
        f"are those it picks at compute capability {major}.x (Ampere/Ada: no FlashMLA, "
        "FlashInfer TRT-LLM or Hopper/Blackwell kernels); add compute_capability to the profile "
        "(NVIDIA's CUDA GPUs table) for the backends this GPU runs."
    )
)
