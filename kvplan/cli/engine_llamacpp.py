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


def host_profile(gpu, cpu: str | None):
    """The CPU side of an offload: --cpu, else desktop DDR5 (a Mac's layers share one memory)."""
    from kvplan.inputs.hardware import load_profile

    host_name = cpu or (None if gpu.vendor.lower() == "apple" else DEFAULT_HOST)
    return load_profile(host_name) if host_name else gpu


def check_device(device: str | None, gpu) -> str | None:
    """--device: llama.cpp's own checks (kvplan.engines.llamacpp.device_name), its spelling."""
    if device is None:
        return None
    # llama.cpp's parse_device_list (common/arg.cpp): "none" offloads nothing, and a CPU device
    # is refused ("invalid device"); kvplan prices the layers offloaded to a GPU, so neither
    # may stand as the GPU's label
    if device.lower() in ("none", "cpu"):
        raise KvplanError(
            f"--device {device}: llama.cpp offloads to a GPU device (CUDA0, Vulkan1); "
            "--device none offloads nothing and a CPU device is refused (use -ngl 0 for no offload)"
        )
    from kvplan.engines.llamacpp import device_name

    return device_name(device, gpu)


def ollama_request(gpu, deprecated: bool = False, **o):
    """--engine ollama's options: its version, OLLAMA_* variables, the request's num_ctx (as
    --ctx) and num_gpu (as -ngl). `deprecated`: the old `--engine llama.cpp --ollama` spelling,
    whose -np, -ctk/-ctv and -fa become the variables Ollama reads them from."""
    from kvplan.dtypes import ggml_type
    from kvplan.engines.ollama import OLLAMA_VERSION, OllamaRequest, parse_env, parse_version
    from kvplan.inputs.options import parse_bytes
    from kvplan.notes import Note, note

    version = o["version"] or OLLAMA_VERSION
    parse_version(version)  # a one-line error for a malformed version
    env = parse_env(o["env"])
    notes: tuple[Note, ...] = ()
    if deprecated:
        notes = (note("ollama-flag-deprecated", version=version),)
        if o.get("parallel") is not None:
            env.setdefault("OLLAMA_NUM_PARALLEL", str(o["parallel"]))
        k, v = o.get("cache_type_k"), o.get("cache_type_v")
        if k and v and k != v:
            raise KvplanError("Ollama sets one cache type for K and V: give -ctk and -ctv alike")
        if k or v:
            env.setdefault("OLLAMA_KV_CACHE_TYPE", str(k or v))
        if o.get("flash_attn") in ("on", "off"):
            env.setdefault("OLLAMA_FLASH_ATTENTION", "1" if o["flash_attn"] == "on" else "0")
    num_ctx = parse_ctx_size(o["num_ctx"])
    if num_ctx == 0:
        raise KvplanError("--ctx 0: Ollama's num_ctx is a number of tokens (at least 4)")
    if o["weights_type"] is not None:
        ggml_type(o["weights_type"])
    device = check_device(o["device"], gpu)
    return OllamaRequest(
        version=version,
        env=tuple(sorted(env.items())),
        num_ctx=max(num_ctx, 4) if num_ctx else None,  # sched.go: num_ctx below 4 becomes 4
        num_gpu=parse_gpu_layers(o["n_gpu_layers"]),
        gpu_memory_bytes=None
        if o["gpu_memory"] is None
        else parse_bytes(o["gpu_memory"], what="--gpu-memory"),
        weights_type=o["weights_type"],
        host=host_profile(gpu, o["cpu"]),
        device=device,
        notes=notes,
    )


def llamacpp_request(spec, gpu, **o):
    from kvplan.dtypes import ggml_type
    from kvplan.engines.llamacpp import LLAMA_CPP_BUILD, LlamaCppRequest
    from kvplan.inputs.options import parse_bytes

    ctx = parse_ctx_size(o["ctx_size"])
    parallel, kv_unified = o["parallel"], bool(o["kv_unified"])
    cache_k, cache_v, flash = o["cache_type_k"], o["cache_type_v"], o["flash_attn"]
    batch, ubatch, swa_full = o["batch_size"], o["ubatch_size"], bool(o["swa_full"])
    gpu_memory = (
        None if o["gpu_memory"] is None else parse_bytes(o["gpu_memory"], what="--gpu-memory")
    )
    if o["weights_type"] is not None:
        ggml_type(o["weights_type"])  # a known ggml type, or a one-line error
    build = o["llama_build"] if o["llama_build"] is not None else LLAMA_CPP_BUILD
    host = host_profile(gpu, o["cpu"])
    device = check_device(o["device"], gpu)
    return LlamaCppRequest(
        ctx_size=ctx,
        parallel=parallel,
        kv_unified=kv_unified,
        batch_size=batch or 2048,
        ubatch_size=ubatch or 512,
        cache_type_k="f16" if cache_k is None else cache_k,
        cache_type_v="f16" if cache_v is None else cache_v,
        flash_attn="auto" if flash is None else flash,
        n_gpu_layers=parse_gpu_layers(o["n_gpu_layers"]),
        swa_full=swa_full,
        build=build,
        gpu_memory_bytes=gpu_memory,
        weights_type=o["weights_type"],
        host=host,
        device=device,
    )
