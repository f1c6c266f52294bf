"""kvplan simulate and kvplan plan from the command line: vllm bench serve's JSON keys, one-line
errors, the technique comparisons (cache-aware routing raises each replica's hit rate), and the
reverse question in one command."""

from __future__ import annotations

import re

import pytest

from kvplan.errors import KvplanError
from kvplan.inputs.hardware import bundled_profiles
from kvplan.inputs.prices import default_prices, parse_price
from kvplan.plans.plan import PlanRequest, Slo, parse_slo, search_space

from helpers import run_cli, run_json

BENCH_KEYS = {  # vllm/benchmarks/serve.py --save-result keys for the default metrics
    "completed",
    "failed",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
}
for metric in ("ttft", "tpot", "itl", "e2el"):
    BENCH_KEYS |= {f"{s}_{metric}_ms" for s in ("mean", "median", "std", "p90", "p99")}

SMALL = ["--gpu", "h100", "--num-prompts", "40", "--input-len", "256", "--output-len", "32"]


def test_simulate_json_has_the_bench_keys():
    data = run_json("simulate", "qwen3-8b", *SMALL, "--request-rate", "4,inf")
    assert len(data["runs"]) == 2
    for run in data["runs"]:
        assert set(run["bench"]) == BENCH_KEYS
        assert run["bench"]["completed"] == 40
        assert 0 < run["engine"]["peak_kv_usage"] <= 1
    assert data["runs"][0]["bench"]["request_rate"] == 4.0
    assert data["runs"][1]["bench"]["request_rate"] == "inf"
    assert data["model"]["hf_id"] == "Qwen/Qwen3-8B"


def test_simulate_table_prints_the_bench_block():
    code, out, err = run_cli("simulate", "qwen3-8b", *SMALL)
    assert code == 0, err
    for label in (
        "Successful requests:",
        "Request throughput (req/s):",
        "Median TTFT (ms):",
        "P99 ITL (ms):",
        "Peak KV cache usage:",
        "Prefix cache hit rate:",
    ):
        assert label in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--request-rate", "fast"], "not a number"),
        (["--request-rate", "-1"], "between 0.001 and 1,000,000"),
        (["--request-rate", "1e-300"], "between 0.001 and 1,000,000"),
        (["--router", "random"], "--router"),
        (["--length-dist", "zipf"], "--length-dist"),
        (["--compare", "speculation"], "--compare"),
        (["--max-num-seqs", "4096", "--max-num-batched-tokens", "2048"], "at least"),
        (["--kv-cache-dtype", "fp4"], "kv-cache-dtype"),
        (["--burstiness", "0"], "--burstiness"),
    ],
)
def test_bad_simulate_options_are_one_line(argv, needle):
    code, out, err = run_cli("simulate", "qwen3-8b", *SMALL, *argv)
    assert code == 2
    assert err.startswith("error:") and needle in err and err.count("\n") == 1


def test_cache_aware_routing_raises_each_replicas_hit_rate():
    """3 system prompts, 2 replicas whose pools hold about two of them: round robin sends every
    prompt to both replicas, which evict each other's; cache-aware routing keeps each prompt on
    one replica, so each replica's hit rate rises."""
    data = run_json(
        "simulate",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "300",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--prefix-len",
        "1024",
        "--num-prefixes",
        "3",
        "--kv-cache-memory",
        "0.4GiB",
        "--max-model-len",
        "2048",
        "--replicas",
        "2",
        "--request-rate",
        "20",
        "--router",
        "round_robin",
        "--compare",
        "cache-aware-routing",
    )
    base = [r["prefix_hit_rate"] for r in data["runs"][0]["engine"]["replicas"]]
    aware = [r["prefix_hit_rate"] for r in data["comparison"]["runs"][0]["engine"]["replicas"]]
    assert data["comparison"]["baseline_on"] is False
    assert all(a > b for a, b in zip(aware, base, strict=True))


@pytest.mark.parametrize(
    "technique", ["chunked-prefill", "prefix-caching", "preemption", "continuous-batching"]
)
def test_each_scheduling_technique_can_be_compared(technique):
    data = run_json("simulate", "qwen3-8b", *SMALL, "--compare", technique)
    assert data["comparison"]["technique"] == technique
    assert data["comparison"]["runs"][0]["bench"]["completed"] == 40


def test_static_batching_costs_throughput():
    data = run_json(
        "simulate",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "64",
        "--input-len",
        "128",
        "--output-len",
        "200",
        "--length-dist",
        "uniform",
        "--spread",
        "0.9",
        "--max-num-seqs",
        "16",
        "--compare",
        "continuous-batching",
    )
    on = data["runs"][0]["bench"]["output_throughput"]
    off = data["comparison"]["runs"][0]["bench"]["output_throughput"]
    assert off < on


