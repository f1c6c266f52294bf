"""What vLLM and SGLang would log, in their own words, from kvplan's allocation results."""

from __future__ import annotations

from kvplan.engines.sglang import MAX_PREFILL_TOKENS, SglangResult
from kvplan.engines.vllm import VllmResult
from kvplan.present import format as f
from kvplan.present.view import Column, Table, View, jsonable, view
from kvplan.units import GIB


def vllm_profile_lines(r: VllmResult) -> list[str]:
    """The memory-profile lines of vLLM 0.19, in its wording and rounding (rank 0; the DEBUG
    line of every further pipeline stage after it)."""
    if r.memory is None:
        return []
    first = r.memory[0]
    lines = [f"Model loading took {f.vllm_gib(first.weights.total_bytes)} GiB memory"]
    if first.cuda_graph_estimate_bytes:
        lines.append(
            f"Estimated CUDA graph memory: {first.cuda_graph_estimate_bytes / GIB:.2f} GiB total"
        )
    for m in r.memory:
        prefix = f"(PP rank {m.stage}) " if m.stage else ""
        lines.append(
            f"{prefix}Total non KV cache memory: {f.vllm_gib(m.non_kv_bytes)}GiB; torch peak "
            f"memory increase: {f.vllm_gib(m.peak.total_bytes)}GiB; non-torch forward increase "
            f"memory: {f.vllm_gib(m.non_torch_bytes)}GiB; weights memory: "
            f"{f.vllm_gib(m.weights.total_bytes)}GiB."
        )
    lines.append(f"Available KV cache memory: {f.vllm_gib(first.available_bytes)} GiB")
    return lines


def vllm_log_lines(r: VllmResult) -> list[str]:
    """The lines vLLM prints for this allocation, with vLLM's wording and rounding."""
    lines = vllm_profile_lines(r)
    lines += [
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


def vllm_memory_rows(r: VllmResult) -> list[dict]:
    """The profile of rank 0, term by term (what each logged figure is made of)."""
    if r.memory is None:
        return []
    m = r.memory[0]
    w, p = m.weights, m.peak
    rows = [
        ("requested: ceil(reported memory x utilization)", m.requested_bytes),
        ("weights memory", w.total_bytes),
        ("  layers on this rank", w.layers_bytes),
        ("  embedding (vocab padded to 64) / TP", w.embedding_bytes),
        ("  lm_head / TP", w.lm_head_bytes),
        ("  vision tower / TP", w.vision_bytes),
        ("  MLA W_UK and W_UV", w.mla_decompressed_bytes),
        ("  rotary tables", w.rotary_bytes),
        ("torch peak memory increase", p.total_bytes),
        ("  sampler phase (logits, sampler, outputs)", p.sampler_phase_bytes),
        ("  forward phase (MLP, activations)", p.forward_phase_bytes),
        ("  fused-MoE workspaces", p.moe_workspace_bytes),
        ("  persistent buffers (pipeline, encoder)", p.persistent_bytes),
        ("  cuBLAS workspaces, small buffers", p.fixed_bytes),
        ("non-torch forward increase memory", m.non_torch_bytes),
        ("total non KV cache memory", m.non_kv_bytes),
        ("estimated CUDA graph memory", m.cuda_graph_estimate_bytes),
        ("available KV cache memory", m.available_bytes),
    ]
    return [
        {"term": term, "bytes": value} for term, value in rows if value or not term.startswith(" ")
    ]


def vllm_view(r: VllmResult) -> View:
    lines = vllm_log_lines(r)
    facts = [
        ("engine", f"vLLM V1 {r.engine_version} rules"),
        ("model / GPU", f"{r.model['name']} on {r.gpu}, TP {r.tp} x PP {r.pp}"),
        (
            "dtypes",
            f"model {r.dtype}, weights {r.weights_dtype}, kv-cache-dtype {r.kv_cache_dtype}",
        ),
        (
            "batch",
            f"max_num_seqs {r.max_num_seqs:,}, max_num_batched_tokens {r.max_num_batched_tokens:,}",
        ),
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
    ]
    memory_rows = vllm_memory_rows(r)
    if memory_rows:
        tables.append(
            Table(
                "memory profile (rank 0)",
                [Column("term", "term", f.text, "left"), Column("bytes", "GiB", f.gib)],
                memory_rows,
            )
        )
    tables.append(
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
        )
    )
    title = f"vLLM {r.engine_version} allocation for {r.model['name']} on {r.gpu}"
    return view(title, r, facts, tables, data=data)


