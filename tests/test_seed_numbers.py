"""The seeds' worked numbers, reproduced by kvplan (seeds 000, 001 and 002)."""

from __future__ import annotations

import pytest

from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence, kv_bytes_per_token
from kvplan.formulas.roofline import batch_equal_memory as batch_equal
from kvplan.inputs.sources import load_model

from helpers import run_json

BF16, FP8 = KvFormat("bf16"), KvFormat("fp8")


def test_llama31_70b_bytes_per_token_is_327680():
    # 2 * L * Hkv * d * p = 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(load_model("llama-3.1-70b"), BF16) == 2 * 80 * 8 * 128 * 2 == 327_680


def test_llama31_70b_128k_sequence_and_four_of_them():
    spec = load_model("llama-3.1-70b")
    one = kv_bytes_per_sequence(spec, 131072, BF16)
    assert one == 327_680 * 131_072
    assert round(one / 1e9, 2) == 42.95
    assert round(4 * one / 1e9, 1) == 171.8


def test_llama31_8b_16_by_8k_bf16_and_fp8():
    spec = load_model("llama-3.1-8b")
    assert round(16 * kv_bytes_per_sequence(spec, 8192, BF16) / 1e9, 1) == 17.2
    assert round(16 * kv_bytes_per_sequence(spec, 8192, FP8) / 1e9, 1) == 8.6
    # seed 002: 128 KiB per token, exactly 1 GiB per 8k conversation
    assert kv_bytes_per_sequence(spec, 8192, BF16) == 2**30


def test_deepseek_v3_mla_is_70272_bytes_per_token():
    # 61 layers * (512 + 64) latent values * 2 bytes, no factor 2 for K and V
    assert kv_bytes_per_token(load_model("deepseek-v3"), BF16) == 61 * 576 * 2 == 70_272


def test_llama2_70b_is_gqa_not_the_seed_multi_head_figure():
    """Seed 001 sizes Llama-2-70B as multi-head (64 KV heads); the real config has 8."""
    spec = load_model("llama-2-70b")
    assert kv_bytes_per_sequence(spec, 4096, KvFormat("fp16")) == 1_342_177_280
    # The seed's 10,737,418,240 B appears only as the multi-head equivalent it saves against.
    assert spec.mha_equivalent_bytes_per_token(KvFormat("fp16")) * 4096 == 10_737_418_240


def test_batch_equal_llama31_70b_8k_is_52_6():
    spec = load_model("llama-3.1-70b")
    weights = spec.params_total * 2
    assert round(batch_equal(weights, kv_bytes_per_sequence(spec, 8192, BF16)), 1) == 52.6
    assert round(batch_equal(weights, kv_bytes_per_sequence(spec, 131072, BF16)), 1) == 3.3


def test_seed_numbers_through_the_cli_json():
    data = run_json("size", "llama-3.1-70b", "--ctx", "128k", "--batch", "1,4")
    rows = {r["batch_size"]: r for r in data["rows"]}
    assert rows[1]["kv_bytes_per_sequence"] == 42_949_672_960
    assert rows[4]["kv_bytes_total"] == 4 * 42_949_672_960
    assert rows[1]["batch_equal_memory"] == pytest.approx(141_107_412_992 / 42_949_672_960)
