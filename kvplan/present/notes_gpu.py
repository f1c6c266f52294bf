"""The words of the notes the planning commands print for a GPU kind (roofline, capacity and its
GPU kinds side by side, deployments, explore, engine's vLLM terms): registered in
kvplan.present.notes' one table, loaded on the first note beyond the core's, before
kvplan.present.notes_more (start-up: a --gpu command reads this file alone)."""

from kvplan.present import format as f
from kvplan.present.format import gib_text
from kvplan.present.note_registry import text

# ---- roofline ---------------------------------------------------------------------------------
text("roofline-terms")(
    lambda: (
        "I_inf is the intensity a decode step approaches as the batch grows (each sequence "
        "brings its own cache to read); ceiling is BW/(s x k), the decode rate no batch beats; "
        "s* is the context above which no batch reaches the ridge. kvplan explain TERM says "
        "more."
    )
)

# ---- engines: vLLM ------------------------------------------------------------------------------
text("vllm-cuda-graph-estimate")(
    lambda: (
        '"Estimated CUDA graph memory" is logged but not subtracted by vLLM 0.19 (it is from '
        "0.21 on); kvplan's figure is a fit (a + b x layers on the rank), good to about 0.3 GiB."
    )
)

# ---- the step model's kernel tables -------------------------------------------------------------
# the evidence class of a GPU's kernel tables in words (notes_more's sim-interval)
EVIDENCE_WORDS = {
    "own": "this GPU's own measured kernel tables for this engine",
    "other-engine": "this GPU's kernel tables measured for the other engine",
    "borrowed": "another GPU's kernel tables (the profile names which)",
    "datasheet": "no kernel tables: another GPU's fractions on this GPU's datasheet rates",
}
# whose tables the GPU runs on, in sim-kernel-tables' words ("for H200 ...")
KERNEL_TABLE_WORDS = {
    "own": "its own",
    "other-engine": "its own but for the other engine (none measured for {engine})",
    "borrowed": "another GPU's, named by its profile",
    "datasheet": "none of its own: the H100 SXM's, on its datasheet rates",
}
text("sim-kernel-tables")(
    lambda gpu, engine, tables, evidence: (
        "Each operation runs at the fraction of the datasheet rate the engine's own kernel "
        f"reaches, from the measured kernel tables {tables} (NVIDIA aiconfigurator's silicon "
        f"tables; evidence {evidence}: for {gpu} "
        + (KERNEL_TABLE_WORDS.get(evidence) or evidence).format(engine=engine)
        + "): dense GEMMs and attention by the medians of their tables, fused-MoE experts by a "
        "curve of the tokens each expert gets; CUDA-graph steps pay 32 us per layer, larger "
        "steps 0.8 ms per layer of CPU dispatch; the API server 15.6 ms per request and 46 us "
        "per streamed token (BLIS)."
    )
)

text("sim-dcp")(
    lambda dcp, tp, block_size: (
        f"Decode context parallelism (-dcp {dcp}, inside the TP {tp} group): each rank holds "
        f"every {dcp}th token of a request's cache, so the pool holds {dcp}x the tokens and "
        f"the scheduler counts blocks of {block_size} tokens; a decode reads 1/{dcp} of its "
        "context per rank, then the ranks all-gather their partial outputs and LSEs once per "
        "attention layer (charged on the interconnect); prefill attention is priced as without "
        "DCP."
    )
)
text("sim-dp-attention-off")(
    lambda tp: (
        f"--enable-dp-attention with --dp-size 1: SGLang turns DP attention off "
        f"(server_args' _handle_data_parallelism) and serves plain TP {tp}, as simulated here."
    )
)
text("sim-enforce-eager")(
    lambda engine: (
        "No CUDA graphs ("
        + ("--enforce-eager" if engine == "vllm" else "--disable-cuda-graph")
        + "): every step pays the eager per-layer CPU dispatch cost"
        + (", and no CUDA-graph memory is taken from the KV pool." if engine == "vllm" else ".")
    )
)

