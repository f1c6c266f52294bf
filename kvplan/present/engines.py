"""What vLLM and SGLang would log, in their own words, from kvplan's allocation results."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.engines.vllm import NULL_BLOCK_CHECK_FROM, VllmResult
from kvplan.present import format as f
from kvplan.present.view import Column, Fact, Table, Verdict, View, jsonable, judged, view
from kvplan.units import GIB, MIB

if TYPE_CHECKING:  # SGLang's and llama.cpp's modules load where their engine is asked for
    from kvplan.engines.sglang import SglangCompressedResult, SglangResult


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
    elif r.engine_version == NULL_BLOCK_CHECK_FROM:
        # kv_cache_utils._check_enough_kv_cache_memory, 0.32: format_gib, the memory less the
        # null block, the CPU remark
        estimate = (
            f"Based on the available memory, the estimated maximum model length is "
            f"{r.estimated_max_model_len}. "
            if r.estimated_max_model_len
            else ""
        )
        lines.append(
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({r.max_model_len}), ({f.vllm_gib(r.required_bytes_per_request)} GiB KV cache is "
            f"needed, which is larger than the available KV cache memory "
            f"({f.vllm_gib(r.check_bytes)} GiB). {estimate}Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
            "decreasing `max_model_len` when initializing the engine."
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


def _packed(r: VllmResult) -> bool:
    """DeepSeek-V4's packed layout: groups of several page sizes sharing one block."""
    return bool(r.groups) and hasattr(r.groups[0], "label")


