"""The words of whatif's techniques, in bytes and in time. Made in kvplan/plans/whatif.py."""

from kvplan.present.notes.registry import text

text("whatif-mla")(
    lambda: (
        "MLA caches a latent: gqa/mqa do not apply to it (no KV heads to share), "
        "and windows were left off its layers."
    )
)
text("whatif-state")(
    lambda: "Recurrent states are fixed-size: the techniques act on the attention layers only."
)
text("whatif-order")(
    lambda: (
        "Order of adoption (the techniques chapter): lossless first — paging and continuous "
        "batching, prefix reuse, chunked prefill — then fp8, then windows or eviction behind a "
        "recall probe, then change the requirement."
    )
)
text("whatif-terms")(
    lambda: (
        "Terms: p bytes per value, L layers, H_kv KV heads, d head_dim, s tokens held; and what "
        "moves no term of the product: dup duplicate bytes (prefix sharing), waste allocation "
        "slack (paging), reads bytes touched per step (sparse reads), +draft a second cache "
        "(speculative decoding). KV is what the batch stores (all GPUs); read is the KV a decode "
        "step reads to give every sequence one token."
    )
)
text("whatif-time")(
    lambda tp: (
        f"Time per GPU of a TP-{tp} group: max tok/s is BW / (s x k), the decode rate no batch "
        "beats (every KV byte read per token); TPOT and tok/s are decode-step floors, "
        "max(bytes / BW, FLOPs / peak), at the batch that fits (the smaller of --batch and users); "
        "TTFT is the prefill floor of one sequence. Weights are the checkpoint's: the K/V "
        "projection weights a conversion removes or adds are not counted."
    )
)
text("whatif-tp-auto")(
    lambda tp, gpu, context_len: (
        f"TP {tp}: the smallest tensor-parallel degree at which one {context_len:,}-token "
        f"sequence fits beside the weights on {gpu}, within one node when one suffices "
        "(--tp to choose)."
    )
)
text("whatif-no-fit")(
    lambda gpu, context_len: (
        f"One {context_len:,}-token sequence does not fit beside the weights on {gpu} at any "
        "tensor-parallel degree up to 1,024: priced at TP 1, where no sequence fits (users 0, "
        "no TPOT); kvplan capacity weighs pipeline stages and DP attention."
    )
)
text("whatif-cla")(
    lambda: (
        "CLA stores one cache per group of layers, but every layer still attends to it, and a "
        "layer's cache does not stay in cache memory between layers: a decode step reads as "
        "much as before (Brandon et al. 2024: CLA does not cut the per-step bandwidth of "
        "attention). It buys concurrency, not a faster step."
    )
)
text("whatif-prefix")(
    lambda: (
        "Prefix sharing stores the prefix once (in whole blocks for users), and a prefix hit "
        "skips its prefill; paged decode kernels still read the shared blocks once per sequence "
        "(cascade attention, which reads them once per batch, is not assumed)."
    )
)
text("whatif-sparse-read")(
    lambda: (
        "Sparse reads (Quest-style) store every token and read a fraction per step: decode runs "
        "as if the context were that fraction (windows still cap their layers); the selection's "
        "page metadata is not counted."
    )
)
text("whatif-lowrank")(
    lambda: (
        "Low-rank (Palu) caches an r-wide latent per KV head instead of head_dim values and "
        "rebuilds keys from it at every step: 2 x H_kv x r x d FLOPs per attended key are added "
        "to decode (values fold into the output projection)."
    )
)
text("whatif-mla-convert")(
    lambda: (
        "MLA conversion replaces each full-attention layer's K and V by one latent (LATENT + "
        "ROPE values per token); decode runs absorbed, 2 x H_q x (2 x LATENT + ROPE) FLOPs per "
        "key; sliding and chunked layers keep their windows."
    )
)
text("whatif-cyclic")(
    lambda: (
        "A cyclic buffer is how a window is implemented: W slots allocated once and overwritten "
        "at t mod W, so memory is constant (W even for a shorter sequence) and the pages a paged "
        "window straddles (one block more) are not needed."
    )
)
text("whatif-paged")(
    lambda: (
        "paged=N: sequences really hold N tokens (default 30% of --ctx, the middle of the 20-40% "
        "utilisation measured under contiguous allocation). A contiguous allocator reserves "
        "--ctx for each, paging only the whole blocks of N: the same bytes and the same time as "
        "the baseline, more users."
    )
)
text("whatif-spec")(
    lambda draft, tokens, acceptance, per_round: (
        f"Speculative decoding: {draft} drafts {tokens} tokens per round, each accepted with "
        f"probability {acceptance:g} ({per_round:.2f} tokens per round); both caches hold "
        f"{tokens} speculative entries per sequence and the draft's weights and cache come out of "
        "the pool; TPOT = (k draft steps + one verification of k+1 tokens) / tokens per round "
        "(--spec-tokens, --spec-accept)."
    )
)
text("whatif-recurrent")(
    lambda head_dim, state_size, groups: (
        "recurrent=F replaces that fraction of the attention layers by a Mamba-2 state of the "
        f"model's width (Nemotron-H's shape: 2 x hidden channels, {head_dim}-wide heads, state "
        f"{state_size}, {groups} groups): a fixed size per sequence, whatever the context."
    )
)
text("whatif-scheduling")(
    lambda: (
        "The scheduling group changes no term: it decides whether freed memory becomes "
        "throughput. kvplan simulate measures each as a switch (cache-aware routing: the prefix "
        "hit rate per replica with and without it)."
    )
)
