"""The published `vllm bench serve` runs in tests/data/sim_bench_cases.json, as simulate requests.

Each run is simulated with vLLM's defaults for its version and GPU and only the flags its serve
command gave; the workload is the bench's: ShareGPT (the stand-in distribution at the run's mean
lengths) or the random dataset (fixed lengths at the run's means), its prompt count, rate inf and
its concurrency limit. Nothing is fitted per case."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from kvplan.engines.backends import ATTENTION_FIELDS, Backends, flag_of
from kvplan.plans.simulate import SimulateRequest
from kvplan.simulate.setup import ServeOptions
from kvplan.simulate.workload import WorkloadSpec

DATA = Path(__file__).resolve().parent / "data"
CASES_PATH = DATA / "sim_bench_cases.json"
# held out: never looked at while building the simulator (tests/data/README.md)
HELDOUT = {
    "sglang": DATA / "sim_bench_cases_sglang.json",
    "vllm": DATA / "sim_bench_cases_heldout.json",
    # other publishers, split into calibrate/validate by a rule fixed in advance (README)
    "external": DATA / "sim_bench_cases_external.json",
    # sources kvplan had not used, collected after its models were fixed: all validate (README)
    "new": DATA / "sim_bench_cases_new.json",
}
GPUS = {"H100": "h100", "A100": "a100-80gb-sxm", "H200": "h200"}
METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")


# the engines' attention-backend flags -> their Backends fields
BACKEND_FLAGS = {flag_of(name): name for name in ATTENTION_FIELDS}


# The fields every published-run record holds (tests/data/README.md: the schema of the
# held-out files other publishers' runs are in)
RECORD_FIELDS = {
    "id", "url", "source", "engine", "engine_version", "vllm_version", "gpu", "gpu_profile",
    "gpu_family", "tp", "pp", "dp", "ep", "model", "serve_cmd", "bench_cmd", "dataset",
    "input_len", "output_len", "num_prompts", "max_concurrency", "request_rate", "measured",
    "spec_accept_length", "spec_accept_length_docs", "bundled_config_differs", "record_mismatch",
    "notes", "split",
}  # fmt: skip


def load_cases(path: Path = CASES_PATH) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cases"]


def serve_options(case: dict) -> ServeOptions:
    argv = shlex.split(case["serve_cmd"])
    if case.get("engine") == "sglang":  # the overlap scheduler is on by default in 0.5
        options = ServeOptions(tp=case["tp"], engine="sglang")
        if case.get("engine_version"):  # the release as run: its patch gates some rules
            options = options._replace(sglang_version=case["engine_version"])
        for i, arg in enumerate(argv):
            if arg == "--context-length":
                options = options._replace(max_model_len=int(argv[i + 1]))
            elif arg == "--max-running-requests":
                options = options._replace(max_num_seqs=int(argv[i + 1]))
            elif arg == "--chunked-prefill-size":
                options = options._replace(max_num_batched_tokens=int(argv[i + 1]))
            elif arg in BACKEND_FLAGS:
                backends = options.backends._replace(**{BACKEND_FLAGS[arg]: argv[i + 1]})
                options = options._replace(backends=backends)
        return options
    version = case.get("engine_version") or case.get("vllm_version")
    if version is None:  # not stated (some external runs): kvplan's default vLLM version
        options = ServeOptions(tp=case["tp"])
    else:
        # async scheduling: the release's default (engines.vllm.async_scheduling_default)
        options = ServeOptions(tp=case["tp"], vllm_version=version)
    for i, arg in enumerate(argv):
        if arg == "--max-model-len":
            options = options._replace(max_model_len=int(argv[i + 1]))
        elif arg == "--async-scheduling":
            options = options._replace(async_scheduling=True)
        elif arg == "--gpu-memory-utilization":
            options = options._replace(gpu_mem_util=float(argv[i + 1]))
        elif arg == "--attention-backend":
            options = options._replace(backends=Backends(attention_backend=argv[i + 1]))
    return options


def simulate_request(case: dict) -> SimulateRequest:
    workload = WorkloadSpec(
        num_prompts=case["num_prompts"],
        input_len=round(case["input_len"]),
        output_len=round(case["output_len"]),
        length_dist="sharegpt" if case["dataset"] == "sharegpt" else "fixed",
        seed=0,
    )
    rate = case.get("request_rate")  # None: every request at once (--request-rate inf)
    return SimulateRequest(
        workload=workload,
        rates=(math.inf if rate is None else rate,),
        max_concurrency=case["max_concurrency"],
        serve=serve_options(case),
        series=False,
    )


def gpu_name(case: dict) -> str:
    """The kvplan profile: the case's own `gpu_profile` (the external runs), else by the
    GPUStack docs' GPU names."""
    return case.get("gpu_profile") or GPUS[case["gpu"].split()[0]]


def replayed_from_serve_cmd(case: dict) -> bool:
    """The published runs recorded with a kvplan profile key (`gpu_profile`: the external and
    feature files) replay their serve command's flags as written (tests/sim_replay.py); the
    GPUStack files' runs keep the options above."""
    return "gpu_profile" in case


def run_case(case: dict) -> dict:
    """Simulated bench numbers for one case, its step-time shares and the step's parts no
    kernel table times (and, for a replayed one, its `bench_interval`)."""
    if replayed_from_serve_cmd(case):
        from sim_replay import accept_length, replay

        sim = replay(case, accept_length(case))
        bench = sim["bench"]
        return {
            "result": None,
            "bench_interval": sim["bench_interval"],
            "step_scaled": sim["step_scaled"],
            "step_time_shares": sim["step_time_shares"],
            "untimed_time_fraction": sim["untimed_time_fraction"],
            "ttft_untimed_fraction": sim["ttft_untimed_fraction"],
            "frontend_request_fraction": sim["frontend_request_fraction"],
            "untimed_parts": sim["untimed_parts"],
            "borrowed_parts": sim["borrowed_parts"],
            **{m: bench.get(m) for m in (*METRICS, "request_throughput")},
        }
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.plans.simulate import simulate

    result = simulate(
        load_model(case["model"]), load_profile(gpu_name(case)), simulate_request(case)
    )
    bench = result.runs[0].bench
    return {
        "result": result,
        "step_scaled": result.runs[0].step_scaled or {},
        "step_time_shares": result.runs[0].engine.step_time_shares,
        "untimed_time_fraction": result.runs[0].engine.untimed_time_fraction,
        "ttft_untimed_fraction": result.runs[0].engine.ttft_untimed_fraction,
        "frontend_request_fraction": result.runs[0].engine.frontend_request_fraction,
        "untimed_parts": result.untimed_parts,
        "borrowed_parts": result.borrowed_parts,
        "output_throughput": bench.output_throughput,
        "request_throughput": bench.request_throughput,
        "median_tpot_ms": bench.median_tpot_ms,
        "median_ttft_ms": bench.median_ttft_ms,
    }


def inconsistent_metrics(case: dict) -> frozenset[str]:
    """The measured metrics a record marks `inconsistent` (its value contradicts the run's own
    medians under its bench client's rules: scripts/bench_consistency.py): reported beside the
    simulation, left out of the medians and the interval calibration."""
    mark = case.get("inconsistent")
    return frozenset(mark["metrics"]) if mark else frozenset()


def relative_error(simulated: float, measured: float) -> float:
    return (simulated - measured) / measured
