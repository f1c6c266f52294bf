"""vLLM's weights per rank under --data-parallel-size with --enable-expert-parallel (issue 34:
vLLM's recipe prints Kimi-K2-Instruct on 16 H800 with DP 16 + EP at --gpu-memory-utilization
0.85, and kvplan refuses it: are its weights per rank vLLM's?).

vLLM's FusedMoEParallelConfig.make (fused_moe/config.py): with EP on, the routed experts split
over dp_size x tp_size ranks (ep_size = tp_size flattened across DP, the experts' own TP 1);
attention, the shared experts and the dense layers stay on the engine's TP group (TP 1 here:
whole on every rank), and so do the vocabulary-parallel embedding and lm_head."""

from __future__ import annotations

import pytest

from kvplan.anatomy.model import pp_stages
from kvplan.engines.vllm_memory import requested_bytes, weights_per_rank
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.units import GIB

from helpers import run_cli

# Kimi-K2-Instruct's config.json: 61 layers (the first dense), 384 routed experts of width 2048
# and one shared, hidden 7168, dense width 18432, MLA q_lora 1536, kv_lora 512, 64 heads of
# nope 128 + rope 64, v 128, vocabulary 163,840; fp8 weights in 128 x 128 blocks, each block
# with one fp32 scale; norms, routers and the vocabulary in bf16
H, LAYERS, DENSE, EXPERTS, WIDTH, DENSE_WIDTH = 7168, 61, 1, 384, 2048, 18432
Q_LORA, KV_LORA, HEADS, NOPE, ROPE, V, VOCAB = 1536, 512, 64, 128, 64, 128, 163_840


def _fp8(rows: int, cols: int) -> int:
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


def _by_hand(expert_ranks: int) -> float:
    mlp = lambda width: 2 * _fp8(width, H) + _fp8(H, width)  # noqa: E731 gate, up, down
    moe_layers = LAYERS - DENSE
    experts = mlp(WIDTH) * EXPERTS * moe_layers / expert_ranks
    attention = LAYERS * (
        _fp8(Q_LORA, H)
        + _fp8(HEADS * (NOPE + ROPE), Q_LORA)
        + _fp8(KV_LORA + ROPE, H)
        + _fp8(HEADS * (NOPE + V), KV_LORA)
        + _fp8(H, HEADS * V)
    )
    shared = mlp(WIDTH) * moe_layers + mlp(DENSE_WIDTH) * DENSE
    routers = (EXPERTS * H * 2 + EXPERTS * 4) * moe_layers  # bf16 gate, fp32 correction bias
    norms = (2 * H + Q_LORA + KV_LORA) * 2 * LAYERS + 2 * H  # per layer, and the final one
    vocabulary = 2 * VOCAB * H * 2  # embedding and lm_head
    absorbed = KV_LORA * HEADS * (NOPE + V) * 2 * LAYERS  # W_UK, W_UV beside kv_b_proj (bf16)
    return experts + attention + shared + routers + norms + vocabulary + absorbed


def test_kimi_k2_under_dp16_ep_holds_a_sixteenth_of_the_routed_experts_and_all_else():
    spec = load_model("moonshotai/Kimi-K2-Instruct")
    (stage,) = pp_stages(spec, 1)
    wdtype, _ = resolve_weights_dtype(spec, "auto")  # the checkpoint's fp8 blocks
    got = weights_per_rank(spec, stage, True, True, wdtype, 1, None, expert_ranks=16)
    rotary = got.rotary_bytes  # the rope cos/sin cache, not a checkpoint tensor
    # kvplan prorates a block's scale over its parameters; the partial blocks at the edges
    # (kv_a's 576 rows: 4.5 blocks) count 0.22 MB more by hand, of 73 GiB
    assert got.total_bytes - rotary == pytest.approx(_by_hand(16), abs=0.3e6)
    assert got.total_bytes / GIB == pytest.approx(73.31, abs=0.01)
    # the experts alone: 59.08 GiB of it; the rest is whole on every rank
    assert (_by_hand(16) - _by_hand(10**9)) / GIB == pytest.approx(59.08, abs=0.01)


def test_the_recipes_printed_h800_launch_cannot_hold_its_weights():
    """0.85 x the H800's 79.19 GiB is 67.31 GiB, below the 73.31 GiB of weights alone: vLLM
    stops at start-up, and so does kvplan (the record stays refused as printed)."""
    assert requested_bytes(load_profile("h800-sxm"), 0.85) / GIB == pytest.approx(67.31, abs=0.01)
    assert _by_hand(16) / GIB > 67.31 + 5
    code, _, err = run_cli(
        "simulate", "moonshotai/Kimi-K2-Instruct", "--gpu", "h800-sxm", "--engine", "vllm",
        "--data-parallel-size", "16", "--enable-expert-parallel", "--max-num-seqs", "256",
        "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.85",
        "--num-prompts", "8", "--input-len", "1000", "--output-len", "512",
    )  # fmt: skip
    assert code == 2 and "no memory is left for the KV cache" in err
    # the refusal names the weights, not the profile run, as what does not fit
    assert "the weights alone (73.31 GiB a rank) exceed the 67.31 GiB requested" in err
