"""The command line: each command parses its options, makes one library call, and renders.

Nothing here computes; every command has a Python twin in the library (docs/python-api.md)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import typer

from kvplan.errors import KvplanError
from kvplan.render import OutputFormat, render

app = typer.Typer(
    name="kvplan",
    help="Plan the KV cache of an LLM deployment from its config.json and a hardware profile.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

MODEL_HELP = "Bundled name (kvplan models), Hugging Face repo id, or path to a config.json."
FORMAT_OPTION = typer.Option(OutputFormat.table, "--format", "-f", help="Output format.")


def command(fn):
    """Turn KvplanError into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KvplanError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def emit(text: str, out: Path | None = None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KvplanError(f"cannot write {out}: {exc.strerror}") from None
    typer.echo(f"wrote {out}", err=True)


@app.command("size")
@command
def size_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    ctx: str = typer.Option("8k", "--ctx", help="Context lengths: 8192, 8k, 128k (k = 1024), 1m."),
    batch: str = typer.Option("1", "--batch", help="Batch sizes (concurrent sequences): 1,8,64."),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="KV dtypes: auto, fp32, bf16, fp16, fp8, int8, int4."
    ),
    kv_group_size: int = typer.Option(32, "--kv-group-size", help="int4 KV quantization group."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree: bytes per GPU."),
    weights_dtype: str = typer.Option(
        "auto",
        "--weights-dtype",
        help="auto (from the config), bf16, fp16, fp32, fp8, int8, int4, mxfp4.",
    ),
    breakdown: bool = typer.Option(False, "--breakdown", help="Add one row per layer group."),
    fmt: OutputFormat = FORMAT_OPTION,
) -> None:
    """KV cache bytes per token, per sequence and per batch, next to the weights."""
    from kvplan.size import SizeRequest, size
    from kvplan.sources import load_model
    from kvplan.units import parse_int_list, parse_token_list

    request = SizeRequest(
        contexts=tuple(parse_token_list(ctx)),
        batches=tuple(parse_int_list(batch, what="batch size", maximum=1 << 24)),
        kv_dtypes=tuple(d.strip() for d in kv_dtype.split(",") if d.strip()),
        tp=tp,
        weights_dtype=weights_dtype,
        kv_group_size=kv_group_size,
        breakdown=breakdown,
    )
    emit(render(size(load_model(model), request), fmt))


@app.command("models")
@command
def models_cmd(fmt: OutputFormat = FORMAT_OPTION) -> None:
    """List the bundled models with family, parameter count and KV bytes per token."""
    from kvplan.catalog import models_report

    emit(render(models_report(), fmt))


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="kvplan")
    except KvplanError as exc:  # raised outside a command (option callbacks)
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:  # never a traceback for users; KVPLAN_DEBUG=1 shows it
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        typer.echo(
            f"internal error: {exc.__class__.__name__}: {exc} (KVPLAN_DEBUG=1 for details)",
            err=True,
        )
        sys.exit(1)
