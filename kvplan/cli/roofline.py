"""kvplan roofline."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli import common as c

EXAMPLE = "Example: kvplan roofline llama-3.1-70b --gpu h100 --ctx 8k,32k --batch 1,8,64"


def add(app: typer.Typer) -> None:
    @app.command("roofline", epilog=EXAMPLE)
    @c.command
    def roofline_cmd(
        model: str = typer.Argument(None, help=c.MODEL_HELP + " Omit to describe the GPU alone."),
        gpu: str = c.gpu_option(),
        ctx: str = c.ctx_option(help=c.CTX_HELP + " The first is also the prefill."),
        batch: str = c.batch_option("1,8,64", "Decode batch size(s): 1,8,64."),
        kv_dtype: str = c.kv_dtype_option(),
        weights_dtype: str = c.weights_dtype_option(),
        tp: int = c.tp_option(default=None),
        pp: int = c.pp_option(default=None),
        dp_attention: int = c.dp_attention_option(),
        ops: bool = typer.Option(
            False,
            "--ops",
            help="Also each operator of the decode step (bytes, FLOPs, intensity, bound) at the "
            "first context; dense attention + MLP models.",
        ),
        plot: Path = c.path_option(
            None, "--plot", help="Write a log-log roofline chart (.png/.svg)."
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """Prefill and decode on the device's roofline: intensity, time floors, ceilings."""
        from kvplan.plans.roofline import RooflineRequest, device, roofline
        from kvplan.present.roofline import device_view, roofline_view

        profile = c.load_gpu(gpu)
        if model is None:
            c.emit(c.render(device_view(device(profile)), fmt))
            return
        request = RooflineRequest(
            contexts=c.contexts(ctx),
            batches=c.batches(batch),
            kv_dtype=kv_dtype,
            weights_dtype=weights_dtype,
            tp=tp,
            pp=pp,
            dp_attention=dp_attention,
            ops=ops,
        )
        view = roofline_view(roofline(c.load_model(model), profile, request))
        from kvplan.atomic import all_or_nothing

        with all_or_nothing():  # the chart and the table, or neither
            if plot is not None:
                from kvplan.present.plots import roofline_plot

                roofline_plot(view.data, plot)
            c.emit(c.render(view, fmt))