_SPEC_DRAFT = {
    "mtp": "the checkpoint's MTP layer (one layer + the target's LM head per draft step)",
    "eagle": "an EAGLE head priced as one target-width decoder layer + the target's LM head",
    "eagle3": "an EAGLE-3 head priced as one target-width decoder layer + the target's LM head",
    "ngram": "n-gram lookup on the host (one more per-request host pass a round, no GPU work)",
}
_SPEC_ACCEPTANCE = {
    "rate": "from the per-token acceptance rate {rate:g}, (1 - a^(k+1)) / (1 - a)",
    "positions": "1 + the sum of the per-position acceptance rates given",
    "length": "the mean acceptance length given",
    "assumed": "ASSUMED: no acceptance given, a per-token rate of {rate:g} (whatif's default); "
    "give --spec-accept or --spec-accept-length from the engine's metrics",
}
text("sim-speculative")(
    lambda engine, method, draft, steps, topk, verify, tokens_per_round, acceptance, rate, weights_bytes, kv_bytes_per_token: (
        f"Speculative decoding ({method}"
        + (f", draft {draft}" if draft else "")
        + f"): each round runs {steps} draft step(s)"
        + (f" of {topk} branches" if topk > 1 else "")
        + f" and one target forward verifying {verify} tokens per sequence (each cache read "
        f"once), and yields {tokens_per_round:.2f} tokens per sequence, the expected value "
        "(never sampled: runs are deterministic), "
        + _SPEC_ACCEPTANCE[acceptance].format(rate=rate or 0.0)
        + ". Each decode step is 1/E of a round (E tokens per round); a prefill chunk in it is "
        "charged what it adds to the verification. The draft: "
        + _SPEC_DRAFT.get(method, f"{draft} priced by its own step model at the target's TP")
        + f"; its weights ({gib_text(weights_bytes)} per GPU) and KV cache "
        f"({kv_bytes_per_token:,.0f} B per token per GPU) come out of the pool"
        + (
            f", and every running request holds {verify - 1} lookahead slot(s) and "
            f"schedules {verify} tokens of the budget (vLLM's num_lookahead_tokens)."
            if engine == "vllm"
            else "; SGLang's own --mem-fraction-static adjustments for a draft are not "
            "modelled, and its overlap scheduler is off (spec v1)."
        )
        + " vLLM bench's ITL is per streamed chunk (a round's tokens arrive together): "
        "kvplan's ITL is per token, like its TPOT."
    )
)

text("plan-speculative")(
    lambda layouts, engine: (
        f"Every layout is searched without speculative decoding and with {layouts} "
        "speculative layout(s) (the model's MTP layers, or the one given), priced as `kvplan "
        "simulate` prices them (sim-speculative: the expected tokens per round at the "
        "acceptance given, else an assumed 0.7 per drafted token); each candidate's launch "
        f"command carries its {'--speculative-config' if engine == 'vllm' else '--speculative-*'} "
        "flags. --speculative off searches without."
    )
)

# ---- deployments: TP within a node, PP across nodes, DP attention with EP ----------------------
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
text("roofline-rows-overflow")(
    lambda gpus, gpu: (
        f"Rows whose fits column says no need more cache than {gpus} x {gpu} holds beside the "
        "weights at that context (max batch says how many fit): they cannot run as shown and "
        "are left out of plots."
    )
)

# ---- explore: deployments (issue 17) ------------------------------------------------------------
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

