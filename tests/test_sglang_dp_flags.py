"""SGLang's --enable-dp-lm-head and --moe-dense-tp-size 1 under DP attention, by hand from its
source: logits_processor.py (use_attn_tp_group: the head over the attention TP group, no
dp_gather_replicate, no all-gather over the group), models/deepseek_v2.py (ParallelLMHead
use_attn_tp_group; the dense layers' MLP at tp_size 1 when enable_moe_dense_fully_dp()),
communicator.py (the dense layers' MLP in ScatterMode SCATTERED: no gather before them).
DeepSeek-V3 (fp8 checkpoint, bf16 head) on 8 H200 at --tp 8 --dp-size 8 (attention TP 1)."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.sglang import sglang_allocation
from kvplan.formulas.batch_step import StepModel
from kvplan.formulas.gemm_calls import dense_gemm_calls
from kvplan.formulas.weights import quantized_parts
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import deepseek_v3_dp8_step, one_line_error, run_cli, run_json

HIDDEN, VOCAB, LAYERS, DENSE_LAYERS = 7168, 129_280, 61, 3
HEAD_BYTES = VOCAB * HIDDEN * 2  # bf16
FP8 = 1 + 4 / 128**2  # an fp32 scale per 128 x 128 block
DENSE_MLP_BYTES = DENSE_LAYERS * 3 * HIDDEN * 18432 * FP8
DP_FLAGS = ("--engine", "sglang", "--gpu", "h200", "--tp", "8", "--dp", "8")


def _weights(**flags) -> float:
    request = EngineRequest(
        engine="sglang", tp=1, dp_attention=8, expert_ranks=8, max_model_len=8192, **flags
    )
    alloc = sglang_allocation(load_model("deepseek-v3"), load_profile("h200"), request)
    assert alloc.weights_bytes is not None
    return alloc.weights_bytes


def test_weights_per_gpu_by_hand():
    """--enable-dp-lm-head holds the head whole on every GPU (attention TP 1) where DP attention
    splits it over the 8: 7/8 of 129,280 x 7168 bf16 more; --moe-dense-tp-size 1 holds the 3
    dense MLPs whole: 7/8 of 3 x 3 x 7168 x 18432 fp8 more. The shared experts stay split."""
    base = _weights()
    assert _weights(enable_dp_lm_head=True) - base == pytest.approx(HEAD_BYTES * 7 / 8)
    assert HEAD_BYTES * 7 / 8 == 1_621_688_320
    assert _weights(moe_dense_tp_size=1) - base == pytest.approx(DENSE_MLP_BYTES * 7 / 8)
    both = _weights(enable_dp_lm_head=True, moe_dense_tp_size=1) - base
    assert both == pytest.approx((HEAD_BYTES + DENSE_MLP_BYTES) * 7 / 8)


def _model(**flags) -> StepModel:
    return deepseek_v3_dp8_step(sglang_collectives=True, **flags)


def test_the_dp_lm_head_drops_the_group_gathers_and_reads_the_whole_head():
    """Without the flag the ranks' sampled rows are all-reduced into one buffer and the logits
    all-gathered over the 8 GPUs; with it each rank runs the whole head (attention TP 1) on its
    own rows and gathers nothing. A decode step of 8 tokens a rank: the head's FLOPs are
    2 x 7168 x 129,280 a row on 8 rows (not 64 rows at 1/8 of the vocabulary: the same total),
    its bytes the whole head (not 1/8)."""
    base, lm = _model(), _model(dp_lm_head=True)
    assert base.logits_gather_s(8) > 0
    assert lm.logits_gather_s(8) == 0.0
    assert lm.head_flop_per_sample * 8 == pytest.approx(base.head_flop_per_sample * 64)
    assert lm.head_flop_per_sample == pytest.approx(2 * HIDDEN * VOCAB, rel=1e-6)
    dense_base, _ = base.weights_bytes(8)
    dense_lm, _ = lm.weights_bytes(8)
    assert dense_lm - dense_base == pytest.approx(HEAD_BYTES * 7 / 8, rel=1e-9)
    calls = dense_gemm_calls(
        load_model("deepseek-v3"),
        "fp8",
        quantized_parts(load_model("deepseek-v3"), "fp8"),
        1,
        8,
        local_head=True,
    )
    assert calls is not None
    head = [c for c in calls if c.head]
    assert [(c.n, c.k, c.gathered) for c in head] == [(VOCAB, HIDDEN, False)]


def test_dense_mlps_whole_skip_the_gather_of_the_three_dense_layers():
    """--moe-dense-tp-size 1: the 3 dense layers' MLPs run on each rank's own rows with their
    whole weights, so only the 58 MoE layers gather over the group. SUM_LEN (a prefill): two
    all-reduces of the summed rows per gathered layer, 2 x 58 of 2 x 61; the dense weights
    read are the whole 3 MLPs (7/8 more than the group's share)."""
    base, dense = _model(), _model(dense_mlp_dp=True)
    gathered = 8 * 512
    assert dense.sglang_dp_comm_s(512, gathered) == pytest.approx(
        base.sglang_dp_comm_s(512, gathered) * (LAYERS - DENSE_LAYERS) / LAYERS
    )
    dense_base, _ = base.weights_bytes(8)
    dense_whole, _ = dense.weights_bytes(8)
    assert dense_whole - dense_base == pytest.approx(DENSE_MLP_BYTES * 7 / 8, rel=1e-9)
    calls = dense_gemm_calls(
        load_model("deepseek-v3"),
        "fp8",
        quantized_parts(load_model("deepseek-v3"), "fp8"),
        1,
        8,
        local_dense_mlp=True,
    )
    assert calls is not None
    own = [(c.n, c.k) for c in calls if not c.gathered and not c.head and c.k in (HIDDEN, 18432)]
    assert (2 * 18432, HIDDEN) in own and (HIDDEN, 18432) in own


def test_flags_reach_the_simulation_and_the_pool():
    """The flags change the pool by the weights above (the head: 1.62 GB less, 23,077 of
    70,272-byte tokens at 0.757) and are printed by plan's launch command."""
    base = run_json("simulate", "deepseek-v3", *DP_FLAGS, "--enable-dp-attention",
                    "--num-prompts", "8", "--input-len", "128", "--output-len", "8")  # fmt: skip
    lm = run_json("simulate", "deepseek-v3", *DP_FLAGS, "--enable-dp-attention",
                  "--enable-dp-lm-head", "--num-prompts", "8", "--input-len", "128",
                  "--output-len", "8")  # fmt: skip
    dropped = base["setup"]["kv_cache_tokens"] - lm["setup"]["kv_cache_tokens"]
    assert abs(dropped - HEAD_BYTES * 7 / 8 / (576 * 2 * 61)) <= 1
    plan = run_json(
        *("plan", "deepseek-v3", "--gpu", "h200", "--emit", "sglang", "--tp", "8", "--dp", "8"),
        *("--enable-dp-attention", "--enable-dp-lm-head", "--moe-dense-tp-size", "1"),
        *("--kv-cache-dtype", "auto", "--max-num-seqs", "64", "--max-num-batched-tokens", "2048"),
        *("--max-model-len", "8192", "--speculative", "off", "--rate", "1"),
        *("--slo", "tpot_p99=1s", "--num-prompts", "20", "--top", "1", "--jobs", "1"),
    )
    command = plan["candidates"][0]["command"]
    assert "--enable-dp-lm-head" in command and "--moe-dense-tp-size 1" in command


@pytest.mark.parametrize(
    "extra,needle",
    [
        (("--enable-dp-lm-head",), "under --enable-dp-attention"),
        (("--moe-dense-tp-size", "1"), "under --enable-dp-attention"),
        (("--enable-dp-attention", "--moe-dense-tp-size", "2"), "SGLang takes 1 alone"),
        (("--enable-dp-attention", "--moe-dense-tp-size", "1", "--dp", "4"), "not modelled"),
    ],
)
def test_bad_flags_are_one_line_errors(extra, needle):
    code, out, err = run_cli("simulate", "deepseek-v3", *DP_FLAGS, *extra, "--num-prompts", "4")
    one_line_error(code, err, needle)
    assert out == ""


def test_vllm_refuses_sglangs_flags():
    code, _, err = run_cli(
        "simulate", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--enable-dp-lm-head"
    )
    one_line_error(code, err, "is SGLang's")


def test_plan_refuses_them_before_searching():
    base = ("plan", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--rate", "1")
    base += ("--slo", "tpot_p99=1s", "--num-prompts", "20")
    code, out, err = run_cli(*base, "--enable-dp-lm-head")
    one_line_error(code, err, "--enable-dp-lm-head is SGLang's: give --emit sglang")
    code, out, err = run_cli(*base, "--emit", "sglang", "--dp", "8", "--moe-dense-tp-size", "1")
    one_line_error(code, err, "under --enable-dp-attention")
    assert out == ""
