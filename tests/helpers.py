"""Shared test helpers (imported as a sibling module under --import-mode=importlib)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from kvplan.cli import main
from kvplan.inputs.architectures import build_model

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """scripts/<name>.py imported as a module (the scripts folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


FITS_OR_NOT = (0, 1)  # capacity's exit codes with an answer: fits, fits: NO


def run_json(*argv: str, expect: int | tuple[int, ...] = 0) -> dict:
    """The JSON a command prints; `expect` its exit code(s) (capacity's fits: NO exits 1)."""
    code, out, err = run_cli(*argv, "--format", "json")
    assert code in ((expect,) if isinstance(expect, int) else expect), err
    return json.loads(out)


def spec_from(config: dict, name: str = "test-model"):
    return build_model(config, name)


def llama_like(**overrides) -> dict:
    config = {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 2816,
        "vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }
    config.update(overrides)
    return config


# the model of tests/data/recorded/measure_cpu_quick.json: two small fp32 layers
# (scripts/record_measure_runs.py records its timings)
RECORDED_MEASURE_MODEL = llama_like(
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=512,
    vocab_size=1000,
    torch_dtype="float32",
)


def synthetic_measure_points(errors) -> list[dict]:
    """A measure JSON's decode points with these relative errors (10 ms measured each)."""
    return [
        {
            "phase": "decode",
            "batch_size": 1,
            "context_len": 1024 * (i + 1),
            "measured_s": 0.01,
            "predicted_s": 0.01 * (1 + e),
            "error": e,
        }
        for i, e in enumerate(errors)
    ]


def mamba2_config(**overrides) -> dict:
    config = {
        "model_type": "mamba2",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_heads": 8,
        "head_dim": 64,
        "expand": 2,
        "state_size": 16,
        "n_groups": 1,
        "conv_kernel": 4,
        "vocab_size": 100,
        "torch_dtype": "float32",
    }
    config.update(overrides)
    return config


def run_by_hand(arrivals, observe, model=None, **config):
    """A small engine whose schedule a test works out by hand: steps of 1 s (or `model`'s), 8
    seats, 4,096 tokens a step and of context, 100 blocks of 16, unless `config`
    (EngineConfig's fields) says otherwise. `arrivals`: (step, prompt tokens, outputs) of each request (ids in order),
    admitted once that many steps have run; `observe` sees every step (Engine's observer, or
    None). Runs to the end: (the engine, its requests)."""
    from kvplan.simulate.engine import Engine, EngineConfig, Req
    from kvplan.simulate.steplog import FixedStep
    from kvplan.simulate.workload import RequestSpec

    small = dict(max_num_seqs=8, max_num_batched_tokens=4096, max_model_len=4096, num_blocks=100)
    engine = Engine(
        EngineConfig(**{**small, "block_size": 16, **config}),
        FixedStep(1.0) if model is None else model,
        0.0,
        observer=observe,
    )
    reqs = [
        Req(RequestSpec(rid, 0.0, prompt, outputs), 0.0, 0.0, outputs)
        for rid, (_step, prompt, outputs) in enumerate(arrivals)
    ]
    for req, (step, _prompt, _outputs) in sorted(
        zip(reqs, arrivals, strict=True), key=lambda ra: ra[1][0]
    ):
        while engine.step_index < step:
            engine.step(engine.clock_s + 0.5)
        engine.admit(req, engine.clock_s)
    while engine.has_work:
        engine.step(engine.clock_s + 0.5)
    return engine, reqs


def default_signals() -> None:
    """preexec_fn for a child the test will signal: SIGTERM, SIGINT and SIGHUP at their default
    action, as in an interactive shell. A run under `nohup` (or a background job's SIGINT)
    passes them on ignored, and kvplan rightly keeps an ignored signal ignored."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def one_line_error(code: int, err: str, needle: str = "") -> str:
    """The project's rule for bad input: exit 2 and one `error:` line holding `needle`, never a
    traceback or an internal error."""
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert needle in err, err
    return err


def serve_locally(handler):
    """A stand-in HTTP server on 127.0.0.1 for a module's tests (tests never use the network):
    yields its base URL, shut down after. Use as `yield from serve_locally(Handler)`."""
    import threading
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def vllm_pythons() -> list[str]:
    """The Pythons with a live vLLM for the slow oracle tests: KVPLAN_VLLM_PYTHON (several
    joined by os.pathsep: CI names vLLM 0.19.1's and 0.32.0's), else this one if it has vLLM."""
    import importlib.util
    import os
    import sys

    named = [p for p in os.environ.get("KVPLAN_VLLM_PYTHON", "").split(os.pathsep) if p]
    if named:
        return named
    return [sys.executable] if importlib.util.find_spec("vllm") else []


def live_vllm(index: int, cwd) -> tuple[str, str]:
    """(Python, vLLM version) of the index-th live vLLM the slow oracle tests run on; the test
    is skipped where there is none (vllm_pythons)."""
    import subprocess

    import pytest

    pythons = vllm_pythons()
    if index >= len(pythons):
        pytest.skip("no such vLLM here (KVPLAN_VLLM_PYTHON names Pythons that have vLLM)")
    version = subprocess.run(
        [pythons[index], "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    ).stdout.strip()
    return pythons[index], version


OWN_GRID = object()


def sglang_table_step(
    spec, profile: str, wdtype: str, tp: int, gemm_grid=OWN_GRID, dsa: bool = False
):
    """A StepModel of `spec` on `profile`'s SGLang kernel tables (bf16 cache), as the GEMM-call
    tests build it: `gemm_grid` the tables' own GEMM grid unless given (None: priced pooled);
    `dsa`: with the tables' DSA module grids (as simulate passes them)."""
    return table_step(spec, profile, wdtype, tp, "sglang", gemm_grid=gemm_grid, dsa=dsa)


def table_step(
    spec,
    profile: str,
    wdtype: str,
    tp: int,
    engine: str,
    version: str | None = None,
    gemm_grid=OWN_GRID,
    dsa: bool = False,
):
    """A StepModel of `spec` on `profile`'s kernel tables of `engine` (at `version` where
    given; bf16 cache), as simulate builds one: `gemm_grid` the tables' own GEMM grid unless
    given (None: priced pooled); `dsa`: with the tables' DSA module grids."""
    from kvplan.dtypes import KvFormat
    from kvplan.formulas.batch_step import StepModel
    from kvplan.formulas.step_time import Rates
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.kernel_tables import tables_for

    gpu = load_profile(profile)
    tables = tables_for(gpu, engine) if version is None else tables_for(gpu, engine, version)
    return StepModel(
        spec,
        Rates(gpu.memory_bandwidth_bytes_per_s, gpu.peak_flop_per_s["bf16"]),
        wdtype,
        KvFormat("bf16"),
        tp=tp,
        link=gpu.interconnect,
        achieved=tables.achieved,
        fp8_flop_per_s=gpu.peak_flop_per_s.get("fp8"),
        gemm_grid=tables.gemm_grid if gemm_grid is OWN_GRID else gemm_grid,
        dsa_delta_us=tables.dsa_delta_us if dsa else None,
    )


def deepseek_v3_dp8_step(**flags):
    """DeepSeek-V3 (fp8) on an H200 at attention TP 1 over 8 DP ranks with its experts on the
    8 GPUs, the StepModel the DP-attention tests price (`flags`: StepModel's, e.g.
    sglang_collectives=True for SGLang's rules, dp_lm_head, dense_mlp_dp)."""
    from kvplan.dtypes import resolve_kv_format
    from kvplan.formulas.batch_step import StepModel
    from kvplan.formulas.step_time import Rates
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model

    spec = load_model("deepseek-v3")
    gpu = load_profile("h200")
    return StepModel(
        spec,
        Rates(gpu.memory_bandwidth_bytes_per_s, gpu.peak(spec.dtype)),
        "fp8",
        resolve_kv_format("auto", spec.dtype),
        tp=1,
        link=gpu.interconnect,
        moe_ranks=8,
        dp=8,
        **flags,
    )
