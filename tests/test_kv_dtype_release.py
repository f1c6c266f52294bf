"""A --kv-cache-dtype the named engine release refuses is refused in one line by every command
that would launch or size it (issue 28): vLLM's CacheDType literal by release
(engines.vllm.KV_CACHE_DTYPE_FROM: nvfp4 from 0.20, float16 from 0.18, bfloat16 from 0.11),
SGLang's --kv-cache-dtype choices by release (engines.sglang.KV_CACHE_DTYPE_FROM: bf16 and
bfloat16 from 0.5.4; 0.4.x-0.5.3 take auto, fp8_e5m2, fp8_e4m3). `plan --emit` refuses before
its search, never ruling every configuration out one by one nor emitting the value."""

from __future__ import annotations

import pytest

from kvplan.engines.sglang import check_kv_cache_dtype_release as sglang_check
from kvplan.engines.vllm import check_kv_cache_dtype_release as vllm_check
from kvplan.errors import KvplanError

from helpers import one_line_error, run_cli, run_json

PLAN = (
    *("plan", "qwen3-8b", "--gpu", "h100", "--rate", "1", "--slo", "tpot_p99=1s"),
    *("--num-prompts", "20", "--jobs", "1", "--input-len", "512", "--output-len", "64"),
    *("--speculative", "off", "--tp", "1", "--max-num-seqs", "64"),
    *("--max-num-batched-tokens", "8192"),
)


@pytest.mark.parametrize(
    ("kv", "release", "taken"),
    [
        ("nvfp4", "0.19", False),
        ("nvfp4", "0.20.0", True),
        ("float16", "0.17.1", False),
        ("float16", "0.18", True),
        ("bfloat16", "0.10.1", False),
        ("bfloat16", "0.11.0", True),
        ("fp8", "0.8.5", True),
    ],
)
def test_vllm_release_rule(kv, release, taken):
    if taken:
        vllm_check(kv, release)
    else:
        with pytest.raises(KvplanError, match=release):
            vllm_check(kv, release)


@pytest.mark.parametrize(
    ("kv", "release", "taken"),
    [
        ("bfloat16", "0.4.6", False),
        ("bf16", "0.5.3", False),
        ("bfloat16", "0.5.4", True),
        ("bf16", "0.5", True),
        ("fp8_e4m3", "0.4.6", True),
        ("auto", "0.4", True),
    ],
)
def test_sglang_release_rule(kv, release, taken):
    if taken:
        sglang_check(kv, release)
    else:
        with pytest.raises(KvplanError, match="0.5.4"):
            sglang_check(kv, release)


@pytest.mark.parametrize(
    ("emit", "release", "kv"),
    [
        ("vllm", "0.19", "nvfp4"),
        ("vllm", "0.17", "float16"),
        ("vllm", "0.10.0", "auto,bfloat16"),
        ("sglang", "0.4.6", "bfloat16"),
        ("sglang", "0.5.3", "bf16,auto"),
    ],
)
def test_plan_refuses_a_dtype_its_release_refuses(emit, release, kv):
    code, out, err = run_cli(
        *PLAN, "--emit", emit, "--engine-version", release, "--kv-cache-dtype", kv
    )
    one_line_error(code, err, release)
    assert out == ""


def test_engine_and_simulate_refuse_sglang_bf16_before_054():
    code, _, err = run_cli(
        *("engine", "qwen3-8b", "--engine", "sglang", "--gpu", "h100"),
        *("--sglang-version", "0.5.3", "--kv-cache-dtype", "bfloat16"),
    )
    one_line_error(code, err, "0.5.4")
    code, _, err = run_cli(
        *("simulate", "qwen3-8b", "--engine", "sglang", "--gpu", "h100"),
        *("--engine-version", "0.4.6", "--kv-cache-dtype", "bf16", "--num-prompts", "4"),
    )
    one_line_error(code, err, "0.5.4")


def test_plan_emits_a_taken_dtype_on_the_first_release_with_it():
    doc = run_json(
        *PLAN, "--emit", "sglang", "--engine-version", "0.5.4", "--kv-cache-dtype", "bfloat16"
    )
    assert doc["candidates"], doc
    assert "--kv-cache-dtype bfloat16" in doc["candidates"][0]["command"]


SGLANG_SIM = (
    *("simulate", "qwen3-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts", "20"),
    *("--input-len", "256", "--output-len", "16"),
)


@pytest.mark.parametrize("kv", ["fp8", "float16"])
@pytest.mark.parametrize("release", ["0.4.6", "0.5.9", "0.5.23"])
def test_sglang_refuses_spellings_no_parser_takes(kv, release):
    """No SGLang --kv-cache-dtype choices list has fp8 or float16 (0.4.6-0.5.13 server_args.py
    choices=[auto, fp8_e5m2, fp8_e4m3(, bf16, bfloat16, fp4_e2m1)]; 0.5.14 :600 the same;
    0.5.16 :616-626 and 0.5.23 arg_groups/fields/model.py:209-219 add mxfp8, nvfp4 and
    fp4_mx_block16): engine and simulate refuse them in one line naming the choices."""
    with pytest.raises(KvplanError, match="fp8_e4m3"):
        sglang_check(kv, release)
    code, out, err = run_cli(*SGLANG_SIM, "--engine-version", release, "--kv-cache-dtype", kv)
    one_line_error(code, err, "fp8_e4m3")
    code, out, err = run_cli(
        *("engine", "qwen3-8b", "--engine", "sglang", "--gpu", "h100"),
        *("--sglang-version", release, "--kv-cache-dtype", kv),
    )
    one_line_error(code, err, "fp8_e4m3")
    assert ("bf16" in err) == (release != "0.4.6")  # the release's own choices


def test_plan_for_sglang_refuses_fp8_and_tries_fp8_e4m3_by_default():
    """SGLang itself maps no "fp8" (its parser refuses it): `plan --emit sglang` refuses it, and
    its default list is SGLang's spellings (auto, fp8_e4m3), vLLM's stays auto, fp8."""
    from kvplan.plans.plan import PlanRequest, plan_kv_cache_dtypes

    code, out, err = run_cli(*PLAN, "--emit", "sglang", "--kv-cache-dtype", "fp8")
    one_line_error(code, err, "fp8_e4m3")
    assert plan_kv_cache_dtypes(PlanRequest(1, (), emit="sglang")) == ("auto", "fp8_e4m3")
    assert plan_kv_cache_dtypes(PlanRequest(1, (), emit="vllm")) == ("auto", "fp8")
    given = PlanRequest(1, (), emit="sglang", kv_cache_dtypes=("bf16",))
    assert plan_kv_cache_dtypes(given) == ("bf16",)
