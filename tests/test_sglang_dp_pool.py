"""SGLang's DP-attention pool, one home: `kvplan capacity --emit sglang`, `kvplan plan --emit
sglang` and `kvplan simulate --engine sglang` size it with SGLang's own allocation
(kvplan.engines.sglang.sglang_allocation), not the engine-free plan's vLLM -dp rule."""

from __future__ import annotations

import pytest

from kvplan.formulas.weights import part_bytes_per_param, resolve_weights_dtype
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.capacity import CapacityRequest, capacity, capacity_for_launch

from helpers import run_cli, run_json

DP_FLAGS = ("--tp", "8", "--dp", "8", "--enable-dp-attention")


def test_sglang_dp_attention_weights_by_hand():
    """DeepSeek-V3 (fp8) over 8 H200 with --dp-size 8 --enable-dp-attention. SGLang splits the
    dense MLPs (3 layers x 3 x 7168 x 18432), the shared experts (58 x 3 x 7168 x 2048) and the
    head (129,280 x 7168, bf16) over the 8 GPUs where vLLM's -dp rank holds them whole, and keeps
    the MLA absorbed copies (61 layers x 128 heads x 512 x (128 + 128), bf16) and the rotary
    table (163,840 positions x 64, bf16): 100.84 GB by vLLM's rule, 98.01 GB by SGLang's."""
    spec, gpu = load_model("deepseek-v3"), load_profile("h200")
    request = CapacityRequest(context_len=8192, dp_attention=8)
    vllm_rule = capacity(spec, gpu, request)
    sglang = capacity_for_launch(spec, gpu, request, "sglang", False)
    wdtype = resolve_weights_dtype(spec, "auto")[0]
    assert wdtype == "fp8"
    fp8 = 1 + 4 / 128**2  # an fp32 scale per 128 x 128 block
    mlp = 3 * 3 * 7168 * 18432 * fp8
    shared = 58 * 3 * 7168 * 2048 * fp8
    head = 129280 * 7168 * 2
    assert part_bytes_per_param(spec, wdtype, "lm_head") == 2
    mla_copies = 61 * 128 * 512 * (128 + 128) * 2
    rotary = 163840 * 64 * 2
    by_hand = vllm_rule.weights_bytes_per_gpu - (mlp + shared + head) * 7 / 8
    by_hand += mla_copies + rotary
    assert sglang.weights_bytes_per_gpu == pytest.approx(by_hand, rel=1e-9)
    assert round(vllm_rule.weights_bytes_per_gpu / 1e9, 2) == 100.84
    assert round(sglang.weights_bytes_per_gpu / 1e9, 2) == 98.01
    # the pool: free before loading x 0.9 - weights; 576 bf16 values x 61 layers a token
    assert sglang.kv_pool_bytes_per_gpu == int(
        sglang.usable_bytes_per_gpu - sglang.weights_bytes_per_gpu
    )
    tokens = int(sglang.kv_pool_bytes_per_gpu // (576 * 2 * 61))
    assert sglang.kv_tokens == tokens == 506883
    # whole 8,192-token requests per rank (page 1), 8 ranks
    assert sglang.max_concurrency == 8 * (tokens // 8192) == 488
    assert vllm_rule.max_concurrency == 416


def test_capacity_plan_and_simulate_size_the_same_sglang_pool():
    """The same flags give the same pool in all three commands."""
    code, out, err = run_cli(
        "capacity", "deepseek-v3", "--gpu", "h200", "--dp-attention", "8", "--emit", "sglang"
    )
    assert code == 0, err
    assert "--max-running-requests 488 " in out + " " and "--mem-fraction-static 0.9 " in out
    sim = run_json(
        *("simulate", "deepseek-v3", "--engine", "sglang", "--gpu", "h200", *DP_FLAGS),
        *("--mem-fraction-static", "0.9", "--max-model-len", "8192"),
        *("--num-prompts", "4", "--input-len", "128", "--output-len", "8"),
    )
    assert sim["setup"]["kv_cache_tokens"] == 506883
    plan = run_json(
        *("plan", "deepseek-v3", "--gpu", "h200", "--emit", "sglang", *DP_FLAGS),
        *("--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048"),
        *("--max-model-len", "8192", "--mem-fraction-static", "0.9", "--speculative", "off"),
        *("--rate", "1", "--slo", "tpot_p99=1s", "--num-prompts", "20", "--top", "1"),
        *("--jobs", "1"),
    )
    best = plan["candidates"][0]
    assert best["kv_cache_tokens"] == 506883
    # SGLang divides both limits among the 8 ranks itself: the command carries the server's
    # values (the replica ran 8 requests and 256-token chunks a rank)
    assert (best["max_num_seqs"], best["max_num_batched_tokens"]) == (64, 2048)
    assert "--max-running-requests 64 " in best["command"]
    assert "--chunked-prefill-size 2048 " in best["command"]
