"""Parameter counts against the published numbers (model_configs/PROVENANCE.md) and by hand."""

from __future__ import annotations

import pytest

from kvplan.inputs.sources import load_model
from kvplan.present.notes import note_texts

PUBLISHED = {
    # name: (total, active)
    "llama-3.1-8b": (8_030_261_248, 8_030_261_248),
    "llama-3.1-70b": (70_553_706_496, 70_553_706_496),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "deepseek-v3": (671_026_404_352, 37_552_282_624),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_counts_exact(name):
    spec = load_model(name)
    assert (spec.params_total, spec.params_active) == PUBLISHED[name]


def test_llama31_8b_by_hand():
    # 2*V*h + L*(2h^2 + 2*h*1024 + 3*h*I + 2h) + h  (architectures.md §5.1)
    h, layers, vocab, inter = 4096, 32, 128256, 14336
    expected = 2 * vocab * h + layers * (2 * h * h + 2 * h * 1024 + 3 * h * inter + 2 * h) + h
    assert load_model("llama-3.1-8b").params_total == expected


def test_deepseek_active_is_total_minus_idle_routed_experts():
    spec = load_model("deepseek-v3")
    idle = (256 - 8) * 3 * 7168 * 2048 * 58  # 58 MoE layers after 3 dense ones
    assert spec.params_total - spec.params_active == idle


@pytest.mark.parametrize(
    "name,billions",
    [
        ("llama-3.1-405b", 405.85),
        ("llama-2-7b", 6.74),
        ("llama-2-70b", 68.98),
        ("mistral-7b-v0.1", 7.24),
        ("qwen2.5-7b", 7.62),
        ("qwen3-8b", 8.19),
        ("qwen3-30b-a3b", 30.53),
        ("qwen3-235b-a22b", 235.09),
        ("gemma-2-9b", 9.24),
        ("gpt-oss-120b", 116.83),
        ("gpt-oss-20b", 20.91),
        ("phi-3-mini-4k", 3.82),
        ("falcon-7b", 6.92),
        ("deepseek-v2-lite", 15.71),
    ],
)
def test_counts_match_model_cards_to_two_decimals(name, billions):
    assert round(load_model(name).params_total / 1e9, 2) == billions


def test_gpt_oss_active_matches_openai_when_the_embedding_table_is_excluded():
    # OpenAI's 5.13B / 3.61B "active" exclude the input embedding; kvplan's convention includes it
    for name, active in (("gpt-oss-120b", 5.13), ("gpt-oss-20b", 3.61)):
        spec = load_model(name)
        assert round((spec.params_active - spec.param_parts["embedding"]) / 1e9, 2) == active


def test_tied_embeddings_counted_once():
    tied = load_model("qwen2.5-3b")
    assert "lm_head" not in tied.param_parts
    untied = load_model("qwen2.5-7b")
    assert untied.param_parts["lm_head"] == untied.param_parts["embedding"]


def test_falcon_legacy_and_native_configs_agree():
    legacy, native = load_model("falcon-40b-legacy"), load_model("falcon-40b")
    assert legacy.params_total == native.params_total
    assert legacy.layers == native.layers


def test_mtp_and_vision_exclusions_are_noted():
    assert any("multi-token-prediction" in n for n in note_texts(load_model("deepseek-v3").notes))
    assert any("Vision tower" in n for n in note_texts(load_model("gemma-3-27b").notes))
