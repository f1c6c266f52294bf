"""kvplan explore."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from kvplan.cli import common as c

DEFAULT_PAGE = "kvcache.html"
EXAMPLE = "Example: kvplan explore deepseek-v3 --gpu h100 --gpu h200 --out kvcache.html"


class PageFormat(str, Enum):
    html = "html"
    json = "json"


def add(app: typer.Typer) -> None:
    @app.command("explore", epilog=EXAMPLE)
    @c.command
    def explore_cmd(
        model: str = c.model_argument(),
        gpu: list[str] = typer.Option(
            ["h100", "h200", "a100"], "--gpu", help="GPU profiles to pick from (repeat the option)."
        ),
        out: Path | None = c.out_option(
            None,
            "The file to write ('-': standard output); default kvcache.html for the page, "
            "standard output for json.",
        ),
        force: bool = typer.Option(
            False, "--force", help="Overwrite kvcache.html (the default --out) if it exists."
        ),
        fmt: PageFormat = typer.Option(
            PageFormat.html,
            "--format",
            "-f",
            help="html: the page; json: the numbers the page embeds.",
        ),
    ) -> None:
        """Write the interactive cache explorer: one self-contained HTML page."""
        from kvplan.atomic import check_outputs
        from kvplan.plans.explore import explore_data
        from kvplan.present import explore_page as page
        from kvplan.present.output import unnamed_path

        if fmt is PageFormat.html and out is None:  # the default page: never overwritten silently
            out = unnamed_path(
                Path(DEFAULT_PAGE), force, "pass --force to overwrite it, or name a file with --out"
            )
        check_outputs({"--out": out})
        data = explore_data(c.load_model(model), [c.load_gpu(g) for g in gpu])
        if fmt is PageFormat.json:
            c.emit(page.explore_json_text(data), out)
        else:
            c.emit(page.explore_page(data), out)
