"""kvplan engine: what vLLM, SGLang or llama.cpp will allocate and log, in the engine's own flag
spelling."""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import typer

from kvplan.cli import common as c
from kvplan.engines.releases import SGLANG_VERSION, VLLM_VERSION
from kvplan.errors import KvplanError
from kvplan.record import NamedTuple

EXAMPLE = (
    "Example: kvplan engine gemma-3-27b --engine vllm --gpu h100 --max-model-len 8192 "
    "--kv-cache-memory 19.53GiB"
)

# Which engines take each flag, declared once beside the flag (Flag below): a flag given to an
# engine that does not take it is an error naming the flag's owner, never ignored.
VLLM, SGLANG, LLAMACPP, OLLAMA = "vllm", "sglang", "llama.cpp", "ollama"
EVERY = (VLLM, SGLANG, LLAMACPP, OLLAMA)
SERVERS = (VLLM, SGLANG)  # vLLM's and SGLang's shared vocabulary
LOCAL = (LLAMACPP, OLLAMA)  # llama.cpp's flags that Ollama takes too (a request's num_gpu is -ngl)
# where llama.cpp and Ollama take what a vLLM/SGLang flag sets
KV_HINTS = {
    LLAMACPP: " (its cache: --cache-type-k, --cache-type-v)",
    OLLAMA: " (its cache: --ollama-env OLLAMA_KV_CACHE_TYPE)",
}
WEIGHTS_HINTS = {LLAMACPP: " (its weights: --weights-type)"}
# a vLLM-only serve flag's name in errors: its vLLM spelling
SERVE_SPELLING = {name: c.SERVE_FLAGS[name][0][0] for name in c.MAMBA_DTYPE_FLAGS}


class Flag(NamedTuple):
    """One option of `kvplan engine`: its parameter, its typer declaration, the name errors
    use, the engines that take it, and where another engine takes what it sets ({engine:
    words}); the command's signature and every applies-to check are built from these."""

    param: str
    annotation: Any
    option: Any
    name: str = ""  # "": not checked (every engine takes it)
    engines: tuple[str, ...] = EVERY
    instead: dict[str, str] = {}


