"""kvplan measure.

Exit codes (kvplan.measure.verdict, the one source of the exit status and the CI line's verdict
word): 0 passed, or nothing gated the run; 1 the prediction check failed (--check), its self-test
included: a blind check is a failure; 3 a regression against --baseline (when the check did not
fail); 2 bad input."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import typer

from kvplan.cli import common as c
from kvplan.errors import KvplanError
from kvplan.present.escape import terminal_text

EXAMPLE = (
    "Example: kvplan measure --quick --check --json measure.json --baseline last.json "
    "--max-regression 5% --junit-xml measure.xml. Exit codes: 0 passed (or NOT GATED: neither "
    "--check nor --baseline), 1 the prediction check failed (a miss, or a self-test that shows "
    "the check blind), 3 a regression against the baseline, 2 bad input. The last line on "
    "stderr starts with the verdict the exit code follows: PASS, FAIL (...) or NOT GATED."
)

DEFAULT_TIMEOUT_S = 60.0  # --distributed: seconds before a collective gives up
DEFAULT_NPROC = 2  # --distributed: ranks spawned
DEFAULT_MAX_REGRESSION = "5%"


def add(app: typer.Typer) -> None:
    @app.command("measure", epilog=EXAMPLE)
    @c.command
    def measure_cmd(
        model: str = typer.Option(
            None,
            "--model",
            help=c.MODEL_HELP + " Default: qwen2.5-3b on a CPU, qwen2.5-7b on a GPU.",
        ),
        layers: int = typer.Option(
            None, "--layers", min=1, max=256, help="Layers to build (1 to 256; the first N)."
        ),
        device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
        gpu: str = typer.Option(
            None, "--gpu", help="A profile to predict with too (else one matched by name)."
        ),
        quick: bool = typer.Option(
            False,
            "--quick",
            help="A short sweep (about 15 s of CPU on 2 cores; the wall time grows with the load).",
        ),
        check: bool = typer.Option(
            False,
            "--check",
            help="Exit 1 when the predictions miss (median absolute error above --tolerance, a "
            "point beyond twice it, no memory-bound point, or a self-test mutation not caught).",
        ),
        confirm: bool = typer.Option(
            False,
            "--confirm",
            help="On a shared machine: measure once more before failing; the --check must miss "
            "in the second run too, a --baseline figure regress in both runs.",
        ),
        tolerance: float = typer.Option(
            None,
            "--tolerance",
            help="Median absolute error allowed (0.01 to 5; default 0.15 on a CPU, 0.10 on a "
            "GPU, 0.25 with --distributed).",
        ),
        threads: int = typer.Option(
            None,
            "--threads",
            min=1,
            max=1024,
            help="CPU threads (1 to 1024; default: the CPUs not busy with other processes).",
        ),
        rounds: int = typer.Option(
            None, "--rounds", min=3, max=100, help="Interleaved rounds (3 to 100)."
        ),
        json_out: Path = c.path_option(
            None, "--json", help="Write every number to this JSON file."
        ),
        save_profile: Path = c.path_option(
            None, "--save-profile", help="Write the measured profile (a --gpu YAML)."
        ),
        baseline: str = typer.Option(
            None, "--baseline", help="A profile YAML or measure JSON of an earlier run."
        ),
        max_regression: str = typer.Option(
            None,
            "--max-regression",
            help="Slowdown allowed against --baseline (0.1% to 100%; default 5%).",
        ),
        allow_other_device: bool = typer.Option(
            False, "--allow-other-device", help="Compare with a baseline from another device."
        ),
        junit_xml: Path = c.path_option(None, "--junit-xml", help="Write JUnit XML here."),
        distributed: bool = typer.Option(
            False,
            "--distributed",
            help="Time all-reduce and a KV transfer with torch.distributed (gloo on CPU, NCCL "
            "on GPU).",
        ),
        nproc: int = typer.Option(
            DEFAULT_NPROC,
            "--nproc",
            min=2,
            max=64,
            help="With --distributed: ranks to spawn (2 to 64).",
        ),
        timeout: float = typer.Option(
            DEFAULT_TIMEOUT_S,
            "--timeout",
            help="With --distributed: seconds before a collective gives up.",
        ),
        fmt: c.OutputFormat = c.format_option(),
    ) -> None:
        """Profile this device, predict a model's steps through the planner, measure them."""
        from kvplan.atomic import check_outputs

        # every file it will write, checked before minutes of measuring
        check_outputs(
            {"--json": json_out, "--junit-xml": junit_xml, "--save-profile": save_profile}
        )
        c.fraction(tolerance, "--tolerance", 0.01, 5.0)
        c.fraction(timeout, "--timeout", 1.0, 3600.0)
        if timeout != DEFAULT_TIMEOUT_S and not distributed:
            raise KvplanError(
                "--timeout bounds the collectives of --distributed: add --distributed"
            )
        if nproc != DEFAULT_NPROC and not distributed:
            raise KvplanError("--nproc spawns the ranks of --distributed: add --distributed")
        if allow_other_device and baseline is None:
            raise KvplanError("--allow-other-device applies to --baseline: add --baseline FILE")
        regression = _percent(DEFAULT_MAX_REGRESSION if max_regression is None else max_regression)
        if max_regression is not None and baseline is None:
            raise KvplanError("--max-regression applies to --baseline: add --baseline FILE")
        if confirm and not (check or baseline is not None):
            raise KvplanError(
                "--confirm measures again before a failure: add --check, --baseline FILE or both"
            )
        if distributed:
            _refuse_with_distributed(
                {
                    "--confirm": confirm,
                    "--baseline": baseline is not None,
                    "--save-profile": save_profile is not None,
                    "--layers": layers is not None,
                    "--threads": threads is not None,
                    "--rounds": rounds is not None,
                }
            )
        # options are checked first: a wrong combination is named with or without torch
        try:
            import torch  # noqa: F401
        except ImportError:
            raise KvplanError(
                "measure needs torch: pip install torch (CPU wheel: --index-url "
                "https://download.pytorch.org/whl/cpu)"
            ) from None
        if distributed:
            _distributed(
                model,
                device,
                gpu,
                quick,
                check,
                tolerance,
                nproc,
                timeout,
                json_out,
                junit_xml,
                fmt,
            )
            return
        if baseline is not None:
            from kvplan.measure.baseline import load_baseline

            base = load_baseline(baseline)  # bad input fails before minutes of measuring
        from kvplan.measure.run import MeasureRequest, measure

        request = MeasureRequest(
            model=model,
            layers=layers,
            device=device,
            gpu=gpu,
            quick=quick,
            threads=threads,
            tolerance=tolerance,
            rounds=rounds,
            check=check,
            confirm=confirm,
        )
        comparison = None
        if baseline is None:
            result = _with_progress(lambda progress: measure(request, progress))
        else:
            from kvplan.measure.run import measure_against

            result, comparison = _with_progress(
                lambda progress: measure_against(
                    request, base, regression, allow_other_device, progress
                )
            )
        from kvplan.measure.verdict import measure_verdict
        from kvplan.present.measure import junit_xml as junit
        from kvplan.present.measure import measure_view

        verdict = measure_verdict(result, comparison, check_gated=check)
        view = measure_view(result, comparison, verdict)
        _write_outputs(view, result, json_out, save_profile, junit_xml, fmt, junit)
        _finish(view.data["summary"], verdict.exit_code)


