"""kvplan simulate."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvplan.cli import common as c
from kvplan.engines.releases import SGLANG_VERSION, VLLM_VERSION
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.engines.backends import Backends

EXAMPLE = (
    "Example: kvplan simulate qwen3-8b --gpu h100 --num-prompts 1000 --request-rate 2,4,8,inf "
    "--length-dist sharegpt --input-len 220 --output-len 200"
)


def parse_rates(text: str) -> tuple[float, ...]:
    """'inf' or '1,2.5,inf' -> request rates (requests per second)."""
    from kvplan.inputs.options import ascii_number
    from kvplan.simulate.workload import MIN_RATE

    rates = []
    for item in ascii_number(text, "--request-rate").split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item in ("inf", "infinity"):
            rates.append(math.inf)
            continue
        try:
            value = float(item)
        except ValueError:
            raise KvplanError(f"--request-rate {item!r} is not a number or inf") from None
        if not math.isfinite(value) or not MIN_RATE <= value <= 1e6:
            raise KvplanError(
                f"--request-rate {item[:40]!r} must be between {MIN_RATE:g} and 1,000,000 (or inf)"
            )
        rates.append(value)
    if not rates:
        raise KvplanError("no --request-rate given")
    return tuple(rates)


def parse_disaggregated(text: str | None) -> tuple[int, int] | None:
    """'2:6' -> (2 prefill replicas, 6 decode replicas)."""
    if text is None:
        return None
    from kvplan.inputs.options import ascii_number

    parts = ascii_number(text, "--disaggregated").strip().split(":")
    try:
        prefill, decode = (int(x) for x in parts)
    except ValueError:
        raise KvplanError(
            f"--disaggregated {str(text)[:40]!r}: give P:D, prefill and decode replicas (2:6)"
        ) from None
    if not (1 <= prefill <= 1024 and 1 <= decode <= 1024):
        raise KvplanError("--disaggregated P:D: each between 1 and 1,024")
    return prefill, decode


def serve_flags(
    tp,
    pp,
    max_num_seqs,
    max_num_batched_tokens,
    max_model_len,
    kv_cache_dtype,
    gpu_mem_util,
    kv_cache_memory,
    block_size,
    prefix_caching,
    chunked_prefill,
    async_scheduling,
    preemption,
    continuous_batching,
    engine="vllm",
    allow_long=False,
    vllm_version=VLLM_VERSION,
    mem_fraction_static=None,
    weights_dtype="auto",
    quantization=None,
    sglang_version=SGLANG_VERSION,
    dcp=1,
    enforce_eager=False,
):
    from kvplan.inputs.options import check_range, parse_bytes

    check_range(dcp, what="--decode-context-parallel-size", minimum=1, maximum=1024)
    from kvplan.simulate.setup import ServeOptions

    return ServeOptions(
        tp=tp,
        pp=pp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=None
        if max_model_len is None
        else c.one_context(max_model_len, "--max-model-len"),
        kv_cache_dtype=kv_cache_dtype,
        gpu_mem_util=c.fraction(gpu_mem_util, "--gpu-memory-utilization"),
        kv_cache_memory_bytes=parse_bytes(kv_cache_memory, what="--kv-cache-memory")
        if kv_cache_memory is not None
        else None,
        block_size=block_size,
        enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=chunked_prefill,
        async_scheduling=async_scheduling,
        preemption=preemption,
        continuous_batching=continuous_batching,
        engine=engine,
        allow_long_max_model_len=allow_long,
        vllm_version=vllm_version,
        mem_fraction_static=mem_fraction_static_value(mem_fraction_static),
        weights_dtype=weights_dtype,
        quantization=quantization,
        sglang_version=sglang_version,
        decode_context_parallel_size=int(dcp),
        enforce_eager=enforce_eager,
    )


def engine_versions(engine: str, engine_version: str | None, vllm_version: str | None):
    """(vLLM version, SGLang release) from --engine-version (the --engine's) and the older
    --vllm-version spelling."""
    if engine_version is not None and vllm_version is not None:
        raise KvplanError("give --engine-version or --vllm-version, not both")
    engine_version = c.check_engine_version(engine, engine_version)
    vllm_version = None if vllm_version is None else vllm_version.strip()  # as --engine-version
    if engine == "sglang":
        if vllm_version is not None:
            raise KvplanError(
                "--vllm-version is vLLM's; with --engine sglang give --engine-version"
            )
        return VLLM_VERSION, SGLANG_VERSION if engine_version is None else engine_version
    # `is None`, not `or`: an empty --vllm-version '' is refused as typed, not read as the default
    given = engine_version if engine_version is not None else vllm_version
    return VLLM_VERSION if given is None else given, SGLANG_VERSION


def mem_fraction_static_value(value: float | None) -> float | None:
    """SGLang's --mem-fraction-static, a fraction in (0, 1): the range the engines' own
    check in kvplan.engines.sglang takes (0.05 to 1), refused at the edge as one line."""
    return None if value is None else c.fraction(value, "--mem-fraction-static")


def length_law(
    length_dist: str,
    spread: float,
    dataset_name: str | None,
    bench_client: str | None,
    range_ratio: float | None,
    engine: str,
) -> tuple[str, float]:
    """(WorkloadSpec.length_dist, its spread) from --length-dist/--spread or the bench
    clients' spelling, --dataset-name random --random-range-ratio R [--bench-client C]
    (default C: the client of --engine, vllm bench serve or sglang.bench_serving)."""
    from kvplan.simulate.workload import BENCH_RANDOM

    if dataset_name is None:
        if range_ratio is not None or bench_client is not None:
            raise KvplanError(
                "--random-range-ratio and --bench-client go with --dataset-name random"
            )
        return length_dist, spread
    name = str(dataset_name).strip().lower()
    if name not in ("random", "sharegpt"):
        raise KvplanError(f"--dataset-name {str(dataset_name)[:40]!r}: choose random or sharegpt")
    if length_dist != "fixed" or spread:
        raise KvplanError("give --dataset-name or --length-dist/--spread, not both")
    if name == "sharegpt":
        if range_ratio is not None or bench_client is not None:
            raise KvplanError(
                "--random-range-ratio and --bench-client go with --dataset-name random"
            )
        return "sharegpt", 0.0
    client = engine if bench_client is None else str(bench_client).strip().lower()
    if client not in BENCH_RANDOM:
        raise KvplanError(f"--bench-client {str(bench_client)[:40]!r}: choose vllm or sglang")
    ratio = 0.0 if range_ratio is None else range_ratio
    if not math.isfinite(ratio):
        raise KvplanError("--random-range-ratio must be a number in [0, 1]")
    return BENCH_RANDOM[client], ratio


def add(app: typer.Typer) -> None:
    @app.command("simulate", epilog=EXAMPLE)
    @c.command
    @c.with_backends
    def simulate_cmd(
        model: str = c.model_argument(),
        gpu: str = c.gpu_option(),
        num_prompts: int = typer.Option(
            1000,
            "--num-prompts",
            min=1,
            max=100_000,
            help="Requests to send (1 to 100,000); over all rates and --compare at most 500,000, "
            "100,000,000 output tokens, and 50,000,000 prompt tokens of shared prefixes and "
            "conversation history.",
        ),
        request_rate: str = typer.Option(
            "inf",
            "--request-rate",
            help="Requests per second, or inf (all at once); comma-separated for a sweep.",
        ),
        burstiness: float = typer.Option(
            1.0,
            "--burstiness",
            help="Gamma shape of the gaps between requests: 1 Poisson, <1 burstier (0.01 to 100).",
        ),
        max_concurrency: int = typer.Option(
            None, "--max-concurrency", min=1, max=1_000_000, help="Requests in flight at most."
        ),
        input_len: str = typer.Option(
            "1024", "--input-len", "--random-input-len", help="Input tokens (mean): 1024, 2k."
        ),
        output_len: str = typer.Option(
            "128", "--output-len", "--random-output-len", help="Output tokens (mean): 128."
        ),
        dataset_name: str = typer.Option(
            None,
            "--dataset-name",
            help="The bench client's dataset: random (its own length law, see --bench-client) "
            "or sharegpt (the stand-in of --length-dist sharegpt).",
        ),
        range_ratio: float = typer.Option(
            None,
            "--random-range-ratio",
            help="--dataset-name random: vLLM's uniform over [L(1-r), L(1+r)], r in [0, 1); "
            "SGLang's over [max(1, L r), L], r in [0, 1] (default 0: U[1, L]).",
        ),
        bench_client: str = typer.Option(
            None,
            "--bench-client",
            help="Whose random dataset: vllm (vllm bench serve) or sglang "
            "(sglang.bench_serving); default the --engine's.",
        ),
        length_dist: str = typer.Option(
            "fixed",
            "--length-dist",
            help="Lengths: fixed, uniform (--spread = range ratio), lognormal (--spread = "
            "sigma), or sharegpt (a ShareGPT-like stand-in at these means).",
        ),
        spread: float = typer.Option(
            0.0, "--spread", help="uniform: range ratio in [0, 1); lognormal: sigma in (0, 3]."
        ),
        prefix_len: str = typer.Option(
            "0", "--prefix-len", help="A shared prefix (system prompt) before every prompt: 2k."
        ),
        num_prefixes: int = typer.Option(
            1, "--num-prefixes", min=1, max=1_000_000, help="Distinct shared prefixes."
        ),
        turns: int = typer.Option(
            1, "--turns", min=1, max=1000, help="Conversation turns (each prompt holds the past)."
        ),
        trace: Path = typer.Option(
            None,
            "--trace",
            help="JSONL trace: arrival_s, input_tokens, output_tokens[, prefix_id, "
            "prefix_tokens | session_id] per line.",
        ),
        seed: int = c.seed_option(),
        warm_prefix_cache: bool = typer.Option(
            False,
            "--warm-prefix-cache",
            help="A server reused across runs: the shared prefixes (--prefix-len) are in the "
            "prefix cache before the first request.",
        ),
        tp: int = c.serve_option("tp", 1, "Tensor-parallel size.", min=1, max=c.MAX_TP),
        pp: int = c.serve_option("pp", 1, "Pipeline stages.", min=1, max=c.MAX_TP),
        replicas: int = typer.Option(1, "--replicas", min=1, max=1024, help="Engine replicas."),
        data_parallel_size: int = c.serve_option(
            "data_parallel_size",
            1,
            min=1,
            max=1024,
            help="DP ranks: vLLM's -dp (MoE: engine cores of TP each in lockstep; dense: "
            "replicas), SGLang's --dp-size (ranks with --enable-dp-attention, else replicas).",
        ),
        enable_expert_parallel: bool = c.serve_option(
            "enable_expert_parallel",
            False,
            help="vLLM: the routed experts spread over the TP x DP GPUs (EP = TP x DP).",
        ),
        ep_size: int = c.serve_option(
            "ep_size",
            None,
            min=1,
            max=1024,
            help="SGLang: expert-parallel size (divides --tp).",
        ),
        enable_dp_attention: bool = c.serve_option(
            "enable_dp_attention",
            False,
            help="SGLang: attention data-parallel over --dp-size ranks at TP tp/dp each.",
        ),
        enable_dp_lm_head: bool = c.serve_option(
            "enable_dp_lm_head",
            False,
            help="SGLang, with --enable-dp-attention: the vocab-parallel head over each rank's attention TP group on its own rows (no gather over the group).",
        ),
        moe_dense_tp_size: int = c.serve_option(
            "moe_dense_tp_size",
            None,
            min=1,
            max=1024,
            help="SGLang, with --enable-dp-attention at --dp-size = --tp: 1 keeps the dense layers' MLPs whole on every GPU, on each rank's own rows (no gather before them).",
        ),
        nnodes: int = c.nnodes_option(),
        node_rank: str = c.launch_only_option("--node-rank"),
        dist_init_addr: str = c.launch_only_option("--dist-init-addr", "--nccl-init-addr"),
        master_addr: str = c.launch_only_option("--master-addr"),
        master_port: str = c.launch_only_option("--master-port"),
        distributed_executor_backend: str = c.launch_only_option("--distributed-executor-backend"),
        data_parallel_size_local: int = c.dp_local_option(),
        data_parallel_address: str = c.launch_only_option("--data-parallel-address", "-dpa"),
        data_parallel_rpc_port: str = c.launch_only_option("--data-parallel-rpc-port", "-dpp"),
        data_parallel_start_rank: str = c.launch_only_option("--data-parallel-start-rank", "-dpr"),
        headless: bool = c.launch_only_option("--headless", flag=True),
        load_balance_method: str = typer.Option(
            None,
            "--load-balance-method",
            help="SGLang: how requests reach the DP ranks: round_robin (its default) or "
            "shortest_queue.",
        ),
        router: str = typer.Option(
            "round_robin",
            "--router",
            help="Replica choice: round_robin, least_outstanding, or cache_aware.",
        ),
        disaggregated: str = typer.Option(
            None,
            "--disaggregated",
            help="Disaggregated prefill/decode: P:D replicas (each of the TP/PP given), the KV "
            "moved from prefill to decode over --link.",
        ),
        link: str = typer.Option(
            "network",
            "--link",
            help="Link for the disaggregated KV transfer: network (inter-node) or interconnect.",
        ),
        network_gbps: float = typer.Option(
            None, "--network-gbps", help="Inter-node Gb/s per GPU per direction (overrides)."
        ),
        interconnect_gbps: float = typer.Option(
            None,
            "--interconnect-gbps",
            help="The TP/PP link instead of the profile's: Gb/s per GPU per direction (PCIe "
            "Gen5 x16: 512).",
        ),
        engine: str = typer.Option(
            "vllm",
            "--engine",
            help="Scheduler to simulate: vllm (V1) or sglang (prefill batches first, "
            "new_token_ratio admission).",
        ),
        max_num_seqs: int = c.serve_option(
            "max_num_seqs",
            None,
            min=1,
            max=1 << 20,
            help="Running requests at most.",
        ),
        max_num_batched_tokens: int = c.serve_option(
            "max_num_batched_tokens",
            None,
            min=1,
            max=1 << 24,
            help="Tokens per step at most (SGLang: per prefill batch chunk).",
        ),
        max_model_len: str = c.serve_option(
            "max_model_len",
            None,
            help="Longest request (default: the model's, at most what the engine derives).",
        ),
        allow_long: bool = c.allow_long_option(),
        kv_cache_dtype: str = c.serve_option(
            "kv_cache_dtype", "auto", "The engine's kv-cache-dtype: auto, fp8, bfloat16, ..."
        ),
        gpu_mem_util: float = c.serve_option(
            "gpu_memory_utilization",
            0.9,
            help="Fraction of GPU memory vLLM may use (0.05 to 1).",
        ),
        mem_fraction_static: float = c.serve_option(
            "mem_fraction_static",
            None,
            help="SGLang: fraction of memory for weights and KV pool (0.05 to 1; default "
            "SGLang's own for the GPU and TP).",
        ),
        cuda_ipc_pool_mib: int = typer.Option(
            None,
            "--cuda-ipc-pool-mib",
            min=1,
            max=1 << 20,
            help="SGLang launched with SGLANG_USE_CUDA_IPC_TRANSPORT=1: the multimodal feature "
            "pool its tokenizer process reserves on GPU 0, MiB (SGLANG_MM_FEATURE_CACHE_MB: "
            "4096 by default until SGLang PR #22662 of April 2026, 1024 since). A multimodal "
            "model's KV pool shrinks by it; a text-only one's does not.",
        ),
        quantization: str = c.serve_option(
            "quantization",
            None,
            help="The engine's quantization method (fp8, fbgemm_fp8, awq, gptq, mxfp4, ...): "
            "the weights' format instead of the checkpoint's.",
        ),
        weights_dtype: str = c.weights_dtype_option(),
        kv_cache_memory: str = c.serve_option(
            "kv_cache_memory", None, "KV memory per GPU as the engine logged it: 19.5GiB."
        ),
        block_size: int = c.serve_option(
            "block_size",
            None,
            "vLLM: tokens per KV block (16, MLA 64); SGLang --page-size: tokens per page "
            "(the attention backends may force their own).",
            min=1,
            max=4096,
        ),  # fmt: skip
        prefix_caching: bool = typer.Option(
            None,
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="Prefix caching (default on, off for models with recurrent state and vLLM V0 0.6-0.7).",
        ),
        disable_radix_cache: bool = typer.Option(
            False,
            "--disable-radix-cache",
            help="SGLang: no radix (prefix) cache; a hybrid's state pool then holds one state "
            "per running request.",
        ),
        chunked_prefill: bool = typer.Option(
            None,
            "--enable-chunked-prefill/--no-enable-chunked-prefill",
            help="Chunked prefill (default: the engine's; vLLM V0 0.6-0.7 only above a "
            "32,768-token max_model_len).",
        ),
        async_scheduling: bool | None = typer.Option(
            None,
            "--async-scheduling/--no-async-scheduling",
            help="Scheduling overlapped with the GPU (default: the engine's; vLLM from 0.12, "
            "SGLang's overlap scheduler).",
        ),
        preemption: bool = typer.Option(
            True,
            "--preemption/--no-preemption",
            help="Preempt by recompute when blocks run out (off: admit only what fits to its end).",
        ),
        continuous_batching: bool = typer.Option(
            True,
            "--continuous-batching/--no-continuous-batching",
            help="Admit requests every step (off: a new batch when the last one ends).",
        ),
        preemption_mode: str = typer.Option(
            None,
            "--preemption-mode",
            help="vLLM V0 (0.6-0.7): recompute (its default for the bench's one-sequence "
            "requests) or swap (blocks copied to the --swap-space CPU pool over the GPU "
            "profile's host link).",
        ),
        swap_space: float = typer.Option(
            None,
            "--swap-space",
            help="vLLM: CPU swap space per GPU in GiB (default 4); V0 uses it only to swap.",
        ),
        engine_version: str = c.engine_version_option(),
        vllm_version: str = typer.Option(
            None,
            "--vllm-version",
            help="Whose scheduler rules: from 0.19 a request is admitted when its whole prompt "
            "fits the free blocks, before when its first chunk does.",
        ),
        compare: str = typer.Option(
            None,
            "--compare",
            help="Run again with one technique toggled: continuous-batching, chunked-prefill, "
            "preemption, prefix-caching, cache-aware-routing.",
        ),
        plot: Path = c.path_option(
            None, "--plot", help="Latency and throughput against the rate (.png/.svg)."
        ),
        timeline: Path = c.path_option(
            None, "--timeline", help="KV usage and queue depth over time (.png/.svg)."
        ),
        step_log: Path = typer.Option(
            None,
            "--step-log",
            help="Write replica 0's schedule step by step (JSON: tokens per request, "
            "preemptions, finishes, each step's start), the format of scripts/step_log.py; "
            "one --request-rate, vLLM's scheduler.",
        ),
        dcp: int = c.dcp_option(),
        enforce_eager: bool = c.enforce_eager_option(),
        disable_piecewise: bool = c.disable_piecewise_option(),
        enable_piecewise: bool = c.enable_piecewise_option(),
        piecewise_max_tokens: int = c.piecewise_max_tokens_option(),
        mamba_cache_dtype: str = c.mamba_dtype_option("mamba_cache_dtype"),
        mamba_ssm_cache_dtype: str = c.mamba_dtype_option("mamba_ssm_cache_dtype"),
        backends: Backends = None,  # type: ignore[assignment]  # its flags: c.with_backends
        num_scheduler_steps: int = typer.Option(
            1,
            "--num-scheduler-steps",
            help="vLLM V0's multi-step scheduling (--engine-version 0.6 to 0.8): one scheduler "
            "pass per this many decode steps.",
        ),
        speculative_config: str = c.speculative_config_option(),
        speculative_algorithm: str = c.speculative_algorithm_option(),
        speculative_num_steps: int = c.speculative_int_option(
            "--speculative-num-steps", "draft steps per round"
        ),
        speculative_eagle_topk: int = c.speculative_int_option(
            "--speculative-eagle-topk", "branches per draft step"
        ),
        speculative_num_draft_tokens: int = c.speculative_int_option(
            "--speculative-num-draft-tokens", "tokens verified per round"
        ),
        speculative_draft_model_path: str = c.speculative_draft_option(),
        mamba_scheduler_strategy: str = c.mamba_scheduler_strategy_option(),
        mamba_radix_cache_strategy: str = c.mamba_radix_cache_strategy_option(),
        speculative_skip_dp_mlp_sync: bool = typer.Option(
            False,
            "--speculative-skip-dp-mlp-sync",
            help="SGLang 0.5.11 to 0.5.22 (EAGLE/NEXTN with DP attention): skip the scheduler's sync of the new "
            "prefill batches, one collective a decode round; ranks may then mix prefill and "
            "decode.",
        ),
        spec_accept: str = c.spec_accept_option(),
        spec_accept_length: float = c.spec_accept_length_option(),
        fmt: c.OutputFormat = c.format_option(),
        out: Path = c.out_option(),
    ) -> None:
        """A discrete-event simulation of vLLM serving a request stream, reported as
        `vllm bench serve` reports a real run."""
        from kvplan.atomic import all_or_nothing, check_outputs, is_stdout
        from kvplan.inputs.hardware import check_link_gbps
        from kvplan.inputs.options import parse_tokens
        from kvplan.plans.simulate import SimulateRequest, simulate
        from kvplan.present.output import write_text
        from kvplan.present.simulate import simulate_plots, simulate_view, step_log_text
        from kvplan.simulate.workload import WorkloadSpec

        if step_log is not None and is_stdout(step_log):
            raise KvplanError("--step-log needs a file name (the report goes to standard output)")
        check_outputs(
            {"--plot": plot, "--timeline": timeline, "--step-log": step_log, "--out": out}
        )

        if not (burstiness == math.inf or 0.01 <= burstiness <= 100):  # -inf is no shape
            raise KvplanError("--burstiness must be between 0.01 and 100")
        rates = parse_rates(request_rate)
        if network_gbps is not None:
            check_link_gbps(network_gbps, "--network-gbps")
        c.check_launch_flags(engine, nnodes, data_parallel_size, {
            "--node-rank": node_rank, "--dist-init-addr": dist_init_addr,
            "--master-addr": master_addr, "--master-port": master_port,
            "--distributed-executor-backend": distributed_executor_backend,
            "--data-parallel-address": data_parallel_address,
            "--data-parallel-rpc-port": data_parallel_rpc_port,
            "--data-parallel-start-rank": data_parallel_start_rank, "--headless": headless,
        })  # fmt: skip
        if trace is not None and request_rate != "inf":
            raise KvplanError("--trace sets the arrival times; leave out --request-rate")
        vllm_version, sglang_version = engine_versions(engine, engine_version, vllm_version)
        mamba_strategy = c.mamba_strategy(
            mamba_scheduler_strategy, mamba_radix_cache_strategy, engine, sglang_version
        )
        prefix_caching = c.radix_flag(engine, disable_radix_cache, prefix_caching)
        law, law_spread = length_law(
            length_dist, spread, dataset_name, bench_client, range_ratio, engine
        )
        workload = WorkloadSpec(
            num_prompts=num_prompts,
            burstiness=burstiness,
            input_len=parse_tokens(input_len, what="--input-len"),
            output_len=parse_tokens(output_len, what="--output-len"),
            length_dist=law,
            spread=law_spread,
            prefix_len=0
            if prefix_len.strip() == "0"
            else parse_tokens(prefix_len, what="--prefix-len"),
            num_prefixes=num_prefixes,
            turns=turns,
            seed=seed,
        )
        request = SimulateRequest(
            workload=workload,
            rates=rates,
            trace=str(trace) if trace is not None else None,
            max_concurrency=max_concurrency,
            serve=serve_flags(
                tp,
                pp,
                max_num_seqs,
                max_num_batched_tokens,
                max_model_len,
                kv_cache_dtype,
                gpu_mem_util,
                kv_cache_memory,
                block_size,
                prefix_caching,
                chunked_prefill,
                async_scheduling,
                preemption,
                continuous_batching,
                engine,
                allow_long,
                vllm_version,
                mem_fraction_static,
                weights_dtype,
                quantization,
                sglang_version,
            )._replace(
                enable_expert_parallel=enable_expert_parallel,
                data_parallel_size=data_parallel_size,
                ep_size=ep_size,
                enable_dp_attention=enable_dp_attention,
                enable_dp_lm_head=enable_dp_lm_head,
                moe_dense_tp_size=moe_dense_tp_size,
                cuda_ipc_pool_mib=cuda_ipc_pool_mib,
                load_balance_method=load_balance_method,
                decode_context_parallel_size=dcp,
                enforce_eager=enforce_eager,
                piecewise=c.piecewise_flags(
                    disable_piecewise, enable_piecewise, piecewise_max_tokens
                ),
                mamba_cache_dtype="auto" if mamba_cache_dtype is None else mamba_cache_dtype,
                mamba_ssm_cache_dtype="auto"
                if mamba_ssm_cache_dtype is None
                else mamba_ssm_cache_dtype,
                num_scheduler_steps=num_scheduler_steps,
                preemption_mode=preemption_mode,
                swap_space=swap_space,
                backends=backends,
                nnodes=nnodes,
                data_parallel_size_local=data_parallel_size_local,
                **c.speculative_fields(
                    speculative_config,
                    speculative_algorithm,
                    speculative_num_steps,
                    speculative_eagle_topk,
                    speculative_num_draft_tokens,
                    speculative_draft_model_path,
                    spec_accept,
                    spec_accept_length,
                ),
                speculative_skip_dp_mlp_sync=speculative_skip_dp_mlp_sync,
                mamba_scheduler_strategy=mamba_strategy,
            ),
            replicas=replicas,
            router=router,
            series=timeline is not None,
            compare=compare,
            disaggregated=parse_disaggregated(disaggregated),
            link=link,
            network_gbps=network_gbps,
            step_log=step_log is not None,
            warm_prefix_cache=warm_prefix_cache,
            interconnect_gbps=interconnect_gbps,
        )
        result = simulate(c.load_model(model), c.load_gpu(gpu), request)
        with all_or_nothing():  # --plot, --timeline, --step-log and --out land together
            if plot is not None or timeline is not None:
                simulate_plots(result, plot, timeline)
            if step_log is not None:
                write_text(step_log_text(result), step_log, "--step-log")
            c.emit(c.render(simulate_view(result), fmt), out)
