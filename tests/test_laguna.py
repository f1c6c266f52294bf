"""Laguna (model_type laguna, poolside): per-layer query heads, full and sliding layers, a
softplus output gate, MoE with a shared expert. Parameters as transformers 5.24's
LagunaForCausalLM counts them (models/laguna/modeling_laguna.py); the cache is plain K and V."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.architectures import build_model

from helpers import REPO

REAL = REPO / "tests" / "data" / "real_configs"
# transformers 5.24.0: LagunaForCausalLM(LagunaConfig(**file)) on the meta device
# (quantization_config and auto_map dropped)
COUNTS = {
    "poolside--Laguna-XS.2-FP8.json": 33_442_617_088,
    "poolside--Laguna-S-2.1-FP8.json": 117_561_977_600,
}


def _raw(file: str) -> dict:
    return json.loads((REAL / file).read_text())


@pytest.mark.parametrize("file", sorted(COUNTS))
def test_parameters_equal_transformers_count(file):
    assert build_model(_raw(file), file).params_total == COUNTS[file]


@pytest.mark.parametrize("file", sorted(COUNTS))
def test_cache_from_the_file_fields(file):
    """Every layer: num_key_value_heads x head_dim for K and for V; the sliding layers hold at
    most sliding_window tokens. The per-layer query heads change the weights only."""
    raw = _raw(file)
    spec = build_model(raw, file)
    assert [a.num_q_heads for a in spec.attention_layers()] == raw["num_attention_heads_per_layer"]
    per_token = 2 * raw["num_key_value_heads"] * raw["head_dim"] * 2
    s, w = 32_768, raw["sliding_window"]
    kinds = Counter(raw["layer_types"])
    expected = (kinds["full_attention"] * s + kinds["sliding_attention"] * w) * per_token
    assert kv_bytes_per_sequence(spec, s, KvFormat("bf16")) == expected


def test_fields_written_twice_must_agree():
    raw = _raw("poolside--Laguna-S-2.1-FP8.json")
    with pytest.raises(KvplanError, match="gating_types disagree"):
        build_model(dict(raw, gating_types=["per_element"] * 48), "x")
    with pytest.raises(KvplanError, match="mlp_only_layers disagree"):
        build_model(dict(raw, mlp_only_layers=[0, 1]), "x")
    with pytest.raises(KvplanError, match="fields kvplan does not read: swa_heads"):
        build_model(dict(raw, swa_heads=4), "x")


SHRUNK = dict(
    model_type="laguna",
    vocab_size=512,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    sliding_window=8,
    gating="per-element",
    layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    num_attention_heads_per_layer=[4, 6, 6, 4],
    torch_dtype="float32",
)


def test_shrunk_copy_recorded_count():
    """What the slow test below measured with transformers 5.24.0."""
    assert build_model(SHRUNK, "shrunk").params_total == 255_436


@pytest.mark.slow  # builds and runs transformers' model (seconds); skipped without it
def test_shrunk_copy_against_a_transformers_forward_pass():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "LagunaConfig"):
        pytest.skip("this transformers has no laguna")
    spec = build_model(SHRUNK, "shrunk")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.LagunaConfig(**SHRUNK)
    ).eval()
    assert spec.params_total == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        out = model(torch.randint(0, 512, (1, 37)), use_cache=True)
    for ours, theirs in zip(spec.layers, out.past_key_values.layers, strict=True):
        a = ours.attention
        assert (a.num_kv_heads, a.head_dim) == tuple(theirs.keys.shape[1::2])
        held = a.tokens_held(37)
        assert held == theirs.keys.shape[-2] + (1 if a.kind.windowed else 0)  # W against W - 1
