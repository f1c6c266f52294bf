"""kvplan report."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = "Example: kvplan report llama-3.1-70b --gpu h100 --gpu h200 --out plan.md"


def add(app: typer.Typer) -> None:
    @app.command("report", epilog=EXAMPLE)
    @c.command
    def report_cmd(
        model: str = c.model_argument(),
        gpu: list[str] = typer.Option(["h100"], "--gpu", help="GPU options (repeat the option)."),
        ctx: str = c.ctx_option("8k,32k,128k", "Context lengths to compare (a sweep)."),
        kv_dtype: str = typer.Option("auto,fp8", "--kv-dtype", help="KV dtypes to compare."),
        tp: int = c.tp_option(None),
        prefix_tokens: str = typer.Option(
            "2k", "--prefix-tokens", help="Shared prompt to price (capped at each context)."
        ),
        out: Path = c.out_option(
            help="Write Markdown here ('-': standard output); charts beside it."
        ),
        force: bool = typer.Option(
            False, "--force", help="Overwrite the charts beside --out if they exist."
        ),
        fmt: str = typer.Option("markdown", "--format", "-f", help="markdown or json."),
    ) -> None:
        """A design-doc section in Markdown: anatomy, KV table, capacity, roofline, decision order."""
        import json

        from kvplan.atomic import all_or_nothing, check_outputs, is_stdout
        from kvplan.plans.design import DesignRequest, design_report
        from kvplan.present.design import design_json, render_markdown, write_plots

        if fmt not in ("markdown", "json"):
            raise KvplanError(f"--format {fmt!r}: report prints markdown or json")
        check_outputs({"--out": out})  # before the charts beside it are drawn
        spec = c.load_model(model)
        gpus = [c.load_gpu(g) for g in gpu]
        contexts = c.contexts(ctx)
        request = DesignRequest(
            contexts=contexts,
            kv_dtypes=c.dtype_list(kv_dtype),
            tp=tp,
            prefix_tokens=c.one_context(prefix_tokens, "--prefix-tokens"),
            plots=not is_stdout(out) and fmt == "markdown",
        )
        result = design_report(spec, gpus, request)
        if fmt == "json":
            c.emit(json.dumps(design_json(result), indent=2, allow_nan=False) + "\n", out)
            return
        with all_or_nothing():  # the charts and the page land together, or none of them
            plots = write_plots(result, out, force) if request.plots else {}
            c.emit(render_markdown(result, plots), out)
