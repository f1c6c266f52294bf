"""kvplan whatif."""

from __future__ import annotations

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = (
    "Example: kvplan whatif llama-3.1-70b --ctx 128k --batch 32 --apply fp8 --apply window=32k"
)


def add(app: typer.Typer) -> None:
    @app.command("whatif", epilog=EXAMPLE)
    @c.command
    def whatif_cmd(
        model: str = c.model_argument(),
        ctx: str = c.ctx_option(help="Context length per sequence: 8192, 8k, 128k, 1m."),
        batch: str = c.batch_option(help="Concurrent sequences."),
        apply: list[str] = typer.Option(
            ...,
            "--apply",
            help="A technique: fp8, int8, int4, claN, gqa=N, mqa, window=N, evict=F, prefix=N; "
            "join with + to combine (fp8+cla2). Repeat the option.",
        ),
        kv_dtype: str = typer.Option("auto", "--kv-dtype", help="The baseline's KV dtype."),
        kv_group_size: int = c.kv_group_size_option(),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """Price each KV-cache technique alone and combined, by the term of the formula it moves."""
        from kvplan.plans.whatif import WhatIfRequest, whatif
        from kvplan.present.whatif import whatif_view

        sizes = c.batches(batch)
        if len(sizes) != 1:
            raise KvplanError("whatif prices one batch size at a time: give --batch N")
        request = WhatIfRequest(
            context_len=c.one_context(ctx),
            batch_size=sizes[0],
            apply=tuple(apply),
            kv_dtype=kv_dtype,
            kv_group_size=kv_group_size,
        )
        c.emit(c.render(whatif_view(whatif(c.load_model(model), request)), fmt))
