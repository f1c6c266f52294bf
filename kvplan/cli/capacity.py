"""kvplan capacity."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = (
    "Example: kvplan capacity llama-3.1-8b --gpu h100 --ctx 32k --kv-dtype fp8. Exit codes: 0 "
    "it fits, 1 fits: NO (the whole answer still printed, with what would fit), 2 bad input "
    "(a comparison of GPU kinds exits 0)."
)
EXIT_NO_FIT = 1  # as measure --check's failed check: the answer is no, the output is complete


def add(app: typer.Typer) -> None:
    @app.command("capacity", epilog=EXAMPLE)
    @c.command
    def capacity_cmd(
        model: str = c.model_argument(),
        gpu: list[str] = c.gpus_option(
            ["h100"],
            c.GPU_HELP + " Repeat the option, or `all`, to compare GPU kinds side by side.",
        ),
        users: int = typer.Option(
            None,
            "--users",
            min=1,
            max=1 << 30,
            help="Concurrent sequences to serve: replicas of the layout that needs the fewest "
            "GPUs in all (and, comparing kinds, the GPUs each needs).",
        ),
        price: list[str] = c.price_option(),
        num_gpus: int = typer.Option(
            None, "--num-gpus", min=1, max=1 << 20, help="GPUs in all (replicas of TP x PP)."
        ),
        tp: int = c.tp_option(default=None),
        pp: int = c.pp_option(default=None),
        dp_attention: int = c.dp_attention_option(),
        ctx: str = c.ctx_option(help="Context length per sequence: 8192, 8k, 128k, 1m."),
        batch: str = c.batch_option(help="Batch size(s) for the longest-context answer: 1 or 1,8."),
        gpu_mem_util: float = c.gpu_mem_util_option(),
        weights_dtype: str = c.weights_dtype_option(),
        kv_dtype: str = c.kv_dtype_option(),
        kv_group_size: int = c.kv_group_size_option(),
        block_size: int = typer.Option(
            None,
            "--block-size",
            min=1,
            max=4096,
            help="Tokens per KV block (1 to 4096; default 16, and with --emit vllm an MLA "
            "model's backend block).",
        ),
        reserve: str = typer.Option(
            "auto",
            "--reserve",
            help="Memory per GPU kept for activations and runtime: auto, or a size (2GiB).",
        ),
        prefix_tokens: str = typer.Option(
            "0", "--prefix-tokens", help="Shared prefix tokens stored once (4k); 0 for none."
        ),
        mean_len: str = typer.Option(
            None, "--mean-len", help="Mean tokens a sequence really uses (paging vs contiguous)."
        ),
        max_num_batched_tokens: int = typer.Option(
            8192,
            "--max-num-batched-tokens",
            min=1,
            max=1 << 24,
            help="Prefill chunk the auto reserve is sized for (1 to 16,777,216).",
        ),
        link: str = typer.Option(
            "network",
            "--link",
            help="Link for the disaggregated KV transfer: network (inter-node) or interconnect.",
        ),
        network_gbps: float = typer.Option(
            None, "--network-gbps", help="Inter-node Gb/s per GPU per direction (overrides)."
        ),
        emit_flags: str = typer.Option(
            None,
            "--emit",
            help="Print how to launch this plan instead: vllm, sglang (the command), "
            "vllm-docker, sglang-docker (docker run), vllm-k8s, sglang-k8s (a Deployment).",
        ),
        allow_long: bool = c.allow_long_option(),
        plot: Path = c.path_option(
            None,
            "--plot",
            help="Max users vs context per KV dtype (.png/.svg); comparing kinds, tokens/s per "
            "GPU vs tokens/s per user per kind (the Pareto front).",
        ),
        fmt: c.OutputFormat = typer.Option(
            None, "--format", "-f", help="Output format (default table)."
        ),
    ) -> None:
        """How many concurrent requests fit on a GPU, engine-free (kvplan engine: as an engine
        allocates)."""
        from kvplan.inputs.hardware import check_link_gbps
        from kvplan.inputs.options import parse_bytes, parse_tokens
        from kvplan.plans.capacity import (
            CapacityRequest,
            capacity,
            capacity_for_launch,
            concurrency_curve,
        )
        from kvplan.plans.deployment import deployment_of, layout_text
        from kvplan.present.render import OutputFormat

        if emit_flags is not None:  # the engines' launch modules load for --emit alone
            from kvplan.plans.launch import TARGETS

            if emit_flags not in TARGETS:
                raise KvplanError(f"--emit {emit_flags[:40]!r}: choose {', '.join(TARGETS)}")
        if emit_flags is not None and fmt is not None:
            raise KvplanError("--emit prints a launch command: drop --format")
        if allow_long and emit_flags is None:
            raise KvplanError("--allow-long-max-model-len applies to --emit's launch command")
        if network_gbps is not None:
            check_link_gbps(network_gbps, "--network-gbps")
        spec, profiles = c.load_model(model), c.load_gpus(gpu)
        overrides = c.prices(price)  # checked whatever follows
        if len(profiles) > 1 or any(g.strip().lower() == "all" for g in gpu):
            from kvplan.plans.compare import CompareRequest, compare
            from kvplan.present.compare import compare_view

            if any(x is not None for x in (num_gpus, emit_flags)):
                raise KvplanError(
                    "a comparison of GPU kinds prints a table: drop --num-gpus and --emit (or "
                    "pass one --gpu); --tp, --pp and --dp-attention fix every kind's layout"
                )
            if plot is not None:
                from kvplan.present.plots import check_plot_path

                check_plot_path(plot)  # before any work
            compare_request = CompareRequest(
                context_len=c.one_context(ctx),
                kv_dtype=kv_dtype,
                weights_dtype=weights_dtype,
                gpu_mem_util=c.fraction(gpu_mem_util, "--gpu-mem-util"),
                users=users,
                prices=overrides,
                tp=tp,
                pp=pp,
                dp_attention=dp_attention,
            )
            result = compare(spec, profiles, compare_request)
            from kvplan.atomic import all_or_nothing

            with all_or_nothing():  # the chart and what is printed, or neither
                if plot is not None:
                    from kvplan.plans.compare import pareto_points
                    from kvplan.present.plots import pareto_plot

                    pareto_plot(
                        pareto_points(spec, profiles, compare_request),
                        f"{spec.name} at {result.context_len:,} tokens, KV {result.kv_dtype}: "
                        "plan's step model",
                        plot,
                    )
                c.emit(c.render(compare_view(result), fmt or OutputFormat.table))
            return
        if overrides:
            raise KvplanError("--price prices a comparison: pass two or more --gpu (or --gpu all)")
        from kvplan.present.capacity import capacity_view, launch_of  # one kind's presenter

        profile = profiles[0]
        request = CapacityRequest(
            context_len=c.one_context(ctx),
            batch_sizes=c.batches(batch),
            num_gpus=num_gpus,
            tp=tp,
            pp=pp,
            dp_attention=dp_attention,
            users_target=users,
            gpu_mem_util=c.fraction(gpu_mem_util, "--gpu-mem-util"),
            weights_dtype=weights_dtype,
            kv_dtype=kv_dtype,
            block_size=block_size or 16,
            reserve_bytes=None
            if reserve == "auto"
            else parse_bytes(reserve, what="--reserve", allow_zero=True),
            prefix_tokens=0
            if prefix_tokens.strip() == "0"
            else parse_tokens(prefix_tokens, what="--prefix-tokens"),
            mean_len=None if mean_len is None else parse_tokens(mean_len, what="--mean-len"),
            kv_group_size=kv_group_size,
            max_num_batched_tokens=max_num_batched_tokens,
            link=link,
            network_gbps=network_gbps,
        )
        if emit_flags is None:
            result = capacity(spec, profile, request)
        else:  # counted as the engine will page it
            engine = emit_flags.partition("-")[0]
            result = capacity_for_launch(spec, profile, request, engine, block_size is not None)
        from kvplan.atomic import all_or_nothing

        with all_or_nothing():  # the chart and what is printed, or neither
            if plot is not None:
                from kvplan.present.plots import capacity_plot

                contexts = [2**k for k in range(10, 21)]
                capacity_plot(
                    concurrency_curve(spec, profile, request, contexts),
                    f"{spec.name} on {profile.name} ({layout_text(deployment_of(result))})",
                    plot,
                )
            if emit_flags is not None:
                from kvplan.plans.launch import check_launch
                from kvplan.present.launch import emit

                launch = launch_of(result, spec, profile, model, max_num_batched_tokens, block_size)
                launch = check_launch(launch, emit_flags, spec, allow_long)
                c.emit(emit(launch, emit_flags, spec.name))
                return
            c.emit(c.render(capacity_view(result), fmt or OutputFormat.table))
        if not result.fits:
            raise typer.Exit(EXIT_NO_FIT)
