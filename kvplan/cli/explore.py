"""kvplan explore."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli import common as c

EXAMPLE = "Example: kvplan explore deepseek-v3 --gpu h100 --gpu h200 --out kvcache.html"


def add(app: typer.Typer) -> None:
    @app.command("explore", epilog=EXAMPLE)
    @c.command
    def explore_cmd(
        model: str = c.model_argument(),
        gpu: list[str] = typer.Option(
            ["h100", "h200", "a100"], "--gpu", help="GPU profiles to pick from (repeat the option)."
        ),
        out: Path = c.out_option(
            Path("kvcache.html"), "The HTML file to write ('-': standard output)."
        ),
    ) -> None:
        """Write the interactive cache explorer: one self-contained HTML page."""
        from kvplan.plans.explore import explore_data
        from kvplan.present.explore_page import explore_page

        data = explore_data(c.load_model(model), [c.load_gpu(g) for g in gpu])
        c.emit(explore_page(data), out)
