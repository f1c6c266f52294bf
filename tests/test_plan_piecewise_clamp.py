"""`plan --emit sglang` always launches with --context-length (the length it planned); SGLang
0.5.13-0.5.16 cap piecewise_cuda_graph_max_tokens to a given --context-length (0.5.13
server_args.py:1579-1585, 0.5.16 :4039-4045; engines.sglang.piecewise_max_tokens), so the
plan's replica is the one `simulate --max-model-len <that length>` builds, given or not
(issue 28)."""

from __future__ import annotations

import pytest

from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.plans.plan import Config, PlanRequest, _options
from kvplan.simulate.setup import ServeOptions, build_replica

from helpers import run_json

LLAMA2 = load_model("llama-2-7b")  # 4,096 positions
H100 = load_profile("h100")


def _planned_graph_tokens(version: str, max_model_len: int | None = None) -> int:
    request = PlanRequest(1, (), emit="sglang", engine_version=version, max_model_len=max_model_len)
    options = _options(LLAMA2, request, Config(0, 1, 1, "auto", 64, 8192), H100)
    return build_replica(LLAMA2, H100, options).model.prefill_graph_max_tokens


def _simulated_graph_tokens(version: str, max_model_len: int | None) -> int:
    options = ServeOptions(
        engine="sglang",
        sglang_version=version,
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        max_model_len=max_model_len,
    )
    return build_replica(LLAMA2, H100, options).model.prefill_graph_max_tokens


@pytest.mark.parametrize(
    ("version", "tokens"), [("0.5.13", 4096), ("0.5.16", 4096), ("0.5.17", 8192)]
)
def test_plan_clamps_to_the_context_length_it_emits(version, tokens):
    """llama-2-7b: the plan emits --context-length 4096 unasked, under which 0.5.13-0.5.16
    capture piecewise graphs up to 4,096 tokens, not the 8,192-token chunk; 0.5.17 has no
    clamp. `simulate` clamps only to a length given to it, as SGLang does."""
    assert _planned_graph_tokens(version) == tokens
    assert _planned_graph_tokens(version, 2048) == (2048 if tokens == 4096 else 8192)
    assert _simulated_graph_tokens(version, 4096) == tokens
    assert _simulated_graph_tokens(version, None) == 8192


def test_the_plan_command_carries_that_length():
    plan = run_json(
        *("plan", "llama-2-7b", "--gpu", "h100", "--rate", "1", "--slo", "tpot_p99=1s"),
        *("--emit", "sglang", "--engine-version", "0.5.13", "--tp", "1", "--kv-cache-dtype"),
        *("auto", "--speculative", "off", "--jobs", "1", "--max-num-seqs", "64"),
        *("--max-num-batched-tokens", "8192", "--input-len", "256", "--output-len", "16"),
        *("--num-prompts", "20"),
    )
    assert "--context-length 4096" in plan["candidates"][0]["command"]