@functools.cache
def _flags() -> tuple[Flag, ...]:
    """Every option, in the order `--help` lists them (built once: the signature and the
    applies-to checks read the same declarations)."""
    from kvplan.engines.backends import FIRST_RELEASE

    return (
        Flag("model", str, c.model_argument()),
        Flag(
            "engine",
            str,
            typer.Option("vllm", "--engine", help="The engine: vllm, sglang, llama.cpp or ollama."),
        ),
        Flag("gpu", str, c.gpu_option()),
        Flag(
            "max_model_len",
            str,
            c.serve_option(
                "max_model_len",
                None,
                extra=("--ctx",),
                help="Longest request the engine admits (8192, 8k, 128k; default 8k). llama.cpp: "
                "as -c.",
            ),
        ),
        Flag(
            "allow_long",
            bool,
            c.allow_long_option(),
            "--allow-long-max-model-len",
            SERVERS,
        ),
        Flag(
            "kv_cache_dtype",
            str,
            c.serve_option(
                "kv_cache_dtype",
                None,
                extra=("--kv-dtype",),
                help="The engine's kv-cache-dtype (vLLM: auto, bfloat16, fp8, fp8_e4m3, "
                "fp8_ds_mla, nvfp4, ...; SGLang: auto, bfloat16, fp8_e4m3, ...).",
            ),
            "--kv-cache-dtype",
            SERVERS,
            KV_HINTS,
        ),
        Flag(
            "block_size",
            int,
            c.serve_option(
                "block_size",
                None,
                min=1,
                max=4096,
                help="Tokens per block (vLLM 16, MLA 64; SGLang page size 1).",
            ),
            "--block-size",
            SERVERS,
        ),
        Flag(
            "max_num_batched_tokens",
            int,
            c.serve_option(
                "max_num_batched_tokens",
                None,
                engines=(VLLM,),
                min=1,
                max=1 << 24,
                help="vLLM: the token budget per step (1 to 16,777,216; default 8192 on GPUs of "
                "70 GiB or more except A100, else 2048).",
            ),
            "--max-num-batched-tokens",
            (VLLM,),
        ),
        Flag(
            "max_num_seqs",
            int,
            c.serve_option(
                "max_num_seqs",
                None,
                engines=(VLLM,),
                min=1,
                max=1 << 20,
                help="vLLM: requests per step (1 to 1,048,576; default 1024 on GPUs of 70 GiB or "
                "more except A100, else 256); sizes the sampler's profiling run.",
            ),
            "--max-num-seqs",
            (VLLM,),
        ),
        Flag(
            "dtype",
            str,
            typer.Option(
                None,
                "--dtype",
                help="The engine's model dtype (auto, bfloat16, float16, float32); auto keeps the "
                "config's but serves float32 in 16 bits; kv-cache-dtype auto follows it.",
            ),
            "--dtype",
            SERVERS,
            WEIGHTS_HINTS,
        ),
        *(
            Flag(name, str, c.mamba_dtype_option(name), SERVE_SPELLING[name], (VLLM,))
            for name in c.MAMBA_DTYPE_FLAGS
        ),
        Flag(
            "quantization",
            str,
            c.serve_option(
                "quantization",
                None,
                help="vLLM: the quantization method (fp8 quantizes a bf16 checkpoint online; awq, "
                "gptq, mxfp4, ...).",
            ),
            "--quantization",
            (VLLM,),
        ),
        Flag(
            "weights_dtype",
            str,
            c.weights_dtype_option(),
            "--weights-dtype",
            SERVERS,
            WEIGHTS_HINTS,
        ),
        Flag(
            "enforce_eager",
            bool,
            typer.Option(
                None,
                "--enforce-eager/--no-enforce-eager",
                help="vLLM: no CUDA graphs (no graph-memory estimate).",
            ),
            "--enforce-eager",
            (VLLM,),
        ),
        Flag(
            "dcp",
            int,
            typer.Option(
                1,
                "--decode-context-parallel-size",
                "-dcp",
                "--dcp",
                help="vLLM: shard the KV cache along tokens over this many ranks of the TP group "
                "(the cache size line counts dcp x the tokens).",
            ),
            "--decode-context-parallel-size",
            (VLLM,),
        ),
        Flag(
            "vllm_version",
            str,
            typer.Option(
                None,
                "--vllm-version",
                help=f"vLLM: {VLLM_VERSION} (default), 0.21 (CUDA-graph memory subtracted, new "
                "cache-size line) or 0.32 (the start-up fit check holds back the null block).",
            ),
            "--vllm-version",
            (VLLM,),
        ),
        Flag(
            "tp",
            int,
            c.serve_option(
                "tp",
                1,
                min=1,
                max=c.MAX_TP,
                help="Tensor-parallel size.",
            ),
            "--tp",
            SERVERS,
        ),
        Flag(
            "pp",
            int,
            c.serve_option(
                "pp",
                1,
                min=1,
                max=c.MAX_TP,
                help="Pipeline-parallel size.",
            ),
            "--pp",
            SERVERS,
        ),
        Flag(
            "gpu_mem_util",
            float,
            c.serve_option(
                "gpu_memory_utilization",
                None,
                help="vLLM: fraction of GPU memory the engine may use (0.05 to 1; default 0.9).",
            ),
            "--gpu-memory-utilization",
            (VLLM,),
        ),
        Flag(
            "sglang_version",
            str,
            typer.Option(
                None,
                "--sglang-version",
                help="SGLang: the release whose defaults apply, 0.4 or 0.5 (default; another runs "
                "with the nearest).",
            ),
            "--sglang-version",
            (SGLANG,),
        ),
        Flag(
            "disable_radix_cache",
            bool,
            typer.Option(
                None,
                "--disable-radix-cache",
                help="SGLang: no radix cache; a hybrid's state pool then caps the running "
                "requests at its states, not a third of them.",
            ),
            "--disable-radix-cache",
            (SGLANG,),
        ),
        Flag(
            "mamba_scheduler_strategy",
            str,
            c.mamba_scheduler_strategy_option(),
            "--mamba-scheduler-strategy",
            (SGLANG,),
        ),
        Flag(
            "mamba_radix_cache_strategy",
            str,
            c.mamba_radix_cache_strategy_option(),
            "--mamba-radix-cache-strategy",
            (SGLANG,),
        ),
        Flag(
            "disable_piecewise",
            bool,
            c.disable_piecewise_option(),
            "--disable-piecewise-cuda-graph",
            (SGLANG,),
        ),
        Flag(
            "enable_piecewise",
            bool,
            c.enable_piecewise_option(),
            "--enable-piecewise-cuda-graph",
            (SGLANG,),
        ),
        Flag(
            "piecewise_max_tokens",
            int,
            c.piecewise_max_tokens_option(),
            "--piecewise-cuda-graph-max-tokens",
            (SGLANG,),
        ),
        Flag(
            "speculative_algorithm",
            str,
            c.speculative_algorithm_option(),
            "--speculative-algorithm",
            (SGLANG,),
        ),
        Flag(
            "mem_fraction_static",
            float,
            c.serve_option(
                "mem_fraction_static",
                None,
                help="SGLang: fraction of memory for weights and KV pool (0.05 to 1; default 0.9).",
            ),
            "--mem-fraction-static",
            (SGLANG,),
        ),
        *(
            Flag(
                name,
                str,
                c.backend_option(name),
                f"--{name.replace('_', '-')}",
                tuple(FIRST_RELEASE[name]),  # the engines that take it
            )
            for name in c.BACKEND_FLAGS
        ),
        Flag(
            "kv_cache_memory",
            str,
            c.serve_option(
                "kv_cache_memory",
                None,
                help="The available KV memory the engine logged (19.53GiB): exact block counts.",
            ),
            "--kv-cache-memory",
            SERVERS,
        ),
        Flag(
            "hybrid_chunked",
            bool,
            typer.Option(
                None,
                "--hybrid-chunked/--no-hybrid-chunked",
                help="vLLM: keep chunked layers chunked (the default; --no-hybrid-chunked is "
                "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0).",
            ),
            "--hybrid-chunked",
            (VLLM,),
        ),
        Flag(
            "disable_hma",
            bool,
            typer.Option(
                None,
                "--disable-hybrid-kv-cache-manager",
                help="vLLM: store sliding and chunked layers as full attention when the model "
                "also has full layers.",
            ),
            "--disable-hybrid-kv-cache-manager",
            (VLLM,),
        ),
        Flag(
            "ctx_size",
            str,
            typer.Option(
                None,
                "-c",
                "--ctx-size",
                help="llama.cpp: context size, all sequences (0: training).",
            ),
            "--ctx-size",
            (LLAMACPP,),
            {OLLAMA: "--ctx (a request's num_ctx, per sequence) or OLLAMA_CONTEXT_LENGTH"},
        ),
        Flag(
            "parallel",
            int,
            typer.Option(
                None, "-np", "--parallel", min=1, max=256, help="llama.cpp: sequences (1 to 256)."
            ),
            "--parallel",
            (LLAMACPP,),
            {OLLAMA: "--ollama-env OLLAMA_NUM_PARALLEL=N"},
        ),
        Flag(
            "kv_unified",
            bool,
            typer.Option(
                None, "-kvu", "--kv-unified", help="llama.cpp: one cache shared by all sequences."
            ),
            "--kv-unified",
            (LLAMACPP,),
        ),
        Flag(
            "batch_size",
            int,
            typer.Option(
                None,
                "-b",
                "--batch-size",
                min=1,
                max=1 << 20,
                help="llama.cpp: logical batch (2048).",
            ),
            "--batch-size",
            (LLAMACPP,),
        ),
        Flag(
            "ubatch_size",
            int,
            typer.Option(
                None,
                "-ub",
                "--ubatch-size",
                min=1,
                max=1 << 20,
                help="llama.cpp: physical batch (512).",
            ),
            "--ubatch-size",
            (LLAMACPP,),
        ),
        Flag(
            "cache_type_k",
            str,
            typer.Option(
                None,
                "-ctk",
                "--cache-type-k",
                help="llama.cpp: K cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, "
                "q5_1).",
            ),
            "--cache-type-k",
            (LLAMACPP,),
            {OLLAMA: "--ollama-env OLLAMA_KV_CACHE_TYPE=q8_0"},
        ),
        Flag(
            "cache_type_v",
            str,
            typer.Option(None, "-ctv", "--cache-type-v", help="llama.cpp: V cache type (as -ctk)."),
            "--cache-type-v",
            (LLAMACPP,),
            {OLLAMA: "--ollama-env OLLAMA_KV_CACHE_TYPE=q8_0"},
        ),
        Flag(
            "flash_attn",
            str,
            typer.Option(
                None, "-fa", "--flash-attn", help="llama.cpp: on, off or auto (default auto)."
            ),
            "--flash-attn",
            (LLAMACPP,),
            {OLLAMA: "--ollama-env OLLAMA_FLASH_ATTENTION=1"},
        ),
        Flag(
            "n_gpu_layers",
            str,
            typer.Option(
                None,
                "-ngl",
                "--n-gpu-layers",
                "--gpu-layers",
                help="llama.cpp: layers on the GPU, the output layer first (N, all, auto).",
            ),
            "--n-gpu-layers",
            LOCAL,
        ),
        Flag(
            "swa_full",
            bool,
            typer.Option(
                None, "--swa-full", help="llama.cpp: full-size cache for sliding-window layers."
            ),
            "--swa-full",
            (LLAMACPP,),
        ),
        Flag(
            "ollama",
            str,
            typer.Option(
                None,
                "--ollama",
                help="Deprecated: --engine ollama --ollama-version V (with --engine llama.cpp it "
                "still answers as Ollama, with a note).",
            ),
            "--ollama",
            LOCAL,
        ),
        Flag(
            "ollama_version",
            str,
            typer.Option(
                None,
                "--ollama-version",
                help="Ollama: the release whose defaults apply (0.33 default, 0.6.7, ...).",
            ),
            "--ollama-version",
            LOCAL,
        ),
        Flag(
            "ollama_env",
            list[str],
            typer.Option(
                None,
                "--ollama-env",
                help="An Ollama variable NAME=VALUE (OLLAMA_CONTEXT_LENGTH, OLLAMA_NUM_PARALLEL, "
                "OLLAMA_KV_CACHE_TYPE, OLLAMA_FLASH_ATTENTION); repeatable.",
            ),
            "--ollama-env",
            LOCAL,
        ),
        Flag(
            "llama_build",
            int,
            typer.Option(
                None,
                "--llama-build",
                help="llama.cpp: the build's rules and log format (b-number).",
            ),
            "--llama-build",
            (LLAMACPP,),
        ),
        Flag(
            "device",
            str,
            typer.Option(
                None,
                "--device",
                help="llama.cpp: the ggml GPU device (CUDA0, ROCm0, Vulkan1, MTL0, SYCL0; any case) "
                "its log shows.",
            ),
            "--device",
            LOCAL,
        ),
        Flag(
            "cpu",
            str,
            typer.Option(
                None,
                "--cpu",
                help="llama.cpp: the host's profile for offloaded layers (default desktop-ddr5; "
                "a file from kvplan measure --save-profile).",
            ),
            "--cpu",
            LOCAL,
        ),
        Flag(
            "gpu_memory",
            str,
            typer.Option(
                None,
                "--gpu-memory",
                help="llama.cpp: memory the GPU may use (22GiB; a Mac's iogpu.wired_limit_mb).",
            ),
            "--gpu-memory",
            LOCAL,
        ),
        Flag(
            "weights_type",
            str,
            typer.Option(
                None,
                "--weights-type",
                help="llama.cpp: every weight in this ggml type (q4_K, q8_0, ...; default: as "
                "stored).",
            ),
            "--weights-type",
            LOCAL,
        ),
        Flag("fmt", c.OutputFormat, c.format_option()),
    )