def _page_facts(r: VllmResult) -> list[tuple[str, str]]:
    if _packed(r):
        return [
            (
                "block",
                f"{r.page_bytes:,} B: one block of every group's pages side by side "
                f"(engine block {r.block_size} tokens)",
            ),
            ("groups", f"{r.num_groups} groups, the pages of up to {r.group_size} caches each"),
        ]
    return [
        (
            "page",
            f"{r.page_bytes:,} B per block of {r.block_size} tokens over all {r.group_size} layers"
            if r.uniform_type
            else f"{r.page_bytes:,} B per layer per block of {r.block_size} tokens",
        ),
        (
            "groups",
            f"{r.num_groups} group{'s' if r.num_groups != 1 else ''} of {r.group_size} layers"
            + (f" ({r.padding_layers} padding layers)" if r.padding_layers else ""),
        ),
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
        *_page_facts(r),
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
            [
                Column(
                    "line",
                    "what vLLM logs",
                    f.text,
                    "left",
                    verdict=lambda row: Verdict.bad if row.get("refused") else None,
                )
            ],
            # when it does not fit, the last line is vLLM's refusal
            [
                {"line": line, **({"refused": True} if not r.fits and i == len(lines) else {})}
                for i, line in enumerate(lines, 1)
            ],
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
    columns = [
        Column("group", "group", f.integer),
        Column("kind", "spec", f.text, "left"),
        Column("window", "window", f.integer),
        Column("block_size", "block (tokens)", f.integer),
        Column("layers", "layers", f.integer),
    ]
    if _packed(r):
        columns += [
            Column("page_bytes", "bytes in a block", f.integer),
            Column("pages_per_request", "blocks a request", f.integer),
            Column("label", "caches", f.text, "left"),
        ]
    tables.append(Table("KV-cache groups", columns, data["groups"]))
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
    from kvplan.engines.sglang import MAX_PREFILL_TOKENS

    lines = []
    if r.weights_bytes is not None and r.free_before_load_bytes is not None:  # set together
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
    indexer_total = r.indexer_bytes_per_token * r.indexer_layers
    per_layer = (r.cell_size_bytes - indexer_total) // layers
    if r.mla:
        rows = r.kv_cache_tokens + page
        size = rows * layers * per_layer
        if r.indexer_bytes_per_token:
            pages = (r.kv_cache_tokens + page + 1) // page
            size += pages * page * indexer_total
        lines.append(_kv_line(r.kv_cache_tokens, size, None))
    elif r.full_tokens is not None:
        lines.append(
            f"Use sliding window memory pool. full_layer_tokens={r.full_tokens}, "
            f"swa_layer_tokens={r.swa_tokens}"
        )
        full_layers = r.full_layers
        swa_layers = layers - full_layers
        pools = (
            (r.full_tokens, full_layers, r.full_layer_bytes_per_token),
            (r.swa_tokens, swa_layers, r.swa_layer_bytes_per_token),
        )
        for tokens, count, layer_bytes in pools:
            assert tokens is not None and layer_bytes is not None, "both pools are sized"
            size = (tokens + page) * count * (layer_bytes // 2)  # K, and V the same
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


def sglang_compressed_log_lines(r: SglangCompressedResult) -> list[str]:
    """SGLang 0.5.14's DeepSeek-V4 pool lines (pool_configurator.py DSV4PoolConfigurator,
    deepseek_v4_memory_pool.py DeepSeekV4TokenToKVPool), in its wording."""
    p = r.pools
    return [
        f"DSV4 memory calculation: bytes_per_full_token={p.bytes_per_full_token:.2f}, "
        f"available_bytes={p.available_bytes / (1 << 30):.2f} GB, full_token={p.full_tokens}",
        f"DSV4 pool sizes: full={p.full_tokens}, swa={p.swa_tokens}, c4={p.c4_tokens}, "
        f"c128={p.c128_tokens}, c4_state={p.c4_state_pool_size}, "
        f"c128_state={p.c128_state_pool_size}",
        f"Initialize DeepSeekV4TokenToKVPool with max_num_reqs={p.max_running_requests} "
        f"swa_size={p.swa_tokens} c4_size={p.c4_tokens} c4_logical_size={p.c128_tokens * 32} "
        f"c128_size={p.c128_tokens} c4_state_pool_size={p.c4_state_pool_size} "
        f"c128_state_pool_size={p.c128_state_pool_size}",
    ]


def sglang_compressed_view(r: SglangCompressedResult) -> View:
    lines = sglang_compressed_log_lines(r)
    p = r.pools
    facts = [
        ("engine", f"SGLang {r.engine_version} rules (DeepSeek-V4 pools)"),
        ("model / GPU", f"{r.model['name']} on {r.gpu}, TP {r.tp} x PP {r.pp}"),
        ("dtypes", f"model {r.dtype}, kv-cache-dtype {r.kv_cache_dtype}"),
        ("pool", f"{f.gib_text(p.available_bytes)} per GPU"),
        ("bytes per full token", f"{p.bytes_per_full_token:,.2f} B over {p.layers} layers"),
        ("max_total_num_tokens", f"{r.kv_cache_tokens:,} (page {r.block_size})"),
        ("max_running_requests", f"{r.max_running_requests:,}"),
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
    if result.engine in ("llama.cpp", "ollama"):
        return llamacpp_view(result)
    if result.engine == "vllm":
        return vllm_view(result)
    return sglang_compressed_view(result) if hasattr(result, "pools") else sglang_view(result)


# ---- llama.cpp ---------------------------------------------------------------------------------
def _mib(num_bytes: float) -> float:
    return num_bytes / MIB


def _context_prefix(build: int) -> str:
    if build >= 4881:
        return "llama_context"
    return "llama_init_from_model" if build >= 4463 else "llama_new_context_with_model"


def _kv_prefix(build: int) -> str:
    """The KV cache's class name, as its lines begin."""
    if build >= 6233:
        return "llama_kv_cache"
    if build >= 5262:
        return "llama_kv_cache_unified"
    return "init" if build >= 4881 else "llama_kv_cache_init"


def _kv_summary(build: int, c) -> str:
    """The one-line KV summary in the format of the build (printf widths as llama.cpp's)."""
    k, v, total = _mib(c.k_bytes), _mib(c.v_bytes), _mib(c.total_bytes)
    kv = f"K ({c.k_type}): {k:7.2f} MiB, V ({c.v_type}): {v:7.2f} MiB"
    if build < 2000:  # late-2023 builds: one lowercase total
        return f"{_context_prefix(build)}: kv self size  = {total:7.2f} MiB"
    if build < 5429:
        if build >= 5262:
            prefix = "llama_kv_cache_unified"
        else:
            prefix = _context_prefix(build)
        return f"{prefix}: KV self size  = {total:7.2f} MiB, {kv}"
    if build >= 6072:
        seqs = f"{c.seqs:2d}/{c.streams} seqs"
    elif build >= 5913:
        seqs = f"{c.seqs:2d}/{c.streams:2d} seqs"
    elif build >= 5441:
        seqs = f"{c.seqs:2d} seqs"
    else:
        seqs = ""
    shape = f"{c.cells:6d} cells, {c.layers:3d} layers" + (f", {seqs}" if seqs else "")
    return f"{_kv_prefix(build)}: size = {total:7.2f} MiB ({shape}), {kv}"


def _recurrent_summary(build: int, c) -> str:
    from kvplan.engines.llamacpp import LLAMA_CPP_ORACLE_BUILD

    r, s = _mib(c.k_bytes), _mib(c.v_bytes)
    states = f"R ({c.k_type}): {r:7.2f} MiB, S ({c.v_type}): {s:7.2f} MiB"
    if build < 5856:
        return f"llama_memory_recurrent: KV self size  = {_mib(c.total_bytes):7.2f} MiB, {states}"
    rs = f" {0:2d} rs_seq" if build >= 9180 else ""
    if build >= LLAMA_CPP_ORACLE_BUILD:  # the PLE conv history (none outside Gemma 3n-like models)
        states += f", P ({c.k_type}): {0:7.2f} MiB"
    return (
        f"llama_memory_recurrent: size = {_mib(c.total_bytes):7.2f} MiB ({c.cells:6d} cells, "
        f"{c.layers:3d} layers, {c.seqs:2d} seqs{rs}), {states}"
    )


def _offload_lines(build: int, p) -> list[str]:
    prefix = "load_tensors" if build >= 4463 else "llm_load_tensors"
    if build >= 7467:
        n_gpu = min(p.n_gpu_layers, p.num_layers)
        lines = [f"{prefix}: offloading output layer to GPU"] if n_gpu > 0 else []
        lines.append(f"{prefix}: offloading {max(n_gpu - 1, 0)} repeating layers to GPU")
    else:
        lines = [
            f"{prefix}: offloading {min(p.n_gpu_layers, p.num_layers)} repeating layers to GPU"
        ]
        if p.n_gpu_layers > p.num_layers:
            word = "output layer" if build >= 3990 else "non-repeating layers"
            lines.append(f"{prefix}: offloading {word} to GPU")
    lines.append(f"{prefix}: offloaded {p.n_gpu_layers}/{p.num_layers + 1} layers to GPU")
    return lines


def llamacpp_log_lines(r) -> list[str]:
    """The lines llama.cpp (llama-server, the build in r.settings.build) prints for this
    allocation, with its printf formats: offload, context, KV and recurrent caches."""
    from kvplan.engines.llamacpp import LLAMA_CPP_ORACLE_BUILD

    s, p, build = r.settings, r.placement, r.settings.build
    lines = _offload_lines(build, p)
    buffer_word = "model buffer size" if build >= 3990 else "buffer size"
    for b in r.model_buffers:
        lines.append(
            f"{'load_tensors' if build >= 4463 else 'llm_load_tensors'}: {b.device:>12} "
            f"{buffer_word} = {_mib(b.bytes):8.2f} MiB"
        )
    ctx = _context_prefix(build)
    if build >= 6325:
        fa = (
            "auto"
            if r.flash_attn_requested == "auto"
            else ("enabled" if s.flash_attn else "disabled")
        )
    else:
        fa = str(int(s.flash_attn))
    shown_ctx = s.n_ctx_seq if build < 4881 and s.kv_unified else s.n_ctx
    width = 21 if build >= LLAMA_CPP_ORACLE_BUILD else 13  # printf's name column

    def setting(name: str, value: object) -> str:
        return f"{ctx}: {name:<{width}} = {value}"

    rounded = [n for n in r.notes if n.id == "llamacpp-ctx-rounded"]
    if rounded and build >= LLAMA_CPP_ORACLE_BUILD:  # printed before the settings
        lines.append(
            f"{ctx}: n_ctx is not divisible by n_seq_max - rounding down to "
            f"{rounded[0].value('n_ctx')}"
        )
    lines += [setting("n_seq_max", s.n_seq_max), setting("n_ctx", shown_ctx)]
    per_seq = "n_ctx_seq" if build >= 6925 else "n_ctx_per_seq"
    if build >= 4014:
        lines.append(setting(per_seq, s.n_ctx_seq if build >= 6071 else s.n_ctx // s.n_seq_max))
    lines += [
        setting("n_batch", s.n_batch),
        setting("n_ubatch", s.n_ubatch),
        setting("flash_attn", fa),
    ]
    if build >= 5913:
        lines.append(setting("kv_unified", "true" if s.kv_unified else "false"))
    if s.n_ctx_train and s.n_ctx_seq < s.n_ctx_train and build >= 4014:
        lines.append(
            f"{ctx}: {per_seq} ({s.n_ctx_seq}) < n_ctx_train ({s.n_ctx_train}) -- the "
            "full capacity of the model will not be utilized"
        )
    if s.n_ctx_train and s.n_ctx_seq > s.n_ctx_train and build >= LLAMA_CPP_ORACLE_BUILD:
        lines.append(
            f"{ctx}: {per_seq} ({s.n_ctx_seq}) > n_ctx_train ({s.n_ctx_train}) -- possible "
            "training context overflow"
        )
    host = "CUDA_Host" if r.backend.startswith("CUDA") else "CPU"
    lines.append(f"{ctx}: {host:>10}  output buffer size = {_mib(r.output_buffer_bytes):8.2f} MiB")
    iswa = any(c.kind == "swa" for c in r.caches)
    iswa_prefix = "llama_kv_cache_iswa" if build >= 6233 else "llama_kv_cache_unified_iswa"
    for c in r.caches:
        if c.kind == "recurrent":
            for b in c.buffers:
                lines.append(
                    f"llama_memory_recurrent: {b.device:>10} RS buffer size = "
                    f"{_mib(b.bytes):8.2f} MiB"
                )
            lines.append(_recurrent_summary(build, c))
            continue
        if iswa:
            label = "    SWA" if c.kind == "swa" else "non-SWA"
            lines.append(f"{iswa_prefix}: creating {label} KV cache, size = {c.cells} cells")
        if 5262 <= build < 5429:
            lines.append(
                f"llama_kv_cache_unified: kv_size = {c.cells}, type_k = '{c.k_type}', type_v = "
                f"'{c.v_type}', n_layer = {c.layers}, can_shift = 1, padding = {s.cells_pad}"
            )
        if build >= 2000:
            for b in c.buffers:
                lines.append(
                    f"{_kv_prefix(build)}: {b.device:>10} KV buffer size = {_mib(b.bytes):8.2f} MiB"
                )
        lines.append(_kv_summary(build, c))
    if r.flash_attn_requested == "auto" and s.flash_attn and build >= LLAMA_CPP_ORACLE_BUILD:
        lines.append("resolve_fused_ops: Flash Attention enabled")  # -fa auto, once reserved
    return lines


def llamacpp_view(r) -> View:
    lines = llamacpp_log_lines(r)
    s, p = r.settings, r.placement
    decode = r.decode[-1]
    engine = ("engine", f"llama.cpp rules of b{s.build} (llama-server)")
    if r.engine == "ollama":
        o = r.ollama
        engine = (
            "engine",
            f"Ollama {r.engine_version}: num_ctx {o.num_ctx:,}, OLLAMA_NUM_PARALLEL "
            f"{o.num_parallel}, OLLAMA_KV_CACHE_TYPE {o.cache_type}, flash attention "
            f"{o.flash_attn} (llama-server b{s.build} underneath)",
        )
    facts = [
        engine,
        ("model / GPU", f"{r.model['name']} on {r.gpu} ({r.backend})"),
        (
            "context",
            f"-c {s.n_ctx:,}: {s.n_seq_max} sequence{'s' if s.n_seq_max > 1 else ''}, "
            + (
                "one unified stream"
                if s.kv_unified
                else f"{s.n_stream} stream{'s' if s.n_stream > 1 else ''}"
            )
            + f" of {s.n_ctx_seq:,} cells",
        ),
        (
            "cache types",
            f"K {s.cache_type_k}, V {s.cache_type_v}, flash attention "
            + ("on" if s.flash_attn else "off"),
        ),
        (
            "layers on GPU",
            f"-ngl {p.n_gpu_layers} of {p.num_layers + 1}"
            + (" (the most that fit)" if p.auto else "")
            + f"; at most {r.max_gpu_layers} fit",
        ),
        Fact(
            "GPU memory",
            f"{f.gib_text(r.gpu_memory.total_bytes)} of {f.gib_text(r.gpu_capacity_bytes)}"
            + (" (fits)" if r.fits else " (does NOT fit)"),
            verdict=judged(r.fits),
        ),
        ("host memory", f.gib_text(r.host_memory.total_bytes)),
        (
            "decode ceiling",
            f"{decode.tok_per_s:,.1f} tok/s per sequence at {decode.context_len:,} tokens "
            f"({r.gpu} + {r.host})",
        ),
    ]
    if r.ollama_estimate is not None:
        e = r.ollama_estimate
        facts.append(
            (
                "Ollama's estimate",
                f"{f.gib_text(e.total_bytes)} (file {f.gib_text(e.weights_bytes)} + f16 cache "
                f"{f.gib_text(e.kv_bytes)} at {e.context_tokens:,} tokens; it evicts other "
                "models above 80% of free memory)",
            )
        )
    if r.recommended is not None:
        facts.append(
            (
                "choose",
                f"weights {r.recommended.weights_type} with a {r.recommended.cache_type} cache "
                f"for -c {s.n_ctx:,} on the GPU",
            )
        )
    data = jsonable(r)
    data["log_lines"] = lines
    tables = [
        Table(
            "log lines",
            [Column("line", "what llama.cpp logs", f.text, "left")],
            [{"line": line} for line in lines],
        ),
        Table(
            "memory",
            [
                Column("device", "device", f.text, "left"),
                Column("weights_bytes", "weights (GiB)", f.gib),
                Column("kv_bytes", "KV (GiB)", f.gib),
                Column("state_bytes", "state (GiB)", f.gib),
                Column("reserve_bytes", "reserve (GiB)", f.gib),
                Column("total_bytes", "total (GiB)", f.gib),
            ],
            [{**m._asdict(), "total_bytes": m.total_bytes} for m in (r.gpu_memory, r.host_memory)],
        ),
        Table(
            "decode ceiling (one sequence, memory-bound)",
            [
                Column("context_len", "context (tokens)", f.integer),
                Column("gpu_read_bytes", "read on GPU (GiB)", f.gib),
                Column("host_read_bytes", "read on host (GiB)", f.gib),
                Column("step_s", "step (ms)", f.ms),
                Column("tok_per_s", "tok/s", f.fixed(1)),
            ],
            [d._asdict() for d in r.decode],
        ),
        Table(
            "largest -c that fits with every layer on the GPU",
            [
                Column("cache_type", "cache type (K = V)", f.text, "left"),
                Column("max_ctx_size", "largest -c (tokens)", f.integer),
                Column("capped", "= training context", f.yes_no),
                Column("kv_bytes", "cache (GiB)", f.gib),
            ],
            [c._asdict() for c in r.context_fit],
        ),
        Table(
            f"weights x cache at -c {s.n_ctx:,}, every layer on the GPU",
            [
                Column("weights_type", "weights", f.text, "left"),
                Column("cache_type", "cache", f.text, "left"),
                Column("weights_bytes", "weights (GiB)", f.gib),
                Column("gpu_bytes", "GPU total (GiB)", f.gib),
                Column("fits", "fits", f.yes_no, verdict=lambda row: judged(row["fits"])),
                Column("tok_per_s", "tok/s", f.fixed(1)),
            ],
            [q._asdict() for q in r.quant_choices],
        ),
    ]
    who = "Ollama" if r.engine == "ollama" else "llama.cpp"
    title = f"{who} allocation for {r.model['name']} on {r.gpu}"
    return view(title, r, facts, tables, data=data)
