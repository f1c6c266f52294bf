"""Tensor parallelism: bytes per GPU, replication, and the divisibility checks."""

from __future__ import annotations

import pytest

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence, state_bytes_per_sequence
from kvplan.inputs.sources import load_model
from kvplan.plans.size import SizeRequest, size
from kvplan.present.notes import note_texts

from helpers import llama_like, mamba2_config, spec_from

BF16 = KvFormat("bf16")


def test_kv_heads_split_across_ranks():
    spec = load_model("llama-3.1-70b")
    assert kv_bytes_per_sequence(spec, 1000, BF16, tp=4) * 4 == kv_bytes_per_sequence(
        spec, 1000, BF16
    )


def test_fewer_kv_heads_than_ranks_replicates_with_a_note():
    spec = load_model("llama-3.1-70b")  # 8 KV heads
    per_gpu_16 = kv_bytes_per_sequence(spec, 1000, BF16, tp=16)
    assert per_gpu_16 == kv_bytes_per_sequence(spec, 1000, BF16, tp=8)  # one head per rank
    notes = note_texts(size(spec, SizeRequest(tp=16)).notes)
    assert any("replicated 2x" in n for n in notes)


def test_mla_latent_is_replicated_on_every_rank():
    spec = load_model("deepseek-v3")
    assert kv_bytes_per_sequence(spec, 1000, BF16, tp=8) == kv_bytes_per_sequence(spec, 1000, BF16)
    assert any("replicated on all 8" in n for n in note_texts(size(spec, SizeRequest(tp=8)).notes))


def test_mamba_state_split_by_heads():
    spec = load_model("nemotron-h-56b")
    # 8 groups divide TP 8; heads and intermediate split evenly
    assert state_bytes_per_sequence(spec, tp=8) * 8 == state_bytes_per_sequence(spec)


def test_mamba2_single_group_is_replicated_like_vllm():
    config = mamba2_config(num_hidden_layers=1, torch_dtype="bfloat16")
    spec = spec_from(config)
    # TP 2: groups padded 1 -> 2, so each rank keeps one group: conv 3 x (256 + 2*1*16)
    conv = 3 * (512 // 2 + 2 * 1 * 16)
    ssm = 4 * 64 * 16
    assert state_bytes_per_sequence(spec, tp=2) == (conv + ssm) * 2


@pytest.mark.parametrize("tp,message", [(3, "query heads"), (0, "between 1"), (2048, "between 1")])
def test_bad_tp_is_refused(tp, message):
    with pytest.raises(KvplanError, match=message):
        load_model("llama-3.1-8b").check_tp(tp)


def test_tp_that_neither_divides_nor_multiplies_kv_heads():
    spec = spec_from(llama_like(num_attention_heads=24, num_key_value_heads=6, hidden_size=1536))
    with pytest.raises(KvplanError, match="KV heads"):
        spec.check_tp(4)
