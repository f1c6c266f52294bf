"""What vLLM and SGLang would log, in their own words, from kvplan's allocation results."""

from __future__ import annotations

from kvplan.engines.sglang import SglangResult
from kvplan.engines.vllm import VllmResult
from kvplan.present import format as f
from kvplan.present.view import Column, Table, View, jsonable, view
from kvplan.units import GIB


def vllm_log_lines(r: VllmResult) -> list[str]:
    """The lines vLLM prints for this allocation, with vLLM's wording and rounding."""
    lines = [
        f"Add {p.layers} padding layers, may waste at most {p.percent:.2f}% KV cache memory"
        for p in r.padding
        if p.layers
    ]
    if r.fits:
        lines.append(f"GPU KV cache size: {r.kv_cache_tokens:,} tokens")
        lines.append(
            f"Maximum concurrency for {r.max_model_len:,} tokens per request: "
            f"{r.max_concurrency:.2f}x"
        )
    else:
        lines.append(
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({r.max_model_len}), ({r.required_bytes_per_request / GIB:.2f} GiB KV cache is "
            f"needed, which is larger than the available KV cache memory "
            f"({r.available_kv_bytes / GIB:.2f} GiB). Based on the available memory, the estimated "
            f"maximum model length is {r.estimated_max_model_len}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    return lines


def vllm_view(r: VllmResult) -> View:
    lines = vllm_log_lines(r)
    facts = [
        ("engine", f"vLLM V1 {r.engine_version} rules"),
        ("model / GPU", f"{r.model['name']} on {r.gpu}, TP {r.tp} x PP {r.pp}"),
        ("available KV memory", f"{f.gib_text(r.available_kv_bytes)} per GPU"),
        ("page", f"{r.page_bytes:,} B per layer per block of {r.block_size} tokens"),
        (
            "groups",
            f"{r.num_groups} groups of {r.group_size} layers"
            + (f" ({r.padding_layers} padding layers)" if r.padding_layers else ""),
        ),
        ("num_blocks", f"{r.num_blocks:,}"),
        ("blocks per request", f"{r.blocks_per_request:,} at max_model_len {r.max_model_len:,}"),
        ("needed per request", f.gib_text(r.required_bytes_per_request)),
    ]
    data = jsonable(r)
    data["log_lines"] = lines
    data["groups"] = [{"group": i, **g} for i, g in enumerate(data["groups"])]
    tables = [
        Table(
            "log lines",
            [Column("line", "what vLLM logs", f.text, "left")],
            [{"line": line} for line in lines],
        ),
        Table(
            "KV-cache groups",
            [
                Column("group", "group", f.integer),
                Column("kind", "spec", f.text, "left"),
                Column("window", "window", f.integer),
                Column("block_size", "block (tokens)", f.integer),
                Column("layers", "layers", f.integer),
            ],
            data["groups"],
        ),
    ]
    title = f"vLLM {r.engine_version} allocation for {r.model['name']} on {r.gpu}"
    return view(title, r, facts, tables, data=data)


def sglang_log_lines(r: SglangResult) -> list[str]:
    shown = r.full_tokens if r.full_tokens is not None else r.kv_cache_tokens
    if r.mla:
        size = shown * r.num_layers * r.head_dim * r.element_bytes / GIB
        return [f"KV Cache is allocated. #tokens: {shown}, KV size: {size:.2f} GB"]
    size = shown * r.num_layers * r.kv_heads_per_rank * r.head_dim * r.element_bytes / GIB
    return [
        f"KV Cache is allocated. #tokens: {shown}, K size: {size:.2f} GB, V size: {size:.2f} GB"
    ]


def sglang_view(r: SglangResult) -> View:
    lines = sglang_log_lines(r)
    facts = [
        ("engine", f"SGLang {r.engine_version} rules"),
        ("cell size", f"{r.cell_size_bytes:,} B per token"),
        ("max_total_num_tokens", f"{r.kv_cache_tokens:,}"),
        ("concurrency", f"{r.max_concurrency:.2f} requests of {r.max_model_len:,} tokens"),
    ]
    data = jsonable(r)
    data["log_lines"] = lines
    table = Table(
        "log lines",
        [Column("line", "what SGLang logs", f.text, "left")],
        [{"line": line} for line in lines],
    )
    return view(f"SGLang allocation for {r.model['name']} on {r.gpu}", r, facts, [table], data=data)


def engine_view(result) -> View:
    return vllm_view(result) if result.engine == "vllm" else sglang_view(result)
