"""Requests past max_model_len: the HTTP server refuses them (HTTP 400, a failed request) by
each engine's rule at its release (kvplan.engines.context_limit), and simulate and plan say so;
only SGLang 0.4.0 and 0.4.1 serve them with their output lowered."""

from __future__ import annotations

import json

import pytest

from kvplan.dtypes import KvFormat
from kvplan.engines.context_limit import ContextLimit, context_limit
from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.step_time import Rates
from kvplan.inputs.sources import load_model
from kvplan.simulate import cluster
from kvplan.simulate.cluster import Frontend
from kvplan.simulate.engine import Engine, EngineConfig
from kvplan.simulate.workload import RequestSpec

from helpers import run_cli, run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4", "-f", "json")
LENGTHS = ("--input-len", "100", "--output-len", "50")


# ---- the rule, by hand: prompt 100 asking 50 outputs ------------------------------------------
@pytest.mark.parametrize("version", ["0.6.6", "0.10.1", "0.19.1", "0.24"])
def test_vllm_refuses_a_total_past_the_limit_and_serves_one_at_it(version):
    assert context_limit("vllm", version, 140).refuses(100, 50)  # 150 > 140
    assert context_limit("vllm", version, 149).refuses(100, 50)
    assert not context_limit("vllm", version, 150).refuses(100, 50)  # 150 = 150: served
    assert context_limit("vllm", version, 100).refuses(100, 1)  # the prompt alone


@pytest.mark.parametrize(
    "version, at_limit_served",
    [("0.4.2", False), ("0.4.6", False), ("0.4", False), ("0.5.9", False),
     ("0.5.10", True), ("0.5.14", True), ("0.5", True)],
)  # fmt: skip
def test_sglang_refuses_the_total_at_its_context_length_until_0_5_10(version, at_limit_served):
    limit = context_limit("sglang", version, 150)
    assert limit.refuses(100, 50) is not at_limit_served  # 100 + 50 = 150 = context_len
    assert limit.refuses(100, 51)  # past it, every release
    assert not limit.refuses(100, 49)
    assert not limit.capped(100, 48) and limit.capped(100, 49)  # the scheduler's 2 tokens


@pytest.mark.parametrize("version", ["0.4.0", "0.4.1"])
def test_sglang_before_0_4_2_caps_the_output_instead(version):
    limit = context_limit("sglang", version, 140)
    assert not limit.refuses(100, 50)
    # the scheduler's cut: max_req_len = context_len - 1, outputs <= max_req_len - prompt - 1
    assert limit.output_tokens(100, 50) == 38 and limit.capped(100, 50)
    assert limit.refuses(140, 1)  # a prompt of the whole context still fails


def test_sglang_scheduler_serves_two_tokens_short_of_the_context_length():
    """SGLang's scheduler cuts max_new_tokens to max_req_len - prompt - 1 with max_req_len =
    context_len - 1 (scheduler.py), so a served total stops 2 tokens below context_len; SGLang
    PR #33814's repro at --context-length 4096 asking 16: prompt 4078 gets 16, 4079 gets 15,
    4080 gets 14 (the total of exactly 4096 the tokenizer serves from PR #22546), 4081 fails."""
    limit = context_limit("sglang", "0.5.10", 4096)
    assert [limit.output_tokens(p, 16) for p in (4078, 4079, 4080)] == [16, 15, 14]
    assert not limit.capped(4078, 16) and limit.capped(4079, 16) and limit.capped(4080, 16)
    assert not limit.refuses(4080, 16) and limit.refuses(4081, 16)
    before = context_limit("sglang", "0.5.9", 4096)  # the total at the limit refused
    assert before.refuses(4080, 16) and before.output_tokens(4079, 16) == 15
    assert context_limit("vllm", "0.19.1", 4096).output_tokens(4080, 16) == 16  # no cut


def test_a_pool_below_the_context_cuts_what_the_engine_holds_not_the_http_check():
    limit = context_limit("sglang", "0.5.10", 40960, engine_len=14558)
    assert limit.max_model_len == 40960 and limit.longest == 14558
    assert not limit.refuses(14000, 4000)  # 18,000 <= 40,960: the server takes it
    assert limit.output_tokens(14000, 4000) == 558  # the scheduler's max_req_len cut
    assert limit.refuses(14558, 1)


def test_sglang_scheduler_refuses_a_prompt_from_max_req_input_len():
    """SGLang's scheduler refuses a prompt of max_req_input_len = max_req_len - 5 tokens or
    more (validate_input_length), max_req_len = min(context_len, pool) - 1: a pool of 8,192
    tokens refuses from 8,186 whatever max_model_len; a context of 4,096 from 4,090."""
    pool = context_limit("sglang", "0.5.10", 131072, engine_len=8190, pool_tokens=8192)
    assert pool.refuses(8186, 1) and not pool.refuses(8185, 1)
    assert pool.output_tokens(8185, 10) == 5  # prompt + outputs within 8,190
    ctx = context_limit("sglang", "0.5.10", 4096)
    assert ctx.refuses(4090, 1) and not ctx.refuses(4089, 1)
    assert not context_limit("vllm", "0.19.1", 4096).refuses(4090, 1)