def test_plots_are_written(tmp_path):
    plot, timeline = tmp_path / "rate.png", tmp_path / "time.svg"
    code, _, err = run_cli(
        "simulate",
        "qwen3-8b",
        *SMALL,
        "--request-rate",
        "2,8,inf",
        "--plot",
        str(plot),
        "--timeline",
        str(timeline),
    )
    assert code == 0, err
    assert plot.stat().st_size > 1000 and timeline.stat().st_size > 1000


def test_plot_of_a_trace(tmp_path):
    """A trace has no request rate (its own arrival times): the throughput plot places the run
    at its achieved rate (it was float(None), an internal error, until mypy saw it)."""
    trace, plot = tmp_path / "trace.jsonl", tmp_path / "rate.png"
    trace.write_text(
        "".join(
            f'{{"arrival_s": {i / 10}, "input_tokens": 200, "output_tokens": 20}}\n'
            for i in range(20)
        )
    )
    code, _, err = run_cli("simulate", "qwen3-8b", "--gpu", "h100", "--trace", str(trace),
                           "--plot", str(plot))  # fmt: skip
    assert code == 0, err
    assert plot.stat().st_size > 1000


# ---- plan -----------------------------------------------------------------------------------
def test_ep_flags_with_no_tp_are_refused_as_without_them():
    """_check_layout raised its first refusal, None when there was no TP to try: `raise None`,
    a TypeError (mypy saw it). With no TP the search space is empty, flags or not."""
    from kvplan.inputs.sources import load_model
    from kvplan.plans.plan import plan

    spec, gpu = load_model("qwen3-30b-a3b"), bundled_profiles()["h100-sxm"]
    slos = (Slo("ttft", "p99", 2.0),)
    for flags in ({}, {"enable_expert_parallel": True}):
        with pytest.raises(KvplanError, match="the search space is empty"):
            plan(spec, [gpu], PlanRequest(rate=1.0, slos=slos, tps=(), **flags))


def test_slo_parsing():
    assert parse_slo("ttft_p99=2s") == Slo("ttft", "p99", 2.0)
    assert parse_slo("tpot_p99=50ms").limit_s == pytest.approx(0.05)
    assert parse_slo("e2el_median=1500ms").key == "median_e2el_ms"
    for bad in ("ttft=2s", "ttft_p99=2", "speed_p99=2s", "ttft_p95=2s", "ttft_p99=0s"):
        with pytest.raises(KvplanError):
            parse_slo(bad)


def test_search_space_skips_seats_above_the_budget():
    request = PlanRequest(
        rate=1,
        slos=(parse_slo("ttft_p99=1s"),),
        tps=(1, 2),
        max_num_seqs=(64, 4096),
        max_num_batched_tokens=(2048, 8192),
    )
    assert len(search_space([None, None], request)) == 2 * 2 * 2 * (2 + 1)
    sglang = request._replace(emit="sglang")  # SGLang's seats are not tied to its chunk size
    assert len(search_space([None, None], sglang)) == 2 * 2 * 2 * 4


def test_prices_are_documented_for_bundled_profiles():
    profiles = bundled_profiles()
    for key, price in default_prices().items():
        assert key in profiles
        assert 0.1 < price.usd_per_gpu_hour < 100 and price.source
    assert parse_price("h100=2.49") == ("h100-sxm", 2.49)
    for bad in ("h100", "h100=free", "h100=-1", "nogpu=1"):
        with pytest.raises(KvplanError):
            parse_price(bad)


def test_the_reverse_question_is_one_command():
    """How many H100s for 20 req/s of 1k-in/100-out at p99 TTFT <= 1 s (Qwen3-8B)?"""
    data = run_json(
        "plan",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--rate",
        "20",
        "--input-len",
        "1k",
        "--output-len",
        "100",
        "--slo",
        "ttft_p99=1s",
        "--slo",
        "tpot_p99=60ms",
        "--tp",
        "1,2",
        "--kv-cache-dtype",
        "auto",
        "--max-num-seqs",
        "64,256",
        "--max-num-batched-tokens",
        "8192",
        "--num-prompts",
        "60",
        "--jobs",
        "1",
    )
    best = data["candidates"][0]
    assert best["replicas"] * best["goodput_rps"] >= 20
    assert best["num_gpus"] == best["replicas"] * best["tp"]
    assert best["usd_per_hour"] == pytest.approx(best["num_gpus"] * 3.49)
    assert best["operating_point"]["p99_ttft_ms"] <= 1000
    assert best["operating_point"]["p99_tpot_ms"] <= 60
    costs = [c["usd_per_hour"] for c in data["candidates"]]
    assert costs == sorted(costs)
    assert data["candidates"][0]["command"].startswith("vllm serve Qwen/Qwen3-8B")


