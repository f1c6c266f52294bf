"""DeepSeek-V4 (model_type deepseek_v4): compressed sparse attention (CSA, 1 entry per 4 tokens
with an indexer key), heavily compressed attention (HCA, 1 per 128) and a sliding window of
shared K=V on every layer, built from structure as transformers 5.24's DeepseekV4ForCausalLM
builds it (models/deepseek_v4/modeling_deepseek_v4.py; the cache is DeepseekV4CSACache /
DeepseekV4HCACache)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvplan.dtypes import KvFormat
from kvplan.errors import KvplanError
from kvplan.formulas.kv import kv_bytes_per_sequence
from kvplan.inputs.architectures import build_model

from helpers import REPO, one_line_error, run_cli

REAL = REPO / "tests" / "data" / "real_configs"
FLASH = REAL / "deepseek-ai--DeepSeek-V4-Flash.json"
ROUNDTRIP = REAL / "transformers5-roundtrip--DeepSeek-V4-Flash.json"
BF16 = KvFormat("bf16")

# transformers 5.24.0: DeepseekV4ForCausalLM(DeepseekV4Config(**file)) on the meta device,
# sum(p.numel() for p in model.parameters()) (quantization_config dropped; buffers excluded)
FLASH_PARAMS = 284_332_230_231
PRO = REAL / "deepseek-ai--DeepSeek-V4-Pro.json"
PRO_PARAMS = 1_572_997_179_491  # the same count on DeepSeek-V4-Pro's file


def _flash() -> dict:
    return json.loads(FLASH.read_text())


def _hand_bytes_per_sequence(raw: dict, s: int, element_bytes: int) -> int:
    """From the file's fields alone: every layer keeps min(s, sliding_window) tokens of one
    head_dim vector (K = V); a layer of ratio r > 0 keeps s // r compressed head_dim vectors, and
    the ratio-4 (CSA) layers the indexer's index_head_dim key per entry as well."""
    n, d, w = raw["num_hidden_layers"], raw["head_dim"], raw["sliding_window"]
    total = 0
    for r in raw["compress_ratios"][:n]:
        total += min(s, w) * d
        if r:
            total += (s // r) * (d + (raw["index_head_dim"] if r == 4 else 0))
    return total * element_bytes


def test_flash_parameters_equal_transformers_count():
    spec = build_model(_flash(), "dsv4")
    assert spec.params_total == FLASH_PARAMS
    assert spec.moe.num_experts == 256 and spec.moe.top_k == 6 and spec.moe.num_layers == 43


def test_pro_parameters_and_cache_equal_transformers_and_the_fields():
    raw = json.loads(PRO.read_text())
    spec = build_model(raw, "dsv4-pro")
    assert spec.params_total == PRO_PARAMS
    for s in (1, 4_096, 131_072):
        assert kv_bytes_per_sequence(spec, s, BF16) == _hand_bytes_per_sequence(raw, s, 2), s


def test_flash_layers_and_cache_bytes_from_the_file_fields():
    raw = _flash()
    spec = build_model(raw, "dsv4")
    layers = Counter(layer.attention.label() for layer in spec.layers)
    assert layers == {
        "sliding window 128": 2,
        "sliding window 128 + 1/4 compressed + indexer 128": 21,
        "sliding window 128 + 1/128 compressed": 20,
    }
    for s in (1, 127, 128, 1000, 32_768, 1_048_576):
        assert kv_bytes_per_sequence(spec, s, BF16) == _hand_bytes_per_sequence(raw, s, 2), s
    # 32k: 43 x 128 x 1,024 + 21 x 8,192 x 1,280 + 20 x 256 x 1,024 B
    assert kv_bytes_per_sequence(spec, 32_768, BF16) == 231_079_936
    assert "compressed-attention" in [n.id for n in spec.notes]


def test_transformers5_roundtrip_reads_as_the_hub_file():
    """DeepseekV4Config.save_pretrained writes layer_types, compress_rates, mlp_layer_types and
    partial_rotary_factor in place of compress_ratios and num_hash_layers: the same model."""
    hub, back = build_model(_flash(), "a"), build_model(json.loads(ROUNDTRIP.read_text()), "b")
    assert "compress_ratios" not in json.loads(ROUNDTRIP.read_text())
    assert back.params_total == hub.params_total == FLASH_PARAMS
    assert [x.attention for x in back.layers] == [x.attention for x in hub.layers]


def test_compress_rates_change_the_entries():
    raw = json.loads(ROUNDTRIP.read_text())
    raw["compress_rates"] = {"compressed_sparse_attention": 8, "heavily_compressed_attention": 64}
    spec = build_model(raw, "x")
    ratios = Counter(layer.attention.compress_ratio for layer in spec.layers)
    assert ratios == {0: 2, 8: 21, 64: 20}


@pytest.mark.parametrize(
    "change, named",
    [
        ({"n_shared_experts": 2}, "n_shared_experts 2"),
        ({"num_key_value_heads": 8}, "num_key_value_heads 8"),
        ({"compress_ratios": [0, 8] + [4] * 42}, "compress_ratios value 8"),
        ({"swa_num_key_value_heads": 4}, "swa_num_key_value_heads"),
    ],
)
def test_what_it_cannot_know_is_refused_by_name(change, named):
    with pytest.raises(KvplanError, match=named):
        build_model(dict(_flash(), **change), "x")


@pytest.mark.parametrize(
    "engine, named",
    [
        ("vllm", "vLLM 0.19 has no DeepSeek-V4 model"),  # 0.32's: tests/test_vllm_dsv4.py
        ("sglang", "give --kv-cache-memory"),  # its pools: tests/test_sglang_dsv4.py
        ("llama.cpp", "keep compressed attention entries"),
    ],
)
def test_engines_refuse_compressed_layers_by_name(engine, named):
    code, _, err = run_cli("engine", str(FLASH), "--engine", engine, "--gpu", "h200")
    one_line_error(code, err, named)


def test_size_and_capacity_answer():
    code, out, err = run_cli("size", str(FLASH), "--ctx", "32k", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["model"]["params_total"] == FLASH_PARAMS
    code, out, err = run_cli("capacity", str(FLASH), "--gpu", "h200", "--ctx", "32k")
    assert code in (0, 1), err


SHRUNK = dict(
    model_type="deepseek_v4",
    hidden_size=64,
    num_hidden_layers=5,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=32,
    qk_rope_head_dim=16,
    q_lora_rank=32,
    o_groups=2,
    o_lora_rank=16,
    sliding_window=8,
    index_n_heads=4,
    index_head_dim=16,
    index_topk=4,
    hc_mult=2,
    vocab_size=512,
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    num_hash_layers=1,
    compress_ratios=[0, 4, 128, 4, 128],
    torch_dtype="float32",
)


@pytest.mark.slow  # builds and runs transformers' model (seconds); skipped without it
def test_shrunk_copy_against_a_transformers_forward_pass():
    """A shrunk copy run by transformers 5.x: its parameter count, and per layer the window's
    K (= V, one tensor in the CSA/HCA caches), the compressed entries and the indexer keys after
    37 and 300 tokens. transformers keeps W - 1 window tokens, kvplan and vLLM count W; its plain
    sliding layers (DynamicSlidingWindowLayer) hold V as a second copy of K, which kvplan counts
    once (the model computes one kv_proj)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DeepseekV4Config"):
        pytest.skip("this transformers has no deepseek_v4")
    spec = build_model(SHRUNK, "shrunk")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.DeepseekV4Config(**SHRUNK)
    ).eval()
    assert spec.params_total == sum(p.numel() for p in model.parameters())
    fp32 = KvFormat("fp32")
    for tokens in (37, 300):
        with torch.no_grad():
            out = model(torch.randint(0, 512, (1, tokens)), use_cache=True)
        for ours, theirs in zip(spec.layers, out.past_key_values.layers, strict=True):
            a = ours.attention
            assert a.kv_bytes_per_token(fp32) // 4 == theirs.keys.shape[-1]
            assert a.tokens_held(tokens) == theirs.keys.shape[-2] + 1  # W against W - 1
            compressed = getattr(theirs, "compressed_kv", {})
            assert bool(a.compress_ratio) == bool(compressed)
            if compressed:
                kv = compressed["compressor"]
                assert (a.compressed_entries(tokens), a.head_dim) == tuple(kv.shape[1:])
                indexer = compressed.get("indexer")
                width = indexer.shape[-1] if indexer is not None else 0
                assert a.compressed_indexer_dim == width
                entry = a.compressed_bytes_per_entry(fp32) // 4
                assert entry == kv.shape[-1] + width


def test_shrunk_copy_recorded_counts():
    """What the slow test above measured with transformers 5.24.0 (params 340,005; after 300
    tokens the CSA layers hold 75 entries of 32 + 16, the HCA layers 2 of 32)."""
    spec = build_model(SHRUNK, "shrunk")
    assert spec.params_total == 340_005
    entries = [
        (x.attention.compressed_entries(300), x.attention.compressed_indexer_dim)
        for x in spec.layers
    ]
    assert entries == [(0, 0), (75, 16), (2, 0), (75, 16), (2, 0)]
