"""kvplan whatif."""

from __future__ import annotations

import typer

from kvplan.cli import common as c

EXAMPLE = (
    "Example: kvplan whatif llama-3.1-70b --ctx 128k --batch 32 --apply fp8 --apply window=32k "
    "(no --apply: every technique)"
)


def add(app: typer.Typer) -> None:
    @app.command("whatif", epilog=EXAMPLE)
    @c.command
    def whatif_cmd(
        model: str = c.model_argument(),
        ctx: str = c.ctx_option(help="Context length per sequence: 8192, 8k, 128k, 1m."),
        batch: str = c.batch_option(),
        apply: list[str] = typer.Option(
            None,
            "--apply",
            help="A technique: fp8, int8, int4, int3, int2, claN, gqa=N, mqa, prune=N, "
            "lowrank=R, mla=LATENT+ROPE, window=N, cyclic=N, evict=F, merge=F, recurrent=F, "
            "prefix=N, paged[=N], sparse-read=F, spec[=DRAFT], or a scheduling one "
            "(continuous-batching, chunked-prefill, preemption, cache-aware-routing); join with "
            "+ to combine (fp8+cla2). Repeat the option. None: every technique.",
        ),
        gpu: str = c.gpu_option(),
        tp: int = typer.Option(
            None,
            "--tp",
            min=1,
            max=c.MAX_TP,
            help="Tensor-parallel degree (1 to 1024); default: the smallest at which one "
            "sequence fits.",
        ),
        gpu_mem_util: float = c.gpu_mem_util_option(),
        weights_dtype: str = c.weights_dtype_option(),
        kv_dtype: str = c.kv_dtype_option(),
        kv_group_size: int = typer.Option(
            32,
            "--kv-group-size",
            min=1,
            max=4096,
            help="int4, int3, int2 KV: values per scale group (1 to 4096).",
        ),
        keep_sink: int = typer.Option(
            4,
            "--keep-sink",
            min=0,
            max=1 << 20,
            help="int3/int2: first tokens per sequence kept in full precision (0 to 1,048,576).",
        ),
        keep_recent: int = typer.Option(
            128,
            "--keep-recent",
            min=0,
            max=1 << 20,
            help="int3/int2: most recent tokens kept in full precision (0 to 1,048,576).",
        ),
        spec_tokens: int = typer.Option(
            4, "--spec-tokens", min=1, max=64, help="spec: tokens drafted per round, k (1 to 64)."
        ),
        spec_accept: float = typer.Option(
            0.7,
            "--spec-accept",
            help="spec: probability that the target accepts one drafted token (0 to 1).",
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """Price each KV-cache technique alone and combined: the term it moves, the bytes stored
        and read per step, the decode time, and the users that fit on a GPU."""
        from kvplan.plans.whatif import WhatIfRequest, whatif
        from kvplan.present.whatif import whatif_view

        request = WhatIfRequest(
            context_len=c.one_context(ctx),
            batch_sizes=c.batches(batch),
            apply=tuple(apply or ()),
            kv_dtype=kv_dtype,
            kv_group_size=kv_group_size,
            keep_sink=keep_sink,
            keep_recent=keep_recent,
            tp=tp,
            gpu_mem_util=c.fraction(gpu_mem_util, "--gpu-mem-util"),
            weights_dtype=weights_dtype,
            spec_tokens=spec_tokens,
            spec_acceptance=c.fraction(spec_accept, "--spec-accept", 0.0, 1.0),
        )
        result = whatif(c.load_model(model), c.load_gpu(gpu), request)
        c.emit(c.render(whatif_view(result), fmt))
