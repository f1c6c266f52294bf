"""kvplan engine: what vLLM or SGLang will allocate and log, in the engine's own flag spelling."""

from __future__ import annotations

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = (
    "Example: kvplan engine gemma-3-27b --engine vllm --gpu h100 --max-model-len 8192 "
    "--kv-cache-memory 19.53GiB"
)

# Flags that belong to one engine only: given with the other, they are an error, never ignored.
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
    ),
    "sglang": ("--mem-fraction-static",),
}


def add(app: typer.Typer) -> None:
    @app.command("engine", epilog=EXAMPLE)
    @c.command
    def engine_cmd(
        model: str = c.model_argument(),
        engine: str = typer.Option("vllm", "--engine", help="The engine: vllm or sglang."),
        gpu: str = c.gpu_option(),
        max_model_len: str = typer.Option(
            c.CTX_DEFAULT,
            "--max-model-len",
            "--context-length",
            "--ctx",
            help="Longest request the engine admits (8192, 8k, 128k).",
        ),
        kv_cache_dtype: str = typer.Option(
            "auto",
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
        vllm_version: str = typer.Option(
            None,
            "--vllm-version",
            help="vLLM: 0.19 (default) or 0.21 (CUDA-graph memory subtracted, new cache-size "
            "line).",
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
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """What vLLM or SGLang will allocate for the KV cache and print in its start-up log."""
        from kvplan.engines import ENGINES, EngineRequest, engine_allocation
        from kvplan.inputs.options import parse_bytes
        from kvplan.present.engines import engine_view

        if engine not in ENGINES:
            raise KvplanError(f"--engine {engine!r}: choose {' or '.join(ENGINES)}")
        given = {
            "--gpu-memory-utilization": gpu_mem_util is not None,
            "--hybrid-chunked": hybrid_chunked is not None,
            "--disable-hybrid-kv-cache-manager": disable_hma is not None,
            "--mem-fraction-static": mem_fraction_static is not None,
            "--max-num-batched-tokens": max_num_batched_tokens is not None,
            "--max-num-seqs": max_num_seqs is not None,
            "--dtype": dtype is not None,
            "--quantization": quantization is not None,
            "--enforce-eager": enforce_eager is not None,
            "--vllm-version": vllm_version is not None,
        }
        for other, flags in ONLY.items():
            for flag in flags:
                if other != engine and given[flag]:
                    raise KvplanError(f"{flag} is a {other} flag; it does not apply to {engine}")
        request = EngineRequest(
            engine=engine,
            max_model_len=c.one_context(max_model_len, "--max-model-len"),
            kv_cache_dtype=kv_cache_dtype,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            dtype=dtype or "auto",
            quantization=quantization,
            weights_dtype=weights_dtype,
            enforce_eager=bool(enforce_eager),
            vllm_version=vllm_version or "0.19",
            tp=tp,
            pp=pp,
            gpu_mem_util=c.fraction(
                gpu_mem_util if gpu_mem_util is not None else 0.9, "--gpu-memory-utilization"
            ),
            kv_cache_memory_bytes=parse_bytes(kv_cache_memory, what="--kv-cache-memory")
            if kv_cache_memory
            else None,
            hybrid_chunked=hybrid_chunked is not False,
            hybrid_kv_cache_manager=not disable_hma,
            mem_fraction_static=c.fraction(mem_fraction_static, "--mem-fraction-static"),
        )
        result = engine_allocation(c.load_model(model), c.load_gpu(gpu), request)
        c.emit(c.render(engine_view(result), fmt))
