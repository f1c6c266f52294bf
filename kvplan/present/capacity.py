"""`kvplan capacity` in words: the budget, the answer, the what-if table; and `--emit vllm`."""

from __future__ import annotations

from kvplan.plans.capacity import CapacityResult, LongestContext, WhatIfRow
from kvplan.plans.deployment import Deployment, layout_text
from kvplan.present import format as f
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


def vllm_command(result: CapacityResult, model_id: str, max_num_batched_tokens: int) -> str:
    """The `vllm serve` command matching this plan."""
    kv = result.kv_dtype if result.kv_dtype == "fp8" else "auto"
    parts = [
        f"vllm serve {model_id}",
        f"--max-model-len {result.context_len}",
        f"--kv-cache-dtype {kv}",
        f"--max-num-seqs {seats_per_engine(result)}",
        f"--gpu-memory-utilization {result.gpu_mem_util}",
    ]
    if result.dp_attention > 1:
        parts += [f"--data-parallel-size {result.dp_attention}", "--enable-expert-parallel"]
    else:
        parts.append(f"--tensor-parallel-size {result.tp}")
    if result.pp > 1:
        parts.append(f"--pipeline-parallel-size {result.pp}")
    parts.append(f"--block-size {result.block_size}")
    if max_num_batched_tokens != 8192:
        parts.append(f"--max-num-batched-tokens {max_num_batched_tokens}")
    return " \\\n  ".join(parts) + "\n"


def serve_command(
    result: CapacityResult, engine: str, model_id: str, max_num_batched_tokens: int
) -> str:
    """The launch command matching this plan: `vllm serve` or SGLang's launch_server."""
    if engine == "vllm":
        return vllm_command(result, model_id, max_num_batched_tokens)
    kv = "fp8_e4m3" if result.kv_dtype == "fp8" else "auto"
    parts = [
        f"python -m sglang.launch_server --model-path {model_id}",
        f"--context-length {result.context_len}",
        f"--kv-cache-dtype {kv}",
        f"--max-running-requests {seats_per_engine(result)}",
        f"--mem-fraction-static {result.gpu_mem_util}",
    ]
    if result.dp_attention > 1:
        n = result.dp_attention
        parts += [f"--tp-size {n}", f"--dp-size {n}", "--enable-dp-attention"]
    else:
        parts.append(f"--tp-size {result.tp}")
    if result.pp > 1:
        parts.append(f"--pp-size {result.pp}")
    parts.append(f"--page-size {result.block_size}")
    return " \\\n  ".join(parts) + "\n"