def test_plan_price_override_and_sglang_commands():
    data = run_json(
        "plan",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--rate",
        "2",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--slo",
        "ttft_p99=2s",
        "--tp",
        "1",
        "--kv-cache-dtype",
        "auto",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "2048",
        "--num-prompts",
        "40",
        "--price",
        "h100=1.00",
        "--emit",
        "sglang",
        "--jobs",
        "1",
    )
    best = data["candidates"][0]
    assert best["usd_per_gpu_hour"] == 1.0 and best["price_source"] == "--price"
    assert best["command"].startswith("python -m sglang.launch_server --model-path Qwen/Qwen3-8B")
    # simulated on SGLang's pool (kvplan engine --engine sglang), not vLLM's
    sglang = run_json("engine", "qwen3-8b", "--engine", "sglang", "--gpu", "h100")
    vllm = run_json("engine", "qwen3-8b", "--engine", "vllm", "--gpu", "h100")
    assert best["kv_cache_tokens"] == sglang["kv_cache_tokens"] != vllm["kv_cache_tokens"]
    assert any("SGLang's scheduler" in n["text"] for n in data["notes"])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--slo", "ttft_p99=fast"], "--slo"),
        (["--slo", "ttft_p99=1s", "--price", "h100"], "--price"),
        (["--slo", "ttft_p99=1s", "--emit", "trt"], "--emit"),
        (["--slo", "ttft_p99=1s", "--rate", "0"], "--rate"),
    ],
)
def test_bad_plan_options_are_one_line(argv, needle):
    args = ["plan", "qwen3-8b", "--gpu", "h100", "--num-prompts", "20"]
    if "--rate" not in argv:
        args += ["--rate", "1"]
    code, out, err = run_cli(*args, *argv)
    assert code == 2 and err.startswith("error:") and needle in err


def test_a_trace_with_a_shared_prefix_hits_its_blocks(tmp_path):
    """The second request shares the first's 400-token prefix (25 blocks of 16) after the first
    is cached: 400 of 1,100 looked-up tokens hit."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0.0, "input_tokens": 500, "output_tokens": 50, "prefix_id": "a", '
        '"prefix_tokens": 400}\n'
        '{"arrival_s": 0.5, "input_tokens": 600, "output_tokens": 20, "prefix_id": "a", '
        '"prefix_tokens": 400}\n'
    )
    data = run_json("simulate", "qwen3-8b", "--gpu", "h100", "--trace", str(trace))
    run = data["runs"][0]
    assert run["bench"]["completed"] == 2 and run["bench"]["request_rate"] is None
    assert run["engine"]["prefix_hit_rate"] == pytest.approx(400 / 1100)


LONG_PROMPTS = (
    "--gpu", "h100", "--engine-version", "0.11.0", "--length-dist", "uniform",
    "--output-len", "100", "--num-prompts", "20",
)  # fmt: skip


def test_requests_failing_only_on_kvplans_own_pool_estimate_are_refused():
    """Qwen3-32B on one H100 (bf16): kvplan's pool estimate holds about 31,700 tokens, below the
    model's 40,960, so simulate lowers max_model_len (sim-max-model-len-reduced). Requests of
    32,000 + 100 tokens would fail on that lowered length only: whether the server serves them
    turns on the estimate, so simulate refuses in one line instead of printing "every request
    failed" (a GPUStack run of these lengths on vLLM 0.11.0 served all 100). Prompts that fit
    the lowered length still run, and a pool the user gives is no estimate: its failures stand."""
    code, _, err = run_cli("simulate", "qwen3-32b", *LONG_PROMPTS, "--input-len", "32000")
    assert code == 2 and err.count("\n") <= 1
    held = int(re.search(r"at most ([\d,]+) tokens", err).group(1).replace(",", ""))
    assert 20_100 < held < 32_100 and "below max_model_len 40,960" in err
    assert "20 of 20 requests (up to 32,100 tokens)" in err
    assert "--kv-cache-memory" in err
    code, out, err = run_cli(
        "simulate", "qwen3-32b", *LONG_PROMPTS, "--input-len", "20000", "-f", "json"
    )
    assert code == 0, err
    assert "sim-max-model-len-reduced" in out and '"failed": 0' in out
    code, out, err = run_cli(
        "simulate", "qwen3-32b", *LONG_PROMPTS, "--input-len", "32000",
        "--kv-cache-memory", "7GiB", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    assert "sim-requests-failed" in out and '"completed": 0' in out
