"""The command line: each command parses its options, makes one library call, and renders.

Nothing here computes; every command has a Python twin in the library (docs/python-api.md)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import typer

from kvplan.errors import KvplanError
from kvplan.present.render import OutputFormat, render

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
    from kvplan.inputs.options import parse_int_list, parse_token_list
    from kvplan.inputs.sources import load_model
    from kvplan.plans.size import SizeRequest, size
    from kvplan.present.size import size_view

    request = SizeRequest(
        contexts=tuple(parse_token_list(ctx)),
        batches=tuple(parse_int_list(batch, what="batch size", maximum=1 << 24)),
        kv_dtypes=tuple(d.strip() for d in kv_dtype.split(",") if d.strip()),
        tp=tp,
        weights_dtype=weights_dtype,
        kv_group_size=kv_group_size,
        breakdown=breakdown,
    )
    emit(render(size_view(size(load_model(model), request)), fmt))


@app.command("models")
@command
def models_cmd(fmt: OutputFormat = FORMAT_OPTION) -> None:
    """List the bundled models with family, parameter count and KV bytes per token."""
    from kvplan.plans.catalog import models
    from kvplan.present.catalog import models_view

    emit(render(models_view(models()), fmt))


@app.command("roofline")
@command
def roofline_cmd(
    model: str = typer.Argument(None, help=MODEL_HELP + " Omit to describe the GPU alone."),
    gpu: str = typer.Option("h100", "--gpu", help="Profile name, alias (h100, a100, ...) or YAML."),
    ctx: str = typer.Option("8k", "--ctx", help="Context lengths; the first is also the prefill."),
    batch: str = typer.Option("1,8,64", "--batch", help="Decode batch sizes."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype (see kvplan size)."),
    weights_dtype: str = typer.Option("auto", "--weights-dtype", help="Weights dtype."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree: per-GPU figures."),
    pp: int = typer.Option(
        1, "--pp", help="Pipeline-parallel degree (bubbles stated, not hidden)."
    ),
    plot: Path = typer.Option(None, "--plot", help="Write a log-log roofline chart (.png/.svg)."),
    fmt: OutputFormat = FORMAT_OPTION,
) -> None:
    """Prefill and decode on the device's roofline: intensity, time floors, ceilings."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.options import parse_int_list, parse_token_list
    from kvplan.plans.roofline import RooflineRequest, device, roofline
    from kvplan.present.roofline import device_view, roofline_view

    profile = load_profile(gpu)
    if model is None:
        emit(render(device_view(device(profile)), fmt))
        return
    from kvplan.inputs.sources import load_model

    request = RooflineRequest(
        contexts=tuple(parse_token_list(ctx)),
        batches=tuple(parse_int_list(batch, what="batch size", maximum=1 << 24)),
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        tp=tp,
        pp=pp,
    )
    report = roofline_view(roofline(load_model(model), profile, request))
    if plot is not None:
        from kvplan.present.plots import roofline_plot

        roofline_plot(report.data, plot)
    emit(render(report, fmt))


