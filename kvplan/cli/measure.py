"""kvplan measure."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = "Example: kvplan measure --quick --check --json measure.json"


def add(app: typer.Typer) -> None:
    @app.command("measure", epilog=EXAMPLE)
    @c.command
    def measure_cmd(
        model: str = typer.Option("qwen2.5-7b", "--model", help=c.MODEL_HELP),
        layers: int = typer.Option(
            None, "--layers", min=1, max=256, help="Layers to build (shapes scaled down)."
        ),
        device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
        gpu: str = typer.Option(None, "--gpu", help="Profile to compare against (else matched)."),
        quick: bool = typer.Option(False, "--quick", help="A short sweep (< 60 s on 2 CPU cores)."),
        check: bool = typer.Option(
            False,
            "--check",
            help="Exit 1 when a bandwidth-bound decode point misses its prediction by more than "
            "--tolerance.",
        ),
        tolerance: float = typer.Option(
            0.15, "--tolerance", help="Allowed relative error (0.01 to 5)."
        ),
        threads: int = typer.Option(
            None, "--threads", min=1, max=1024, help="CPU threads (recorded)."
        ),
        json_out: Path = typer.Option(None, "--json", help="Write every number to this JSON file."),
        save_profile: Path = typer.Option(None, "--save-profile", help="Write a measured profile."),
        distributed: bool = typer.Option(
            False,
            "--distributed",
            help="Time all-reduce and a KV transfer with torch.distributed (gloo on CPU, NCCL on "
            "GPU).",
        ),
        nproc: int = typer.Option(
            2, "--nproc", min=2, max=64, help="With --distributed: ranks to spawn (2 to 64)."
        ),
        timeout: float = typer.Option(
            60.0, "--timeout", help="With --distributed: seconds before a collective gives up."
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """Microbenchmarks on this device that check the planner's predictions."""
        try:
            import torch
        except ImportError:
            raise KvplanError(
                "measure needs torch: pip install torch (CPU wheel: --index-url "
                "https://download.pytorch.org/whl/cpu)"
            ) from None
        import json

        from kvplan.measure.run import MeasureRequest, measure, profile_yaml

        c.fraction(tolerance, "--tolerance", 0.01, 5.0)
        c.fraction(timeout, "--timeout", 1.0, 3600.0)
        if distributed:
            from kvplan.measure.distributed import DistributedRequest, run_distributed

            dev = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
            report = run_distributed(
                DistributedRequest(
                    nproc=nproc,
                    device=dev,
                    model=model,
                    gpu=gpu,
                    timeout_s=timeout,
                    context_len=2048 if quick else 8192,
                    runs=9 if quick else 25,
                )
            )
            if json_out is not None:
                c.emit(json.dumps(report.data, indent=2, allow_nan=False) + "\n", json_out)
            c.emit(c.render(report, fmt))
            return

        request = MeasureRequest(
            model=model,
            layers=layers,
            device=device,
            gpu=gpu,
            quick=quick,
            threads=threads,
            tolerance=tolerance,
        )
        report = _with_progress(lambda progress: measure(request, progress))
        if json_out is not None:
            c.emit(json.dumps(report.data, indent=2, allow_nan=False) + "\n", json_out)
        if save_profile is not None:
            c.emit(profile_yaml(report.data), save_profile)
        c.emit(c.render(report, fmt))
        if check and not report.data["check"]["passed"]:
            raise typer.Exit(1)


def _with_progress(run):
    """A rich progress line on stderr while `run(progress)` works (rich only imported here)."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("measuring", total=None)
        return run(lambda step: bar.update(task, description=f"measuring: {step}"))
