"""nvidia/Kimi-K2.5-NVFP4 (issue 28): the config bundled is the one aiconfigurator vendors,
byte for byte as PROVENANCE.md traces it, and is read as NVIDIA's ModelOpt NVFP4 checkpoint:
Kimi-K2.5's architecture, its experts and MLPs in nvfp4, attention and the head (the
quantization_config's `ignore` list) left in bf16."""

from __future__ import annotations

import hashlib

from kvplan.inputs.sources import bundled_models, load_model

from helpers import REPO, run_json

SHA = ("c375d7d5", "cd8f")  # as PROVENANCE.md gives it


def test_the_bundled_bytes_are_the_traced_copy():
    path = REPO / "model_configs" / bundled_models()["kimi-k2.5-nvfp4"].file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest.startswith(SHA[0]) and digest.endswith(SHA[1])
    row = next(
        line
        for line in (REPO / "model_configs" / "PROVENANCE.md").read_text().splitlines()
        if line.startswith(f"| {path.name} |")
    )
    assert "nvidia/Kimi-K2.5-NVFP4" in row and f"{SHA[0]}…{SHA[1]}" in row


def test_the_hub_id_resolves_offline_to_kimi_k2_5_in_nvfp4():
    nvfp4, int4 = load_model("nvidia/Kimi-K2.5-NVFP4"), load_model("kimi-k2.5")
    assert nvfp4.params_total == int4.params_total and nvfp4.layers == int4.layers
    doc = run_json("capacity", "nvidia/Kimi-K2.5-NVFP4", "--gpu", "b200", "--tp", "8")
    assert doc["weights_dtype"] == "nvfp4"
    (quantized,) = [n["text"] for n in doc["notes"] if n["id"] == "weights-quantized"]
    assert "experts" in quantized and "mlp" in quantized and "attn" not in quantized
    assert quantized.endswith("the rest in bf16.")