@app.command("capacity")
@command
def capacity_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    gpu: str = typer.Option("h100", "--gpu", help="Profile name, alias or YAML file."),
    num_gpus: int = typer.Option(None, "--num-gpus", help="GPUs in all (replicas of TP x PP)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree."),
    ctx: str = typer.Option("32k", "--ctx", help="Context length per sequence."),
    batch: int = typer.Option(1, "--batch", help="Batch for the longest-context answer."),
    gpu_mem_util: float = typer.Option(0.9, "--gpu-mem-util", help="Fraction of memory used."),
    weights_dtype: str = typer.Option("auto", "--weights-dtype", help="Weights dtype."),
    kv_dtype: str = typer.Option(
        "auto",
        "--kv-dtype",
        help="KV dtype (engine spelling with --engine: auto, fp8, fp8_e4m3, ...).",
    ),
    block_size: int = typer.Option(
        None, "--block-size", help="Tokens per KV block (16; vLLM MLA backends force 64)."
    ),
    reserve: str = typer.Option(
        "auto", "--reserve", help="auto, or GiB for activations and runtime per GPU."
    ),
    prefix_tokens: str = typer.Option("0", "--prefix-tokens", help="Shared prefix tokens (4k)."),
    mean_len: str = typer.Option(None, "--mean-len", help="Mean tokens a sequence really uses."),
    engine: str = typer.Option(
        None, "--engine", help="Model an engine's allocator: vllm or sglang."
    ),
    kv_cache_memory: str = typer.Option(
        None,
        "--kv-cache-memory",
        help="With --engine: the engine's available KV memory (e.g. 19.53GiB).",
    ),
    max_model_len: str = typer.Option(
        None, "--max-model-len", help="With --engine: defaults to --ctx."
    ),
    max_num_batched_tokens: int = typer.Option(
        8192, "--max-num-batched-tokens", help="Prefill chunk (vLLM default 8192)."
    ),
    hybrid_chunked: bool = typer.Option(
        False,
        "--hybrid-chunked",
        help="vLLM: keep chunked "
        "layers chunked (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_"
        "HYBRID_KV_CACHE=1).",
    ),
    mem_fraction_static: float = typer.Option(
        None, "--mem-fraction-static", help="SGLang's memory fraction (default 0.9)."
    ),
    link: str = typer.Option(
        "network",
        "--link",
        help="Link for the disaggregated KV transfer: network (inter-node) or interconnect.",
    ),
    network_gbps: float = typer.Option(
        None, "--network-gbps", help="Inter-node Gb/s per GPU per direction (overrides)."
    ),
    emit_flags: str = typer.Option(None, "--emit", help="Print engine flags instead: vllm."),
    plot: Path = typer.Option(
        None, "--plot", help="Max users vs context per KV dtype (.png/.svg)."
    ),
    fmt: OutputFormat = FORMAT_OPTION,
) -> None:
    """How many concurrent requests fit on a GPU (engine-free, or as vLLM/SGLang allocate)."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.options import parse_tokens
    from kvplan.inputs.sources import load_model

    spec, profile = load_model(model), load_profile(gpu)
    context_len = parse_tokens(ctx)
    if engine is not None:
        from kvplan.engines import EngineRequest, engine_allocation
        from kvplan.inputs.options import parse_bytes
        from kvplan.present.engines import engine_view

        request = EngineRequest(
            engine=engine,
            max_model_len=parse_tokens(max_model_len, what="--max-model-len")
            if max_model_len
            else context_len,
            kv_cache_dtype=kv_dtype,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            tp=tp,
            pp=pp,
            gpu_mem_util=gpu_mem_util if gpu_mem_util != 0.9 or engine != "sglang" else 0.9,
            kv_cache_memory_bytes=parse_bytes(kv_cache_memory, what="--kv-cache-memory")
            if kv_cache_memory
            else None,
            hybrid_chunked=hybrid_chunked,
            mem_fraction_static=mem_fraction_static,
        )
        emit(render(engine_view(engine_allocation(spec, profile, request)), fmt))
        return
    from kvplan.inputs.options import parse_bytes
    from kvplan.plans.capacity import CapacityRequest, capacity, concurrency_curve
    from kvplan.present.capacity import capacity_view, vllm_command

    request = CapacityRequest(
        context_len=context_len,
        batch_size=batch,
        num_gpus=num_gpus,
        tp=tp,
        pp=pp,
        gpu_mem_util=gpu_mem_util,
        weights_dtype=weights_dtype,
        kv_dtype=kv_dtype,
        block_size=16 if block_size is None else block_size,
        reserve_bytes=None
        if reserve == "auto"
        else parse_bytes(reserve, what="--reserve", allow_zero=True),
        prefix_tokens=0
        if prefix_tokens == "0"
        else parse_tokens(prefix_tokens, what="--prefix-tokens"),
        mean_len=parse_tokens(mean_len, what="--mean-len") if mean_len else None,
        max_num_batched_tokens=max_num_batched_tokens,
        link=link,
        network_gbps=network_gbps,
    )
    result = capacity(spec, profile, request)
    report = capacity_view(result)
    if plot is not None:
        from kvplan.present.plots import capacity_plot

        contexts = [2**k for k in range(10, 21)]
        capacity_plot(
            concurrency_curve(spec, profile, request, contexts),
            f"{spec.name} on {profile.name} (TP {tp})",
            plot,
        )
    if emit_flags is not None:
        if emit_flags != "vllm":
            raise KvplanError(f"--emit {emit_flags!r}: only vllm is supported")
        emit(vllm_command(result, spec.name, max_num_batched_tokens))
        return
    emit(render(report, fmt))


@app.command("whatif")
@command
def whatif_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    ctx: str = typer.Option("128k", "--ctx", help="Context length per sequence."),
    batch: int = typer.Option(1, "--batch", help="Concurrent sequences."),
    apply: list[str] = typer.Option(
        ...,
        "--apply",
        help="A technique: fp8, int8, int4, claN, "
        "gqa=N, mqa, window=N, evict=F, prefix=N; join with + to "
        "combine (fp8+cla2). Repeat the option.",
    ),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="The baseline's KV dtype."),
    kv_group_size: int = typer.Option(32, "--kv-group-size", help="int4 group size."),
    fmt: OutputFormat = FORMAT_OPTION,
) -> None:
    """Price each KV-cache technique alone and combined, by the term of the formula it moves."""
    from kvplan.inputs.options import parse_tokens
    from kvplan.inputs.sources import load_model
    from kvplan.plans.whatif import WhatIfRequest, whatif
    from kvplan.present.whatif import whatif_view

    request = WhatIfRequest(
        context_len=parse_tokens(ctx),
        batch_size=batch,
        apply=tuple(apply),
        kv_dtype=kv_dtype,
        kv_group_size=kv_group_size,
    )
    emit(render(whatif_view(whatif(load_model(model), request)), fmt))


@app.command("report")
@command
def report_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    gpu: list[str] = typer.Option(["h100"], "--gpu", help="GPU options (repeat the option)."),
    ctx: str = typer.Option("8k,32k,128k", "--ctx", help="Context lengths."),
    kv_dtype: str = typer.Option("auto,fp8", "--kv-dtype", help="KV dtypes to compare."),
    tp: int = typer.Option(
        None,
        "--tp",
        help="Tensor parallelism (default: the smallest that fits the longest context).",
    ),
    prefix_tokens: str = typer.Option("2k", "--prefix-tokens", help="Shared prompt to price."),
    out: Path = typer.Option(None, "--out", help="Write Markdown here; plots go beside it."),
    fmt: str = typer.Option("markdown", "--format", "-f", help="markdown or json."),
) -> None:
    """A design-doc section in Markdown: anatomy, KV table, capacity, roofline, decision order."""
    import json as _json

    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.options import parse_token_list, parse_tokens
    from kvplan.inputs.sources import load_model
    from kvplan.plans.design import DesignRequest, design_report
    from kvplan.present.design import design_json, render_markdown, write_plots

    if fmt not in ("markdown", "json"):
        raise KvplanError(f"--format {fmt!r}: report prints markdown or json")
    spec = load_model(model)
    gpus = [load_profile(g) for g in gpu]
    request = DesignRequest(
        contexts=tuple(parse_token_list(ctx)),
        kv_dtypes=tuple(d.strip() for d in kv_dtype.split(",") if d.strip()),
        tp=tp,
        prefix_tokens=parse_tokens(prefix_tokens, what="--prefix-tokens"),
        plots=out is not None and fmt == "markdown",
    )
    result = design_report(spec, gpus, request)
    if fmt == "json":
        emit(_json.dumps(design_json(result), indent=2, allow_nan=False) + "\n", out)
        return
    plots = {}
    if out is not None:
        try:
            plots = write_plots(result, out)
        except KvplanError:
            plots = {}
    emit(render_markdown(result, plots), out)


@app.command("explore")
@command
def explore_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    gpu: list[str] = typer.Option(
        ["h100", "h200", "a100"], "--gpu", help="GPU profiles to pick from (repeat the option)."
    ),
    out: Path = typer.Option(Path("kvcache.html"), "--out", help="The HTML file to write."),
) -> None:
    """Write the interactive cache explorer: one self-contained HTML page."""
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.explore import explore_data
    from kvplan.present.explore_page import explore_page

    data = explore_data(load_model(model), [load_profile(g) for g in gpu])
    emit(explore_page(data), out)


@app.command("measure")
@command
def measure_cmd(
    model: str = typer.Option("qwen2.5-7b", "--model", help=MODEL_HELP),
    layers: int = typer.Option(None, "--layers", help="Layers to build (shapes scaled down)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    gpu: str = typer.Option(None, "--gpu", help="Profile to compare against (else matched)."),
    quick: bool = typer.Option(False, "--quick", help="A short sweep (< 60 s on 2 CPU cores)."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Exit 1 when a bandwidth-bound decode "
        "point misses its prediction by more than --tolerance.",
    ),
    tolerance: float = typer.Option(0.15, "--tolerance", help="Allowed relative error."),
    threads: int = typer.Option(None, "--threads", help="CPU threads (recorded)."),
    json_out: Path = typer.Option(None, "--json", help="Write every number to this JSON file."),
    save_profile: Path = typer.Option(None, "--save-profile", help="Write a measured profile."),
    distributed: bool = typer.Option(
        False,
        "--distributed",
        help="Time all-reduce and a KV transfer with torch.distributed (gloo on CPU, NCCL on GPU).",
    ),
    nproc: int = typer.Option(2, "--nproc", help="With --distributed: ranks to spawn."),
    timeout: float = typer.Option(
        60.0, "--timeout", help="With --distributed: seconds before a collective gives up."
    ),
    fmt: OutputFormat = FORMAT_OPTION,
) -> None:
    """Microbenchmarks on this device that check the planner's predictions."""
    try:
        import torch
    except ImportError:
        raise KvplanError("measure needs torch: pip install 'kvplan[measure]'") from None
    import json as _json

    from kvplan.measure.run import MeasureRequest, measure, profile_yaml

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
            emit(_json.dumps(report.data, indent=2, allow_nan=False) + "\n", json_out)
        emit(render(report, fmt))
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
        emit(_json.dumps(report.data, indent=2, allow_nan=False) + "\n", json_out)
    if save_profile is not None:
        emit(profile_yaml(report.data), save_profile)
    emit(render(report, fmt))
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


