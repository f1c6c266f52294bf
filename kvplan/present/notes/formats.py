"""The words of the storage formats: KV-cache dtypes with their scales, quantized and GGUF weights.
Made in kvplan/dtypes.py and kvplan/formulas/weights.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("kv-fp8")(lambda: "fp8 KV: e4m3 with per-tensor scales (two fp32 per layer, not counted).")
text("kv-int8")(
    lambda: "int8 KV: one fp32 scale per token per head for K and for V (vLLM int8_per_token_head)."
)
text("kv-nvfp4")(
    lambda: (
        "nvfp4 KV: 4-bit values two to a byte and one fp8 scale per 16 values (vLLM's nvfp4 "
        "cache, 0.5625 bytes a value)."
    )
)
text("kv-int4")(
    lambda group_size: (
        f"int4 KV: asymmetric, an fp16 scale and an fp16 zero-point per group of "
        f"{group_size} values (KIVI-style); no full-precision residual window counted."
    )
)
text("weights-quantized")(
    lambda dtype, scope, bytes_per_param, rest_dtype: (
        f"weights: {scope} in {dtype} ({bytes_per_param:.4f} B/param with scales); "
        f"the rest in {rest_dtype}."
    )
)
text("kv-ggml")(
    lambda dtype, block_size, block_bytes: (
        f"{dtype} KV (ggml): {block_size} values in {block_bytes} bytes, the block's fp16 scale "
        f"(and minimum) included ({8 * block_bytes / block_size:.3g} bits per value), as llama.cpp "
        "stores a quantized cache."
    )
)
text("weights-gguf")(
    lambda file_type, weights_bytes: (
        f"weights as the GGUF file stores them ({file_type}): {f.gib_text(weights_bytes)}, the sum "
        "of every tensor's ggml size with its block scales."
    )
)
text("weights-stored")(
    lambda weights_bytes: (
        f"Weights: {f.gib_text(weights_bytes)}, the bytes the checkpoint's tensors take "
        "(their own types and scales)."
    )
)
text("kv-sub-byte")(
    lambda dtype, bits, group_size, full_precision_tokens, full_precision_dtype: (
        f"{dtype} KV: {bits}-bit values packed, an fp16 scale and an fp16 zero-point per "
        f"{group_size} values (keys grouped per channel, values per token, as KIVI; the bytes are "
        "the same either way)"
        + (
            f"; the first and the most recent tokens, {full_precision_tokens:,} per sequence per "
            f"layer (--keep-sink + --keep-recent), stay in {full_precision_dtype}."
            if full_precision_tokens
            else "; no token kept in full precision."
        )
    )
)