def _given(value: object, default: object) -> bool:
    """Whether an option was given: its value differs from its declared default (a repeatable
    option: any value)."""
    if isinstance(value, list):
        return bool(value)
    return value != default


def _owner(flag: Flag) -> str:
    """Whose flag it is, in an error: 'an Ollama', 'a vllm', 'a llama.cpp'."""
    return "an Ollama" if flag.name.startswith("--ollama") else f"a {flag.engines[0]}"


def check_flags(engine: str, given: dict[str, bool], deprecated: bool = False) -> None:
    """Refuse every given flag that `engine` does not take, as one line naming whose flag it
    is or where this engine takes it instead. One engine's own flags are checked before the
    servers' shared ones; `deprecated` (--engine llama.cpp --ollama) answers as Ollama."""
    flags = [f for f in _flags() if f.name and given.get(f.name)]
    answering = OLLAMA if deprecated else engine
    own = [f for f in flags if f.engines != SERVERS]
    rank = {VLLM: 0, SGLANG: 1, LLAMACPP: 2, OLLAMA: 2}
    for flag in sorted(own, key=lambda f: rank[f.engines[0]]):
        if engine in flag.engines:
            continue
        if engine == OLLAMA and OLLAMA in flag.instead:
            raise KvplanError(f"{flag.name} is llama.cpp's; Ollama takes {flag.instead[OLLAMA]}")
        raise KvplanError(f"{flag.name} is {_owner(flag)} flag; it does not apply to {engine}")
    for flag in flags:
        if flag.engines == SERVERS and answering not in SERVERS:
            label = "Ollama" if answering == OLLAMA else answering
            hint = flag.instead.get(answering, "")
            raise KvplanError(f"{flag.name} does not apply to {label}{hint}")


