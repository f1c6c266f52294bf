"""scripts/bench_consistency.py: the output throughput a published run's own medians imply under
its bench client's rules, the runs that contradict it, and their `inconsistent` marks (issue 34:
two Llama-4 MI300X runs at concurrency 1 printed 57 and 62 tok/s where their own TTFT and TPOT
give 132 and 164)."""

from __future__ import annotations

import sys

import pytest

from helpers import REPO, load_script
from sim_cases import HELDOUT, inconsistent_metrics, load_cases

sys.path.insert(0, str(REPO / "scripts"))

import collect_external_runs as collect  # noqa: E402

consistency = load_script("bench_consistency")


def run(**kw) -> dict:
    """A run record: 10 requests one at a time, 400 output tokens each, TTFT 50 ms, TPOT 10 ms."""
    measured = {"median_ttft_ms": 50.0, "median_tpot_ms": 10.0, "completed": 10}
    measured.update(kw.pop("measured", {}))
    base = {
        "id": "x",
        "num_prompts": 10,
        "max_concurrency": 1,
        "request_rate": None,
        "output_len": 400.0,
        "measured": measured,
    }
    return {**base, **kw}


def test_one_at_a_time_the_duration_is_the_sum_of_the_latencies():
    implied = consistency.implied_output_throughput(run())
    latency_s = 0.050 + 399 * 0.010
    assert implied.exact
    assert implied.output_throughput == pytest.approx(10 * 400 / (10 * latency_s))
    # no median TPOT printed: the median ITL stands in, and the basis says so
    itl = consistency.implied_output_throughput(
        run(measured={"median_tpot_ms": None, "median_itl_ms": 20.0})
    )
    assert itl.output_throughput == pytest.approx(400 / (0.050 + 399 * 0.020))
    assert "ITL" in itl.basis
    assert consistency.implied_output_throughput(run(measured={"median_ttft_ms": None})) == (
        consistency.Implied(None, "no median TTFT or TPOT/ITL printed")
    )


def test_in_flight_and_arrival_bounds_and_every_request_at_once():
    latency_s = 0.050 + 399 * 0.010
    four = consistency.implied_output_throughput(run(max_concurrency=4, num_prompts=40))
    # 40 requests: `completed` says 10 completed, so 10 / 4 in flight
    assert not four.exact
    assert four.output_throughput == pytest.approx(10 * 400 / (10 * latency_s / 4))
    slow_arrivals = consistency.implied_output_throughput(
        run(max_concurrency=None, request_rate=0.5)
    )
    assert slow_arrivals.output_throughput == pytest.approx(10 * 400 / (9 / 0.5 + latency_s))
    assert "arrivals" in slow_arrivals.basis
    at_once = consistency.implied_output_throughput(run(max_concurrency=None))
    assert at_once.output_throughput is None and "slowest" in at_once.basis


def test_an_equality_flags_both_ways_a_bound_only_a_run_faster_than_it():
    implied = consistency.implied_output_throughput(run()).output_throughput
    assert consistency.check(run(measured={"output_throughput": 0.6 * implied})).flagged
    assert consistency.check(run(measured={"output_throughput": 1.4 * implied})).flagged
    assert not consistency.check(run(measured={"output_throughput": 0.8 * implied})).flagged
    bound = run(max_concurrency=2, num_prompts=10)
    ceiling = consistency.implied_output_throughput(bound).output_throughput
    # below a bound is queueing the medians do not see; above it is impossible
    assert not consistency.check({**bound, "measured": {**bound["measured"], "output_throughput": 0.3 * ceiling}}).flagged  # fmt: skip
    assert consistency.check({**bound, "measured": {**bound["measured"], "output_throughput": 1.4 * ceiling}}).flagged  # fmt: skip


def test_every_flagged_run_is_marked_in_its_record_and_only_those():
    rows = consistency.checks()
    assert len(rows) >= 200 and sum(r.ratio is not None for r in rows) >= 90
    flagged = {r.id for r in rows if r.flagged}
    marked = {
        c["id"]
        for path in consistency.CASE_FILES
        for c in load_cases(path)
        if inconsistent_metrics(c)
    }
    assert flagged == marked
    assert flagged == {
        "sglcb-llama4-mi300x-tp8-random-1000-1000-c1-L134",
        "sglcb-llama4-mi300x-tp8-random-1000-1000-c1-L312",
    }


def test_the_printed_means_put_a_one_off_into_one_first_token():
    case = next(
        c
        for c in load_cases(HELDOUT["external"])
        if c["id"] == "sglcb-llama4-mi300x-tp8-random-1000-1000-c1-L312"
    )
    # Llama4.md#L312 prints mean TTFT 4296.56 ms and mean E2E 6805.62 ms: 10 x 6.81 s = 68.06 s
    # of its 68.08 s duration; the TTFT sum less nine at the 57.45 ms median is one 42.4 s stall
    mark = consistency.sequential_one_off(case, 4296.56, 6805.62)
    assert mark is not None and mark["metrics"] == ["output_throughput"]
    assert "about 42 s" in mark["reason"]
    assert mark == case["inconsistent"]
    # means that do not account for the duration either explain nothing
    assert consistency.sequential_one_off(case, 4296.56, 3000.0) is None
    # nor does a run that is not one at a time
    assert consistency.sequential_one_off({**case, "max_concurrency": 4}, 4296.56, 6805.62) is None


def test_the_collector_marks_a_block_that_contradicts_its_medians():
    measured = {
        "completed": 10,
        "duration_s": 68.08,
        "total_input_tokens": 6101,
        "total_output_tokens": 4220,
        "output_throughput": 61.99,
        "median_ttft_ms": 57.45,
        "median_tpot_ms": 5.96,
        "printed_concurrency": 1,
        "mean_ttft_ms": 4296.56,
        "mean_e2e_latency_ms": 6805.62,
    }
    raw = {
        "line": 312,
        "hardware": "Hardware: AMD MI300x GPU",
        "heading": "### 5.1.1 Low Concurrency (Latency-Optimized)",
        "version": "sglang version: 0.5.9",
        "serve": "sglang serve --model-path meta-llama/Llama-4-Maverick-17B-128E-Instruct --tp 8",
        "bench": "python3 -m sglang.bench_serving --backend sglang --dataset-name random "
        "--random-input-len 1000 --random-output-len 1000 --num-prompts 10 --max-concurrency 1",
        "added": None,
        "measured": measured,
        "path": "docs/autoregressive/Llama/Llama4.md",
    }
    case, why = collect.case_of(raw)
    assert case is not None, why
    assert "about 42 s" in case["inconsistent"]["reason"]
    assert "mean_ttft_ms" not in case["measured"]  # read for the check, not stored
    # without the means the block explains nothing: still marked, as unexplained
    bare = {k: v for k, v in measured.items() if not k.startswith("mean_")}
    case = collect.case_of({**raw, "measured": bare})[0]
    assert case is not None and case["inconsistent"]["reason"].startswith("unexplained")
    # a block whose throughput its medians give is not marked
    steady = {**bare, "duration_s": 25.9, "output_throughput": 4220 / 25.9}
    case = collect.case_of({**raw, "measured": steady})[0]
    assert case is not None and "inconsistent" not in case
