"""The real 2026 configs bundled in model_configs/ (issue 29) are the files tests/data/real_configs/
holds and SOURCES.md traces, byte for byte, under the aliases and Hub ids people type."""

from __future__ import annotations

import json

import pytest

from kvplan.dtypes import KvFormat
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.architectures import build_model
from kvplan.inputs.sources import bundled_models, load_model

from helpers import REPO

REAL = REPO / "tests" / "data" / "real_configs"
BUNDLED = {
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash.json",
    "deepseek-v4-pro": "deepseek-ai--DeepSeek-V4-Pro.json",
    "kimi-k3": "moonshotai--Kimi-K3.json",
    "minimax-m3": "MiniMaxAI--MiniMax-M3.json",
    "glm-5.1": "zai-org--GLM-5.1.json",
    "glm-5.2-fp8": "isim--glm-5.2-fp8.json",
    "glm-5.3": "zai-org--GLM-5.3.json",
    "qwen3.5-122b-a10b": "Qwen--Qwen3.5-122B-A10B.json",
    "qwen3.5-397b-a17b": "Qwen--Qwen3.5-397B-A17B.json",
    "qwen3.6-35b-a3b": "Qwen--Qwen3.6-35B-A3B.json",
    "qwen3.6-27b-nvfp4": "nvidia--Qwen3.6-27B-NVFP4.json",
    "qwen3.8-2.4t-a95b": "Qwen--Qwen3.8-2.4T-A95B.json",
    "qwen3-vl-32b": "Qwen--Qwen3-VL-32B-Instruct.json",
    "gemma-4-31b": "transformers5-roundtrip--Gemma-4-31B-IT.json",
    "gemma-4-31b-nvfp4": "nvidia--Gemma-4-31B-IT-NVFP4.json",
    "step-3.7-flash": "stepfun-ai--Step-3.7-Flash.json",
    "llama-3.3-nemotron-super-49b": "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json",
    "nemotron-3-super-120b": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json",
    "laguna-xs.2-fp8": "poolside--Laguna-XS.2-FP8.json",
    "laguna-s-2.1-fp8": "poolside--Laguna-S-2.1-FP8.json",
    "exaone-4.0-32b": "LGAI-EXAONE--EXAONE-4.0-32B.json",
    "olmo-3.1-32b": "allenai--Olmo-3.1-32B-Instruct.json",
    "smollm3-3b": "HuggingFaceTB--SmolLM3-3B.json",
    "lfm2-1.2b": "LiquidAI--LFM2-1.2B.json",
    "lfm2.5-vl-1.6b": "LiquidAI--LFM2.5-VL-1.6B.json",
    "mimo-7b": "XiaomiMiMo--MiMo-7B-Base.json",
}


@pytest.mark.parametrize("alias", sorted(BUNDLED))
def test_bundled_copy_is_the_traced_file(alias):
    bundled = REPO / "model_configs" / bundled_models()[alias].file
    assert bundled.read_bytes() == (REAL / BUNDLED[alias]).read_bytes()
    assert bundled.name in (REPO / "model_configs" / "PROVENANCE.md").read_text()


@pytest.mark.parametrize(
    "name, alias",
    [
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-flash"),
        ("moonshotai/Kimi-K3", "kimi-k3"),
        ("MiniMaxAI/MiniMax-M3", "minimax-m3"),
        ("google/gemma-4-31B-it", "gemma-4-31b"),
        ("Qwen/Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"),
        ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "llama-3.3-nemotron-super-49b"),
        ("HuggingFaceTB/SmolLM3-3B", "smollm3-3b"),
    ],
)
def test_hub_ids_resolve_offline_to_the_bundled_file(name, alias):
    by_id, by_alias = load_model(name), load_model(alias)
    assert by_id.params_total == by_alias.params_total
    assert by_id.layers == by_alias.layers


def test_the_kimi_k3_alias_answers_what_the_file_answers():
    """Refused before issue 29's last step; now the count the test of vLLM's K3 code holds."""
    assert load_model("kimi-k3").params_total == 2_779_484_393_568


@pytest.mark.parametrize(
    "file, layers, kv_heads, head_dim",
    [
        # head_dim 128 is stated: hidden 5,120 / 64 heads would say 80
        ("Qwen--Qwen3-VL-32B-Instruct.json", 64, 8, 128),
        ("Qwen--Qwen3-VL-8B-Instruct.json", 36, 8, 128),
        ("transformers5-roundtrip--Qwen3-VL-30B-A3B-Instruct.json", 48, 4, 128),
        # sliding_window 32,768 with use_sliding_window false: every layer holds every token
        ("XiaomiMiMo--MiMo-7B-Base.json", 36, 8, 128),
    ],
)
def test_cache_of_real_configs_transformers_cannot_run_shrunk(file, layers, kv_heads, head_dim):
    """The real configs whose shrunk copy transformers 5.24 does not run (Qwen3-VL's text config
    has no causal-LM class; MiMo is remote code): K and V of every layer from the file's fields,
    in its bf16, held for the whole context."""

    spec = build_model(json.loads((REAL / file).read_text()), file)
    per_token = layers * 2 * kv_heads * head_dim * 2
    assert kv_bytes_per_sequence(spec, 131_072, KvFormat("bf16")) == 131_072 * per_token


def test_full_attention_interval_beside_layer_types_is_read_when_it_agrees():
    """Qwen3.5/3.6/3.8 write full_attention_interval 4 beside the layer_types derived from it:
    read, no structure note. An interval that disagrees changes nothing transformers or vLLM
    build (they follow layer_types) and stays named in the note."""
    raw = json.loads((REAL / "Qwen--Qwen3.8-2.4T-A95B.json").read_text())
    assert raw["full_attention_interval"] == 4
    spec = build_model(raw, "q")
    assert "structure-unread" not in {n.id for n in spec.notes}
    other = build_model(dict(raw, full_attention_interval=3), "q")
    assert other.layers == spec.layers
    unread = [n for n in other.notes if n.id == "structure-unread"]
    assert unread and "full_attention_interval" in str(unread[0].values)


def test_nemotron_3_super_mtp_pattern_is_the_unbuilt_mtp_layer():
    """mtp_hybrid_override_pattern ("*E": the MTP layer's attention and MoE, in the legacy
    letters) describes the multi-token-prediction layer outside num_hidden_layers, which kvplan
    does not build, as mtp_layers_block_type does for Nemotron-3-Ultra: no structure note."""
    spec = load_model("nemotron-3-super-120b")
    assert "structure-unread" not in {n.id for n in spec.notes}
    assert spec.params_total == 120_668_687_360  # transformers 5.24, the real/ oracle entry
