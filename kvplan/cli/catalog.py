"""kvplan models and kvplan gpus."""

from __future__ import annotations

import typer

from kvplan.cli import common as c


def add_models(app: typer.Typer) -> None:
    @app.command("models", epilog="Example: kvplan models --format csv")
    @c.command
    def models_cmd(fmt: c.OutputFormat = c.format_option()) -> None:
        """List the bundled models with family, parameter count and KV bytes per token."""
        from kvplan.plans.catalog import models
        from kvplan.present.catalog import models_view

        c.emit(c.render(models_view(models()), fmt))


def add_gpus(app: typer.Typer) -> None:
    @app.command("gpus", epilog="Example: kvplan gpus")
    @c.command
    def gpus_cmd(fmt: c.OutputFormat = c.format_option()) -> None:
        """List the hardware profiles with their ridge points."""
        from kvplan.plans.gpus import gpus
        from kvplan.present.catalog import gpus_view

        c.emit(c.render(gpus_view(gpus()), fmt))
