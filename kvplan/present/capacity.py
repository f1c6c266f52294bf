"""`kvplan capacity` in words: the budget, the answer, the what-if table; and `--emit vllm`."""

from __future__ import annotations

from kvplan.plans.capacity import CapacityResult, WhatIfRow
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, Verdict, View, jsonable, judged, ref, view


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


def _what_if_note(row: dict) -> tuple:
    """A what-if row cites its KV format's note, or paging's."""
    if row["kind"] == "kv_dtype":
        return (f"kv-{row['kv_dtype']}", ref("kv-ggml", dtype=row["kv_dtype"]))
    return ("capacity-paged",) if row["kind"] in ("paged", "contiguous") else ()


def capacity_view(result: CapacityResult) -> View:
    r = result
    ctx = r.context_len
    facts = [
        Fact(
            "model / GPU",
            f"{r.model['name']} on {r.gpu}, TP {r.tp} x PP {r.pp}"
            + (f", {r.replicas} replicas" if r.replicas > 1 else ""),
            notes=("capacity-pp", "capacity-replicas", "tp-per-gpu", "memory-estimated"),
            data={"tp": r.tp, "pp": r.pp, "replicas": r.replicas},
        ),
        Fact(
            "dtypes",
            f"weights {r.weights_dtype}, KV {r.kv_dtype}",
            notes=("weights-quantized", f"kv-{r.kv_dtype}", ref("kv-ggml", dtype=r.kv_dtype)),
        ),
        Fact(
            "memory per GPU",
            f"{f.gib(r.usable_bytes_per_gpu)} GiB usable - {f.gib(r.weights_bytes_per_gpu)} "
            f"weights - {f.gib(r.reserve_bytes_per_gpu)} reserve = "
            f"{f.gib(r.kv_pool_bytes_per_gpu)} GiB KV pool",
            notes=("capacity-budget",),
            data={
                "usable_bytes_per_gpu": r.usable_bytes_per_gpu,
                "weights_bytes_per_gpu": r.weights_bytes_per_gpu,
                "reserve_bytes_per_gpu": r.reserve_bytes_per_gpu,
                "kv_pool_bytes_per_gpu": r.kv_pool_bytes_per_gpu,
            },
        ),
        Fact(
            "fits",
            "yes" if r.fits else "NO",
            verdict=judged(r.fits),
            notes=("capacity-no-room",),
            data={"fits": r.fits},
        ),
        Fact(
            "KV tokens per GPU",
            f.DASH
            if r.kv_tokens is None
            else f"{r.kv_tokens:,} (every attention layer holding every token)",
            notes=("sliding-held", "state-fixed", "tp-kv-replicated", "tp-mla-replicated"),
            data={"kv_tokens": r.kv_tokens},
        ),
        Fact(
            f"max sequences at {ctx:,}",
            f"{r.max_concurrency:,}",
            verdict=None if r.max_concurrency else Verdict.bad,
            notes=("capacity-paged", "ctx-beyond-positions"),
            data={"planned_context_len": ctx, "planned_max_concurrency": r.max_concurrency},
        ),
    ]
    facts += [
        Fact(
            f"longest context at batch {row.batch_size:,}",
            f"{row.max_context_len:,} tokens",
            verdict=None if row.max_context_len else Verdict.bad,
            data={f"longest_context_len_at_batch_{row.batch_size}": row.max_context_len},
        )
        for row in r.longest_context
    ]
    if r.paging:
        facts.append(
            Fact(
                "paging vs contiguous",
                f"{r.paging.paged_sequences:,} vs {r.paging.contiguous_sequences:,} sequences at "
                f"mean length {r.paging.mean_len:,}",
                notes=("capacity-paged",),
                data={
                    "paging_mean_len": r.paging.mean_len,
                    "paged_sequences": r.paging.paged_sequences,
                    "contiguous_sequences": r.paging.contiguous_sequences,
                },
            )
        )
    if r.kv_transfer:
        t = r.kv_transfer
        facts.append(
            Fact(
                "disaggregated KV transfer",
                f"{f.gib_text(t.bytes_per_request)} per {ctx:,}-token request over {t.link}: "
                f"{f.ms_text(t.time_s)}, at most {t.requests_per_s:,.1f} requests/s",
                notes=("transfer-link", "transfer-replication"),
                data={
                    "transfer_bytes_per_request": t.bytes_per_request,
                    "transfer_time_s": t.time_s,
                    "transfer_requests_per_s": t.requests_per_s,
                },
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
        row_notes=_what_if_note,
    )
    return view(f"Capacity of {r.model['name']} on {r.gpu}", r, facts, [table], data=data)


def vllm_command(result: CapacityResult, model_id: str, max_num_batched_tokens: int) -> str:
    """The `vllm serve` command matching this plan."""
    kv = result.kv_dtype if result.kv_dtype == "fp8" else "auto"
    parts = [
        f"vllm serve {model_id}",
        f"--max-model-len {result.context_len}",
        f"--kv-cache-dtype {kv}",
        f"--max-num-seqs {max(1, result.max_concurrency // result.replicas)}",
        f"--gpu-memory-utilization {result.gpu_mem_util}",
        f"--tensor-parallel-size {result.tp}",
    ]
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
        f"--max-running-requests {max(1, result.max_concurrency // result.replicas)}",
        f"--mem-fraction-static {result.gpu_mem_util}",
        f"--tp-size {result.tp}",
    ]
    if result.pp > 1:
        parts.append(f"--pp-size {result.pp}")
    parts.append(f"--page-size {result.block_size}")
    return " \\\n  ".join(parts) + "\n"
