"""Communication formulas by hand-computed examples, and their use in roofline and capacity."""

from __future__ import annotations

import pytest

from kvplan.dtypes import KvFormat
from kvplan.formulas.comm import (
    kv_transfer_bytes,
    kv_transfer_requests_per_s,
    kv_transfer_time_s,
    logits_allgather_bytes,
    p2p_time_s,
    pipeline_bubble_fraction,
    qk_norm_allreduce_bytes,
    qk_norm_allreduces_per_forward,
    ring_allgather_time_s,
    ring_allreduce_time_s,
    tp_allreduce_bytes,
    tp_comm_time_per_decode_step_s,
)
from kvplan.inputs.sources import load_model

from helpers import run_json, sglang_table_step

BF16 = KvFormat("bf16")


def test_p2p_and_ring_by_hand():
    assert p2p_time_s(1e9, 100e9, 5e-6) == pytest.approx(5e-6 + 0.01)
    # 8 ranks: 2*7/8 * 1 MB / 450 GB/s + 14 * 2 us
    assert ring_allreduce_time_s(1e6, 8, 450e9, 2e-6) == pytest.approx(
        14 / 8 * 1e6 / 450e9 + 14 * 2e-6
    )
    assert ring_allreduce_time_s(1e6, 1, 450e9, 2e-6) == 0.0
    assert pipeline_bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert pipeline_bubble_fraction(1, 8) == 0


def test_tp_decode_step_communication_llama70b():
    spec = load_model("llama-3.1-70b")
    assert tp_allreduce_bytes(spec, 64) == 64 * 8192 * 2
    one = ring_allreduce_time_s(64 * 8192 * 2, 8, 450e9, 2e-6)
    # two per layer and the vocab-parallel embedding's
    assert tp_comm_time_per_decode_step_s(spec, 64, 8, 450e9, 2e-6) == pytest.approx(161 * one)
    # the head's logits: each rank receives the other 7/8 of 64 x 128,256 bf16
    assert logits_allgather_bytes(64, 128_256, 8) == 64 * 128_256 * 2 * 7 / 8
    assert logits_allgather_bytes(64, 128_256, 1) == 0.0
    assert ring_allgather_time_s(7e6, 8, 350e9, 2e-6) == pytest.approx(7e6 / 350e9 + 14e-6)


def test_kv_transfer_counts_replication():
    llama, deepseek = load_model("llama-3.1-70b"), load_model("deepseek-v3")
    whole = 327_680 * 32768
    assert kv_transfer_bytes(llama, 32768, BF16, 8) == whole  # 8 KV heads over 8 ranks: sharded
    assert kv_transfer_bytes(llama, 32768, BF16, 16) == 2 * whole  # each head sent to 2 ranks
    latent = 70_272 * 32768
    assert kv_transfer_bytes(deepseek, 32768, BF16, 8) == 8 * latent  # latent replicated
    assert kv_transfer_time_s(whole, 8, 50e9, 5e-6) == pytest.approx(5e-6 + whole / 8 / 50e9)
    assert kv_transfer_requests_per_s(whole, 8, 50e9) == pytest.approx(8 * 50e9 / whole)


def test_roofline_adds_communication_and_finds_where_it_dominates():
    data = run_json(
        "roofline", "llama-3.1-70b", "--gpu", "h100", "--tp", "8", "--ctx", "8k", "--batch", "1"
    )
    row = data["decode"][0]
    spec = load_model("llama-3.1-70b")
    expected = tp_comm_time_per_decode_step_s(spec, 1, 8, 450e9, 2e-6)
    assert row["comm_s"] == pytest.approx(expected)
    assert row["time_floor_s"] == pytest.approx(row["compute_or_memory_s"] + expected)
    assert data["tp_where_comm_dominates"] in (0, 16, 32, 64)
    single = run_json(
        "roofline", "llama-3.1-70b", "--gpu", "h100", "--ctx", "8k", "--batch", "1", "--tp", "1"
    )
    assert single["decode"][0]["comm_s"] == 0


