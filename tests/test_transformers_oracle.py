"""kvplan against transformers' own models (tests/data/transformers_oracle.json, produced by
scripts/transformers_oracle.py with transformers 5.24.0): the parameter count of every bundled
config on the meta device, and every layer's cache after real forward passes of shrunk copies."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvplan.dtypes import KvFormat
from kvplan.inputs.architectures import build_model
from kvplan.inputs.sources import bundled_models, load_model

from helpers import REPO, load_script

ORACLE = json.loads((REPO / "tests" / "data" / "transformers_oracle.json").read_text())["models"]
FP32 = KvFormat("fp32")

# Bundled configs transformers cannot load, and what they are checked against instead.
NO_ORACLE = {
    "falcon-40b-legacy": "falcon-40b",  # the RefinedWeb format transformers dropped
    "kimi-k2": "kimi-k2.5",  # model_type kimi_k2: transformers reads it as deepseek_v3
    # the NVFP4 checkpoint's text_config is kimi-k2.5's field for field (its model_type spelled
    # deepseek_v3, its quantization apart); not counted by transformers here (no oracle run)
    "kimi-k2.5-nvfp4": "kimi-k2.5",
}


REAL = REPO / "tests" / "data" / "real_configs"


def _real_twin(file: str) -> str | None:
    """The tests/data/real_configs/ file a bundled config is a byte-for-byte copy of (issue 29
    bundled them), whose oracle entry is filed under real/."""
    data = (REPO / "model_configs" / file).read_bytes()
    return next((p.name for p in sorted(REAL.glob("*.json")) if p.read_bytes() == data), None)


def _cited_counts() -> dict[str, int]:
    """The counts cited from the engines' model code where transformers 5.24 cannot count the
    file (scripts/real_configs_scoreboard.py's CITED, their one home)."""
    return load_script("real_configs_scoreboard").CITED


def oracle_entry(alias: str) -> dict | None:
    file = bundled_models()[alias].file
    twin = _real_twin(file)
    return (
        ORACLE.get(f"bundled/{file}")
        or ORACLE.get(file)
        or (ORACLE.get(f"real/{twin}") if twin else None)
    )


@pytest.mark.parametrize("alias", sorted(bundled_models()))
def test_parameter_count_equals_transformers(alias):
    spec = load_model(alias)
    if alias in NO_ORACLE:
        assert spec.params_total == load_model(NO_ORACLE[alias]).params_total
        return
    twin = _real_twin(bundled_models()[alias].file)
    cited = _cited_counts()
    if twin in cited:  # no transformers count of this file: the engine code's, cited
        assert oracle_entry(alias) is None
        assert spec.params_total == cited[twin]
        return
    entry = oracle_entry(alias)
    assert entry is not None, (
        f"no transformers count for {alias}: run scripts/transformers_oracle.py"
    )
    expected = entry.get("params_language_model") or entry["params_text_only"]
    assert spec.params_total == (expected or entry["params_total"])


def _oracle_models_with_runs():
    return sorted(k for k, v in ORACLE.items() if v["runs"] and v["shrunk_config"])


@pytest.mark.parametrize("name", _oracle_models_with_runs())
def test_cache_after_a_real_forward_pass(name):
    """Every layer of the shrunk copy: the K/V width per token, the tokens held (transformers keeps
    W - 1 of a window once full; kvplan and vLLM count W), the indexer key, the conv state (kvplan
    and vLLM keep kernel - 1 columns, transformers the whole kernel) and the recurrent state."""
    entry = ORACLE[name]
    config = dict(entry["shrunk_config"])
    if config.get("model_type") == "nemotron_h" and "attention_head_dim" in config:
        # transformers 5.24 reads head_dim (class default 128) and ignores the legacy
        # attention_head_dim, which the shrunk copy set to 256; real configs carry both equal.
        config["head_dim"] = 128
        del config["attention_head_dim"]
    spec = build_model(config, name)
    # transformers broadcasts Falcon's KV heads to every query head before caching
    broadcast = 1
    if config.get("model_type") == "falcon" and config.get("new_decoder_architecture"):
        broadcast = config["num_attention_heads"] // config["num_kv_heads"]
    for run in entry["runs"]:
        tokens = run["tokens"]
        assert len(run["layers"]) == spec.num_layers
        for index, (ours, theirs) in enumerate(zip(spec.layers, run["layers"], strict=True)):
            where = f"{name} layer {index} after {tokens} tokens"
            attention, state = ours.attention, ours.state
            if "kv_width" in theirs:
                assert attention is not None, where
                latent = attention.kv_bytes_per_token(FP32) // 4
                indexer = attention.indexer_bytes_per_token(FP32) // 4
                assert (latent - indexer) * broadcast == theirs["kv_width"], where
                assert indexer == theirs.get("indexer_width", 0), where
                held = attention.tokens_held(tokens)
                if attention.kind.windowed and tokens >= attention.window:
                    assert held == theirs["tokens"] + 1, where  # W against W - 1
                else:
                    assert held == theirs["tokens"], where
            else:
                assert attention is None, where
            if "recurrent" in theirs or "conv" in theirs:  # LFM2's short conv: conv only
                assert state is not None, where
                conv, ssm = state.elements()
                conv_dim, kernel = theirs["conv"] if "conv" in theirs else (0, 1)
                assert state.conv_kernel == kernel or "conv" not in theirs, where
                assert conv == conv_dim * (kernel - 1), where
                assert ssm == theirs.get("recurrent", 0), where
            else:
                assert state is None, where


SYNTHETIC = sorted(k for k in ORACLE if k.startswith("synthetic/"))


@pytest.mark.parametrize("name", SYNTHETIC)
def test_parameter_count_of_families_without_a_real_config(name):
    """Families with no usable real config (Falcon-H1, Zamba2, Granite-4.0-H, Jamba, Mamba, ...)
    are checked on small configs built for the purpose, counted by transformers itself."""
    entry = ORACLE[name]
    spec = build_model(entry["shrunk_config"], name)
    assert spec.params_total == entry["params_total"]


@pytest.mark.parametrize("name", sorted(k for k in ORACLE if k.startswith("real/")))
def test_parameter_count_of_real_configs(name):
    """Real configs of families and variants kvplan was not built around (Gemma-4 with wider
    global layers whose values are the keys' projection, GLM-5.3 whose "shared" layers have no
    indexer, Qwen3.5/3.6/3.8, Nemotron-3-Super, DeepSeek-V3.1, ...): transformers' own count."""
    entry = ORACLE[name]
    raw = json.loads((REAL / name.removeprefix("real/")).read_text())
    spec = build_model(raw, name)
    # a wrapper's language model as the wrapper builds it (its own tie flag), where it has one
    expected = entry.get("params_language_model") or entry["params_text_only"]
    assert spec.params_total == (expected or entry["params_total"])


CLASS = REPO / "tests" / "data" / "class_configs"


@pytest.mark.parametrize("name", sorted(k for k in ORACLE if k.startswith("class/")))
def test_parameter_count_of_configs_built_from_transformers_classes(name):
    """SmolLM3 (no_rope_layers: no cache change), EXAONE-4.0 (a lettered window pattern "LLLG"
    beside layer_types), OLMo-3 (full-width q/k norms): exact, on the shapes transformers' own
    config classes give (tests/data/class_configs/SOURCES.md)."""
    raw = json.loads((CLASS / name.removeprefix("class/")).read_text())
    spec = build_model(raw, name)
    assert spec.params_total == ORACLE[name]["params_total"]
    assert not [n for n in spec.notes if n.id in ("structure-read", "structure-unread")]


def test_exaone4_lettered_pattern_slides_three_layers_in_four():
    raw = json.loads((CLASS / "exaone4.EXAONE-4.0-32B-dims-LLLG.json").read_text())
    spec = build_model(raw, "exaone")
    kinds = [a.kind.value for a in spec.attention_layers()]
    assert kinds == ["sliding", "sliding", "sliding", "full"] * 16
    # 64 layers x 2 x 8 x 128 x 2 B = 262,144 B/token before any window applies
    assert sum(a.kv_bytes_per_token(KvFormat("bf16")) for a in spec.attention_layers()) == 262_144
    del raw["layer_types"]  # the letters alone give the same layers
    assert [a.kind.value for a in build_model(raw, "e").attention_layers()] == kinds
    raw["layer_types"] = ["full_attention"] * 64
    from kvplan.errors import KvplanError

    with pytest.raises(KvplanError, match="sliding_window_pattern 'LLLG' and layer_types disagree"):
        build_model(raw, "e")


def test_mimo_counts_as_vllm_builds_it():
    """MiMo-7B (model_type mimo, remote code): vLLM's MiMoForCausalLM is Qwen2ForCausalLM
    (vllm/model_executor/models/mimo.py), q/k/v biased and no o_proj bias whatever
    attention_bias says; transformers' Qwen2ForCausalLM on the same fields counts 7,622,619,136.
    The MTP layer is outside num_hidden_layers, as in vLLM's main model."""
    spec = build_model(json.loads((REAL / "XiaomiMiMo--MiMo-7B-Base.json").read_text()), "mimo")
    assert spec.params_total == 7_622_619_136
    assert [n.id for n in spec.notes] == ["mtp-excluded"]


def test_step37_flash_reads_as_transformers_text_config():
    """Step-3.7-Flash's hub file is flat (remote-code form); transformers' Step3p7Config ignores
    the flat fields and builds its class defaults, so its own meta count (vocab 128815, no
    sliding layers) is not this file. Read as Step3p7TextConfig(**file) (transformers 5.24):
    Step3p7TextModel 195,316,538,624 + an untied lm_head of 128,896 x 4,096 = 195,844,496,640;
    33 sliding layers of 512 tokens, 12 full, 8 KV heads x 128: 184,320 B/token in bf16."""
    spec = build_model(json.loads((REAL / "stepfun-ai--Step-3.7-Flash.json").read_text()), "s")
    assert spec.params_total == 195_844_496_640
    kinds = Counter((a.kind.value, a.window) for a in spec.attention_layers())
    assert kinds == {("sliding", 512): 33, ("full", None): 12}
    assert sum(a.kv_bytes_per_token(KvFormat("bf16")) for a in spec.attention_layers()) == 184_320
    assert spec.moe.num_experts == 288 and spec.moe.num_layers == 42
    assert spec.moe.shared_intermediate_size == 1280  # share_expert_dim


NEMOTRON_SUPER = "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json"


def test_nemotron_super_blocks_per_layer():
    """Llama-3.3-Nemotron-Super-49B (DeciLM block_configs, remote code): 49 layers with GQA
    (64 // n_heads_in_group 8 = 8 KV heads x 128), 31 without attention; each MLP
    int(2 x ffn_mult x 8192 / 3) rounded up to 256 (vLLM's nemotron_nas.py, llama.cpp's
    DeciModel converter). 200,704 B/token in bf16; 49,867,145,216 parameters."""
    spec = build_model(json.loads((REAL / NEMOTRON_SUPER).read_text()), "super")
    assert spec.params_total == 49_867_145_216
    attention = spec.attention_layers()
    assert len(attention) == 49 and {(a.num_kv_heads, a.head_dim) for a in attention} == {(8, 128)}
    assert sum(a.kv_bytes_per_token(KvFormat("bf16")) for a in attention) == 200_704
    assert sum(1 for layer in spec.layers if layer.attention is None) == 31


@pytest.mark.slow  # imports transformers' modelling (seconds); skipped without it
def test_nemotron_super_count_equals_llama_modules_assembled_as_vllm_does():
    """The same count from transformers' own Llama modules, built block by block as vLLM's
    DeciLMForCausalLM builds them (attention and its input norm unless no_op; MLP and its norm
    unless no_op), on the meta device (one module per distinct shape)."""
    from functools import cache

    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    raw = json.loads((REAL / NEMOTRON_SUPER).read_text())
    hidden, heads = raw["hidden_size"], raw["num_attention_heads"]

    @cache
    def attention(kv: int) -> int:
        cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv)
        with torch.device("meta"):
            return sum(p.numel() for p in llama.LlamaAttention(cfg, 0).parameters())

    @cache
    def mlp(width: int) -> int:
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=width)
        with torch.device("meta"):
            return sum(p.numel() for p in llama.LlamaMLP(cfg).parameters())

    total = 2 * raw["vocab_size"] * hidden + hidden  # embeddings, untied lm_head, final norm
    for block in raw["block_configs"]:
        if not block["attention"]["no_op"]:
            total += attention(heads // block["attention"]["n_heads_in_group"]) + hidden
        if not block["ffn"]["no_op"]:
            width = int(2 * block["ffn"]["ffn_mult"] * hidden / 3)
            total += mlp(width + (-width) % 256) + hidden
    assert build_model(raw, "super").params_total == total


MINIMAX_M3 = "MiniMaxAI--MiniMax-M3.json"


def test_minimax_m3_gqa_with_a_key_only_indexer_cache():
    """MiniMax-M3 (minimax_m3; transformers 5.24 has its text model as MiniMaxM3VLTextConfig):
    60 GQA layers (4 KV x 128), 57 of them (sparse_attention_freq) also caching the lightning
    indexer's 128-wide key: 60 x 2,048 + 57 x 256 = 137,472 B/token in bf16; 426,174,565,632
    params = MiniMaxM3VLTextModel(MiniMaxM3VLTextConfig(**file)) + the untied lm_head."""
    spec = build_model(json.loads((REAL / MINIMAX_M3).read_text()), "m3")
    assert spec.params_total == 426_174_565_632
    bf16 = KvFormat("bf16")
    assert sum(a.kv_bytes_per_token(bf16) for a in spec.attention_layers()) == 137_472
    assert sum(1 for a in spec.attention_layers() if a.gqa_indexer) == 57
    assert spec.moe.num_layers == 57 and spec.moe.shared_intermediate_size == 3072


def test_minimax_m3_engines_refuse_the_indexer_they_do_not_model():
    from kvplan.engines import EngineRequest, engine_allocation
    from kvplan.errors import KvplanError
    from kvplan.inputs.hardware import load_profile

    spec = build_model(json.loads((REAL / MINIMAX_M3).read_text()), "m3")
    with pytest.raises(KvplanError, match="key-only indexer"):
        engine_allocation(spec, load_profile("h200"), EngineRequest(engine="vllm", tp=8))


@pytest.mark.slow  # imports transformers' modelling (seconds); skipped without it
def test_minimax_m3_shrunk_against_transformers_forward_pass():
    """A shrunk MiniMax-M3 run through transformers' MiniMaxM3VLForCausalLM: the parameter count
    and every layer's cache (K, V and the indexer's idx_keys) equal kvplan's."""
    torch = pytest.importorskip("torch")
    mm = pytest.importorskip("transformers.models.minimax_m3_vl.modeling_minimax_m3_vl")
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import (
        MiniMaxM3VLTextConfig,
    )

    raw = json.loads((REAL / MINIMAX_M3).read_text())
    small = {k: v for k, v in raw.items() if k not in ("architectures", "auto_map")}
    small.update(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_hidden_layers=4,
        rotary_dim=32,
        vocab_size=512,
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        intermediate_size=64,
        dense_intermediate_size=128,
        shared_intermediate_size=64,
        moe_layer_freq=[0, 1, 1, 1],
        first_k_dense_replace=1,
        bos_token_id=1,
        eos_token_id=2,
    )
    sparse = dict(raw["sparse_attention_config"])
    sparse.update(
        sparse_attention_freq=[0, 0, 1, 1],
        sparse_disable_index_value=[0, 0, 1, 1],
        sparse_index_dim=32,
        sparse_num_index_heads=2,
        sparse_block_size=16,
        sparse_topk_blocks=2,
    )
    small["sparse_attention_config"] = sparse
    spec = build_model(small, "m3-small")
    config = MiniMaxM3VLTextConfig(**{k: v for k, v in small.items() if k != "model_type"})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = mm.MiniMaxM3VLForCausalLM(config).eval()
    assert spec.params_total == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        cache = model(input_ids=torch.randint(3, 500, (1, 37)), use_cache=True).past_key_values
    fp32 = KvFormat("fp32")
    for ours, layer in zip(spec.attention_layers(), cache.layers, strict=True):
        width = layer.keys.shape[1] * (layer.keys.shape[3] + layer.values.shape[3])
        index = getattr(layer, "idx_keys", None)
        width += index.shape[-1] if index is not None else 0
        assert ours.kv_bytes_per_token(fp32) // 4 == width


def test_gemma4_global_layers_cache_their_own_width():
    """Gemma-4-31B: 50 sliding layers of 16 KV heads x 256 and 10 global ones of 4 x 512 (K and
    V both cached although V is K's projection): 901,120 bytes per token in bf16 before any
    window applies, 1.51 GB for one 8k sequence (transformers' cache shapes, tested above)."""
    spec = build_model(json.loads((REAL / "nvidia--Gemma-4-31B-IT-NVFP4.json").read_text()), "g4")
    widths = sorted({(a.kind.value, a.num_kv_heads, a.head_dim) for a in spec.attention_layers()})
    assert widths == [("full", 4, 512), ("sliding", 16, 256)]
    bf16 = KvFormat("bf16")
    assert sum(a.kv_bytes_per_token(bf16) for a in spec.attention_layers()) == 901_120


def test_gemma4_written_back_by_transformers5_reads_per_layer_config():
    """save_pretrained in transformers 5.x drops global_head_dim / num_global_key_value_heads and
    writes `per_layer_config` (head_dim 512, 4 KV heads on each full-attention layer): the same
    cache as the original file, not 16 KV heads on the global layers (1,146,880 B/token, +27%)."""
    original = build_model(
        json.loads((REAL / "nvidia--Gemma-4-31B-IT-NVFP4.json").read_text()), "a"
    )
    file = "transformers5-roundtrip--Gemma-4-31B-IT.json"
    written = build_model(json.loads((REAL / file).read_text()), "b")
    bf16 = KvFormat("bf16")
    assert [
        (a.kind, a.num_kv_heads, a.head_dim, a.shared_kv_proj) for a in written.attention_layers()
    ] == [
        (a.kind, a.num_kv_heads, a.head_dim, a.shared_kv_proj) for a in original.attention_layers()
    ]
    assert sum(a.kv_bytes_per_token(bf16) for a in written.attention_layers()) == 901_120
    assert written.params_total == original.params_total == 30_697_345_280


def test_qwen3_vl_wrapper_tie_flag_decides_over_text_config():
    """Qwen3-VL-30B-A3B written back by transformers 5.x: untied at the top level, tied (the text
    class's default) inside text_config. The wrapper holds the lm_head: counted, with a note."""
    from kvplan.present.notes import note_texts

    file = "transformers5-roundtrip--Qwen3-VL-30B-A3B-Instruct.json"
    spec = build_model(json.loads((REAL / file).read_text()), file)
    assert not spec.tied_embeddings
    assert spec.params_total == 30_532_122_624  # transformers' wrapper: language_model + lm_head
    assert any("wrapper's model holds the output head" in t for t in note_texts(spec.notes))


def test_per_layer_config_overriding_what_kvplan_does_not_read_is_refused():
    from kvplan.errors import KvplanError

    raw = json.loads((REAL / "transformers5-roundtrip--Gemma-4-31B-IT.json").read_text())
    raw["text_config"]["per_layer_config"]["05"]["intermediate_size"] = 1024
    with pytest.raises(KvplanError, match="per_layer_config.*intermediate_size"):
        build_model(raw, "g4")


@pytest.mark.parametrize(
    "file, extra, named",
    [
        # every real config answers now; one carrying a field nobody's model code reads is
        # refused with the type and the field, not only the symptom
        (
            "moonshotai--Kimi-K3.json",
            {"latent_moe_rank": 512},
            "kimi_linear config has fields neither .* reads: latent_moe_rank",
        ),
    ],
)
def test_real_configs_it_cannot_size_are_refused_by_name(file, extra, named):
    """What kvplan does not build is an error naming it, never a plain-attention guess."""
    from kvplan.errors import KvplanError

    raw = json.loads((REAL / file).read_text())
    raw["text_config"].update(extra)
    with pytest.raises(KvplanError, match=named):
        build_model(raw, file)


def test_a_sliding_window_switched_off_is_full_attention_in_any_family():
    """MiMo-7B (model_type mimo, unknown to kvplan) carries sliding_window 32768 with
    use_sliding_window false: every layer holds the whole context, as transformers builds it."""
    spec = build_model(json.loads((REAL / "XiaomiMiMo--MiMo-7B-Base.json").read_text()), "mimo")
    assert all(a.window is None for a in spec.attention_layers())


def test_a_structural_map_kvplan_does_not_read_is_named_never_skipped():
    """Non-empty structural maps count like lists. per_layer_config is transformers' generic
    heterogeneous form, read for any type (the attention geometry per layer) and refused for any
    other field; a known family carrying a map it does not read (sparse_attention_config) gets
    the structure-unread note."""
    from kvplan.errors import KvplanError

    raw = json.loads((REAL / "Qwen--Qwen3-0.6B.json").read_text())
    wider = dict(raw, model_type="newfamily", per_layer_config={"3": {"head_dim": 256}})
    layers = build_model(wider, "x").attention_layers()
    assert [a.head_dim for a in layers[2:5]] == [128, 256, 128]
    other = dict(raw, model_type="newfamily", per_layer_config={"3": {"intermediate_size": 256}})
    with pytest.raises(KvplanError, match="per_layer_config.*intermediate_size"):
        build_model(other, "x")
    known = dict(raw, sparse_attention_config={"sparse_index_dim": 128})
    spec = build_model(known, "y")
    assert [n.id for n in spec.notes if n.id == "structure-unread"] == ["structure-unread"]
