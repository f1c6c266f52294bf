"""kvplan plan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.engines.backends import Backends

EXAMPLE = (
    "Example: kvplan plan llama-3.1-70b --gpu h200 --rate 50 --input-len 2k --output-len 500 "
    "--slo ttft_p99=1s --slo tpot_p99=50ms"
)


def _ints(text: str, what: str, maximum: int) -> tuple[int, ...]:
    from kvplan.inputs.options import parse_int_list

    return tuple(parse_int_list(text, what=what, maximum=maximum))


def add(app: typer.Typer) -> None:
    @app.command("plan", epilog=EXAMPLE)
    @c.command
    @c.with_backends
    def plan_cmd(
        model: str = c.model_argument(),
        rate: float = typer.Option(..., "--rate", help="Requests per second to serve in all."),
        slo: list[str] = typer.Option(
            ...,
            "--slo",
            help="A target: METRIC_STAT=VALUE with ttft, tpot, itl or e2el and mean, median, "
            "p90 or p99 (ttft_p99=2s, tpot_p99=50ms). Repeat the option.",
        ),
        gpu: list[str] = typer.Option(
            ["h100", "h200", "a100"], "--gpu", help=c.GPU_HELP + " Repeat to compare kinds."
        ),
        input_len: str = typer.Option("1024", "--input-len", help="Input tokens (mean): 2k."),
        output_len: str = typer.Option("128", "--output-len", help="Output tokens (mean)."),
        length_dist: str = typer.Option(
            "fixed", "--length-dist", help="fixed, uniform, lognormal or sharegpt (see simulate)."
        ),
        spread: float = typer.Option(0.0, "--spread", help="Range ratio or sigma (see simulate)."),
        prefix_len: str = typer.Option("0", "--prefix-len", help="Shared prefix tokens: 2k."),
        num_prompts: int = typer.Option(
            200,
            "--num-prompts",
            min=20,
            max=100_000,
            help="Requests per simulated run (20 to 100,000); times the configurations "
            "searched at most 500,000 (and 100,000,000 output, 50,000,000 shared-prefix "
            "tokens).",
        ),
        tp: str = c.serve_option("tp", "1,2,4,8", "Tensor-parallel sizes to try."),
        pp: str = c.serve_option("pp", "1", "Pipeline-parallel sizes to try."),
        kv_cache_dtype: str | None = c.serve_option(
            "kv_cache_dtype",
            None,
            "The engine's kv-cache-dtypes to try (default: auto,fp8 for vLLM, auto,fp8_e4m3 "
            "for SGLang).",
        ),
        max_num_seqs: str = c.serve_option(
            "max_num_seqs", "64,128,256,512,1024", "max_num_seqs values to try."
        ),
        max_num_batched_tokens: str | None = c.serve_option(
            "max_num_batched_tokens",
            None,
            "Token budgets per step to try (default: 2048,8192; with a vLLM V0 "
            "--engine-version, that release's own default for the max model length).",
        ),
        max_model_len: str = c.serve_option(
            "max_model_len", None, "Longest request (default: the model's, or what fits)."
        ),
        price: list[str] = typer.Option(
            [], "--price", help="USD per GPU-hour for a GPU: h100=2.49. Repeat the option."
        ),
        max_gpus: int = typer.Option(
            1024, "--max-gpus", min=1, max=1_000_000, help="Most GPUs a deployment may use."
        ),
        top: int = typer.Option(10, "--top", min=1, max=1000, help="Configurations to list."),
        emit: str = typer.Option(
            "vllm", "--emit", help="Engine simulated and launched: vllm or sglang."
        ),
        engine_version: str | None = c.engine_version_option(),
        mem_fraction_static: float = c.serve_option(
            "mem_fraction_static",
            None,
            help="With --emit sglang: SGLang's pool fraction for every configuration (0.05 to "
            "1; default SGLang's own), printed in the launch command.",
        ),
        async_scheduling: bool | None = typer.Option(
            None,
            "--async-scheduling/--no-async-scheduling",
            help="vLLM async scheduling (default: the release's, on from 0.12).",
        ),
        data_parallel_size: int = c.serve_option(
            "data_parallel_size",
            1,
            min=1,
            max=1024,
            help="DP ranks per replica, as kvplan simulate takes them (vLLM's -dp, SGLang's "
            "--dp-size).",
        ),
        enable_expert_parallel: bool = c.serve_option(
            "enable_expert_parallel", False, "vLLM: EP = TP x DP."
        ),
        ep_size: int = c.serve_option(
            "ep_size",
            None,
            min=1,
            max=1024,
            help="SGLang: expert-parallel size.",
        ),
        enable_dp_attention: bool = c.serve_option(
            "enable_dp_attention", False, "SGLang: attention data-parallel over --dp-size."
        ),
        enable_dp_lm_head: bool = c.serve_option(
            "enable_dp_lm_head",
            False,
            "SGLang, with --enable-dp-attention: the vocab-parallel head over each rank's attention TP group on its own rows (no gather over the group).",
        ),
        moe_dense_tp_size: int = c.serve_option(
            "moe_dense_tp_size",
            None,
            "SGLang, with --enable-dp-attention at --dp-size = --tp: 1 keeps the dense layers' MLPs whole on every GPU, on each rank's own rows (no gather before them).",
            min=1,
            max=1024,
        ),
        nnodes: int = c.nnodes_option(),
        data_parallel_size_local: int = c.dp_local_option(),
        jobs: int = typer.Option(0, "--jobs", min=0, max=256, help="Processes (0: one per core)."),
        prune: bool = typer.Option(
            True,
            "--prune/--no-prune",
            help="Skip bisecting configurations whose saturated rate cannot place them among "
            "the --top cheapest (the table is the same; --no-prune counts all that meet the "
            "targets).",
        ),
        confidence: float = typer.Option(
            None,
            "--confidence",
            help="Size deployments so the pessimistic bound at this confidence (0.5 to 0.95) "
            "meets the targets; default: the point estimate.",
        ),
        seed: int = c.seed_option(),
        dcp: int = c.dcp_option(),
        enforce_eager: bool = c.enforce_eager_option(),
        disable_piecewise: bool = c.disable_piecewise_option(),
        enable_piecewise: bool = c.enable_piecewise_option(),
        piecewise_max_tokens: int = c.piecewise_max_tokens_option(),
        backends: Backends = None,  # type: ignore[assignment]  # its flags: c.with_backends
        speculative: str = typer.Option(
            "auto",
            "--speculative",
            help="auto: search each layout without speculative decoding and with the model's "
            "MTP layers (or the layout given); off: without.",
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
        spec_accept: str = c.spec_accept_option(),
        spec_accept_length: float = c.spec_accept_length_option(),
        disable_radix_cache: bool = typer.Option(
            False,
            "--disable-radix-cache",
            help="With --emit sglang: no radix (prefix) cache for every configuration (a "
            "speculating hybrid that SGLang runs without it on that GPU gets the flag in any "
            "case).",
        ),
        speculative_skip_dp_mlp_sync: bool = typer.Option(
            False,
            "--speculative-skip-dp-mlp-sync",
            help="With --emit sglang (0.5.11 to 0.5.22), DP attention and EAGLE/NEXTN: every speculative layout "
            "skips the sync of decode batches (default: searched with and without).",
        ),
        mamba_scheduler_strategy: str = c.mamba_scheduler_strategy_option(
            "With --emit sglang, a recurrent-state hybrid, for every configuration, printed in "
            "the launch command in the release's spelling"
        ),
        mamba_radix_cache_strategy: str = c.mamba_radix_cache_strategy_option(),
        fmt: c.OutputFormat = c.format_option(),
        out: Path = c.out_option(),
    ) -> None:
        """The cheapest deployments (GPU kind, TP/PP, replicas, KV dtype, batch limits) that
        serve a request rate within latency targets."""
        from kvplan.inputs.options import check_range, parse_tokens
        from kvplan.inputs.prices import parse_price
        from kvplan.plans.plan import PlanRequest, parse_slo, plan
        from kvplan.present.plan import plan_view
        from kvplan.simulate.workload import WorkloadSpec

        if emit not in ("vllm", "sglang"):
            raise KvplanError(f"--emit {emit!r}: choose vllm or sglang")
        engine_version = c.check_engine_version(emit, engine_version)
        from kvplan.engines.releases import SGLANG_VERSION

        mamba_strategy = c.mamba_strategy(
            mamba_scheduler_strategy, mamba_radix_cache_strategy, emit,
            engine_version or SGLANG_VERSION,
        )  # fmt: skip
        if emit == "vllm" and engine_version is not None:
            from kvplan.present.launch import vllm_image

            vllm_image(engine_version)  # a pre-release has none: refused before the search
        from kvplan.simulate.workload import MIN_RATE

        if not MIN_RATE <= rate <= 1e6:
            raise KvplanError(
                f"--rate must be between {MIN_RATE:g} and 1,000,000 requests per second"
            )
        workload = WorkloadSpec(
            num_prompts=num_prompts,
            input_len=parse_tokens(input_len, what="--input-len"),
            output_len=parse_tokens(output_len, what="--output-len"),
            length_dist=length_dist,
            spread=spread,
            prefix_len=0
            if prefix_len.strip() == "0"
            else parse_tokens(prefix_len, what="--prefix-len"),
            seed=seed,
        )
        request = PlanRequest(
            rate=rate,
            slos=tuple(parse_slo(s) for s in slo),
            workload=workload,
            tps=_ints(tp, "--tp", c.MAX_TP),
            pps=_ints(pp, "--pp", c.MAX_TP),
            kv_cache_dtypes=() if kv_cache_dtype is None else c.dtype_list(kv_cache_dtype),
            max_num_seqs=_ints(max_num_seqs, "--max-num-seqs", 1 << 20),
            max_num_batched_tokens=()
            if max_num_batched_tokens is None
            else _ints(max_num_batched_tokens, "--max-num-batched-tokens", 1 << 24),
            max_model_len=c.one_context(max_model_len, "--max-model-len")
            if max_model_len
            else None,
            prices=dict(parse_price(p) for p in price),
            max_gpus=max_gpus,
            top=top,
            emit=emit,
            engine_version=engine_version,
            async_scheduling=async_scheduling,
            jobs=jobs,
            prune=prune,
            mem_fraction_static=mem_fraction_static,
            confidence=confidence,
            enable_expert_parallel=enable_expert_parallel,
            data_parallel_size=data_parallel_size,
            ep_size=ep_size,
            enable_dp_attention=enable_dp_attention,
            enable_dp_lm_head=enable_dp_lm_head,
            moe_dense_tp_size=moe_dense_tp_size,
            nnodes=nnodes,
            data_parallel_size_local=data_parallel_size_local,
            decode_context_parallel_size=check_range(
                dcp, what="--decode-context-parallel-size", minimum=1, maximum=1024
            ),
            enforce_eager=enforce_eager,
            piecewise=c.piecewise_flags(disable_piecewise, enable_piecewise, piecewise_max_tokens),
            backends=backends,
            speculative=speculative,
            disable_radix_cache=disable_radix_cache,
            speculative_skip_dp_mlp_sync=speculative_skip_dp_mlp_sync,
            mamba_scheduler_strategy=mamba_strategy,
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
        )
        gpus = list({g.key: g for g in (c.load_gpu(name) for name in gpu)}.values())
        result = plan(c.load_model(model), gpus, request, progress=_progress)
        c.emit(c.render(plan_view(result, emit), fmt), out)


def _progress(done: int, total: int) -> None:
    """A one-line progress display on standard error, only on a terminal."""
    if not sys.stderr.isatty():
        return
    end = "\n" if done == total else ""
    sys.stderr.write(f"\rsearched {done:,}/{total:,} configurations{end}")
    sys.stderr.flush()
