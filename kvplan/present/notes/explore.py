"""The words of the explorer page. Made in kvplan/plans/explore.py."""

from kvplan.present.notes.registry import text

text("explore-capacity")(
    lambda gpu_mem_util, block_size: (
        f"Capacity: memory the GPU reports (or its nominal memory) x {gpu_mem_util:g} "
        "utilization (the wall on the memory bar), minus the weights per GPU, minus an "
        f"activation and runtime reserve; whole {block_size}-token blocks per sequence."
    )
)
text("explore-cache-bytes")(
    lambda: (
        "Cache bytes count every layer's real cache: windows hold at most W tokens and "
        "recurrent states a fixed size, as kvplan size computes them."
    )
)
text("explore-deployment")(
    lambda context_len: (
        "Each GPU opens on the deployment kvplan chooses for one "
        f"{context_len:,}-token conversation: the fewest GPUs that hold it beside the weights, "
        "tensor parallelism within a node, pipeline stages across nodes, or for MoE models DP "
        "attention with the experts spread over the GPUs (see kvplan capacity). Weights split "
        "evenly over TP x PP; KV heads split over TP, replicated when TP exceeds them."
    )
)
text("explore-mla-replicated")(
    lambda: (
        "MLA: every tensor-parallel rank stores the whole latent of every request it serves, so "
        "TP does not shrink the cache per GPU; DP attention (an option when the model has "
        "experts) gives each GPU different requests instead."
    )
)