@app.command("gpus")
@command
def gpus_cmd(fmt: OutputFormat = FORMAT_OPTION) -> None:
    """List the hardware profiles with their ridge points."""
    from kvplan.plans.gpus import gpus
    from kvplan.present.catalog import gpus_view

    emit(render(gpus_view(gpus()), fmt))


def _app_for(argv: list[str]) -> typer.Typer:
    """The app to run: for `kvplan <command> ...`, a group holding only that command, so typer
    builds one command's parameters instead of all of them (start-up cost); else the full app."""
    name = argv[0] if argv else None
    info = next((c for c in app.registered_commands if c.name == name), None)
    if info is None:
        return app
    single = typer.Typer(
        add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
    )
    single.callback()(_root)
    single.registered_commands.append(info)
    return single


def _root() -> None:
    """Plan the KV cache of an LLM deployment from its config.json and a hardware profile."""


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _app_for(argv)(args=argv, prog_name="kvplan", standalone_mode=False)
    except KvplanError as exc:  # raised outside a command (option callbacks)
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # click usage errors
            message = " ".join(exc.format_message().split())
            typer.echo(f"error: {message} (kvplan --help)", err=True)
            sys.exit(exc.exit_code or 2)
        if exc.__class__.__name__ == "Abort":
            sys.exit(130)
        _internal_error(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _internal_error(exc: Exception) -> None:
    """Never a traceback for users; KVPLAN_DEBUG=1 shows it."""
    if os.environ.get("KVPLAN_DEBUG"):
        raise exc
    typer.echo(
        f"internal error: {exc.__class__.__name__}: {exc} (KVPLAN_DEBUG=1 for details)", err=True
    )
    sys.exit(1)
