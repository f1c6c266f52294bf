"""kvplan engine: what vLLM, SGLang or llama.cpp will allocate and log, in the engine's own flag
spelling."""

from __future__ import annotations

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = (
    "Example: kvplan engine gemma-3-27b --engine vllm --gpu h100 --max-model-len 8192 "
    "--kv-cache-memory 19.53GiB"
)

# Flags that belong to one engine only: given with another, they are an error, never ignored.
ONLY = {
    "vllm": (
        "--gpu-memory-utilization",
        "--hybrid-chunked",
        "--disable-hybrid-kv-cache-manager",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--quantization",
        "--enforce-eager",
        "--vllm-version",
        "--decode-context-parallel-size",
    ),
    "sglang": ("--mem-fraction-static", "--sglang-version"),
    "llama.cpp": (
        "--ctx-size",
        "--parallel",
        "--kv-unified",
        "--batch-size",
        "--ubatch-size",
        "--cache-type-k",
        "--cache-type-v",
        "--flash-attn",
        "--n-gpu-layers",
        "--swa-full",
        "--ollama",
        "--ollama-env",
        "--ollama-version",
        "--llama-build",
        "--device",
        "--cpu",
        "--gpu-memory",
        "--weights-type",
    ),
}
# vLLM/SGLang flags that mean nothing to llama.cpp
NOT_LLAMACPP = (
    "--kv-cache-dtype",
    "--block-size",
    "--tp",
    "--pp",
    "--kv-cache-memory",
    "--dtype",
    "--weights-dtype",
    "--allow-long-max-model-len",
)
# llama.cpp's flags that Ollama takes too (a request's num_gpu is -ngl)
OLLAMA_SHARED = (
    "--ollama",
    "--ollama-env",
    "--ollama-version",
    "--n-gpu-layers",
    "--device",
    "--cpu",
    "--gpu-memory",
    "--weights-type",
)
# where Ollama takes what a llama.cpp flag sets
OLLAMA_INSTEAD = {
    "--ctx-size": "--ctx (a request's num_ctx, per sequence) or OLLAMA_CONTEXT_LENGTH",
    "--parallel": "--ollama-env OLLAMA_NUM_PARALLEL=N",
    "--cache-type-k": "--ollama-env OLLAMA_KV_CACHE_TYPE=q8_0",
    "--cache-type-v": "--ollama-env OLLAMA_KV_CACHE_TYPE=q8_0",
    "--flash-attn": "--ollama-env OLLAMA_FLASH_ATTENTION=1",
}
LLAMACPP_INSTEAD = {
    "--kv-cache-dtype": " (its cache: --cache-type-k, --cache-type-v)",
    "--dtype": " (its weights: --weights-type)",
    "--weights-dtype": " (its weights: --weights-type)",
}


