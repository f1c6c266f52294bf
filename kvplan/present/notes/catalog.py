"""The words of the catalogues, kvplan models and kvplan gpus. Made in kvplan/plans/catalog.py and
gpus.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("models-kv-per-token")(
    lambda context_len=131072: (
        "KV B/token: every attention layer holding every token, in the model dtype. at "
        f"{f.tokens(context_len)}: the KV of one {context_len:,}-token sequence per token (at "
        "the model's maximum positions where shorter), sliding-window and chunked layers "
        "holding only their window: what a long context really costs (kvplan size --breakdown "
        "per layer group)."
    )
)
text("gpus-dense")(
    lambda: "Dense peaks (no 2:4 sparsity) from each vendor's datasheet; sources in each YAML."
)
