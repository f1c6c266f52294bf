"""`kvplan capacity` in words: the budget, the answer, the what-if table; and `--emit vllm`."""

from __future__ import annotations

from kvplan.plans.capacity import CapacityResult, LongestContext, WhatIfRow
from kvplan.plans.deployment import Deployment, layout_text
from kvplan.present import format as f
from kvplan.present.launch import Launch
from kvplan.present.view import Column, Table, View, jsonable, view


def scenario(row: WhatIfRow, ctx: int) -> str:
    """A what-if row's label."""
    return {
        "kv_dtype": lambda: f"KV {row.kv_dtype}",
        "half_context": lambda: "half context",
        "double_context": lambda: "double context",
        "prefix": lambda: f"{row.prefix_tokens:,}-token shared prefix",
        "contiguous": lambda: f"contiguous, reserving {ctx:,} per sequence",
        "paged": lambda: f"paged, {row.context_len:,} tokens actually used",
    }[row.kind]()


def deployment_text(r: CapacityResult) -> str:
    """'TP 8 x PP 2 on 16 GPUs (2 nodes of 8), chosen: ...'."""
    d = Deployment(r.tp, r.pp, r.dp_attention)
    per_replica = d.gpus
    where = "one node" if r.nodes_per_replica == 1 else f"{r.nodes_per_replica} nodes"
    out = f"{layout_text(d)}: {per_replica:,} GPU{'s' if per_replica > 1 else ''} ({where})"
    if r.replicas > 1:
        out += f" x {r.replicas:,} replicas = {r.num_gpus:,} GPUs"
    return (
        out
        + {
            "given": "",
            "fewest-gpus": ", the fewest that fit",
            "most-users": ", the fewest that fit, the layout holding the most",
            "fewest-total-gpus": ", the layout serving --users on the fewest GPUs",
        }[r.deployment_chosen_by]
    )


def longest_text(row: LongestContext) -> str:
    if row.limited_by == "positions":
        return (
            f"{row.max_context_len:,} tokens (the model's maximum positions; memory would hold "
            f"{row.memory_context_len:,})"
        )
    return f"{row.max_context_len:,} tokens"


def capacity_view(result: CapacityResult) -> View:
    r = result
    ctx = r.context_len
    facts = [
        ("model / GPU", f"{r.model['name']} on {r.gpu}"),
        ("deployment", deployment_text(r)),
        ("dtypes", f"weights {r.weights_dtype}, KV {r.kv_dtype}"),
        (
            "memory per GPU",
            f"{f.gib(r.usable_bytes_per_gpu)} GiB usable - {f.gib(r.weights_bytes_per_gpu)} "
            f"weights - {f.gib(r.reserve_bytes_per_gpu)} reserve = "
            f"{f.gib(r.kv_pool_bytes_per_gpu)} GiB KV pool",
        ),
        ("fits", "yes" if r.fits else "NO"),
        (
            "KV tokens per GPU",
            f.DASH
            if r.kv_tokens is None
            else f"{r.kv_tokens:,} (every attention layer holding every token)",
        ),
        (f"max sequences at {ctx:,}", f"{r.max_concurrency:,}"),
    ]
    facts += [
        (f"longest context at batch {row.batch_size:,}", longest_text(row))
        for row in r.longest_context
    ]
    if r.paging:
        facts.append(
            (
                "paging vs contiguous",
                f"{r.paging.paged_sequences:,} vs {r.paging.contiguous_sequences:,} sequences at "
                f"mean length {r.paging.mean_len:,}",
            )
        )
    if r.kv_transfer:
        t = r.kv_transfer
        facts.append(
            (
                "disaggregated KV transfer",
                f"{f.gib_text(t.bytes_per_request)} per {ctx:,}-token request over {t.link}: "
                f"{f.ms_text(t.time_s)}, at most {t.requests_per_s:,.1f} requests/s",
            )
        )
    data = jsonable(r)
    for row, item in zip(r.what_if, data["what_if"], strict=True):
        item["scenario"] = scenario(row, ctx)
    table = Table(
        "what if",
        [
            Column("scenario", "scenario", f.text, "left"),
            Column("context_len", "context (tokens)", f.integer),
            Column("max_concurrency", "max sequences", f.integer),
        ],
        data["what_if"],
    )
    return view(f"Capacity of {r.model['name']} on {r.gpu}", r, facts, [table], data=data)


def seats_per_engine(result: CapacityResult) -> int:
    """Sequences one engine instance runs: a replica's share (per DP rank under DP attention)."""
    return max(1, result.max_concurrency // result.replicas // result.dp_attention)


def launch_of(result: CapacityResult, model_id: str, max_num_batched_tokens: int) -> Launch:
    """The launch settings matching this plan (kvplan.present.launch spells them)."""
    return Launch(
        model_id=model_id,
        context_len=result.context_len,
        kv_dtype=result.kv_dtype,
        seats=seats_per_engine(result),
        gpu_mem_util=result.gpu_mem_util,
        tp=result.tp,
        pp=result.pp,
        dp_attention=result.dp_attention,
        block_size=result.block_size,
        max_num_batched_tokens=None if max_num_batched_tokens == 8192 else max_num_batched_tokens,
        gpus=result.num_gpus // result.replicas,
        nodes=result.nodes_per_replica,
        replicas=result.replicas,
    )