def add(app: typer.Typer) -> None:
    @app.command("engine", epilog=EXAMPLE)
    @c.command
    def engine_cmd(
        model: str = c.model_argument(),
        engine: str = typer.Option(
            "vllm", "--engine", help="The engine: vllm, sglang, llama.cpp or ollama."
        ),
        gpu: str = c.gpu_option(),
        max_model_len: str = typer.Option(
            None,
            "--max-model-len",
            "--context-length",
            "--ctx",
            help="Longest request the engine admits (8192, 8k, 128k; default 8k). llama.cpp: as -c.",
        ),
        allow_long: bool = c.allow_long_option(),
        kv_cache_dtype: str = typer.Option(
            None,
            "--kv-cache-dtype",
            "--kv-dtype",
            help="The engine's kv-cache-dtype (vLLM: auto, bfloat16, fp8, fp8_e4m3, fp8_ds_mla, "
            "nvfp4, ...; SGLang: auto, bfloat16, fp8_e4m3, ...).",
        ),
        block_size: int = typer.Option(
            None,
            "--block-size",
            "--page-size",
            min=1,
            max=4096,
            help="Tokens per block (vLLM 16, MLA 64; SGLang page size 1).",
        ),
        max_num_batched_tokens: int = typer.Option(
            None,
            "--max-num-batched-tokens",
            min=1,
            max=1 << 24,
            help="vLLM: the token budget per step (1 to 16,777,216; default 8192 on GPUs of "
            "70 GiB or more except A100, else 2048).",
        ),
        max_num_seqs: int = typer.Option(
            None,
            "--max-num-seqs",
            min=1,
            max=1 << 20,
            help="vLLM: requests per step (1 to 1,048,576; default 1024 on GPUs of 70 GiB or "
            "more except A100, else 256); sizes the sampler's profiling run.",
        ),
        dtype: str = typer.Option(
            None,
            "--dtype",
            help="The engine's model dtype (auto, bfloat16, float16, float32); auto keeps the "
            "config's but serves float32 in 16 bits; kv-cache-dtype auto follows it.",
        ),
        quantization: str = typer.Option(
            None,
            "--quantization",
            "-q",
            help="vLLM: the quantization method (fp8 quantizes a bf16 checkpoint online; awq, "
            "gptq, mxfp4, ...).",
        ),
        weights_dtype: str = c.weights_dtype_option(),
        enforce_eager: bool = typer.Option(
            None,
            "--enforce-eager/--no-enforce-eager",
            help="vLLM: no CUDA graphs (no graph-memory estimate).",
        ),
        dcp: int = typer.Option(
            1,
            "--decode-context-parallel-size",
            "-dcp",
            "--dcp",
            help="vLLM: shard the KV cache along tokens over this many ranks of the TP group "
            "(the cache size line counts dcp x the tokens).",
        ),
        vllm_version: str = typer.Option(
            None,
            "--vllm-version",
            help="vLLM: 0.19 (default), 0.21 (CUDA-graph memory subtracted, new cache-size "
            "line) or 0.32 (the start-up fit check holds back the null block).",
        ),
        tp: int = typer.Option(
            1, "--tensor-parallel-size", "--tp", min=1, max=c.MAX_TP, help="Tensor-parallel size."
        ),
        pp: int = typer.Option(
            1,
            "--pipeline-parallel-size",
            "--pp",
            min=1,
            max=c.MAX_TP,
            help="Pipeline-parallel size.",
        ),
        gpu_mem_util: float = typer.Option(
            None,
            "--gpu-memory-utilization",
            "--gpu-mem-util",
            help="vLLM: fraction of GPU memory the engine may use (0.05 to 1; default 0.9).",
        ),
        sglang_version: str = typer.Option(
            None,
            "--sglang-version",
            help="SGLang: the release whose defaults apply, 0.4 or 0.5 (default; another runs "
            "with the nearest).",
        ),
        mem_fraction_static: float = typer.Option(
            None,
            "--mem-fraction-static",
            help="SGLang: fraction of memory for weights and KV pool (0.05 to 1; default 0.9).",
        ),
        kv_cache_memory: str = typer.Option(
            None,
            "--kv-cache-memory",
            help="The available KV memory the engine logged (19.53GiB): exact block counts.",
        ),
        hybrid_chunked: bool = typer.Option(
            None,
            "--hybrid-chunked/--no-hybrid-chunked",
            help="vLLM: keep chunked layers chunked (the default; --no-hybrid-chunked is "
            "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0).",
        ),
        disable_hma: bool = typer.Option(
            None,
            "--disable-hybrid-kv-cache-manager",
            help="vLLM: store sliding and chunked layers as full attention when the model also "
            "has full layers.",
        ),
        ctx_size: str = typer.Option(
            None, "-c", "--ctx-size", help="llama.cpp: context size, all sequences (0: training)."
        ),
        parallel: int = typer.Option(
            None, "-np", "--parallel", min=1, max=256, help="llama.cpp: sequences (1 to 256)."
        ),
        kv_unified: bool = typer.Option(
            None, "-kvu", "--kv-unified", help="llama.cpp: one cache shared by all sequences."
        ),
        batch_size: int = typer.Option(
            None, "-b", "--batch-size", min=1, max=1 << 20, help="llama.cpp: logical batch (2048)."
        ),
        ubatch_size: int = typer.Option(
            None,
            "-ub",
            "--ubatch-size",
            min=1,
            max=1 << 20,
            help="llama.cpp: physical batch (512).",
        ),
        cache_type_k: str = typer.Option(
            None,
            "-ctk",
            "--cache-type-k",
            help="llama.cpp: K cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1).",
        ),
        cache_type_v: str = typer.Option(
            None, "-ctv", "--cache-type-v", help="llama.cpp: V cache type (as -ctk)."
        ),
        flash_attn: str = typer.Option(
            None, "-fa", "--flash-attn", help="llama.cpp: on, off or auto (default auto)."
        ),
        n_gpu_layers: str = typer.Option(
            None,
            "-ngl",
            "--n-gpu-layers",
            "--gpu-layers",
            help="llama.cpp: layers on the GPU, the output layer first (N, all, auto).",
        ),
        swa_full: bool = typer.Option(
            None, "--swa-full", help="llama.cpp: full-size cache for sliding-window layers."
        ),
        ollama: str = typer.Option(
            None,
            "--ollama",
            help="Deprecated: --engine ollama --ollama-version V (with --engine llama.cpp it "
            "still answers as Ollama, with a note).",
        ),
        ollama_version: str = typer.Option(
            None,
            "--ollama-version",
            help="Ollama: the release whose defaults apply (0.33 default, 0.6.7, ...).",
        ),
        ollama_env: list[str] = typer.Option(
            None,
            "--ollama-env",
            help="An Ollama variable NAME=VALUE (OLLAMA_CONTEXT_LENGTH, OLLAMA_NUM_PARALLEL, "
            "OLLAMA_KV_CACHE_TYPE, OLLAMA_FLASH_ATTENTION); repeatable.",
        ),
        llama_build: int = typer.Option(
            None, "--llama-build", help="llama.cpp: the build's rules and log format (b-number)."
        ),
        device: str = typer.Option(
            None, "--device", help="llama.cpp: the device name its log shows (CUDA0, Vulkan1)."
        ),
        cpu: str = typer.Option(
            None,
            "--cpu",
            help="llama.cpp: the host's profile for offloaded layers (default desktop-ddr5; "
            "a file from kvplan measure --save-profile).",
        ),
        gpu_memory: str = typer.Option(
            None,
            "--gpu-memory",
            help="llama.cpp: memory the GPU may use (22GiB; a Mac's iogpu.wired_limit_mb).",
        ),
        weights_type: str = typer.Option(
            None,
            "--weights-type",
            help="llama.cpp: every weight in this ggml type (q4_K, q8_0, ...; default: as stored).",
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """What vLLM, SGLang, llama.cpp or Ollama will allocate for the KV cache and print in
        its start-up log; llama.cpp and Ollama add the offload, the decode ceiling and what
        fits."""
        from kvplan.engines import ENGINES, EngineRequest, engine_allocation
        from kvplan.inputs.options import check_range, parse_bytes
        from kvplan.present.engines import engine_view

        if engine not in ENGINES:
            raise KvplanError(f"--engine {engine!r}: choose {', '.join(ENGINES)}")
        given = {
            "--gpu-memory-utilization": gpu_mem_util is not None,
            "--hybrid-chunked": hybrid_chunked is not None,
            "--disable-hybrid-kv-cache-manager": disable_hma is not None,
            "--mem-fraction-static": mem_fraction_static is not None,
            "--sglang-version": sglang_version is not None,
            "--max-num-batched-tokens": max_num_batched_tokens is not None,
            "--ctx-size": ctx_size is not None,
            "--parallel": parallel is not None,
            "--kv-unified": kv_unified is not None,
            "--batch-size": batch_size is not None,
            "--ubatch-size": ubatch_size is not None,
            "--cache-type-k": cache_type_k is not None,
            "--cache-type-v": cache_type_v is not None,
            "--flash-attn": flash_attn is not None,
            "--n-gpu-layers": n_gpu_layers is not None,
            "--swa-full": swa_full is not None,
            "--ollama": ollama is not None,
            "--ollama-env": bool(ollama_env),
            "--ollama-version": ollama_version is not None,
            "--llama-build": llama_build is not None,
            "--device": device is not None,
            "--cpu": cpu is not None,
            "--gpu-memory": gpu_memory is not None,
            "--weights-type": weights_type is not None,
            "--kv-cache-dtype": kv_cache_dtype is not None,
            "--block-size": block_size is not None,
            "--tp": tp != 1,
            "--pp": pp != 1,
            "--kv-cache-memory": kv_cache_memory is not None,
            "--max-num-seqs": max_num_seqs is not None,
            "--dtype": dtype is not None,
            "--weights-dtype": weights_dtype != "auto",
            "--quantization": quantization is not None,
            "--enforce-eager": enforce_eager is not None,
            "--vllm-version": vllm_version is not None,
            "--decode-context-parallel-size": dcp != 1,
            "--allow-long-max-model-len": allow_long,
        }
        # the old spelling, --engine llama.cpp --ollama V: Ollama's answer, with a note
        deprecated = engine == "llama.cpp" and (ollama is not None or bool(ollama_env))
        if engine == "llama.cpp" and ollama_version is not None:
            raise KvplanError("--ollama-version is an Ollama flag: --engine ollama")
        if deprecated:
            for flag in ("--batch-size", "--ubatch-size", "--kv-unified", "--swa-full"):
                if given[flag]:
                    raise KvplanError(
                        f"{flag} is llama.cpp's; Ollama sets it itself (--engine ollama)"
                    )
            if given["--llama-build"] or given["--ollama-version"]:
                raise KvplanError("--engine llama.cpp --ollama is deprecated: use --engine ollama")
        for other, flags in ONLY.items():
            for flag in flags:
                if other == engine or not given[flag]:
                    continue
                if engine == "ollama" and flag in OLLAMA_SHARED:
                    continue
                if engine == "ollama" and flag in OLLAMA_INSTEAD:
                    raise KvplanError(f"{flag} is llama.cpp's; Ollama takes {OLLAMA_INSTEAD[flag]}")
                owner = "an Ollama" if flag.startswith("--ollama") else f"a {other}"
                raise KvplanError(f"{flag} is {owner} flag; it does not apply to {engine}")
        if engine == "ollama" or deprecated:
            for flag in NOT_LLAMACPP:
                if given[flag]:
                    hint = " (its cache: --ollama-env OLLAMA_KV_CACHE_TYPE)" if "kv" in flag else ""
                    raise KvplanError(f"{flag} does not apply to Ollama{hint}")
            if engine == "ollama" and ollama is not None and ollama_version is not None:
                raise KvplanError("give the version once: --ollama-version")
            from kvplan.cli.engine_llamacpp import ollama_request

            spec = c.load_model(model)
            profile = c.load_gpu(gpu, gpu_memory is not None)
            request = ollama_request(
                profile,
                deprecated=deprecated or ollama is not None,  # the old flag's spelling
                version=ollama_version or ollama,
                env=ollama_env or [],
                num_ctx=ctx_size if ctx_size is not None else max_model_len,
                n_gpu_layers=n_gpu_layers,
                gpu_memory=gpu_memory,
                weights_type=weights_type,
                cpu=cpu,
                device=device,
                parallel=parallel,
                cache_type_k=cache_type_k,
                cache_type_v=cache_type_v,
                flash_attn=flash_attn,
            )
            result = engine_allocation(spec, profile, EngineRequest("ollama", ollama=request))
            c.emit(c.render(engine_view(result), fmt))
            return
        if engine == "llama.cpp":
            for flag in NOT_LLAMACPP:
                if given[flag]:
                    hint = LLAMACPP_INSTEAD.get(flag, "")
                    raise KvplanError(f"{flag} does not apply to llama.cpp{hint}")
            from kvplan.cli.engine_llamacpp import llamacpp_request

            # a Mac's memory told by --gpu-memory: a bare m3-max names the chip only
            spec, profile = c.load_model(model), c.load_gpu(gpu, gpu_memory is not None)
            request = llamacpp_request(
                spec,
                profile,
                ctx_size=ctx_size if ctx_size is not None else max_model_len,
                parallel=parallel,
                kv_unified=kv_unified,
                batch_size=batch_size,
                ubatch_size=ubatch_size,
                cache_type_k=cache_type_k,
                cache_type_v=cache_type_v,
                flash_attn=flash_attn,
                n_gpu_layers=n_gpu_layers,
                swa_full=swa_full,
                llama_build=llama_build,
                device=device,
                cpu=cpu,
                gpu_memory=gpu_memory,
                weights_type=weights_type,
            )
            result = engine_allocation(spec, profile, EngineRequest("llama.cpp", llamacpp=request))
            c.emit(c.render(engine_view(result), fmt))
            return
        from kvplan.engines.max_len import default_max_model_len

        spec = c.load_model(model)
        request = EngineRequest(
            engine=engine,
            max_model_len=c.one_context(max_model_len, "--max-model-len")
            if max_model_len is not None
            else default_max_model_len(spec, engine, c.one_context(c.CTX_DEFAULT)),
            allow_long_max_model_len=allow_long,
            kv_cache_dtype=kv_cache_dtype if kv_cache_dtype is not None else "auto",
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            dtype=dtype if dtype is not None else "auto",
            quantization=quantization,
            weights_dtype=weights_dtype,
            enforce_eager=bool(enforce_eager),
            decode_context_parallel_size=int(
                check_range(dcp, what="--decode-context-parallel-size", minimum=1, maximum=1024)
            ),
            vllm_version=vllm_version if vllm_version is not None else "0.19",
            tp=tp,
            pp=pp,
            gpu_mem_util=c.fraction(
                gpu_mem_util if gpu_mem_util is not None else 0.9, "--gpu-memory-utilization"
            ),
            kv_cache_memory_bytes=parse_bytes(kv_cache_memory, what="--kv-cache-memory")
            if kv_cache_memory is not None
            else None,
            hybrid_chunked=hybrid_chunked is not False,
            hybrid_kv_cache_manager=not disable_hma,
            mem_fraction_static=c.fraction(mem_fraction_static, "--mem-fraction-static"),
            sglang_version=sglang_version if sglang_version is not None else "0.5",
        )
        result = engine_allocation(spec, c.load_gpu(gpu), request)
        c.emit(c.render(engine_view(result), fmt))
