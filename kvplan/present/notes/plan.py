"""The words of kvplan plan's search. Made in kvplan/plans/plan.py."""

from kvplan.present.notes.registry import text

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
text("plan-method")(
    lambda bisections, num_prompts: (
        f"Each configuration: one replica simulated with {num_prompts:,} requests, saturated "
        f"first, then {bisections} bisections of the rate for the highest one meeting every "
        "target (its goodput); the smallest max_num_seqs variants reuse runs where the seat "
        "limit never bound."
    )
)
text("plan-pruned")(
    lambda pruned, top: (
        f"{pruned:,} configurations were pruned: a replica's goodput is at most the rate that "
        "ends its search so far (first the saturated rate, then each bisection's upper end, "
        "then the goodput found), so it needs at least ceil(rate / that rate) replicas, and at "
        f"that many it already costs more per hour than the {top:,} cheapest found before it "
        "(groups run cheapest floor first; --no-prune searches every one in full)."
    )
)
text("plan-replicas")(
    lambda: (
        "Replicas behind a round-robin router each take rate / replicas: replicas = "
        "ceil(rate / goodput), GPUs = replicas x TP x PP, and the operating point is a run at "
        "rate / replicas."
    )
)
text("plan-prices")(
    lambda: (
        "Prices are on-demand USD per GPU-hour from hardware_profiles/prices.yaml (RunPod "
        "Secure Cloud list prices read 2026-09-25 unless noted; hyperscalers charge 2-3x); "
        "override with --price GPU=USD. $ per million tokens counts input and output tokens "
        "served at the requested rate."
    )
)
text("plan-no-hf-id")(
    lambda: (
        "The config is a local file: the launch command names the model by kvplan's name; "
        "replace it with the checkpoint's Hugging Face id or path."
    )
)
text("plan-sglang")(
    lambda: (
        "Simulated with SGLang's scheduler and pool (kvplan simulate --engine sglang): "
        "max_num_seqs is --max-running-requests and max_num_batched_tokens "
        "--chunked-prefill-size; kv-cache-dtype fp8 is SGLang's fp8_e4m3."
    )
)
text("plan-point-estimate")(
    lambda: (
        "Sized on kvplan's point estimates, which published runs have mostly found optimistic; "
        "plan --confidence 0.8 (or 0.9) sizes on the pessimistic bound of the simulated "
        "figures' intervals instead (kvplan/data/intervals.json)."
    )
)
text("plan-confidence")(
    lambda confidence, gpus: (
        f"Sized so the pessimistic bound at {confidence:.0%} confidence meets the targets: "
        + (
            "; ".join(
                f"{name} (interval class {evidence}) taken as {_slower(low, high)} slower than "
                "simulated"
                for name, evidence, low, high in gpus
            )
            + ", each latency target checked on its own bound (kvplan/data/intervals.json); "
            "the operating point shown is the point estimate."
            if gpus
            else "no configuration met them at that bound (each taken at its own interval "
            "class, each latency target checked on its own bound; kvplan/data/intervals.json)."
        )
    )
)


def _slower(low: float, high: float) -> str:
    """The rate factors of one GPU kind's configurations: one, or their range (each at its
    runs' untimed share)."""
    if f"{low:.2f}" == f"{high:.2f}":
        return f"{low:.2f}x"
    return f"{low:.2f}-{high:.2f}x (by each configuration's untimed share)"


text("plan-none")(
    lambda: (
        "No configuration meets the targets: loosen a target, allow more GPU kinds or TP "
        "degrees, or raise --max-gpus."
    )
)
text("plan-parallel")(
    lambda flags: (
        f"Every configuration launched with {flags}: a replica is its group of DP ranks (vLLM: "
        "TP x PP x DP GPUs; SGLang's --enable-dp-attention ranks share its --tp GPUs), each rank "
        "simulated with its own scheduler and KV pool as kvplan simulate runs them "
        "(sim-expert-parallel); a layout the model refuses is listed among the rejections."
    )
)