def _signature(fn):
    """`fn(**options)` with the signature typer reads its options from: one parameter a Flag."""
    fn.__signature__ = inspect.Signature(
        [
            inspect.Parameter(
                f.param,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=f.option,
                annotation=f.annotation,
            )
            for f in _flags()
        ]
    )
    return fn


def add(app: typer.Typer) -> None:
    flags = _flags()

    @app.command("engine", epilog=EXAMPLE)
    @c.command
    @_signature
    def engine_cmd(**options: Any) -> None:
        """What vLLM, SGLang, llama.cpp or Ollama will allocate for the KV cache and print in
        its start-up log; llama.cpp and Ollama add the offload, the decode ceiling and what
        fits."""
        from kvplan.engines import ENGINES

        o = types.SimpleNamespace(**options)
        engine = o.engine
        if engine not in ENGINES:
            raise KvplanError(f"--engine {engine!r}: choose {', '.join(ENGINES)}")
        given = {f.name: _given(options[f.param], f.option.default) for f in flags if f.name}
        # the old spelling, --engine llama.cpp --ollama V: Ollama's answer, with a note
        deprecated = engine == LLAMACPP and (given["--ollama"] or given["--ollama-env"])
        if engine == LLAMACPP and given["--ollama-version"]:
            raise KvplanError("--ollama-version is an Ollama flag: --engine ollama")
        if deprecated:
            for flag in ("--batch-size", "--ubatch-size", "--kv-unified", "--swa-full"):
                if given[flag]:
                    raise KvplanError(
                        f"{flag} is llama.cpp's; Ollama sets it itself (--engine ollama)"
                    )
            if given["--llama-build"]:
                raise KvplanError("--engine llama.cpp --ollama is deprecated: use --engine ollama")
        check_flags(engine, given, deprecated)
        if engine == OLLAMA or deprecated:
            if engine == OLLAMA and given["--ollama"] and given["--ollama-version"]:
                raise KvplanError("give the version once: --ollama-version")
            _ollama(o, deprecated)
        elif engine == LLAMACPP:
            _llamacpp(o)
        else:
            _server(o)


