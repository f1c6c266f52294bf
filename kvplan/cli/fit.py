"""kvplan fit: what runs on this machine (or a named one): models x quantizations x contexts."""

from __future__ import annotations

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError

EXAMPLE = "Example: kvplan fit --gpu m3-max-64gb --ctx 8k,32k"
MAX_TOP = 100_000


def add(app: typer.Typer) -> None:
    @app.command("fit", epilog=EXAMPLE)
    @c.command
    def fit_cmd(
        models: list[str] = typer.Argument(
            None,
            help="Models to try: .gguf files (sized as stored), config.json files, bundled names "
            "or Hub ids (default: every bundled model).",
        ),
        gpu: str = typer.Option(
            None,
            "--gpu",
            help="The machine: a profile (rtx-4090, m3-max-64gb) or a YAML file (default: this "
            "machine's GPU, as --gpu local).",
        ),
        ctx: str = typer.Option(
            "4k,8k,32k,128k", "--ctx", help="Contexts to try, -c (8k,32k; 1 to 16 of them)."
        ),
        weights_type: list[str] = typer.Option(
            None,
            "--weights-type",
            help="ggml weight types to try for a config (repeatable; default f16, q8_0, q6_K, "
            "q5_K, q4_K, iq4_xs, q3_K, q2_K); a .gguf file is sized as stored.",
        ),
        cache_type: str = typer.Option(
            "f16", "--cache-type", "-ctk", help="K and V cache type (f16, q8_0, q4_0, ...)."
        ),
        gpu_memory: str = typer.Option(
            None,
            "--gpu-memory",
            help="Memory the GPU may use (40GiB; a Mac's iogpu.wired_limit_mb), instead of the "
            "profile's.",
        ),
        every_type: bool = typer.Option(
            False,
            "--every-type",
            help="Every weights type that fits at each context, not only the most bits.",
        ),
        top: int = typer.Option(
            25, "--top", help="Rows shown, best first (0 to 100,000; 0: all; JSON holds all)."
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """What runs here: the models, weights quantizations and contexts whose llama.cpp
        allocation fits the GPU with every layer on it, ranked, each row with its exact bytes."""
        from kvplan.inputs.options import parse_bytes
        from kvplan.plans.fit import WEIGHT_TYPES, FitRequest, fit
        from kvplan.present.fit import fit_view

        if not 0 <= top <= MAX_TOP:
            raise KvplanError(f"--top {top} must be between 0 and {MAX_TOP:,}")
        memory = None if gpu_memory is None else parse_bytes(gpu_memory, what="--gpu-memory")
        profile = _machine(gpu, memory is not None)
        request = FitRequest(
            models=tuple(models or ()),
            contexts=c.contexts(ctx),
            weights_types=tuple(weights_type) if weights_type else WEIGHT_TYPES,
            cache_type=cache_type,
            gpu_memory_bytes=memory,
            every_type=every_type,
            gpu_name=gpu or "local",
        )
        c.emit(c.render(fit_view(fit(profile, request), top=top), fmt))


def _machine(gpu: str | None, memory_given: bool):
    """--gpu, else this machine's GPU; none found is a one-line error naming the way out."""
    if gpu is not None:
        return c.load_gpu(gpu, memory_given)
    try:
        return c.load_gpu("local")
    except KvplanError:
        raise KvplanError(
            "no --gpu given and no GPU found on this machine (torch, NVML and macOS's sysctl "
            "see none): name it, --gpu rtx-4090 or --gpu m3-max-64gb (kvplan gpus lists them)"
        ) from None
