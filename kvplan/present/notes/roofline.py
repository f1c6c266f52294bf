"""The words of the roofline: the peaks, what a decode step reads, the operators, TP and PP terms.
Made in kvplan/plans/roofline.py (roofline-peaks also in whatif.py)."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("roofline-peaks")(
    lambda dtype, peak_flop_per_s, bandwidth_bytes_per_s: (
        f"Compute at the {dtype} dense peak ({f.tflops_text(peak_flop_per_s)}); bandwidth "
        f"{f.bandwidth_text(bandwidth_bytes_per_s)}; floors assume both at 100% (real kernels "
        "reach 55-90% of bandwidth on decode, see kvplan measure)."
    )
)
text("roofline-decode-reads")(
    lambda: (
        "Decode reads every weight once per step (the input-embedding table only for the B rows "
        "looked up) plus every resident sequence's KV; FLOPs are 2 per active matmul parameter "
        "plus attention over each layer's real heads, head widths and window."
    )
)
text("roofline-prefill-causal")(
    lambda: (
        "Prefill attention counts the causal half of the n x n scores (what FlashAttention "
        "computes); the textbook 4 x L x d x n per token counts the full square."
    )
)
text("roofline-batch-equal-reads")(
    lambda: (
        "B_read is the batch at which a decode step's KV reads equal its weight reads, i.e. "
        "where throughput reaches half the ceiling BW/(s*k); kvplan size's B_mem (weights "
        "stored / KV per sequence) is where the cache's memory equals the weights'."
    )
)
text("roofline-moe")(
    lambda experts, top_k: (
        f"MoE: a decode step reads only the experts its batch touches, expected "
        f"E*(1-(1-k/E)^B) per MoE layer under uniform routing (E={experts}, "
        f"k={top_k}); real routing is less uniform, so more experts stay idle."
    )
)
text("roofline-state")(
    lambda: (
        "Recurrent-state layers: the state read and written each step is in the "
        "KV bytes; their scan FLOPs are small and not counted."
    )
)
text("roofline-tp")(
    lambda tp, link, one_way_bytes_per_s, latency_s, node_gpus=None, network=None, network_one_way_bytes_per_s=None, network_latency_s=None: (
        f"Per GPU at TP {tp}: FLOPs, weights and KV heads divided by {tp}; each layer adds 2 "
        f"ring all-reduces of batch x hidden bf16 activations over {link} "
        f"({f.gbps_text(one_way_bytes_per_s)} one way, {f.us_text(latency_s)} "
        "per message), not overlapped with compute."
        + (
            f" The group spans {-(-tp // node_gpus)} nodes of {node_gpus} GPUs: each "
            f"all-reduce runs in two levels, as simulate prices it (reduce-scatter and "
            f"all-gather within the node over {link}, a ring all-reduce of each GPU's "
            f"1/{node_gpus} shard across the nodes over {network}, "
            f"{f.gbps_text(network_one_way_bytes_per_s)} one way, "
            f"{f.us_text(network_latency_s)} per message; "
            "kvplan.formulas.comm.tp_allreduce_time_s)."
            if node_gpus is not None
            else ""
        )
    )
)
text("roofline-pp")(
    lambda pp, bubble: (
        f"PP {pp}: a token crosses the {pp} stages in turn (each stage boundary sends batch x "
        "hidden activations); the floors above are per token through all stages. Throughput "
        f"needs microbatches to fill the pipe: with m microbatches the stages idle "
        f"(p-1)/(m+p-1) of the time, {bubble:.0%} at m = p."
    )
)
text("roofline-terms")(
    lambda: (
        "I_inf is the intensity a decode step approaches as the batch grows (each sequence "
        "brings its own cache to read); ceiling is BW/(s x k), the decode rate no batch beats "
        "(s x k: the KV one decode reads, a sparse layer's top-k rather than all it holds); "
        "s* is the context above which no batch reaches the ridge. kvplan explain TERM says "
        "more."
    )
)
text("roofline-rows-overflow")(
    lambda gpus, gpu: (
        f"Rows whose fits column says no need more cache than {gpus} x {gpu} holds beside the "
        "weights at that context (max batch says how many fit): they cannot run as shown and "
        "are left out of plots."
    )
)
text("roofline-ops")(
    lambda tp: (
        "Operators of the decode step summed over the layers"
        + (
            f", per GPU at TP {tp} (weights and FLOPs split evenly, the KV a rank holds)"
            if tp > 1
            else ""
        )
        + ": each on the datasheet roofline alone, max(bytes / BW, FLOPs / peak); share is of "
        "their summed floors. The embedding lookup and lm_head are outside the layers and not "
        "listed; kvplan measure times the same operators on a device."
    )
)
