"""kvplan size."""

import typer

from kvplan.cli import common as c

EXAMPLE = (
    "Example: kvplan size llama-3.1-70b --ctx 8k,128k --batch 1,32 --kv-dtype auto,fp8; "
    "several models in one table: kvplan size llama-3.1-8b qwen3-8b gemma-3-27b --ctx 32k"
)


def add(app: typer.Typer) -> None:
    @app.command("size", epilog=EXAMPLE)
    @c.command
    def size_cmd(
        models: list[str] = c.models_argument(),
        ctx: str = c.ctx_option(),
        batch: str = c.batch_option(),
        kv_dtype: str = typer.Option(
            "auto",
            "--kv-dtype",
            help="KV dtype(s), comma-separated: auto, fp32, bf16, fp16, fp8, int8, int4.",
        ),
        kv_group_size: int = c.kv_group_size_option(),
        tp: int = c.tp_option(),
        weights_dtype: str = c.weights_dtype_option(),
        breakdown: bool = typer.Option(False, "--breakdown", help="Add one row per layer group."),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """KV cache bytes per token, per sequence and per batch, next to the weights; several
        models in one table."""
        from kvplan.plans.size import SizeRequest, size, size_table
        from kvplan.present.size import size_table_view, size_view

        request = SizeRequest(
            contexts=c.contexts(ctx),
            batches=c.batches(batch),
            kv_dtypes=c.dtype_list(kv_dtype),
            tp=tp,
            weights_dtype=weights_dtype,
            kv_group_size=kv_group_size,
            breakdown=breakdown,
        )
        if len(models) == 1:
            c.emit(c.render(size_view(size(c.load_model(models[0]), request)), fmt))
            return
        table = size_table(c.load_models(models), request)
        c.emit(c.render(size_table_view(table), fmt))