def _ollama(o, deprecated: bool) -> None:
    from kvplan.cli.engine_llamacpp import ollama_request
    from kvplan.engines import EngineRequest, engine_allocation
    from kvplan.present.engines import engine_view

    spec = c.load_model(o.model)
    profile = c.load_gpu(o.gpu, o.gpu_memory is not None)
    request = ollama_request(
        profile,
        deprecated=deprecated or o.ollama is not None,  # the old flag's spelling
        version=o.ollama_version or o.ollama,
        env=o.ollama_env or [],
        num_ctx=o.ctx_size if o.ctx_size is not None else o.max_model_len,
        n_gpu_layers=o.n_gpu_layers,
        gpu_memory=o.gpu_memory,
        weights_type=o.weights_type,
        cpu=o.cpu,
        device=o.device,
        parallel=o.parallel,
        cache_type_k=o.cache_type_k,
        cache_type_v=o.cache_type_v,
        flash_attn=o.flash_attn,
    )
    result = engine_allocation(spec, profile, EngineRequest(OLLAMA, ollama=request))
    c.emit(c.render(engine_view(result), o.fmt))


def _llamacpp(o) -> None:
    from kvplan.cli.engine_llamacpp import llamacpp_request
    from kvplan.engines import EngineRequest, engine_allocation
    from kvplan.present.engines import engine_view

    # a Mac's memory told by --gpu-memory: a bare m3-max names the chip only
    spec, profile = c.load_model(o.model), c.load_gpu(o.gpu, o.gpu_memory is not None)
    request = llamacpp_request(
        spec,
        profile,
        ctx_size=o.ctx_size if o.ctx_size is not None else o.max_model_len,
        parallel=o.parallel,
        kv_unified=o.kv_unified,
        batch_size=o.batch_size,
        ubatch_size=o.ubatch_size,
        cache_type_k=o.cache_type_k,
        cache_type_v=o.cache_type_v,
        flash_attn=o.flash_attn,
        n_gpu_layers=o.n_gpu_layers,
        swa_full=o.swa_full,
        llama_build=o.llama_build,
        device=o.device,
        cpu=o.cpu,
        gpu_memory=o.gpu_memory,
        weights_type=o.weights_type,
    )
    result = engine_allocation(spec, profile, EngineRequest(LLAMACPP, llamacpp=request))
    c.emit(c.render(engine_view(result), o.fmt))


