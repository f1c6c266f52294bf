"""The words of GPU kinds side by side (kvplan capacity --gpu all). Made in
kvplan/plans/compare.py."""

from kvplan.present import format as f
from kvplan.present.notes.registry import text

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
