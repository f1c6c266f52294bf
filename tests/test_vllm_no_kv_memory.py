"""vLLM's start-up refusal ("No available memory for the cache blocks") says what does not fit
(issue 28/34): the weights alone, or weights that fit and the profile run's terms that take the
rest. vLLM's recipe prints DeepSeek-V3.2 on 8 H20 (96 GB) at TP 8 with vLLM's defaults;
kvplan refuses it by 0.70 GiB, and so did vLLM 0.19.1 on 8 x H20-96G (vllm-project/vllm#40592:
out of memory at start-up with the recipe's command). The weights are not the reason: they fit.

DeepSeek-V3.2's weights per rank at TP 8, as vLLM's deepseek_v2.py loads them: the fused
q_a/kv_a down-projection and the DSA indexer ("no tensor parallel, just replicated") whole on
every rank, q_b/kv_b/o and every MLP split over TP, the routers and norms replicated, the
vocabulary (129,280 rows, a multiple of 64) split over TP, and the decompressed W_UK/W_UV (bf16)
beside kv_b_proj."""

from __future__ import annotations

import math

import pytest

from kvplan.anatomy.model import pp_stages
from kvplan.engines.vllm_memory import requested_bytes, weights_per_rank
from kvplan.formulas.weights import resolve_weights_dtype
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model
from kvplan.units import GIB

from helpers import run_cli

# DeepSeek-V3.2's config.json: 61 layers (the first 3 dense), 256 routed experts of width 2048
# and one shared, hidden 7168, dense width 18432, MLA q_lora 1536, kv_lora 512, 128 heads of
# nope 128 + rope 64, v 128, vocabulary 129,280; the indexer's 64 heads of 128; fp8 weights in
# 128 x 128 blocks with one fp32 scale each; norms, routers and the vocabulary in bf16
H, LAYERS, DENSE, EXPERTS, WIDTH, DENSE_WIDTH = 7168, 61, 3, 256, 2048, 18432
Q_LORA, KV_LORA, HEADS, NOPE, ROPE, V, VOCAB = 1536, 512, 128, 128, 64, 128, 129_280
INDEX_HEADS, INDEX_DIM = 64, 128
TP = 8


def _fp8(rows: int, cols: int) -> int:
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


def _mlp(width: int) -> int:  # gate, up, down of one rank
    return 2 * _fp8(width // TP, H) + _fp8(H, width // TP)


def _by_hand() -> int:
    moe_layers = LAYERS - DENSE
    heads = HEADS // TP
    attention = LAYERS * (
        _fp8(Q_LORA + KV_LORA + ROPE, H)  # fused_qkv_a_proj, replicated
        + _fp8(heads * (NOPE + ROPE), Q_LORA)
        + _fp8(heads * (NOPE + V), KV_LORA)
        + _fp8(H, heads * V)
    )
    # wq_b, wk in fp8; weights_proj has no quant_config (bf16); k_norm's weight and bias
    indexer = LAYERS * (
        _fp8(INDEX_HEADS * INDEX_DIM, Q_LORA) + _fp8(INDEX_DIM, H) + INDEX_HEADS * H * 2 + 4 * 128
    )
    experts = _mlp(WIDTH) * EXPERTS * moe_layers
    shared = _mlp(WIDTH) * moe_layers + _mlp(DENSE_WIDTH) * DENSE
    routers = (EXPERTS * H * 2 + EXPERTS * 4) * moe_layers  # bf16 gate, fp32 correction bias
    norms = (2 * H + Q_LORA + KV_LORA) * 2 * LAYERS + 2 * H
    vocabulary = 2 * VOCAB * H * 2 // TP
    absorbed = KV_LORA * heads * (NOPE + V) * 2 * LAYERS
    return attention + indexer + experts + shared + routers + norms + vocabulary + absorbed


def test_deepseek_v32_at_tp8_holds_80_gib_a_rank():
    spec = load_model("deepseek-ai/DeepSeek-V3.2")
    (stage,) = pp_stages(spec, 1)
    wdtype, _ = resolve_weights_dtype(spec, "auto")
    got = weights_per_rank(spec, stage, True, True, wdtype, TP, None)
    loaded = got.total_bytes - got.rotary_bytes  # the rope tables are no checkpoint tensor
    # kvplan counts the indexer's weights_proj with the fp8 attention (1.0002 B a parameter)
    # where vLLM keeps it in bf16: 28 MB short over 61 layers, of 80 GiB; the partial blocks at
    # the edges (kv_a's 576 rows: 4.5 blocks) are 0.2 MB
    weights_proj = INDEX_HEADS * H * LAYERS * (2 - (1 + 4 / 128**2))
    assert loaded - _by_hand() == pytest.approx(-weights_proj, abs=0.3e6)
    assert got.total_bytes / GIB == pytest.approx(80.34, abs=0.01)
    # the H20 reports 97,285 MiB: 0.9 of it is 85.50 GiB, 5 GiB above the weights
    requested = requested_bytes(load_profile("h20"), 0.9)
    assert requested == math.ceil(97285 * 2**20 * 0.9)
    assert (requested - _by_hand()) / GIB == pytest.approx(5.15, abs=0.01)


def test_the_refusal_names_the_profile_run_when_the_weights_fit():
    code, _, err = run_cli(
        "simulate", "deepseek-ai/DeepSeek-V3.2", "--gpu", "h20", "--engine", "vllm",
        "--tp", "8", "--num-prompts", "20", "--input-len", "2048", "--output-len", "1024",
    )  # fmt: skip
    assert code == 2 and "no memory is left for the KV cache (-0.70 GiB" in err
    assert "the weights (80.34 GiB a rank) fit in the 85.50 GiB requested" in err
    # the torch peak at vLLM's 1,024 default sequences on a 70 GiB+ GPU, and the non-torch term
    # kvplan has measured up to TP 4 only: the refusal says so
    assert "torch peak (3.69 GiB)" in err and "TP 8 is not measured" in err
    assert "weights alone" not in err


def test_fewer_sequences_shrink_the_profile_run_the_refusal_names():
    """The remedy the refusal names works: at --max-num-seqs 256 the sampler's dummy run takes
    a quarter of the logits rows and the launch keeps a KV cache."""
    code, out, err = run_cli(
        "engine", "deepseek-ai/DeepSeek-V3.2", "--gpu", "h20", "--engine", "vllm", "--tp", "8",
        "--max-num-seqs", "256", "--max-model-len", "2048",
    )  # fmt: skip
    assert code == 0, err
    assert "Available KV cache memory: 0.3 GiB" in out


def test_plan_groups_the_refusal_without_blaming_the_weights():
    """plan --emit vllm rules out the same launch (vLLM's default 8,192 batched tokens and 1,024
    sequences) under a reason that does not claim the weights are what fails."""
    code, out, err = run_cli(
        "plan", "deepseek-ai/DeepSeek-V3.2", "--gpu", "h20", "--price", "h20=2", "--tp", "8",
        "--rate", "1", "--slo", "tpot_p99=1s", "--input-len", "2048", "--output-len", "1024",
        "--num-prompts", "20", "--kv-cache-dtype", "auto", "--speculative", "off",
    )  # fmt: skip
    assert code == 0, err
    assert "weights, the profile run or one max-length request do not fit" in out