def _engine_speculation(spec, algorithm: str, request) -> str:
    """SGLang's --speculative-algorithm for `kvplan engine`, which sizes the target's pool
    under the release's speculative reserve (engines.sglang.speculative_reserve_mib) but not a
    draft: refused, one line, where the release's pool holds the draft (from 0.5.14,
    engines.sglang.draft_in_pool; NGRAM has none) or the model keeps recurrent state (the
    verification's states: kvplan simulate sizes both)."""
    from kvplan.engines.sglang import draft_in_pool
    from kvplan.simulate.speculative import SGLANG_ALGORITHMS, check_nextn

    name = str(algorithm).strip().upper()
    if name not in SGLANG_ALGORITHMS:
        raise KvplanError(
            f"--speculative-algorithm {str(algorithm)[:40]!r}: choose {', '.join(SGLANG_ALGORITHMS)}"
        )
    check_nextn(spec, name)  # as kvplan simulate refuses it
    simulate = (
        "kvplan simulate --engine sglang --speculative-algorithm "
        # NGRAM drafts from the prompt, NEXTN with the checkpoint's MTP layers: no draft path
        f"{name}{'' if name in ('NGRAM', 'NEXTN') else ' --speculative-draft-model-path ...'} "
        "sizes it"
    )
    if name != "NGRAM" and draft_in_pool(request.sglang_version):
        raise KvplanError(
            f"--speculative-algorithm {name}: SGLang {str(request.sglang_version)[:20]} sizes "
            "its pool with the draft's weights and layers in it (from 0.5.14), which kvplan "
            f"engine does not read; {simulate}"
        )
    if spec.state_layers():
        raise KvplanError(
            f"--speculative-algorithm {name}: {spec.name} keeps recurrent state, whose "
            f"speculative verification states kvplan engine does not size; {simulate}"
        )
    return name