_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


def _kv_line(tokens: int, k_bytes: float, v_bytes: float | None) -> str:
    if v_bytes is None:
        return f"KV Cache is allocated. #tokens: {tokens}, KV size: {k_bytes / GIB:.2f} GB"
    return (
        f"KV Cache is allocated. #tokens: {tokens}, K size: {k_bytes / GIB:.2f} GB, "
        f"V size: {v_bytes / GIB:.2f} GB"
    )


def sglang_log_lines(r: SglangResult) -> list[str]:
    """SGLang's start-up lines for this pool (every buffer holds size + page_size rows)."""
    lines = []
    if r.weights_bytes is not None:
        after = r.free_before_load_bytes - r.weights_bytes
        lines.append(
            f"Load weight end. dtype={_TORCH_DTYPES.get(r.dtype, r.dtype)}, avail mem="
            f"{after / GIB:.2f} GB, mem usage={r.weights_bytes / GIB:.2f} GB."
        )
    if r.max_mamba_cache_size is not None:
        lines.append(
            f"Mamba Cache is allocated. max_mamba_cache_size: {r.max_mamba_cache_size}, "
            f"conv_state size: {r.mamba_conv_bytes / GIB:.2f}GB, ssm_state size: "
            f"{r.mamba_ssm_bytes / GIB:.2f}GB"
        )
    page, layers = r.block_size, r.num_layers
    per_layer = r.cell_size_bytes // layers - r.indexer_bytes_per_token
    if r.mla:
        rows = r.kv_cache_tokens + page
        size = rows * layers * per_layer
        if r.indexer_bytes_per_token:
            pages = (r.kv_cache_tokens + page + 1) // page
            size += pages * page * r.indexer_bytes_per_token * layers
        lines.append(_kv_line(r.kv_cache_tokens, size, None))
    elif r.full_tokens is not None:
        half = per_layer // 2
        lines.append(
            f"Use sliding window memory pool. full_layer_tokens={r.full_tokens}, "
            f"swa_layer_tokens={r.swa_tokens}"
        )
        full_layers = r.full_layers
        swa_layers = layers - full_layers
        for tokens, count in ((r.full_tokens, full_layers), (r.swa_tokens, swa_layers)):
            size = (tokens + page) * count * half
            lines.append(_kv_line(tokens, size, size))
    else:
        size = (r.kv_cache_tokens + page) * layers * (per_layer // 2)
        lines.append(_kv_line(r.kv_cache_tokens, size, size))
    lines.append(
        f"max_total_num_tokens={r.kv_cache_tokens}, chunked_prefill_size="
        f"{r.chunked_prefill_size}, max_prefill_tokens={MAX_PREFILL_TOKENS}, "
        f"max_running_requests={r.max_running_requests}, context_len={r.max_model_len}"
    )
    return lines


def sglang_view(r: SglangResult) -> View:
    lines = sglang_log_lines(r)
    facts = [
        ("engine", f"SGLang {r.engine_version} rules"),
        ("model / GPU", f"{r.model['name']} on {r.gpu}, TP {r.tp} x PP {r.pp}"),
        ("dtypes", f"model {r.dtype}, kv-cache-dtype {r.kv_cache_dtype}"),
        ("mem_fraction_static", f"{r.mem_fraction_static}"),
        ("pool", f"{f.gib_text(r.pool_bytes)} per GPU"),
        ("cell size", f"{r.cell_size_bytes:,} B per token allocated"),
        ("max_total_num_tokens", f"{r.kv_cache_tokens:,}"),
        ("concurrency", f"{r.max_concurrency:.2f} requests of {r.max_model_len:,} tokens"),
    ]
    if r.profile_cell_size_bytes != r.cell_size_bytes:
        facts.insert(6, ("profile cell size", f"{r.profile_cell_size_bytes:,} B per token"))
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
