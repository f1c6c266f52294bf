"""The 2026 families on their real config.json files (issue 29), not on configs written for the
tests: SmolLM3-3B, LFM2-1.2B, EXAONE-4.0-32B, a published EXAONE-4.0-1.2B checkpoint and
OLMo-3.1-32B-Instruct, LFM2.5-VL-1.6B, copied byte for byte
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
EXAONE4_32B = "LGAI-EXAONE--EXAONE-4.0-32B.json"
OLMO3 = "allenai--Olmo-3.1-32B-Instruct.json"
LFM25_VL = "LiquidAI--LFM2.5-VL-1.6B.json"


def raw(name: str) -> dict:
    return json.loads((REAL / name).read_text())


def size(name: str, ctx: str = "32k") -> dict:
    return run_json("size", str(REAL / name), "--ctx", ctx)


@pytest.mark.parametrize("name", [SMOLLM3, LFM2, EXAONE4, EXAONE4_32B, OLMO3, LFM25_VL])
def test_the_files_are_the_real_ones_not_trimmed(name):
    """Spot checks that these are the released files: the dtype is named, and each carries
    keys only a saved checkpoint has (token ids, transformers_version)."""
    cfg = raw(name)
    assert "bfloat16" in (cfg.get("torch_dtype"), cfg.get("dtype"))
    text = cfg.get("text_config", cfg)
    assert "transformers_version" in cfg and {"eos_token_id", "vocab_size"} <= set(text)


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


def _sliding_hybrid(name: str, model_type: str) -> None:
    """Three sliding layers of `sliding_window` tokens to one full layer, written out in
    `layer_types` (EXAONE-4.0-32B also says `sliding_window_pattern` "LLLG")."""
    cfg = raw(name)
    layers, kv_heads, window = (
        cfg["num_hidden_layers"],
        cfg["num_key_value_heads"],
        cfg["sliding_window"],
    )
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert (layers, cfg["num_attention_heads"], kv_heads, head_dim, window) == (
        64,
        40,
        8,
        128,
        4096,
    )
    sliding = cfg["layer_types"].count("sliding_attention")
    full = cfg["layer_types"].count("full_attention")
    assert (sliding, full) == (48, 16)
    assert cfg["layer_types"][3::4] == ["full_attention"] * 16
    per_layer = kv_heads * head_dim * 2 * BF16  # 8 x 128 x 2 (K and V) x 2 B = 4,096 B
    # every layer holding every token: 64 x 4,096 = 262,144 B/token
    per_token = layers * per_layer
    assert per_token == 262_144
    # at 32k the 48 sliding layers hold 4,096 tokens, the 16 full ones all 32,768:
    # 48 x 4,096 x 4,096 + 16 x 32,768 x 4,096 = 805,306,368 + 2,147,483,648 = 2,952,790,016 B
    per_sequence = sliding * min(CTX, window) * per_layer + full * CTX * per_layer
    assert per_sequence == 2_952_790_016

    out = size(name)
    model = out["model"]
    assert model["model_type"] == model_type
    assert model["kv_bytes_per_token"] == per_token
    assert model["layer_groups"] == [
        {"cache": "sliding window 4,096", "num_layers": 48},
        {"cache": "full attention", "num_layers": 16},
    ]
    assert not model.get("state_bytes_per_sequence")
    assert out["rows"][0]["kv_bytes_per_sequence"] == per_sequence
    # below the window every layer holds every token: 4k x 262,144 B
    short = size(name, "4k")["rows"][0]["kv_bytes_per_sequence"]
    assert short == 4096 * per_token


def test_exaone4_32b_lettered_pattern_and_layer_types_agree():
    assert raw(EXAONE4_32B)["sliding_window_pattern"] == "LLLG"
    _sliding_hybrid(EXAONE4_32B, "exaone4")


def test_olmo3_32b_three_sliding_layers_to_one_full():
    cfg = raw(OLMO3)
    assert "sliding_window_pattern" not in cfg and "head_dim" not in cfg  # 5120 / 40 = 128
    _sliding_hybrid(OLMO3, "olmo3")


def test_lfm2_5_vl_text_model_in_the_transformers_5_layer_types_form():
    """LFM2.5-VL-1.6B, saved by transformers 5.0.0.dev0: the LFM2-1.2B language model inside an
    lfm2_vl wrapper, its layers given as `layer_types` ("conv" / "full_attention") instead of
    `full_attn_idxs`, `rope_parameters` instead of `rope_theta`. The same cache as LFM2-1.2B."""
    cfg = raw(LFM25_VL)
    assert cfg["model_type"] == "lfm2_vl"
    text = cfg["text_config"]
    assert "full_attn_idxs" not in text
    types = text["layer_types"]
    attn = [i for i, kind in enumerate(types) if kind == "full_attention"]
    assert attn == [2, 5, 8, 10, 12, 14] and types.count("conv") == 10
    head_dim = text["hidden_size"] // text["num_attention_heads"]  # 2048 / 32 = 64
    # 6 attention layers x 8 KV heads x 64 x 2 (K and V) x 2 B = 12,288 B/token
    per_token = len(attn) * text["num_key_value_heads"] * head_dim * 2 * BF16
    assert per_token == 12_288
    # 10 conv layers x 2048 x (3 - 1) x 2 B = 81,920 B per sequence
    state = types.count("conv") * text["conv_dim"] * (text["conv_L_cache"] - 1) * BF16
    assert state == 81_920

    out = size(LFM25_VL)
    model = out["model"]
    assert model["kv_bytes_per_token"] == per_token
    assert model["state_bytes_per_sequence"] == state
    assert out["rows"][0]["kv_bytes_per_sequence"] == per_token * CTX + state
    # the language model only (vision tower and projector not counted), as LFM2-1.2B
    assert model["params_total"] == size(LFM2)["model"]["params_total"] == 1_170_340_608
