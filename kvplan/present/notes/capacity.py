"""The words of capacity and deployments: the memory budget, paging, pipeline stages, replicas, the
GPU's reported memory, the KV transfer of a disaggregated pair, the deployment chosen and its
nodes. Made in kvplan/plans/capacity.py, deployment.py and common.py (the budget)."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

text("capacity-budget")(
    lambda gpu, reported, usable_memory_bytes, gpu_mem_util, reserve_bytes, reserve_given: (
        f"Budget per GPU: {gpu} {'reports' if reported else 'nominal'} "
        f"{f.gib_text(usable_memory_bytes)} x {gpu_mem_util} utilization, minus weights, minus a "
        f"reserve of {f.gib_text(reserve_bytes)} "
        + (
            "(given)"
            if reserve_given
            else "(what vLLM 0.19's profiling run measures beside the weights: the torch peak "
            "of an 8192-token step with the sampler, non-torch memory at this TP, the rotary "
            "tables; see kvplan.formulas.memory)"
        )
        + "."
    )
)
text("capacity-paged")(
    lambda block_size: (
        f"Paged in blocks of {block_size} tokens: each sequence wastes under one block per "
        "layer group; counts are whole sequences."
    )
)
text("capacity-pp")(
    lambda pp: (
        f"PP {pp}: layers split as vLLM does; the most loaded stage sets capacity. "
        "Pipeline bubbles are not modelled."
    )
)
text("capacity-replicas")(
    lambda num_gpus, replicas, layout: (
        f"{num_gpus} GPUs = {replicas} replicas of {f.layout_text(layout)}; concurrency summed "
        "over replicas."
    )
)
text("capacity-no-room")(
    lambda weights_bytes, usable_bytes: (
        f"The weights ({f.gib_text(weights_bytes)} per GPU) and reserve do not fit "
        f"in {f.gib_text(usable_bytes)}: raise --tp/--pp, quantize the weights or "
        "use a larger GPU."
    )
)
text("transfer-no-link")(lambda reason: f"No disaggregated KV transfer figure: {reason}.")
text("transfer-replication")(
    lambda tp, what, factor: (
        f"KV transfer counts replication honestly: each of the {tp} decode ranks receives "
        f"the {what} it needs, {factor:.0f}x the cache itself."
    )
)
text("transfer-link")(
    lambda link, one_way_bytes_per_s, latency_s: (
        f"KV transfer over {link}: {f.gbps_text(one_way_bytes_per_s)} one way per "
        f"GPU and {f.us_text(latency_s)} latency, each decode rank on its own link, the "
        "link doing nothing else."
    )
)
text("memory-estimated")(
    lambda gpu, source: (
        f"{gpu}: the memory the device reports is an estimate ({source}); budgets may be off by "
        "a few hundred MiB per GPU."
    )
)
text("node-size-assumed")(
    lambda gpu, gpus: (
        f"{gpu}'s profile does not say how many GPUs its interconnect joins (gpus_per_node): "
        f"{gpus} assumed, the common server; tensor parallelism stays within them."
    )
)


def _deployment_chosen(layout, gpu, gpus, nodes, context_len, users, others):
    where = "one node" if nodes == 1 else f"{nodes} nodes"
    out = (
        f"Deployment {f.layout_text(layout)} on {gpus} x {gpu} ({where}): the fewest GPUs that hold one "
        f"{context_len:,}-token sequence beside the weights; it holds {users:,}."
    )
    if others:
        weighed = "; ".join(f"{f.layout_text(d)} {count:,}" for d, count in others)
        out += f" Also weighed at {gpus} GPUs: {weighed}."
    return out + " Fix any of it with --tp, --pp or --dp-attention."


text("deployment-chosen")(_deployment_chosen)
text("tp-crosses-nodes")(
    lambda tp, node: (
        f"TP {tp} spans more than the {node} GPUs of one node: every layer's all-reduce crosses "
        "the inter-node network (engines keep TP within a node; prefer PP across nodes)."
    )
)
text("node-network-assumed")(
    lambda gpu, nodes, network, one_way_bytes_per_s, latency_s: (
        f"The layout spans {nodes} nodes, and {gpu}'s profile states no inter-node network: "
        f"the traffic between nodes is priced on {network}: "
        f"{f.gbps_text(one_way_bytes_per_s)} one way per GPU, {f.us_text(latency_s)} per "
        "message, the bundled datacenter profiles' figure and the one simulate and plan assume. "
        "Give a profile with a network figure for your cluster's own link."
    )
)
text("pp-across-nodes")(
    lambda pp, nodes: (
        f"{pp} pipeline stages over {nodes} nodes: each stage holds its layers' weights and "
        "cache; activations cross the network once per stage boundary per step."
    )
)
text("dp-attention")(
    lambda ranks, mla: (
        f"DP attention over {ranks} ranks with the routed experts spread over them (EP {ranks}): "
        "each rank holds every weight but the experts, 1/N of the experts, and its own requests' "
        "cache whole"
        + (" (under TP every rank would hold a copy of each request's MLA latent)." if mla else ".")
        + " Weights as vLLM's -dp N --enable-expert-parallel loads them (SGLang's "
        "--enable-dp-attention splits the dense layers too: a little more room)."
    )
)
text("deployment-for-users")(
    lambda layout, gpu, gpus, replicas, total, users_target, context_len, users: (
        f"Deployment {f.layout_text(layout)} on {gpus} x {gpu} per replica: {replicas:,} replica(s) of it "
        f"serve {users_target:,} sequences of {context_len:,} tokens on {total:,} GPUs, the fewest "
        f"of any layout kvplan weighs (one replica holds {users:,}). Fix any of it with --tp, "
        "--pp or --dp-attention."
    )
)
text("deployment-none-fits")(
    lambda reason, gpus=1: (
        f"{reason}. Shown on {'one GPU' if gpus == 1 else f'{gpus} GPUs'}, with what would fit."
    )
)
text("deployment-on-gpus")(
    lambda layout, gpu, num_gpus, replicas, context_len, users, others: (
        f"On {num_gpus:,} x {gpu}: "
        + (
            f"{replicas:,} replicas of {f.layout_text(layout)}"
            if replicas > 1
            else f.layout_text(layout)
        )
        + f", the layout holding the most {context_len:,}-token sequences on them ({users:,})"
        + (
            "; also weighed: "
            + "; ".join(
                f"{n:,} x {f.layout_text(d)} {count:,}"
                if n > 1
                else f"{f.layout_text(d)} {count:,}"
                for d, n, count in others
            )
            if others
            else ""
        )
        + ". Fix any of it with --tp, --pp or --dp-attention."
    )
)
text("launch-engine-seats")(
    lambda planned, held, layout: (
        f"vLLM's own allocation of these flags holds {held:,} max_model_len requests per "
        f"replica of {f.layout_text(layout)}, not the {planned:,} the engine-free plan counts (its page layout "
        "differs, e.g. fp8_ds_mla for a DSA model's fp8 cache): the launch carries vLLM's count."
    )
)
text("launch-sglang-state-cap")(
    lambda planned, held, states: (
        f"SGLang's recurrent-state pool ({states:,} states) caps its running requests at "
        f"{held:,} (max_mamba_cache_size // _calculate_mamba_ratio, the default mamba "
        f"strategy's), below the {planned:,} max_model_len requests its KV pool holds: the "
        "launch carries SGLang's cap."
    )
)
text("gpus-idle")(
    lambda num_gpus, used, layout: (
        f"{num_gpus - used:,} of the {num_gpus:,} GPUs stay idle: replicas of {f.layout_text(layout)} "
        f"use {used:,}."
    )
)
