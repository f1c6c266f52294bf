"""The words of the model at a layout, as kvplan size prints it: KV heads and MLA latents at a TP
degree, recurrent state, sliding windows, a context past the model's positions. Made in
kvplan/plans/common.py, size.py and capacity.py."""

from kvplan.present.notes.registry import text

text("tp-kv-replicated")(
    lambda tp, kv_heads: (
        f"TP {tp} > {kv_heads} KV heads: each rank stores one KV head, "
        f"replicated {tp // kv_heads}x across ranks."
    )
)
text("tp-mla-replicated")(
    lambda tp: f"MLA latent is replicated on all {tp} TP ranks (not sharded)."
)
text("tp-per-gpu")(lambda tp: f"Per-GPU figures at TP {tp}: weights split evenly across ranks.")
text("state-fixed")(
    lambda: (
        "Recurrent state per sequence counted once, at its fixed size (conv state with "
        "kernel-1 columns plus the SSM state), in the model dtype unless the config names one;"
        " the KV dtype does not apply to it."
    )
)
text("sliding-held")(
    lambda: (
        "Sliding-window layers hold min(s, W) tokens. transformers keeps W-1; vLLM reserves "
        "W-1 + max_num_batched_tokens + one block (kvplan engine MODEL --engine vllm)."
    )
)
text("ctx-beyond-positions")(
    lambda context_len, positions: (
        f"--ctx {context_len:,} is past the model's {positions:,} positions "
        "(max_position_embeddings): it cannot attend that far without a longer-context "
        "variant or rope scaling; such rows are marked '!' and show what a cache that long "
        "would take."
    )
)