# ---- GPU kinds side by side ----------------------------------------------------------------------
text("compare-columns")(
    lambda context_len, layout=None: (
        (
            f"Every GPU kind on {f.layout_text(layout)}, the layout given"
            if layout
            else "Each GPU kind on the deployment kvplan chooses: of the fewest GPUs that hold "
            f"one {context_len:,}-token sequence and the wider TPs within a node, the one that "
            "decodes the most per GPU (with --users, the layout serving them on the fewest GPUs)"
        )
        + " (kvplan capacity --gpu KIND for its details). users: sequences of that context one "
        "replica holds; per GPU: divided by its GPUs; ceiling: one sequence's decode rate no "
        "batch beats, BW/(s x k); TPOT and tok/s per GPU: a decode step with the replica full "
        "(every seat taken, at most vLLM's max_num_seqs, each sequence at the context) priced by "
        "the step model kvplan plan and simulate use (each kernel family's measured fraction of "
        "the datasheet, host and launch costs, all-reduces, the API server's streaming pace); "
        "no prefill, no queueing, no latency target; TPOT floor: the same step at 100% of "
        "bandwidth and peak, which ranks GPUs only by their datasheets."
    )
)
text("compare-prices")(
    lambda: (
        "Prices: on-demand USD per GPU-hour from hardware_profiles/prices.yaml (dated, with "
        "sources) or --price GPU=USD; USD per million output tokens at the full replica's TPOT "
        "by plan's step model: decode at the largest batch the layout holds, so the cheapest a "
        "token gets with no latency target; kvplan plan prices a request rate under targets."
    )
)


def _compare_verdict(
    context_len, most, most_tokens_per_s_per_gpu, most_users_per_gpu, most_layout, cheapest,
    cheapest_usd, fewest, fewest_gpus, users, unfit, tied=(), tied_usd=(), priced_by=("step",),
):  # fmt: skip
    model = "plan's step model" if list(priced_by) == ["step"] else "plan's step model or floor"
    out = (
        f"At {context_len:,} tokens {most} decodes the most per GPU "
        f"({most_tokens_per_s_per_gpu:,.0f} tok/s by {model} with the replica full, "
        f"{most_users_per_gpu:,.1f} sequences per GPU, {f.layout_text(most_layout)})"
    )
    if tied:
        spread = tied_usd[-1] / tied_usd[0] - 1
        prices = ", ".join(f"{g} ${u:,.2f}" for g, u in zip(tied, tied_usd, strict=True))
        out += (
            f"; {' and '.join(tied) if len(tied) == 2 else ', '.join(tied)} serve a million output "
            f"tokens within {spread:.0%} of each other ({prices}), a tie at the step model's "
            "precision (11.7% median throughput error): latency targets decide, kvplan plan "
            "--slo ranks them"
        )
    elif cheapest:
        out += (
            f"; {cheapest} serves a million output tokens cheapest (${cheapest_usd:,.2f} by "
            f"{model}, no latency target)"
        )
    if fewest:
        out += f"; {fewest} needs the fewest GPUs for {users:,} users ({fewest_gpus:,})"
    if unfit:
        out += f"; cannot serve it: {', '.join(unfit)}"
    out += "."
    if not users:
        out += (
            " Pass --users N to size every kind for a load (a larger layout can need fewer GPUs)."
        )
    return out


text("compare-verdict")(_compare_verdict)
text("compare-best-layout")(
    lambda gpu, layout, weighed, tokens_per_s_per_gpu: (
        f"{gpu} on {f.layout_text(layout)}, its best layout: of "
        + ", ".join(
            f"{f.layout_text(w)} ({t:,.0f} tok/s per GPU)"
            for w, t in zip(weighed, tokens_per_s_per_gpu, strict=True)
        )
        + ", the most tokens/s per GPU by plan's step model with the replica full (the fewest "
        "GPUs that fit leave room for few sequences beside the weights). Fix a layout with --tp."
    )
)
text("compare-none")(
    lambda context_len, gpus: (
        f"None of {', '.join(gpus)} holds one {context_len:,}-token sequence beside the weights "
        "on any deployment kvplan weighs: quantize the weights, shorten the context or pick "
        "larger GPUs."
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
