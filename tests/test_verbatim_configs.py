"""The 2026 families on their real config.json files (issue 29), not on configs written for the
tests: SmolLM3-3B, LFM2-1.2B and a published EXAONE-4.0-1.2B checkpoint, copied byte for byte
into tests/data/real_configs/ (SOURCES.md there says from where). Each test reads the file's
own fields, works the KV bytes per token out by hand, and asks `kvplan size` for the same."""

from __future__ import annotations

import json

import pytest

from helpers import REPO, run_json

REAL = REPO / "tests" / "data" / "real_configs"
BF16 = 2  # bytes; every one of these files says torch_dtype / dtype bfloat16
CTX = 32_768

SMOLLM3 = "HuggingFaceTB--SmolLM3-3B.json"
LFM2 = "LiquidAI--LFM2-1.2B.json"
EXAONE4 = "his0si--EXAONE-4.0-1.2B-W4A16.json"


def raw(name: str) -> dict:
    return json.loads((REAL / name).read_text())


def size(name: str, ctx: str = "32k") -> dict:
    return run_json("size", str(REAL / name), "--ctx", ctx)


@pytest.mark.parametrize("name", [SMOLLM3, LFM2, EXAONE4])
def test_the_files_are_the_real_ones_not_trimmed(name):
    """Spot checks that these are the released files: the dtype is named, and each carries
    keys only a saved checkpoint has (token ids, transformers_version)."""
    cfg = raw(name)
    assert "bfloat16" in (cfg.get("torch_dtype"), cfg.get("dtype"))
    assert {"transformers_version", "eos_token_id", "vocab_size"} <= set(cfg)


def test_smollm3_3b_nope_layers_still_hold_a_full_cache():
    cfg = raw(SMOLLM3)
    layers, q_heads, kv_heads = (
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
    )
    assert (layers, q_heads, kv_heads, cfg["hidden_size"]) == (36, 16, 4, 2048)
    assert "head_dim" not in cfg  # head_dim = hidden_size / heads = 2048 / 16 = 128
    head_dim = cfg["hidden_size"] // q_heads
    # every 4th layer skips RoPE (no_rope_layers 0), but it is still full attention with K/V
    assert cfg["no_rope_layers"].count(0) == 9
    assert cfg["layer_types"] == ["full_attention"] * 36
    assert cfg["use_sliding_window"] is False and cfg["sliding_window"] is None
    # 36 layers x 4 KV heads x 128 x 2 (K and V) x 2 B = 73,728 B/token
    expected = layers * kv_heads * head_dim * 2 * BF16
    assert expected == 73_728

    out = size(SMOLLM3)
    model = out["model"]
    assert model["model_type"] == "smollm3"
    assert model["kv_bytes_per_token"] == expected
    assert model["layer_groups"] == [{"cache": "full attention", "num_layers": 36}]
    assert not model.get("state_bytes_per_sequence")
    assert out["rows"][0]["kv_bytes_per_sequence"] == expected * CTX  # 2,415,919,104 B


def test_lfm2_1_2b_only_its_attention_layers_grow_with_the_context():
    """The released LFM2-1.2B file names its six attention layers in `full_attn_idxs` (no
    `layer_types`); the other ten are short convolutions whose state has a fixed size."""
    cfg = raw(LFM2)
    assert "layer_types" not in cfg
    attn = cfg["full_attn_idxs"]
    assert attn == [2, 5, 8, 10, 12, 14]
    layers, q_heads, kv_heads = (
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
    )
    assert (layers, q_heads, kv_heads, cfg["hidden_size"]) == (16, 32, 8, 2048)
    head_dim = cfg["hidden_size"] // q_heads  # 2048 / 32 = 64
    conv_layers = layers - len(attn)  # 10
    # 6 attention layers x 8 KV heads x 64 x 2 (K and V) x 2 B = 12,288 B/token
    per_token = len(attn) * kv_heads * head_dim * 2 * BF16
    assert per_token == 12_288
    # conv state per layer: conv_dim channels x (conv_L_cache - 1) past inputs, as vLLM and
    # SGLang hold it: 10 layers x 2048 x (3 - 1) x 2 B = 81,920 B per sequence, any context
    state = conv_layers * cfg["conv_dim"] * (cfg["conv_L_cache"] - 1) * BF16
    assert state == 81_920

    out = size(LFM2)
    model = out["model"]
    assert model["model_type"] == "lfm2"
    assert model["kv_bytes_per_token"] == per_token
    assert model["state_bytes_per_sequence"] == state
    assert model["layer_groups"] == [
        {"cache": "convolution state", "num_layers": 10},
        {"cache": "full attention", "num_layers": 6},
    ]
    # 12,288 x 32,768 + 81,920 = 402,735,104 B for one 32k sequence
    assert out["rows"][0]["kv_bytes_per_sequence"] == per_token * CTX + state == 402_735_104
    # four times the context: only the attention part grows
    longer = size(LFM2, "128k")["rows"][0]["kv_bytes_per_sequence"]
    assert longer == per_token * 4 * CTX + state


def test_exaone4_1_2b_all_global_with_a_null_window_pattern():
    """EXAONE-4.0-1.2B, unlike the 32B, has no sliding layers: `layer_types` lists 30
    full_attention layers and `sliding_window` / `sliding_window_pattern` are null. The file is
    a public W4A16 checkpoint of it (its compressed-tensors `quantization_config` added by
    the quantizer); the cache fields are the original's."""
    cfg = raw(EXAONE4)
    assert cfg["sliding_window"] is None and cfg["sliding_window_pattern"] is None
    assert cfg["layer_types"] == ["full_attention"] * 30
    layers, kv_heads, head_dim = (
        cfg["num_hidden_layers"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
    )
    assert (layers, cfg["num_attention_heads"], kv_heads, head_dim) == (30, 32, 8, 64)
    # quantization_config has kv_cache_scheme null: the cache stays in bf16
    assert cfg["quantization_config"]["kv_cache_scheme"] is None
    # 30 layers x 8 KV heads x 64 x 2 (K and V) x 2 B = 61,440 B/token
    expected = layers * kv_heads * head_dim * 2 * BF16
    assert expected == 61_440

    out = size(EXAONE4)
    model = out["model"]
    assert model["model_type"] == "exaone4"
    assert model["kv_bytes_per_token"] == expected
    assert model["layer_groups"] == [{"cache": "full attention", "num_layers": 30}]
    assert out["rows"][0]["kv_bytes_per_sequence"] == expected * CTX  # 2,013,265,920 B
