"""Per-architecture cache rules, on the bundled configs and on configs built for the purpose."""

from __future__ import annotations

from collections import Counter

import pytest

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence, kv_bytes_per_token, state_bytes_per_sequence
from kvplan.inputs.sources import bundled_models, load_model
from kvplan.present.notes import note_texts

from helpers import llama_like, mamba2_config, spec_from

BF16 = KvFormat("bf16")

# name: (layers holding KV, KV heads, head_dim) for plain stacks, derived from each config by hand
PLAIN = {
    "llama-2-7b": (32, 32, 128),
    "llama-3.1-405b": (126, 8, 128),
    "mistral-nemo": (40, 8, 128),  # explicit head_dim 128, not 5120/32 = 160
    "qwen2.5-3b": (36, 2, 128),
    "qwen2.5-72b": (80, 8, 128),
    "qwen3-4b": (36, 8, 128),
    "qwen3-30b-a3b": (48, 4, 128),  # explicit head_dim 128, not 2048/32 = 64
    "qwen3-235b-a22b": (94, 4, 128),
    "command-r": (40, 64, 128),  # v01 is MHA
    "falcon-7b": (32, 1, 64),  # multi_query
    "falcon-40b": (60, 8, 64),
    "mixtral-8x7b": (32, 8, 128),
}


@pytest.mark.parametrize("name", sorted(bundled_models()))
def test_every_bundled_config_parses(name):
    spec = load_model(name)
    assert spec.params_total > 0
    assert spec.num_layers > 0
    assert kv_bytes_per_sequence(spec, 4096, BF16) > 0


@pytest.mark.parametrize("name", PLAIN)
def test_plain_stacks_bytes_per_token(name):
    layers, kv_heads, head_dim = PLAIN[name]
    assert kv_bytes_per_token(load_model(name), BF16) == 2 * layers * kv_heads * head_dim * 2


def kinds(spec):
    return Counter(
        (layer.attention.kind, layer.attention.window) if layer.attention else "state"
        for layer in spec.layers
        if layer.attention or layer.state
    )


def test_qwen25_window_is_ignored_without_use_sliding_window():
    assert kinds(load_model("qwen2.5-7b")) == {("full", None): 28}


def test_mistral_v01_and_phi3_are_all_sliding():
    assert kinds(load_model("mistral-7b-v0.1")) == {("sliding", 4096): 32}
    assert kinds(load_model("phi-3-mini-4k")) == {("sliding", 2047): 32}


def test_gemma2_even_layers_slide():
    spec = load_model("gemma-2-9b")
    assert [layer.attention.kind for layer in spec.layers[:4]] == [
        "sliding",
        "full",
        "sliding",
        "full",
    ]
    assert kv_bytes_per_token(spec, BF16) == 2 * 42 * 8 * 256 * 2  # head_dim 256, not 224


def test_gemma3_27b_class_defaults_fill_the_gaps():
    spec = load_model("gemma-3-27b")
    assert kinds(spec) == {("sliding", 1024): 52, ("full", None): 10}
    assert spec.vocab_size == 262208  # absent from text_config: class default
    assert spec.tied_embeddings  # top-level Gemma3Config default
    # at 8k: 10 full layers hold 8192 tokens, 52 sliding layers hold 1024
    per_layer_token = 2 * 16 * 128 * 2
    assert kv_bytes_per_sequence(spec, 8192, BF16) == per_layer_token * (10 * 8192 + 52 * 1024)


def test_gpt_oss_alternates_window_128():
    spec = load_model("gpt-oss-120b")
    assert kinds(spec) == {("sliding", 128): 18, ("full", None): 18}
    assert kv_bytes_per_token(spec, BF16) == 2 * 36 * 8 * 64 * 2  # head_dim 64, not 2880/64


def test_llama4_every_fourth_layer_is_global():
    spec = load_model("llama-4-scout")
    assert kinds(spec) == {("chunked", 8192): 36, ("full", None): 12}
    assert [layer.attention.kind for layer in spec.layers[:4]] == ["chunked"] * 3 + ["full"]
    # storage the architecture needs at 128k: 12 global layers in full, 36 chunked capped at 8192
    per_layer_token = 2 * 8 * 128 * 2
    expected = per_layer_token * (12 * 131072 + 36 * 8192)
    assert kv_bytes_per_sequence(spec, 131072, BF16) == expected
    assert any("hybrid KV-cache manager" in n for n in note_texts(spec.notes))


def test_nemotron_h_pattern_state_and_kv():
    spec = load_model("nemotron-h-56b")
    assert kinds(spec) == {"state": 54, ("full", None): 10}
    assert kv_bytes_per_token(spec, BF16) == 10 * 2 * 8 * 128 * 2 == 40_960
    # per Mamba-2 layer: conv 3 x (16384 + 2*8*256) + ssm 256*64*256, 2 bytes each
    assert state_bytes_per_sequence(spec) == 54 * (3 * 20480 + 4_194_304) * 2 == 459_620_352


