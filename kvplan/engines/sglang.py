"""SGLang's KV pool (model_runner profile_max_num_token / set_num_token_hybrid), from the config.

cell_size = (kv_lora_rank + rope) x L x elem for MLA, else Hkv_rank x D x L x 2 x elem;
rest = memory after weights - total x (1 - mem_fraction_static);
max_total_num_tokens = rest // cell_size, rounded down to the page size.
"""

from __future__ import annotations

from kvplan import __version__
from kvplan.anatomy.model import ModelSpec, pp_stages
from kvplan.engines import EngineRequest
from kvplan.errors import KvplanError
from kvplan.formulas.weights import resolve_weights_dtype, weight_bytes
from kvplan.inputs.hardware import GpuProfile
from kvplan.present.view import Column, Report, Table, fmt_text, unique_notes
from kvplan.units import GIB, parse_bytes

SGLANG_VERSION = "0.5"
SWA_FULL_TOKENS_RATIO = 0.8
_ELEMENT = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def sglang_report(spec: ModelSpec, gpu: GpuProfile, request: EngineRequest) -> Report:
    if request.kv_cache_dtype not in _ELEMENT:
        raise KvplanError(
            f"--kv-dtype {request.kv_cache_dtype!r} is not an SGLang kv-cache-dtype "
            f"({', '.join(_ELEMENT)})"
        )
    spec.check_tp(request.tp)
    fraction = request.mem_fraction_static or 0.9
    if not 0.05 <= fraction <= 1:
        raise KvplanError("--mem-fraction-static must be between 0.05 and 1")
    if any(layer.state for layer in spec.layers):
        raise KvplanError("kvplan does not model SGLang's Mamba/linear-attention pools yet")
    page = request.block_size or 1
    elem = _ELEMENT[request.kv_cache_dtype] or {"bf16": 2, "fp16": 2, "fp32": 4}[spec.dtype]
    stage = max(pp_stages(spec, request.pp), key=lambda s: len(s.attention_layers()))
    attn = stage.attention_layers()
    layers = len(attn)
    total = gpu.usable_memory_bytes
    notes = [
        f"Rules of SGLang {SGLANG_VERSION} (model_runner.profile_max_num_token); "
        f"mem_fraction_static {fraction}"
        + (
            ""
            if request.mem_fraction_static
            else " (SGLang picks its own default per GPU; pass --mem-fraction-static to match)"
        )
        + "."
    ]
    if request.kv_cache_memory:
        rest = parse_bytes(request.kv_cache_memory, what="--kv-cache-memory")
    else:
        wdtype, _ = resolve_weights_dtype(spec, "auto")
        weights = (weight_bytes(spec, wdtype) + spec.vision_params * 2) / (request.tp * request.pp)
        rest = int(total - weights - total * (1 - fraction))
        notes.append(
            f"Memory after weights {(total - weights) / GIB:,.2f} GiB minus "
            f"{total * (1 - fraction) / GIB:,.2f} GiB kept free = {rest / GIB:,.2f} GiB "
            "for the pool."
        )
    if rest <= 0:
        raise KvplanError("no memory is left for SGLang's KV pool: the weights do not fit")
    a = attn[0]
    mla = a.kind == "mla"
    heads = 1 if mla else max(1, a.num_kv_heads // request.tp)
    if mla:
        cell = a.head_dim * layers * elem
    else:
        cell = heads * a.head_dim * layers * 2 * elem
    tokens = int(rest // cell) // page * page
    full_tokens = swa_tokens = None
    kinds = [x.kind for x in attn]
    n_swa = sum(k in ("sliding", "chunked") for k in kinds)
    n_full = layers - n_swa
    if n_swa and n_full:
        total_layer_tokens = tokens * layers
        if "chunked" in kinds:  # Llama 4
            chunk = next(x.window for x in attn if x.kind == "chunked")
            temp = chunk / request.max_model_len
            swa_tokens = int(4 * tokens * temp // (3 * temp + 1))
            full_tokens = int(4 * tokens - 12 * tokens * temp // (3 * temp + 1))
        else:
            full_tokens = int(total_layer_tokens / (SWA_FULL_TOKENS_RATIO * n_swa + n_full))
            swa_tokens = int(SWA_FULL_TOKENS_RATIO * full_tokens)
        full_tokens = full_tokens // page * page
        swa_tokens = swa_tokens // page * page
        notes.append(
            f"Hybrid SWA: {n_swa} windowed and {n_full} full layers share the pool "
            f"(swa_full_tokens_ratio {SWA_FULL_TOKENS_RATIO})."
        )
    shown = full_tokens if full_tokens is not None else tokens
    if mla:
        size = shown * layers * a.head_dim * elem / GIB
        log = f"KV Cache is allocated. #tokens: {shown}, KV size: {size:.2f} GB"
    else:
        size = shown * layers * heads * a.head_dim * elem / GIB
        log = (
            f"KV Cache is allocated. #tokens: {shown}, K size: {size:.2f} GB, V size: {size:.2f} GB"
        )
    concurrency = shown / request.max_model_len
    fits = shown >= request.max_model_len
    log_lines = [log]
    notes = unique_notes(notes)
    data = {
        "kvplan_version": __version__,
        "engine": "sglang",
        "engine_version": SGLANG_VERSION,
        "model": {"name": spec.name},
        "gpu": gpu.name,
        "tp": request.tp,
        "pp": request.pp,
        "cell_size_bytes": cell,
        "num_blocks": tokens // page,
        "block_size": page,
        "kv_cache_tokens": tokens,
        "full_tokens": full_tokens,
        "swa_tokens": swa_tokens,
        "max_concurrency": concurrency,
        "padding_layers": 0,
        "required_bytes_per_request": cell * request.max_model_len,
        "fits": fits,
        "estimated_max_model_len": None if fits else shown,
        "log_lines": log_lines,
        "notes": notes,
    }
    facts = [
        ("engine", f"SGLang {SGLANG_VERSION} rules"),
        ("cell size", f"{cell:,} B per token"),
        ("max_total_num_tokens", f"{tokens:,}"),
        ("concurrency", f"{concurrency:.2f} requests of {request.max_model_len:,} tokens"),
    ]
    table = Table(
        "log lines",
        [Column("line", "what SGLang logs", fmt_text, "left")],
        [{"line": line} for line in log_lines],
    )
    return Report(f"SGLang allocation for {spec.name} on {gpu.name}", facts, [table], notes, data)
