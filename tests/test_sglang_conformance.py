"""kvplan's SGLang engine step for step against SGLang's own scheduler.

scripts/record_sglang_schedule.py drove SGLang's real Scheduler (get_next_batch_to_run,
PrefillAdder, update_running_batch, new_token_ratio) over a real token pool and radix cache on
a CPU for the scenarios SGLang can express; its step logs are the fixtures
(tests/data/sched_fixtures_sglang/<SGLang version>/). The default run compares
`steplog.sglang_step_log` with each; the slow test re-records them with a live SGLang source
(`import sglang`, or the Python that `KVPLAN_SGLANG_PYTHON` names).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.simulate import steplog

DATA = Path(__file__).parent / "data"
SCENARIOS = DATA / "sched_scenarios"
SGLANG_ONLY = DATA / "sched_scenarios_sglang"  # tight pools: new_token_ratio, retraction
FIXTURES = sorted((DATA / "sched_fixtures_sglang").glob("*/*.json"))
RECORDER = Path(__file__).parent.parent / "scripts" / "record_sglang_schedule.py"

# scenario -> why kvplan's SGLang engine does not yet schedule it as SGLang does (xfail, strict)
KNOWN: dict[str, str] = {}


def _recorder():
    """scripts/record_sglang_schedule.py, imported (its module level imports nothing of SGLang)."""
    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    sys.path.insert(0, scripts)
    try:
        import record_sglang_schedule
    finally:
        sys.path.remove(scripts)
    return record_sglang_schedule


# the scenarios shared with vLLM's harness that SGLang can express: the recorder's own list
SHARED = _recorder().SGLANG_SCENARIOS


def _scenario_path(name: str) -> Path:
    only = SGLANG_ONLY / f"{name}.json"
    return only if only.exists() else SCENARIOS / f"{name}.json"


def _cases():
    for path in FIXTURES:
        reason = KNOWN.get(path.stem)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(path, marks=marks, id=f"{path.parent.name}/{path.stem}")


@pytest.mark.parametrize("path", list(_cases()))
def test_kvplan_schedules_every_step_as_sglang(path):
    fixture = json.loads(path.read_text())
    scenario = steplog.load_scenario(_scenario_path(fixture["scenario"]))
    difference = steplog.compare(fixture["steps"], steplog.sglang_step_log(scenario))
    assert difference is None, difference


def test_the_fixtures_cover_the_sglang_scenarios():
    assert {p.stem for p in FIXTURES} >= {*SHARED, *(p.stem for p in SGLANG_ONLY.glob("*.json"))}
    for path in FIXTURES:
        assert json.loads(path.read_text())["sglang_version"] == path.parent.name


def test_a_prefill_step_decodes_nothing():
    """SGLang runs a prefill batch alone: no request decodes in the step a prompt runs."""
    scenario = steplog.load_scenario(SCENARIOS / "steady.json")
    log = steplog.sglang_step_log(scenario)
    prefills = [e for e in log if any(n > 1 for n in e["scheduled"].values())]
    assert prefills and all(len(e["scheduled"]) == 1 for e in prefills[1:3])
    assert any(len(e["scheduled"]) > 1 for e in log)  # decodes batch together


def test_vllm_only_scenarios_are_refused():
    for name in ("async_steady", "sliding_window", "pool_exhaustion_no_caching"):
        with pytest.raises(KvplanError):
            steplog.sglang_step_log(steplog.load_scenario(SCENARIOS / f"{name}.json"))


def _sglang_python() -> str | None:
    if os.environ.get("KVPLAN_SGLANG_PYTHON"):
        return os.environ["KVPLAN_SGLANG_PYTHON"]
    return sys.executable if importlib.util.find_spec("sglang") else None


@pytest.mark.slow
def test_sglang_still_schedules_as_recorded(tmp_path):
    python = _sglang_python()
    if python is None:
        pytest.skip("SGLang is not importable (set KVPLAN_SGLANG_PYTHON to a Python that has it)")
    run = subprocess.run(
        [python, str(RECORDER), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    newest = sorted({p.parent for p in FIXTURES})[-1]
    for path in sorted(tmp_path.glob("*.json")):
        fresh = json.loads(path.read_text())
        known = newest / path.name
        if (newest.parent / fresh["sglang_version"] / path.name).exists():
            known = newest.parent / fresh["sglang_version"] / path.name
        assert fresh["steps"] == json.loads(known.read_text())["steps"], path.stem
        if path.stem not in KNOWN:
            log = steplog.sglang_step_log(steplog.load_scenario(_scenario_path(path.stem)))
            assert steplog.compare(fresh["steps"], log) is None


def test_a_finish_clears_batch_is_full_only_at_the_next_decode_step():
    """SGLang's update_running_batch filters finished requests (and so clears batch_is_full)
    after the next step's prefill attempt: with requests waiting on a full batch, one decode
    step runs between a finish and the next admission (ratio_retract: 8 and 9 finish in step
    701, 5-7 decode alone in 702, 10 and 11 prefill in 703). kvplan cleared the flag at the
    finish and admitted in 702; all three SGLang-only scenarios differed."""
    log = steplog.sglang_step_log(steplog.load_scenario(SGLANG_ONLY / "ratio_retract.json"))
    finish = next(e["step"] for e in log if {"8", "9"} <= set(e["finished"]))
    assert set(log[finish + 1]["scheduled"]) == {"5", "6", "7"}
    assert log[finish + 2]["scheduled"] == {"10": 60, "11": 60}
    assert any(e["preempted"] for e in log)  # the scenario retracts, too


def _sglang_log(name: str) -> list[dict]:
    return steplog.sglang_step_log(steplog.load_scenario(_scenario_path(name)))


def _entry(log: list[dict], step: int) -> dict:
    return next(e for e in log if e["step"] == step)


def test_a_match_leaves_only_the_prompts_last_token_to_compute():
    """SGLang matches up to input_len - 1 tokens: the same 128-token prompt again computes one
    token. kvplan dropped the last token twice (127 looked up, 126 found) and computed 2."""
    log = _sglang_log("same_prompt")
    assert [_entry(log, k)["scheduled"] for k in (0, 1)] == [{"0": 128}, {"1": 1}]


def test_outputs_stop_at_sglangs_max_req_len():
    """init_req_max_new_tokens: outputs <= max_req_len - prompt - 1, max_req_len = context - 1:
    a 900-token prompt at max_model_len 1,024 makes 122 tokens (vLLM: 124)."""
    log = _sglang_log("max_model_len")
    made = sum(e["scheduled"].get("0", 0) for e in log) - 900 + 1  # the prefill samples one
    assert made == 1024 - 1 - 900 - 1
    scenario = steplog.load_scenario(SCENARIOS / "max_model_len.json")
    vllm = steplog.step_log(scenario)
    assert sum(e["scheduled"].get("0", 0) for e in vllm) - 900 + 1 == 1024 - 900

    # max_req_input_len = 1,023 - 5: a 1,017-token prompt makes 5 tokens, 1,018 is refused
    def one(prompt_len):
        request = scenario.requests[0]._replace(prompt_len=prompt_len)
        return steplog.sglang_step_log(scenario._replace(requests=(request,)))

    assert len(one(1017)) == 6  # two prefill chunks (512 a step), then 4 decode steps
    with pytest.raises(KvplanError, match="over the engine's limit"):
        one(1018)


def test_decoded_tokens_never_enter_the_radix_cache():
    """recompute_outputs: request 3 (40-token prompt) is retracted after 317 outputs; SGLang
    recomputes 317 of its 357 tokens (only the prompt, inserted after its prefill, is in the
    tree; retract_decode and cache_finished_req insert no decoded token). kvplan cached the
    outputs, evicted part of the prompt instead, and recomputed 330."""
    log = _sglang_log("recompute_outputs")
    assert _entry(log, 318)["preempted"] == ["3"]
    assert _entry(log, 401)["scheduled"] == {"3": 317, "4": 40, "5": 40}


def test_a_retraction_evicts_ahead_of_the_next_decodes():
    """shared_prefixes_tight: retracting request 5 leaves 5 requests decoding; fewer than
    5 x 20 tokens are outside the tree, so release_req evicts 100 tokens from it, request 5's
    own 72 prompt tokens (its shared 128-token prefix stays locked by the others). It later
    recomputes 142 = 200 + 70 outputs - 128; without the eviction kvplan kept the 72 and
    recomputed 70."""
    log = _sglang_log("shared_prefixes_tight")
    assert _entry(log, 75)["preempted"] == ["5"]
    assert _entry(log, 85)["scheduled"]["5"] == 142


def test_a_matched_prefix_is_locked_before_the_budget_check():
    """random_resume_whole_blocks, step 1354: request 34's match is cached but unused
    (evictable); PrefillAdder locks it before comparing the request with rem_total_tokens,
    which then falls by the match: 34 does not fit. kvplan counted the match as free and
    admitted 34 a step early."""
    log = _sglang_log("random_resume_whole_blocks")
    assert _entry(log, 1354)["scheduled"] == {"33": 66}


def test_a_prefill_batch_finds_none_of_its_own_tokens_in_the_cache():
    """prefix_mix_6, step 67: request 8's last chunk and request 9 (528 prompt tokens in
    common) run in one batch; the tree holds only 8's first chunk (283 tokens, inserted after
    step 66), so 9 matches 283 and computes 125 + 283. kvplan matched the 528 that 8's chunk
    was computing in the same batch, and computed 125 + 38."""
    log = _sglang_log("prefix_mix_6")
    assert _entry(log, 67)["scheduled"] == {"8": 387, "9": 125}
    assert _entry(log, 68)["scheduled"] == {"9": 283}


def test_the_tree_evicts_whole_leaves():
    """prefix_mix_3, step 2994: every node of prefix 0 was evicted whole before request 16
    (494 tokens of it) came, so 16 computes all 607 (512 + 95). Evicted block by block, 5
    tokens of a node stayed and 16 computed 512 + 90."""
    log = _sglang_log("prefix_mix_3")
    assert _entry(log, 2993)["scheduled"] == {"16": 512}
    assert _entry(log, 2994)["scheduled"] == {"16": 95, "17": 94, "18": 40}


def test_a_match_splits_the_node_it_ends_in():
    """random_resume_whole_blocks: request 27 matched 500 tokens of request 25's node
    [418, 821) of prefix 0, splitting it; the leaf [500, 821) is evicted alone, so request 34
    (500 tokens of prefix 0) still matches 500 at step 1365 and computes 200 + 179. With the
    node evicted whole, 34 matched 418 and computed 200 + 200 + 61."""
    log = _sglang_log("random_resume_whole_blocks")
    assert _entry(log, 1365)["scheduled"] == {"34": 200}
    assert _entry(log, 1366)["scheduled"] == {"34": 179, "35": 21}


def test_the_tree_evicts_the_leaf_used_least_recently():
    """prefix_mix_7, step 2303: request 2, retracted at step 534, recomputes 493 tokens; the
    nodes its match needs were matched and inserted (finishes touch their path) more recently
    than the leaves evicted before them. Evicting the node freed first, kvplan lost
    some of them and computed a 512-token chunk."""
    log = _sglang_log("prefix_mix_7")
    assert _entry(log, 534)["preempted"] == ["2"]
    assert log[-1]["step"] == 2303 and log[-1]["scheduled"] == {"2": 493}


def test_a_request_finished_in_its_prefill_batch_leaves_its_prompt_cached():
    """cache_finished_req inserts a request that finishes in its prefill batch (one output):
    request 1 (its first 200 tokens request 0's whole prompt) computes 100 of 300, request 3
    (request 2's 150-token prompt again) 1. kvplan freed such a request before the batch's
    tokens entered the tree: 1 computed 256 (a chunk) and 2 had to wait."""
    log = _sglang_log("prefix_after_one_token")
    assert _entry(log, 0) == {
        "step": 0,
        "scheduled": {"0": 200},
        "preempted": [],
        "finished": ["0"],
    }
    assert _entry(log, 3)["scheduled"] == {"1": 100, "2": 150}
    assert _entry(log, 6)["scheduled"] == {"3": 1}


def test_a_finished_request_holds_its_seat_until_the_next_decode_step():
    """seat_until_filtered (4 seats): request 12 finishes in decode step 730; prefill steps
    731-733 follow with no decode step between, so 12 is still in running_batch and with 10,
    13 and 14 fills the 4 seats: 15 waits, and is admitted after decode step 734 filtered 12.
    kvplan freed the seat at the finish and admitted 15 in step 733."""
    log = _sglang_log("seat_until_filtered")
    assert _entry(log, 730)["finished"] == ["12"]
    assert _entry(log, 733)["scheduled"] == {"14": 29}
    assert set(_entry(log, 734)["scheduled"]) == {"10", "13", "14"}


def test_an_idle_pass_filters_the_finished_requests():
    """idle_pass_filters (4 seats): request 0 finishes in step 13 and the loop then passes
    idle until step 22, filtering it out of the running batch, so its seat is free again
    when 1-4 arrive: 3 and 4 prefill together in step 27. Holding the seat until a decode
    step would admit only 3."""
    log = _sglang_log("idle_pass_filters")
    assert _entry(log, 13)["finished"] == ["0"]
    assert _entry(log, 27)["scheduled"] == {"3": 89, "4": 39}


def test_the_kv_budget_charges_no_page():
    """PrefillAdder charges a request extend_input_len + min(max_new_tokens, 4,096) and checks
    total_tokens >= rem_total_tokens, no page added (0.5.6.post2). budget_without_a_page, step
    341: 761 tokens free or evictable less 181.04 expected for the running requests leave
    579.96; request 14 needs 522 + 57 = 579 and prefills. kvplan charged a page more (580)
    and decoded instead."""
    log = _sglang_log("budget_without_a_page")
    assert _entry(log, 341)["scheduled"] == {"14": 256}


def test_a_readmitted_request_is_charged_its_max_new_tokens_in_full():
    """_update_prefill_budget charges min(max_new_tokens, 4,096), not the outputs left: request
    8, retracted at step 1909 and admitted again at step 3066 (249 tokens to compute), leaves
    no room for request 15 in that batch (budget_counts_max_new_tokens). Charged the outputs
    left, kvplan added 7 tokens of 15's."""
    log = _sglang_log("budget_counts_max_new_tokens")
    assert _entry(log, 1909)["preempted"] == ["8"]
    assert _entry(log, 3066)["scheduled"] == {"8": 249}


def test_a_match_beside_an_unfinished_chunk_keeps_its_prefix_cached():
    """match_beside_a_chunk: while request 12's prompt runs in chunks, each prefill pass still
    reaches the waiting loop, and init_next_round_input matches the head (request 13, whose 57
    tokens of prefix 2 are cached) before it is refused: the match makes those tokens the
    most recently used, and the tree evicts request 2's finished prompt instead. 13 then
    computes 592 - 57 (its last chunk 23 tokens, at step 425). kvplan matched no one beside a
    chunk, evicted the 57 and computed 80 more."""
    log = _sglang_log("match_beside_a_chunk")
    assert _entry(log, 425)["scheduled"] == {"13": 23, "14": 105}


def test_a_refused_head_is_matched_first():
    """match_of_a_refused_head: a prefill attempt between decode steps (the head has a seat
    but not the tokens) matches request 12's 38 tokens of prefix 1 before NO_TOKEN refuses
    it, so later evictions take older leaves first, and 12 computes 368 - 38 = 330 at step
    642. kvplan decided that attempt without a match, evicted the 38 and computed 368."""
    log = _sglang_log("match_of_a_refused_head")
    assert _entry(log, 642)["scheduled"] == {"12": 330}


def test_an_insert_frees_the_tokens_the_tree_already_holds():
    """insert_frees_duplicates: requests 0 and 1 prefill in one batch, 1's 172-token prompt the
    first 172 tokens of 0's; cache_unfinished_req inserts 0 first, then 1 finds its tokens in
    the tree and frees its own copies (free 1,250 = 1,536 - 286 after step 0, not 1,078).
    kvplan kept both copies, and with 172 tokens fewer admitted request 3 only after it."""
    log = _sglang_log("insert_frees_duplicates")
    assert _entry(log, 0)["scheduled"] == {"0": 286, "1": 172}
    assert _entry(log, 7)["scheduled"] == {"3": 343}


def test_a_run_of_decode_steps_filters_the_finished_requests():
    """decode_run_filters (4 seats): request 0 finishes in decode step 29 and nothing waits;
    decode step 30's update_running_batch filters it, so its seat is free when request 4
    arrives at step 40 and prefills at once. kvplan's run of decode steps 30-39 left the
    seat taken, and 4 waited a decode step."""
    log = _sglang_log("decode_run_filters")
    assert _entry(log, 29)["finished"] == ["0"]
    assert _entry(log, 40)["scheduled"] == {"4": 256}


def test_a_prefill_merged_into_unfiltered_finishes_keeps_batch_is_full():
    """prefill_keeps_full_flag: request 0, the only one decoding, finishes in step 20; step 21
    prefills request 1 and finds no tokens for request 2 (NO_TOKEN: batch_is_full). The
    running batch still holds 0, so the prefill batch merges into it and the flag stays: step
    22 decodes (its filter clears the flag), 2 prefills in step 23. kvplan took the batch for
    a fresh running batch, cleared the flag and prefilled 2 in step 22."""
    log = _sglang_log("prefill_keeps_full_flag")
    assert _entry(log, 20)["finished"] == ["0"]
    assert [_entry(log, k)["scheduled"] for k in (21, 22, 23)] == [{"1": 100}, {"1": 1}, {"2": 400}]
