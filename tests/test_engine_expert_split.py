"""Block-FP8 experts split over TP into partial 128-wide blocks stop vLLM and SGLang at weight
loading (Fp8MoEMethod.create_weights; engines.moe_backend.check_expert_split). `simulate`
refused such a launch while `kvplan engine` sized it and `capacity --emit` printed its command
(issue 28's sweep, scripts/engine_consistency.py): every command now refuses it in one line."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_cli, run_json

MODEL = "minimax-m2.5"  # experts 1,536 wide, FP8 blocks of 128: TP 8 leaves 192 a rank


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_refuses_a_split_the_engines_stop_at(engine):
    code, out, err = run_cli("engine", MODEL, "--engine", engine, "--gpu", "h200", "--tp", "8")
    one_line_error(code, err, "block_n = 128")
    assert out == ""


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_capacity_emit_refuses_it(engine):
    code, out, err = run_cli(
        "capacity", MODEL, "--gpu", "h200", "--ctx", "8k", "--tp", "8", "--emit", engine
    )
    one_line_error(code, err, "block_n = 128")
    assert out == ""


def test_a_whole_block_split_still_sizes():
    """TP 4: 384 a rank, three whole blocks; both commands size it alike."""
    alloc = run_json("engine", MODEL, "--engine", "sglang", "--gpu", "h200", "--tp", "4")
    assert alloc["kv_cache_tokens"] > 0
    code, out, _ = run_cli(
        "capacity", MODEL, "--gpu", "h200", "--ctx", "8k", "--tp", "4", "--emit", "vllm"
    )
    assert code == 0 and "--tensor-parallel-size 4" in out