def _finish(summary: str, exit_code: int) -> None:
    """The CI line last on stderr, then the exit status: both from the one verdict."""
    typer.echo(terminal_text(summary), err=True)
    if exit_code:
        raise typer.Exit(exit_code)


def _refuse_with_distributed(given: dict[str, bool]) -> None:
    """--distributed times collectives, not this device's steps: the options of the step sweep
    would be ignored, so they are refused."""
    used = [option for option, on in given.items() if on]
    if used:
        raise KvplanError(
            f"{', '.join(used)} {'applies' if len(used) == 1 else 'apply'} to the step sweep, "
            "not to --distributed (it times collectives: --nproc, --timeout, --check, "
            "--tolerance, --json, --junit-xml)"
        )


def _percent(text: str) -> float:
    """'5%' or 0.05 -> 0.05, checked at the edge."""
    from kvplan.inputs.options import ascii_number

    raw = ascii_number(text, "--max-regression").strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise KvplanError(f"--max-regression {text!r}: give a percentage like 5%") from None
    if not math.isfinite(value) or not 0.001 <= value <= 1.0:
        raise KvplanError(f"--max-regression {text!r} must be between 0.1% and 100%")
    return value


def _write_outputs(view, result, json_out, save_profile, junit_path, fmt, junit) -> None:
    """--json, --save-profile, --junit-xml and the table: all of them, or none."""
    import json

    from kvplan.atomic import all_or_nothing

    with all_or_nothing():
        if json_out is not None:
            c.emit(json.dumps(view.data, indent=2, allow_nan=False) + "\n", json_out)
        if save_profile is not None:
            from kvplan.measure.profile import profile_yaml

            cond = result.conditions
            c.emit(
                profile_yaml(
                    result.profile,
                    {**result.identity, "rounds": cond["rounds"]},
                    cond["dtype"],
                    cond["gather_kv"],
                    cond["threads"],
                ),
                save_profile,
            )
        if junit_path is not None:
            c.emit(junit(view.data), junit_path)
        c.emit(c.render(view, fmt))