def _server(o) -> None:
    """vLLM or SGLang."""
    from kvplan.engines import EngineRequest, engine_allocation
    from kvplan.engines.max_len import default_max_model_len
    from kvplan.inputs.options import check_range, parse_bytes
    from kvplan.present.engines import engine_view

    spec = c.load_model(o.model)
    request = EngineRequest(
        engine=o.engine,
        max_model_len=c.one_context(o.max_model_len, "--max-model-len")
        if o.max_model_len is not None
        else default_max_model_len(spec, o.engine, c.one_context(c.CTX_DEFAULT)),
        allow_long_max_model_len=o.allow_long,
        kv_cache_dtype=o.kv_cache_dtype if o.kv_cache_dtype is not None else "auto",
        block_size=o.block_size,
        max_num_batched_tokens=o.max_num_batched_tokens,
        max_num_seqs=o.max_num_seqs,
        dtype=o.dtype if o.dtype is not None else "auto",
        mamba_cache_dtype="auto" if o.mamba_cache_dtype is None else o.mamba_cache_dtype,
        mamba_ssm_cache_dtype="auto"
        if o.mamba_ssm_cache_dtype is None
        else o.mamba_ssm_cache_dtype,
        quantization=o.quantization,
        weights_dtype=o.weights_dtype,
        enforce_eager=bool(o.enforce_eager),
        decode_context_parallel_size=int(
            check_range(o.dcp, what="--decode-context-parallel-size", minimum=1, maximum=1024)
        ),
        vllm_version=o.vllm_version if o.vllm_version is not None else VLLM_VERSION,
        tp=o.tp,
        pp=o.pp,
        gpu_mem_util=c.fraction(
            o.gpu_mem_util if o.gpu_mem_util is not None else 0.9, "--gpu-memory-utilization"
        ),
        kv_cache_memory_bytes=parse_bytes(o.kv_cache_memory, what="--kv-cache-memory")
        if o.kv_cache_memory is not None
        else None,
        hybrid_chunked=o.hybrid_chunked is not False,
        hybrid_kv_cache_manager=not o.disable_hma,
        mem_fraction_static=c.fraction(o.mem_fraction_static, "--mem-fraction-static"),
        sglang_version=o.sglang_version if o.sglang_version is not None else SGLANG_VERSION,
        backends=c.backends_of(vars(o)),
        radix_cache=not o.disable_radix_cache,
        piecewise=c.piecewise_flags(
            o.disable_piecewise,
            o.enable_piecewise,
            o.piecewise_max_tokens,
            None if o.max_model_len is None else c.one_context(o.max_model_len, "--max-model-len"),
        ),
    )
    gpu = c.load_gpu(o.gpu)
    if o.engine == "sglang":
        from kvplan.engines.sglang import requested_running, with_launch_mamba_strategy

        if o.speculative_algorithm is not None:
            request = request._replace(
                speculative=True,
                speculative_algorithm=_engine_speculation(spec, o.speculative_algorithm, request),
                # server_args' count when speculating (engines.sglang.requested_running)
                max_running_requests=requested_running(None, True),
            )
        strategy = c.mamba_strategy(
            o.mamba_scheduler_strategy,
            o.mamba_radix_cache_strategy,
            o.engine,
            request.sglang_version,
        )
        request = with_launch_mamba_strategy(spec, gpu, request, strategy)
    result = engine_allocation(spec, gpu, request)
    if o.engine == "sglang" and request.speculative:
        from kvplan.engines.sglang import SglangResult, with_spec_v2_concurrency

        if isinstance(result, SglangResult):
            result = with_spec_v2_concurrency(spec, result, request)
    c.emit(c.render(engine_view(result), o.fmt))
