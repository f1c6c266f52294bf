"""`kvplan plan` in words: the configurations that meet the targets, cheapest first, with the
GPUs they need, their goodput, their cost, and the command that launches each replica."""

from __future__ import annotations

from kvplan.plans.launch import Launch, check_launch
from kvplan.plans.plan import Candidate, PlanResult
from kvplan.present import format as f
from kvplan.present.launch import one_line, vllm_image
from kvplan.present.view import Column, Table, View, jsonable, view

# the config column's words for a layout's flags (Candidate.layout_flags)
LAYOUT_LABELS = {
    "--disable-radix-cache": "no radix cache",
    "--speculative-skip-dp-mlp-sync": "no DP MLP sync",
}


def serve_command(
    engine: str, model_id: str, c: Candidate, mem_fraction: float | None = None
) -> str:
    """One replica's launch command in the engine's own flag spelling (kvplan.present.launch);
    `mem_fraction`: SGLang's --mem-fraction-static as planned (None: the engine's default)."""
    launch = Launch(
        model_id=model_id,
        context_len=c.max_model_len,
        kv_dtype=c.kv_cache_dtype,
        seats=c.max_num_seqs,
        gpu_mem_util=mem_fraction,
        tp=c.tp,
        pp=c.pp,
        max_num_batched_tokens=c.max_num_batched_tokens,
        gpus=c.tp * c.pp,
        speculative=tuple(getattr(c, "speculative", None) or ()),
    )
    return one_line(check_launch(launch, engine), engine)


def searched_text(result: PlanResult) -> str:
    """'80 configurations, 80 meet the targets'; with some pruned, how many and why."""
    text = f"{result.searched:,} configurations, {result.feasible:,} meet the targets"
    pruned = getattr(result, "pruned", 0)
    if pruned:
        text += (
            f", {pruned:,} pruned (a floor on their cost is above the "
            f"{len(result.candidates):,} cheapest)"
        )
    return text


def plan_view(result: PlanResult, engine: str = "vllm") -> View:
    model_id = result.model["hf_id"] or result.model["name"]
    targets = ", ".join(f"{s['target']} <= {f.ms_text(s['limit_s'], 0)}" for s in result.slos)
    w = result.workload
    facts = [
        ("model", model_id),
        (
            "traffic",
            f"{result.rate:g} requests/s of {w['mean_input_tokens']:,.0f} in / "
            f"{w['mean_output_tokens']:,.0f} out tokens ({w['length_dist']} lengths)",
        ),
        ("targets", targets),
        (
            "sized on",
            "the point estimate (--confidence P: on the pessimistic bound)"
            if result.confidence is None
            else f"the pessimistic bound at {result.confidence:.0%} confidence",
        ),
        ("searched", searched_text(result)),
    ]
    data = jsonable(result)
    for item in data["candidates"]:
        if item.get("speculative") is None:  # no speculative decoding: the JSON as before
            item.pop("speculative", None)
            item.pop("spec_tokens_per_round", None)
        if item.get("layout_flags") is None:  # none: the JSON as before
            item.pop("layout_flags", None)
    flags = [getattr(result, k, None) for k in ("parallel_flags", "mode_flags")]
    for key, given in zip(("parallel_flags", "mode_flags"), flags, strict=True):
        if given is None:
            data.pop(key, None)  # not given: the JSON as before
    extra = " ".join(f for f in flags if f)
    version = getattr(result, "engine_version", None)
    if version is None:
        data.pop("engine_version", None)  # not given: the JSON as before
    elif engine == "vllm":  # SGLang's tags name a CUDA build too (v0.4.6.post1-cu124): none
        data["image"] = vllm_image(version)
    rows = []
    for c, item in zip(result.candidates, data["candidates"], strict=True):
        item["command"] = serve_command(
            engine, model_id, c, getattr(result, "mem_fraction_static", None)
        ) + "".join(
            f" {flag}" for flag in [extra, *(getattr(c, "layout_flags", None) or ())] if flag
        )
        rows.append(
            {
                **item,
                "config": f"{c.gpu} TP{c.tp}"
                + (f" PP{c.pp}" if c.pp > 1 else "")
                + (_spec_text(c) if getattr(c, "speculative", None) else "")
                + "".join(
                    f", {LAYOUT_LABELS.get(flag, flag)}"
                    for flag in getattr(c, "layout_flags", None) or ()
                ),
                "kv": c.kv_cache_dtype,
                "p99_ttft_ms": c.operating_point.p99_ttft_ms,
                "p99_tpot_ms": c.operating_point.p99_tpot_ms,
            }
        )
    if result.candidates:
        best = result.candidates[0]
        facts.append(
            (
                "cheapest",
                f"{best.num_gpus} x {best.gpu} ({best.replicas} replica"
                f"{'s' if best.replicas > 1 else ''} of TP {best.tp}), "
                f"${best.usd_per_hour:,.2f}/h, ${best.usd_per_million_tokens:,.3f} per million "
                "tokens",
            )
        )
        facts.append(("launch each replica", rows[0]["command"]))
        if "image" in data:
            facts.append(("image", data["image"]))
    table = Table(
        "configurations that meet the targets, cheapest first",
        [
            Column("config", "GPU, parallelism", f.text, "left"),
            Column("kv", "KV", f.text, "left"),
            Column("max_num_seqs", "seqs", f.integer),
            Column("max_num_batched_tokens", "batch tokens", f.integer, priority=3),
            Column("goodput_rps", "goodput/replica (req/s)", f.fixed(2), priority=2),
            Column("replicas", "replicas", f.integer, priority=4),  # GPUs / (TP x PP)
            Column("num_gpus", "GPUs", f.integer),
            Column("usd_per_hour", "$/hour", f.usd, priority=1),
            # what plan answers: the cost, and the latencies the targets bound
            Column("usd_per_million_tokens", "$/M tokens", f.fixed(3), answer=True),
            Column("p99_ttft_ms", "TTFT p99 (ms)", f.fixed(0), answer=True),
            Column("p99_tpot_ms", "TPOT p99 (ms)", f.fixed(1), answer=True),
        ],
        rows,
    )
    rejected = Table(
        "ruled out",
        [Column("reason", "reason", f.text, "left"), Column("count", "configurations", f.integer)],
        [r._asdict() for r in result.rejections],
    )
    tables = [table] + ([rejected] if result.rejections else [])
    return view(
        f"Plan for {result.model['name']} at {result.rate:g} req/s",
        result,
        facts,
        tables,
        data=data,
    )


def _spec_text(c: Candidate) -> str:
    """' + mtp k=1 (1.70/round)': the candidate's speculative layout."""
    if not c.speculative:
        return ""
    flags = dict(zip(c.speculative[::2], c.speculative[1::2], strict=True))
    if "--speculative-config" in flags:
        import json

        config = json.loads(flags["--speculative-config"])
        method, k = config["method"], config["num_speculative_tokens"]
    else:
        method = flags["--speculative-algorithm"].lower()
        if method == "eagle" and "--speculative-draft-model-path" not in flags:
            method = "mtp"  # SGLang runs the checkpoint's MTP layers as EAGLE
        k = flags.get("--speculative-num-steps", flags.get("--speculative-num-draft-tokens"))
    return f" + {method} k={k} ({c.spec_tokens_per_round:.2f}/round)"
