"""Hostile inputs, ninth round: llama.cpp's --device keywords. `--device none` (llama.cpp's
parse_device_list: offload nothing) printed every layer offloaded to the GPU under the label
"none", and `--device CPU`, which llama.cpp refuses ("invalid device"), ran as a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import one_line_error, run_cli

MODELS = Path(__file__).resolve().parents[1] / "model_configs"

LLAMA = ("engine", "qwen3-8b", "--engine", "llama.cpp", "--gpu", "h100")


@pytest.mark.parametrize("device", ["none", "NONE", "cpu", "CPU"])
def test_a_device_that_offloads_nothing_is_refused(device):
    code, _, err = run_cli(*LLAMA, "--device", device)
    one_line_error(code, err, "llama.cpp offloads to a GPU device")


def test_a_gpu_device_name_still_labels_the_allocation():
    code, out, _ = run_cli(*LLAMA, "--device", "CUDA0")
    assert code == 0
    assert "CUDA0 KV buffer size" in out


# ---- 2. quantization_config numbers -------------------------------------------------------
# "bits": 10**30 was noted as "10000000000000000000 bits" (its repr cut at 20 characters, another
# number); "weight_block_size": [0, 0] or [-128, 128] sized the weights as block fp8, a block
# vLLM's Fp8Config cannot load.
def _quantized(tmp_path, qc):
    import json

    config = json.loads((MODELS / "Qwen3-8B.json").read_text())
    config["quantization_config"] = qc
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("block", [[0, 0], [-128, 128], [128], [128, "x"], [1.5, 128]])
def test_an_fp8_block_no_engine_loads_is_noted_not_sized(tmp_path, block):
    path = _quantized(tmp_path, {"quant_method": "fp8", "weight_block_size": block})
    code, out, _ = run_cli("size", str(path))
    assert code == 0
    assert "in bf16" in out and "weight_block_size" in out and "not one kvplan sizes" in out


def test_an_fp8_block_of_128_is_still_block_fp8(tmp_path):
    path = _quantized(tmp_path, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    code, out, _ = run_cli("size", str(path))
    assert code == 0 and "in fp8" in out


def test_a_long_number_in_a_note_is_cut_with_an_ellipsis(tmp_path):
    path = _quantized(tmp_path, {"quant_method": "gptq", "bits": 10**30, "group_size": 128})
    code, out, _ = run_cli("size", str(path))
    assert code == 0
    assert "1000000000000000000… bits" in out
    assert "10000000000000000000 bits" not in out