def test_qwen3_next_gated_deltanet_state():
    spec = load_model("qwen3-next-80b-a3b")
    assert kinds(spec) == {"state": 36, ("full", None): 12}
    assert kv_bytes_per_token(spec, BF16) == 12 * 2 * 2 * 256 * 2 == 24_576
    assert state_bytes_per_sequence(spec) == 36 * (3 * 8192 + 524_288) * 2 == 39_518_208


def test_falcon_40b_notes_transformers_caches_all_query_heads():
    spec = load_model("falcon-40b")
    assert any("16x" in n for n in note_texts(spec.notes))


def test_command_r_max_length_from_model_max_length():
    assert load_model("command-r").max_position_embeddings == 131072


# ---- configs built for the purpose ---------------------------------------------------------


def test_text_config_nesting_takes_tie_and_dtype_from_the_top():
    nested = {
        "model_type": "llava",
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
        "text_config": llama_like(torch_dtype=None),
    }
    spec = spec_from(nested)
    assert spec.tied_embeddings and spec.dtype == "fp16"
    assert "lm_head" not in spec.param_parts


def test_two_text_configs_is_an_error():
    with pytest.raises(KvplanError, match="several text configs"):
        spec_from({"text_config": llama_like(), "decoder": llama_like()})


def test_class_default_kv_heads_qwen2_is_32_not_heads():
    config = llama_like(model_type="qwen2", num_attention_heads=64, hidden_size=4096)
    del config["num_key_value_heads"]
    assert spec_from(config).layers[0].attention.num_kv_heads == 32


def test_class_default_kv_heads_llama_is_the_head_count():
    config = llama_like()
    del config["num_key_value_heads"]
    assert spec_from(config).layers[0].attention.num_kv_heads == 16


def test_mistral_without_sliding_window_key_gets_4096_and_null_disables_it():
    absent = llama_like(model_type="mistral")
    assert spec_from(absent).layers[0].attention.window == 4096
    disabled = llama_like(model_type="mistral", sliding_window=None)
    assert spec_from(disabled).layers[0].attention.kind == "full"
    zero = llama_like(model_type="mistral", sliding_window=0)
    assert spec_from(zero).layers[0].attention.kind == "full"


def test_null_head_dim_means_derived():
    spec = spec_from(llama_like(head_dim=None))
    assert spec.layers[0].attention.head_dim == 1024 // 16


def test_mixed_layer_types_with_legacy_names():
    config = llama_like(
        sliding_window=512,
        layer_types=["sliding_attention", "attention", "sliding_attention", "full_attention"],
    )
    spec = spec_from(config)
    assert [layer.attention.kind for layer in spec.layers] == [
        "sliding",
        "full",
        "sliding",
        "full",
    ]


def test_unknown_layer_type_is_refused():
    with pytest.raises(KvplanError, match="layer_types value 'weird'"):
        spec_from(llama_like(layer_types=["weird"] * 4))


def test_qwen2_partial_sliding_from_max_window_layers():
    config = llama_like(
        model_type="qwen2", use_sliding_window=True, sliding_window=256, max_window_layers=2
    )
    assert [layer.attention.kind for layer in spec_from(config).layers] == [
        "full",
        "full",
        "sliding",
        "sliding",
    ]


def test_unknown_model_type_is_sized_from_structure_and_says_which_fields_decided():
    spec = spec_from(llama_like(model_type="brand_new"))
    words = " ".join(note_texts(spec.notes))
    assert "'brand_new' is not one kvplan knows: sized from its structure" in words
    assert "num_key_value_heads" in words
    assert kv_bytes_per_token(spec, BF16) == 2 * 4 * 4 * 64 * 2


def test_unknown_model_type_with_an_mla_latent_is_mla():
    config = {
        "model_type": "future_mla",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "kv_lora_rank": 256,
        "q_lora_rank": 512,
        "qk_rope_head_dim": 32,
        "qk_nope_head_dim": 64,
        "v_head_dim": 64,
        "intermediate_size": 2048,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from(config)
    assert {layer.attention.kind for layer in spec.layers} == {"mla"}
    assert kv_bytes_per_token(spec, BF16) == 4 * (256 + 32) * 2  # one latent, no factor 2
    assert "MLA from kv_lora_rank" in " ".join(note_texts(spec.notes))


def test_unknown_model_type_with_an_indexer_and_experts():
    config = {
        "model_type": "future_dsa",
        "hidden_size": 512,
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "kv_lora_rank": 128,
        "q_lora_rank": 256,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "index_head_dim": 64,
        "index_n_heads": 4,
        "intermediate_size": 1024,
        "moe_intermediate_size": 128,
        "n_routed_experts": 16,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from(config)
    assert kv_bytes_per_token(spec, BF16) == 3 * (128 + 16 + 64) * 2  # latent + indexer key
    assert spec.moe.num_layers == 2 and spec.moe.num_experts == 16
    assert spec.intermediate_size == 1024 and spec.moe.expert_intermediate_size == 128


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_routed_experts_total", 64),
        ("lightning_window_size", 512),
        ("mamba_state_dim", 16),
        ("custom_layer_types", ["full", "linear"]),
    ],
)
def test_unknown_model_type_declaring_unread_structure_is_refused(field, value):
    with pytest.raises(KvplanError, match=field):
        spec_from(llama_like(model_type="brand_new", **{field: value}))


