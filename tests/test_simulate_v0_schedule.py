"""vLLM V0's default scheduling (Scheduler._schedule_default, chunked prefill off) in kvplan
simulate: a step that admits prompts runs them alone and the running requests decode only in
steps that admit none ("Don't schedule decodes if prefills are scheduled", vllm/core/
scheduler.py) — worked by hand against V1's rule (decodes first, new prompts beside them)."""

from __future__ import annotations

import pytest

from helpers import run_by_hand, run_cli, run_json


def _schedule(prefill_first: bool):
    """Steps of 1 s: A (8-token prompt, 5 outputs) from t = 0; B (8, 3) arrives after two
    steps. Returns each step's (decodes, prompts scheduled), A's and B's last-token times and
    the engine."""
    steps: list[tuple[int, tuple[int, ...]]] = []

    def observe(engine, count, num_decodes, chunks):
        for _ in range(count):
            steps.append((num_decodes, tuple(r.rid for r, _ in chunks)))

    knobs = {"enable_chunked_prefill": False, "prefill_first": prefill_first}
    engine, (a, b) = run_by_hand([(0, 8, 5), (2, 8, 3)], observe, **knobs)
    return steps, a.last_client_s, b.last_client_s, engine


def test_v0_runs_an_admitted_prompt_alone():
    steps, a_end, b_end, engine = _schedule(prefill_first=True)
    # step 0 A's prompt; 1 A decodes (token 2); 2 B's prompt alone, A waits; 3 and 4 both
    # decode (A tokens 3, 4; B tokens 2, 3: B done); 5 A's token 5
    assert steps == [(0, (0,)), (1, ()), (0, (1,)), (2, ()), (2, ()), (1, ())]
    assert (a_end, b_end) == (6.0, 5.0)
    # the inter-token gaps the bench sees, each (step before, step after, tokens): A's token 2
    # (step 1) after its first (step 0, a prefill-only step); A's token 3 (step 3) after its
    # token 2 (step 1), across B's prefill step; B's token 2 (step 3) after its first (step 2)
    assert sorted(engine.resume_gaps) == [(0, 1, 1), (1, 3, 1), (2, 3, 1)]
    assert engine.log.decode_tokens[1] == engine.log.decode_tokens[3] == 0  # moved to the gaps


def test_v1_runs_the_prompt_beside_the_decodes():
    steps, a_end, b_end, engine = _schedule(prefill_first=False)
    assert steps == [(0, (0,)), (1, ()), (1, (1,)), (2, ()), (2, ())]
    assert (a_end, b_end) == (5.0, 5.0)
    assert engine.resume_gaps == []


def test_simulate_takes_v0_prefill_first_and_says_so():
    argv = (
        "simulate", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "32", "--input-len",
        "1000", "--output-len", "100", "--request-rate", "8", "--max-model-len", "8192",
        "--no-enable-chunked-prefill",
    )  # fmt: skip
    v0 = run_json(*argv, "--engine-version", "0.7")
    v1 = run_json(*argv, "--engine-version", "0.8")
    words = next(n["text"] for n in v0["notes"] if n["id"] == "sim-vllm-v0")
    assert "_schedule_default" in words
    # decodes wait out every prefill step: the worst inter-token gaps grow
    assert v0["runs"][0]["bench"]["p99_itl_ms"] > v1["runs"][0]["bench"]["p99_itl_ms"]


@pytest.mark.parametrize(
    "extra",
    [
        ("--tp", "2", "-dp", "2"),
        ("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'),
    ],
)
def test_v0_prefill_first_outside_one_plain_engine_is_refused(extra):
    code, out, err = run_cli(
        "simulate", "qwen3-30b-a3b", "--gpu", "h100", "--engine-version", "0.7",
        "--no-enable-chunked-prefill", "--max-model-len", "8192", "--num-prompts", "4", *extra,
    )  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1, err
