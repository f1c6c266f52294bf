"""kvplan against transformers' own models (tests/data/transformers_oracle.json, produced by
scripts/transformers_oracle.py with transformers 5.24.0): the parameter count of every bundled
config on the meta device, and every layer's cache after real forward passes of shrunk copies."""

from __future__ import annotations

import json

import pytest

from kvplan.formulas.dtypes import KvFormat
from kvplan.inputs.architectures import build_model
from kvplan.inputs.sources import bundled_models, load_model

from helpers import REPO

ORACLE = json.loads((REPO / "tests" / "data" / "transformers_oracle.json").read_text())["models"]
FP32 = KvFormat("fp32")

# Bundled configs transformers cannot load, and what they are checked against instead.
NO_ORACLE = {
    "falcon-40b-legacy": "falcon-40b",  # the RefinedWeb format transformers dropped
    "kimi-k2": "kimi-k2.5",  # model_type kimi_k2: transformers reads it as deepseek_v3
}


def oracle_entry(alias: str) -> dict | None:
    file = bundled_models()[alias].file
    return ORACLE.get(f"bundled/{file}") or ORACLE.get(file)


@pytest.mark.parametrize("alias", sorted(bundled_models()))
def test_parameter_count_equals_transformers(alias):
    spec = load_model(alias)
    if alias in NO_ORACLE:
        assert spec.params_total == load_model(NO_ORACLE[alias]).params_total
        return
    entry = oracle_entry(alias)
    assert entry is not None, (
        f"no transformers count for {alias}: run scripts/transformers_oracle.py"
    )
    expected = entry["params_text_only"] or entry["params_total"]
    assert spec.params_total == expected


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
            if "recurrent" in theirs:
                assert state is not None, where
                conv, ssm = state.elements()
                conv_dim, kernel = theirs["conv"] if "conv" in theirs else (0, 1)
                assert state.conv_kernel == kernel or "conv" not in theirs, where
                assert conv == conv_dim * (kernel - 1), where
                assert ssm == theirs["recurrent"], where
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