def test_pipeline_notes_the_bubble():
    data = run_json("roofline", "llama-3.1-8b", "--gpu", "h100", "--pp", "4", "--batch", "8")
    assert data["decode"][0]["comm_s"] == pytest.approx(3 * p2p_time_s(8 * 4096 * 2, 450e9, 2e-6))
    assert any("(p-1)/(m+p-1)" in n for n in (x["text"] for x in data["notes"]))


def test_capacity_disaggregated_transfer():
    data = run_json("capacity", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ctx", "32k")
    t = data["kv_transfer"]
    moved = 8 * 70_272 * 32768
    assert t["bytes_per_request"] == moved
    assert t["time_s"] == pytest.approx(5e-6 + moved / 8 / 50e9)
    assert any("replication honestly" in n for n in (x["text"] for x in data["notes"]))
    over = run_json(
        "capacity", "llama-3.1-8b", "--gpu", "h100", "--ctx", "32k", "--network-gbps", "100"
    )
    assert over["kv_transfer"]["link"] == "100 Gb/s per GPU"
    assert over["kv_transfer"]["time_s"] == pytest.approx(5e-6 + 131_072 * 32768 / 12.5e9)


def test_minimax_m2_qk_norm_all_reduces_by_hand():
    """MiniMax-M2's q and k RMSNorms run over all heads: under TP every layer all-reduces the
    two fp32 sums of squares per token (SGLang and vLLM minimax_m2.py), a third call per layer
    beside the two of the layer's outputs; a per-head norm (Qwen3's) needs none."""
    spec = load_model("MiniMaxAI/MiniMax-M2.5")
    assert spec.num_layers == 62
    assert qk_norm_allreduces_per_forward(spec) == 62
    assert qk_norm_allreduce_bytes(16) == 16 * 2 * 4
    assert qk_norm_allreduces_per_forward(load_model("Qwen/Qwen3-235B-A22B-Instruct-2507")) == 0
    # 8 ranks at 450 GB/s one way, 2 us a hop: 125 of 3,072 bf16 activations, 62 of 2 fp32
    outputs = ring_allreduce_time_s(3072 * 2, 8, 450e9, 2e-6)
    norms = ring_allreduce_time_s(2 * 4, 8, 450e9, 2e-6)
    assert tp_comm_time_per_decode_step_s(spec, 1, 8, 450e9, 2e-6) == pytest.approx(
        125 * outputs + 62 * norms
    )
    assert tp_comm_time_per_decode_step_s(spec, 1, 1, 450e9, 2e-6) == 0.0


def test_step_model_charges_minimax_m2_qk_norm_all_reduces():
    """On the B200's SGLang tables at TP 8, one decode's step pays MiniMax-M2.5's 62 q/k-norm
    all-reduces of 8 bytes each, every one the engine's all-reduce as its table times the
    smallest message it measured at 8 GPUs (256 B: an 8-byte message costs no less); the layers'
    own collectives are unchanged."""
    m = sglang_table_step(load_model("MiniMaxAI/MiniMax-M2.5"), "b200", "fp8", 8)
    call = m.achieved.allreduce_call_s_at(8)
    assert call == m.achieved.allreduce_s(8, 8) == m.achieved.allreduce_s(256, 8)
    assert m.qk_norm_comm_s(1) == pytest.approx(62 * call)
    assert m.comm_s(1) == pytest.approx(m._layer_comm_s(1) + 62 * call)
    assert 0.3e-3 < m.qk_norm_comm_s(1) < 0.5e-3  # 62 calls of about 7 us
    qwen = sglang_table_step(load_model("Qwen/Qwen3-235B-A22B-Instruct-2507"), "b200", "bf16", 8)
    assert qwen.qk_norm_comm_s(1) == 0.0