def test_a_prompt_the_sglang_pool_refuses_is_failed_and_named_so():
    argv = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
            "--kv-cache-memory", "1GiB", "--num-prompts", "2", "--output-len", "1")  # fmt: skip
    data = run_json(*argv, "--input-len", "8188")  # 8,189 <= 8,190: the total fits the pool
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (0, 2)
    text = data["notes"][0]["text"]
    assert "prompt reaches 8,186 tokens" in text and "sglang.bench_serving" in text
    assert "or the KV memory" in text
    served = run_json(*argv, "--input-len", "8185")["runs"][0]["bench"]
    assert (served["completed"], served["failed"]) == (2, 0)


# ---- the simulator: the refused request is failed, the other runs in full ---------------------
def test_cluster_fails_the_request_past_the_limit_and_serves_the_rest():
    model = StepModel(
        load_model("llama-3.1-8b"), Rates(3.35e12, 989.4e12), "bf16", KvFormat("bf16")
    )
    cfg = EngineConfig(
        max_num_seqs=4,
        max_num_batched_tokens=512,
        max_model_len=140,
        num_blocks=64,
        block_size=16,
        enable_prefix_caching=False,
    )
    engine = Engine(cfg, model, 0.0)
    requests = [RequestSpec(0, 0.0, 100, 50), RequestSpec(1, 0.0, 50, 50)]
    run = cluster.run(requests, [engine], frontend=Frontend(0.0, 0.0), context=ContextLimit(140))
    assert [r.rid for r in run.failed] == [0]
    assert [(r.rid, r.outputs) for r in run.finished] == [(1, 50)]


# ---- simulate: the note, per engine and release -----------------------------------------------
@pytest.mark.parametrize(
    "argv, limit, failed",
    [
        (("--engine", "vllm"), "140", 4),
        (("--engine", "vllm"), "150", 0),
        (("--engine", "sglang", "--engine-version", "0.5.9"), "150", 4),
        (("--engine", "sglang", "--engine-version", "0.5.10"), "152", 0),
    ],
)
def test_simulate_fails_the_requests_its_server_refuses(argv, limit, failed):
    data = run_json(*SIM, *LENGTHS, *argv, "--max-model-len", limit)
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (4 - failed, failed)
    ids = [n["id"] for n in data["notes"]]
    assert "sim-outputs-capped" not in ids
    if failed:
        first = data["notes"][0]
        assert first["id"] == "sim-requests-failed"
        word = "reaches" if "sglang" in argv else "is more than"
        assert f"{word} max_model_len ({limit})" in first["text"]
    else:
        assert "sim-requests-failed" not in ids
        assert bench["total_output_tokens"] == 4 * 50


def test_sglang_0_4_1_serves_them_capped_and_says_so():
    data = run_json(
        *SIM, *LENGTHS, "--engine", "sglang", "--engine-version", "0.4.1", "--max-model-len", "140"
    )
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (4, 0)
    assert bench["total_output_tokens"] == 4 * 38  # 140 - 2 - 100: the scheduler's cut
    capped = [n for n in data["notes"] if n["id"] == "sim-outputs-capped"]
    assert capped and capped[0]["text"].startswith("4 request(s)")


def test_sglang_serves_the_total_at_its_context_length_two_tokens_short_and_says_so():
    data = run_json(
        *SIM, *LENGTHS, "--engine", "sglang", "--engine-version", "0.5.10", "--max-model-len", "150"
    )
    bench = data["runs"][0]["bench"]
    assert (bench["completed"], bench["failed"]) == (4, 0)
    assert bench["total_output_tokens"] == 4 * 48  # 150 - 2 - 100
    capped = [n["text"] for n in data["notes"] if n["id"] == "sim-outputs-capped"]
    assert capped and "less 2 tokens (max_req_len - prompt - 1" in capped[0]


# ---- plan: a configuration whose server refuses requests is ruled out, and says how many -----
def test_plan_rules_out_a_configuration_whose_requests_fail():
    code, out, err = run_cli(
        "plan", "qwen3-8b", "--gpu", "h100", "--rate", "5", *LENGTHS,
        "--max-model-len", "140", "--slo", "ttft_p99=1s", "-f", "json",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["feasible"] == 0 and data["candidates"] == []
    assert [r["reason"] for r in data["rejections"]] == [
        "200 of 200 requests refused (prompt + output past max_model_len 140)"
    ]


# ---- --engine-version as typed ----------------------------------------------------------------
@pytest.mark.parametrize("engine, version", [("vllm", "0.19 "), ("sglang", " 0.5.9 ")])
def test_an_engine_version_with_spaces_runs_as_the_release(engine, version):
    code, out, err = run_cli(
        "simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "2", "--engine", engine,
        "--engine-version", version,
    )  # fmt: skip
    assert code == 0, err
    assert "  rules)" not in out and f"{version} " not in out
    assert version.strip() in out
