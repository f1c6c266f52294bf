"""llama.cpp's flags (and Ollama's preset) -> a LlamaCppRequest, ranges checked at the edge."""

from __future__ import annotations

from kvplan.errors import KvplanError

DEFAULT_HOST = "desktop-ddr5"  # the host profile for offloaded layers on a discrete GPU


def parse_gpu_layers(text: str | None) -> int | None:
    """-ngl: a count (0 to 100000), `all` (every layer), `auto` or unset (the most that fit)."""
    if text is None or str(text).strip().lower() == "auto":
        return None
    value = str(text).strip().lower()
    if value == "all":
        return 100000
    from kvplan.inputs.options import parse_int

    return parse_int(value, what="--n-gpu-layers", minimum=0, maximum=100000)


def parse_ctx_size(text: str | None) -> int | None:
    """-c: tokens (8192, 32k), 0 for the training context, unset for the build's default."""
    if text is None:
        return None
    if str(text).strip() == "0":
        return 0
    from kvplan.inputs.options import parse_tokens

    return parse_tokens(text, what="--ctx-size")


def llamacpp_request(spec, gpu, **o):
    from kvplan.engines.llamacpp import LLAMA_CPP_BUILD, LlamaCppRequest
    from kvplan.engines.ollama import OLLAMA_VERSION, ollama_settings, parse_env
    from kvplan.formulas.dtypes import ggml_type
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.options import parse_bytes

    ctx = parse_ctx_size(o["ctx_size"])
    parallel, kv_unified = o["parallel"], bool(o["kv_unified"])
    cache_k, cache_v, flash = o["cache_type_k"], o["cache_type_v"], o["flash_attn"]
    batch, ubatch, swa_full = o["batch_size"], o["ubatch_size"], bool(o["swa_full"])
    gpu_memory = parse_bytes(o["gpu_memory"], what="--gpu-memory") if o["gpu_memory"] else None
    notes = ()
    if o["ollama"] is not None or o["ollama_env"]:
        arch = spec.model_type.removeprefix("gguf:")
        preset = ollama_settings(
            o["ollama"] or OLLAMA_VERSION,
            parse_env(o["ollama_env"]),
            gpu_memory or gpu.usable_memory_bytes,
            spec.max_position_embeddings,
            arch,
        )
        # Ollama's num_ctx is per sequence: llama.cpp gets num_ctx x num_parallel in -np streams.
        parallel = parallel or preset.num_parallel
        ctx = (ctx or preset.num_ctx) * parallel
        cache_k, cache_v = cache_k or preset.cache_type, cache_v or preset.cache_type
        flash = flash or preset.flash_attn
        batch, ubatch = batch or 512, ubatch or 512
        swa_full = swa_full or preset.swa_full
        notes = preset.notes
    if o["weights_type"] is not None:
        ggml_type(o["weights_type"])  # a known ggml type, or a one-line error
    build = o["llama_build"] if o["llama_build"] is not None else LLAMA_CPP_BUILD
    host_name = o["cpu"] or (None if gpu.vendor.lower() == "apple" else DEFAULT_HOST)
    host = load_profile(host_name) if host_name else gpu  # a Mac's layers share one memory
    if o["device"] is not None and not o["device"].replace("_", "").isalnum():
        raise KvplanError(f"--device {o['device'][:20]!r}: a ggml device name (CUDA0, Vulkan1)")
    return LlamaCppRequest(
        ctx_size=ctx,
        parallel=parallel,
        kv_unified=kv_unified,
        batch_size=batch or 2048,
        ubatch_size=ubatch or 512,
        cache_type_k=cache_k or "f16",
        cache_type_v=cache_v or "f16",
        flash_attn=flash or "auto",
        n_gpu_layers=parse_gpu_layers(o["n_gpu_layers"]),
        swa_full=swa_full,
        build=build,
        gpu_memory_bytes=gpu_memory,
        weights_type=o["weights_type"],
        host=host,
        device=o["device"],
        preset_notes=notes,
    )