def _distributed(
    model, device, gpu, quick, check, tolerance, nproc, timeout, json_out, junit_path, fmt
):
    import json

    import torch

    from kvplan.measure.distributed import DEFAULT_TOLERANCE, DistributedRequest, run_distributed

    dev = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    from kvplan.present.measure import distributed_junit_xml, distributed_view

    result = run_distributed(
        DistributedRequest(
            nproc=nproc,
            device=dev,
            model=model or "qwen2.5-3b",
            gpu=gpu,
            timeout_s=timeout,
            context_len=2048 if quick else 8192,
            # rounds x samples per round: 50-60 s (quick) on 2 busy cores
            rounds=15,
            runs=6 if quick else 8,
            tolerance=tolerance if tolerance is not None else DEFAULT_TOLERANCE,
        )
    )
    if result is None:  # a torchrun rank other than 0: rank 0 reports
        return
    from kvplan.measure.verdict import distributed_verdict

    verdict = distributed_verdict(result, check_gated=check)
    view = distributed_view(result, verdict)
    from kvplan.atomic import all_or_nothing

    with all_or_nothing():  # --json, --junit-xml and the table: all of them, or none
        if json_out is not None:
            c.emit(json.dumps(view.data, indent=2, allow_nan=False) + "\n", json_out)
        if junit_path is not None:
            c.emit(distributed_junit_xml(view.data), junit_path)
        c.emit(c.render(view, fmt))
    _finish(view.data["summary"], verdict.exit_code)


def _with_progress(run):
    """The step and an ETA on stderr while `run(progress)` works: a live line on a terminal, a
    plain line every 10 s in a CI log."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        last = [0.0]

        def plain(step: str, done: float, left: float) -> None:
            now = time.monotonic()
            if now - last[0] >= 10 or step == "done":
                last[0] = now
                eta = "" if math.isnan(left) else f", about {left:,.0f} s left"
                print(f"measure: {done:.0%} {step}{eta}", file=sys.stderr, flush=True)

        return run(plain)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[eta]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("measuring", total=1.0, eta="")

        def live(step: str, done: float, left: float) -> None:
            eta = "" if math.isnan(left) else f"ETA {left:,.0f} s"
            bar.update(task, description=f"measure: {step}", completed=done, eta=eta)

        return run(live)
