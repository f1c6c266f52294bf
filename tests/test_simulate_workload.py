"""Workloads and metrics: the bench's arrival process and length rules, traces, shared tokens,
and the bench's statistics (percentiles over pooled ITLs) against numpy on expanded lists."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.errors import KvplanError
from kvplan.simulate.metrics import weighted_percentile
from kvplan.simulate.workload import (
    SHAREGPT_MAX_INPUT,
    SHAREGPT_MAX_TOTAL,
    WorkloadSpec,
    arrival_times_s,
    generate,
    output_token_ids,
    prompt_token_ids,
    read_trace,
)


def test_rate_inf_sends_everything_at_once():
    assert arrival_times_s(5, math.inf, 1.0, 0) == [0.0] * 5


def test_poisson_arrivals_have_the_requested_mean_gap():
    times = arrival_times_s(20000, 8.0, 1.0, 0)
    assert times[0] == 0.0  # the bench sends the first request at once
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: cv = 1


def test_burstiness_below_one_is_burstier():
    bursty = np.diff(arrival_times_s(20000, 8.0, 0.25, 0))
    assert bursty.mean() == pytest.approx(1 / 8.0, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)  # gamma k: cv = 1/sqrt(k)


def test_uniform_lengths_follow_the_bench_range_ratio():
    requests = generate(
        WorkloadSpec(
            num_prompts=2000, input_len=1000, output_len=100, length_dist="uniform", spread=0.5
        )
    )
    inputs = [r.input_tokens for r in requests]
    outputs = [r.output_tokens for r in requests]
    assert min(inputs) >= 500 and max(inputs) <= 1500
    assert min(outputs) >= 50 and max(outputs) <= 150
    assert np.mean(inputs) == pytest.approx(1000, rel=0.02)


def test_sharegpt_stand_in_keeps_the_means_and_the_filter():
    requests = generate(
        WorkloadSpec(num_prompts=1000, input_len=217, output_len=201, length_dist="sharegpt")
    )
    inputs = np.array([r.input_tokens for r in requests])
    outputs = np.array([r.output_tokens for r in requests])
    assert inputs.mean() == pytest.approx(217, abs=1.5)
    assert outputs.mean() == pytest.approx(201, abs=1.5)
    assert inputs.min() >= 4 and outputs.min() >= 4
    assert inputs.max() <= SHAREGPT_MAX_INPUT
    assert (inputs + outputs).max() <= SHAREGPT_MAX_TOTAL
    assert np.median(outputs) < outputs.mean()  # heavy-tailed


def test_shared_prefix_tokens_are_identical_and_the_rest_unique():
    a, b, c = generate(
        WorkloadSpec(num_prompts=3, input_len=40, output_len=4, prefix_len=32, num_prefixes=2)
    )
    pa, pb, pc = prompt_token_ids(a), prompt_token_ids(b), prompt_token_ids(c)
    assert len(pa) == 72
    assert pa[:32] == pc[:32] and pa[:32] != pb[:32]  # round robin over two prefixes
    assert pa[32:] != pc[32:]
    assert output_token_ids(a, 0, 4) != output_token_ids(c, 0, 4)


def test_conversation_turns_hold_the_past_turns():
    first, second = generate(WorkloadSpec(num_prompts=2, input_len=30, output_len=10, turns=2))
    p1, p2 = prompt_token_ids(first), prompt_token_ids(second)
    assert len(p2) == 30 + 10 + 30
    assert p2[: 30 + 10] == p1 + output_token_ids(first, 0, 10)


def test_trace_file(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {
            "arrival_s": 0.5,
            "input_tokens": 100,
            "output_tokens": 10,
            "prefix_id": "sys",
            "prefix_tokens": 64,
        },
        {
            "arrival_s": 0.0,
            "input_tokens": 80,
            "output_tokens": 5,
            "prefix_id": "sys",
            "prefix_tokens": 64,
        },
        {"arrival_s": 1.0, "input_tokens": 50, "output_tokens": 5, "session_id": 7},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    requests = read_trace(path)
    assert [r.arrival_s for r in requests] == [0.0, 0.5, 1.0]  # sorted by arrival
    assert prompt_token_ids(requests[0])[:64] == prompt_token_ids(requests[1])[:64]
    assert requests[2].session


@pytest.mark.parametrize(
    "line,needle",
    [
        ('{"arrival_s": 0, "input_tokens": 0, "output_tokens": 5}', "input_tokens"),
        ('{"arrival_s": 0, "input_tokens": 5}', "missing output_tokens"),
        ('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 5, "x": 1}', "unknown field"),
        ("[1, 2]", "not a JSON object"),
        (
            '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 5, "prefix_tokens": 3}',
            "needs a prefix_id",
        ),
        ('{"arrival_s": NaN, "input_tokens": 5, "output_tokens": 5}', "arrival_s"),
    ],
)
def test_bad_trace_lines_are_one_clear_error(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(KvplanError, match=needle):
        read_trace(path)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=30),
    st.data(),
    st.floats(0, 100),
)
def test_weighted_percentile_is_numpy_on_the_expanded_list(values, data, q):
    weights = data.draw(st.lists(st.integers(1, 20), min_size=len(values), max_size=len(values)))
    expanded = np.repeat(values, weights)
    assert weighted_percentile(values, weights, q) == pytest.approx(
        float(np.percentile(expanded, q)), rel=1e-9, abs=1e-9
    )