def test_known_family_with_an_unread_structural_field_says_so():
    spec = spec_from(llama_like(moe_latent_size_v2=1024))
    assert "moe_latent_size_v2 (experts)" in " ".join(note_texts(spec.notes))


@pytest.mark.parametrize("key", ["llm_config", "language_config", "text_config"])
def test_multimodal_wrappers_are_unwrapped_whatever_their_key(key):
    wrapped = {"model_type": "some_vlm", key: llama_like(), "vision_config": {"hidden_size": 64}}
    assert kv_bytes_per_token(spec_from(wrapped), BF16) == kv_bytes_per_token(
        spec_from(llama_like()), BF16
    )


def test_nemotron_h_layers_block_type_without_num_hidden_layers():
    spec = load_model("nemotron-3-ultra-550b")  # transformers-5 style: layers_block_type only
    assert spec.num_layers == 108
    assert len(spec.attention_layers()) == 12 and len(spec.state_layers()) == 48


def test_two_matrix_mlps_with_biases():
    # phi-2 and starcoder2 have up/down MLPs with biases, not a gated 3-matrix MLP
    assert load_model("phi-2").params_total == 2_779_683_840
    assert load_model("starcoder2-7b").params_total == 7_173_923_840


def test_jamba_periods():
    config = {
        "model_type": "jamba",
        "hidden_size": 512,
        "num_hidden_layers": 16,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from(config)
    attention_at = [i for i, layer in enumerate(spec.layers) if layer.attention]
    assert attention_at == [4, 12]
    # Mamba-1: conv 3 x 1024 + ssm 1024 x 16, 2 bytes, on 14 layers
    assert state_bytes_per_sequence(spec) == 14 * (3 * 1024 + 1024 * 16) * 2
    assert spec.moe.num_layers == 8


def test_mamba2_is_attention_free():
    config = mamba2_config()
    spec = spec_from(config)
    assert spec.attention_layers() == []
    assert kv_bytes_per_sequence(spec, 10, BF16) == kv_bytes_per_sequence(spec, 10_000, BF16)
    assert state_bytes_per_sequence(spec) == 4 * (3 * (512 + 2 * 16) + 8 * 64 * 16) * 4


def test_gpt2_legacy_names():
    config = {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
    }
    spec = spec_from(config)
    assert spec.params_total == 124_439_808  # GPT-2 small
    assert kv_bytes_per_token(spec, KvFormat("fp32")) == 2 * 12 * 12 * 64 * 4


def test_deepseek_v2_lite_q_lora_null_means_single_q_proj():
    spec = load_model("deepseek-v2-lite")
    assert kv_bytes_per_token(spec, BF16) == 27 * 576 * 2


def test_infinity_in_json_parses():
    from kvplan.inputs.sources import parse_config_text

    assert parse_config_text('{"a": [0.0, Infinity]}', "x")["a"][1] == float("inf")


def test_missing_vocab_without_a_class_default_is_a_clean_error():
    """Found by the fuzz test: llama4_text has no class default for vocab_size."""
    import json

    from helpers import REPO

    config = json.loads(
        (REPO / "model_configs" / "Llama-4-Scout-17B-16E-Instruct.TRIMMED.json").read_text()
    )
    del config["text_config"]["vocab_size"]
    with pytest.raises(KvplanError, match="lacks vocab_size"):
        spec_from(config)


@pytest.mark.parametrize(
    "repo_id,alias",
    [
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ],
)
def test_common_variant_ids_resolve_offline_with_a_note(repo_id, alias, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_model(repo_id)
    assert spec.params_total == load_model(alias).params_total
    assert spec.hf_id == repo_id


def test_quantized_variants_are_not_resolved_to_the_bf16_config():
    from kvplan.inputs.sources import resolve_variant

    assert resolve_variant("Qwen/Qwen2.5-72B-Instruct-AWQ") is None
    assert resolve_variant("deepseek-ai/DeepSeek-V3-0324-FP8") is None
    assert resolve_variant("Qwen/Qwen2.5-72B-Instruct").alias == "qwen2.5-72b"
