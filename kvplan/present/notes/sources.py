"""The words of where the model came from: a local path, a resolved variant, its quantization, its
checkpoint's tensor headers, a GGUF file. Made in kvplan/inputs/ (sources, quantization, gguf);
checkpoint-differs in kvplan/formulas/weights.py, which weighs the checkpoint against the config."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text


def _model_path(path: str, instead_of: str | None) -> str:
    """A config read from a local path; where the same spelling also names a bundled config or a
    Hub repository, which one was not read."""
    if instead_of is None:
        return f"Config read from the local path {path}."
    kind, _, name = instead_of.partition(":")
    other, which = (
        (f"the bundled {name} config", "the bundled one")
        if kind == "bundled"
        else (f"the Hub repository {name}", "the Hub's")
    )
    return (
        f"Config read from the local path {path}, not {other} of the same name: an existing "
        f"path is read first, as engines read their model argument (run from another folder "
        f"for {which})."
    )


text("model-path")(_model_path)


def _checkpoint_kv_stated(kv_cache, model_dtype, vllm_from=None, sglang_from=None) -> str:
    firsts = (("vLLM", vllm_from), ("SGLang", sglang_from))
    taken = [f"{name} {first}+" for name, first in firsts if first]
    who = " and ".join(taken) + (" take" if len(taken) > 1 else " takes") if taken else None
    who = who or "no engine kvplan models takes"
    return (
        f"The checkpoint states an {kv_cache} KV cache, which {who} for --kv-cache-dtype "
        f"auto; these KV figures are at the model's {model_dtype}: give --kv-dtype {kv_cache} "
        "for the cache those engines hold."
    )


text("checkpoint-kv-cache-stated")(_checkpoint_kv_stated)
text("quant-hf-file")(
    lambda path: (
        f"Quantization read from {path}: config.json has no quantization_config, and vLLM "
        "then reads this file beside it (ModelOpt 0.29 and earlier export it) for the weights "
        "format and the KV cache the checkpoint states."
    )
)
text("variant-resolved")(
    lambda repo_id, alias: (
        f"{repo_id} was resolved offline to the bundled {alias} config: the same architecture "
        "(an instruction-tuned, thinking or dated variant), so its KV figures hold; its own weights "
        f"format was not read (a variant may be quantized differently): the weights shown are "
        f"{alias}'s. Pass a path to its own config.json, or --weights-dtype, for its weights."
    )
)
text("quant-name-only")(
    lambda name: (
        f"{name} looks quantized by its name, but its config declares no quantization_config "
        "(ModelOpt keeps it in hf_quant_config.json): weights are counted unquantized. Pass "
        "--weights-dtype (nvfp4, fp8, int4-g128, ...) or a checkpoint folder for exact bytes."
    )
)
text("quant-unread")(
    lambda method, why: (
        f"config quantization {method!r} ({why}) is not one kvplan sizes: weights counted "
        "unquantized; pass --weights-dtype (fp8, int4-gN, nvfp4, ...) to size it."
    )
)
text("checkpoint-weights")(
    lambda source, tensors, text_bytes, vision_bytes, skipped_bytes: (
        f"Weights from the checkpoint's own tensor headers ({source}, {tensors:,} tensors): "
        f"{f.gib_text(text_bytes)} for the language model"
        + (f", {f.gib_text(vision_bytes)} vision tower" if vision_bytes else "")
        + (
            f", {f.gib_text(skipped_bytes)} of multi-token-prediction layers not loaded by default"
            if skipped_bytes
            else ""
        )
        + "."
    )
)
text("checkpoint-differs")(
    lambda checkpoint_bytes, config_bytes, config_dtype: (
        f"The checkpoint holds {f.gib_text(checkpoint_bytes)} of weights where the config's count "
        f"in {config_dtype} gives {f.gib_text(config_bytes)} "
        f"({checkpoint_bytes / config_bytes - 1:+.1%}): the checkpoint's figure is used."
    )
)
text("checkpoint-unread")(
    lambda repo_id: (
        f"{repo_id}: the safetensors headers could not be read in time (or there are none): "
        "weights counted from the config."
    )
)
text("gguf-file")(
    lambda arch: (
        f"Read from a GGUF file (architecture {arch}): the cache follows llama.cpp's rules for "
        "it; the KV default dtype is f16 and recurrent state is f32, as llama.cpp keeps them."
    )
)
text("gguf-mla-legacy")(
    lambda: (
        "This deepseek2 GGUF has no key_length_mla/value_length_mla: converted before llama.cpp's "
        "MLA cache (#12801), it is cached as full K and V per head, not as the latent."
    )
)
text("gguf-window-ignored")(
    lambda arch: (
        f"The file states a sliding window, but llama.cpp ignores it for {arch}: every layer "
        "keeps every token."
    )
)
text("gguf-nextn-layers")(
    lambda layers: (
        f"The file holds {layers} NextN (multi-token prediction) block(s); llama.cpp allocates "
        "their KV cache too, so they are counted."
    )
)
text("gguf-shared-kv")(
    lambda layers: (
        f"The last {layers} layers read an earlier layer's KV (shared_kv_layers) and keep none "
        "of their own."
    )
)
