"""Hostile inputs, thirteenth round (SGLang's checkpoint KV cache by release:
tests/test_checkpoint_kv_cache.py).
2. vLLM reads a checkpoint's KV cache where quant_method starts with "modelopt"; kvplan read it
for quant_method "nvfp4" or none (quant_algo alone) and not for "modelopt_fp8"/"modelopt_mixed"."""

from __future__ import annotations

import pytest

from kvplan.inputs.quantization import read_quantization

from helpers import run_json

# ---- 2. which quantization_config's KV cache vLLM reads ---------------------------------------
# vllm/utils/torch_utils.py get_kv_cache_quant_algo_string (0.14.0-0.19.1) reads the KV cache
# only where quant_cfg.get("quant_method", "") .startswith("modelopt"), whatever the weights'
# method: a "modelopt_fp8" config (weights not sized by kvplan) states one; a config naming no
# quant_method, or "nvfp4", states none vLLM reads.
FP8_KV = {"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}


@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", **FP8_KV}, "fp8"),
        ({"quant_method": "modelopt_fp8", "quant_algo": "FP8", **FP8_KV}, "fp8"),
        ({"quant_method": "modelopt_mixed", "kv_cache_quant_algo": "FP8"}, "fp8"),
        ({"quant_algo": "NVFP4", **FP8_KV}, None),
        ({"quant_method": "nvfp4", "kv_cache_quant_algo": "FP8"}, None),
        ({"quant_method": "ModelOpt", "kv_cache_quant_algo": "FP8"}, None),
        ({"quant_method": 7, "kv_cache_quant_algo": "FP8"}, None),
    ],
)
def test_vllm_reads_the_kv_cache_of_modelopt_methods_only(qc, expected):
    top = {"quantization_config": qc}
    assert read_quantization(top, top, "m").kv_cache == expected


# ---- 3. scripts/prefill_terms.py ----------------------------------------------------------
def test_prefill_terms_says_a_speculative_run_is_not_split(monkeypatch):
    """The DeepSeek-V3 MI300X run serves with MTP: its replica's step model is speculative,
    which defines no gemm_parts_s (the target's would price the step without its draft), and
    the script's default run ended in an AttributeError traceback at that row."""
    import io
    import sys
    from contextlib import redirect_stdout

    from helpers import load_script

    script = load_script("prefill_terms")
    only = "deepseek-v3-mi300x-tp8-sharegpt"
    for extra in ([], ["--tokens", "500,1000"]):
        monkeypatch.setattr(sys, "argv", ["prefill_terms.py", "--only", only, *extra])
        out = io.StringIO()
        with redirect_stdout(out):
            script.main()
        rows = [line for line in out.getvalue().splitlines() if only in line]
        assert len(rows) == 1 and "not split: a speculative run" in rows[0]


# ---- 4. a four-part vLLM release ------------------------------------------------------------
# vLLM 0.10.1.1 is a release (a hotfix of 0.10.1, on PyPI and tagged v0.10.1.1); the release
# grammar took three parts, so simulate refused it as "no vLLM release".
def test_a_four_part_release_reads_as_a_hotfix_of_its_patch():
    from kvplan.release import release_key

    assert release_key("0.10.1.1") == (0, 10, 1, 1)
    assert release_key("0.10.1") < release_key("0.10.1.1") < release_key("0.10.2")
    assert release_key("0.10.1.1.1") is None


def test_simulate_runs_vllm_0_10_1_1():
    result = run_json(
        "simulate",
        "qwen3-8b",
        "--gpu",
        "h100",
        "--num-prompts",
        "4",
        "--engine-version",
        "0.10.1.1",
    )
    assert result["runs"][0]["bench"]["completed"] == 4


# ---- 5. kvplan engine says when the config's weights format was not read ---------------------
# size, capacity and simulate print quant-unread / quant-name-only; `kvplan engine` (vLLM,
# SGLang) printed "weights bf16" and a bf16 "Model loading took" with no word that the config's
# quantization was not read (Qwen3.6-27B-NVFP4: ModelOpt MIXED_PRECISION, 50.91 GiB shown).
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_says_the_configs_weights_format_was_not_read(engine):
    result = run_json("engine", "qwen3.6-27b-nvfp4", "--engine", engine, "--gpu", "b200")
    assert "quant-unread" in [n["id"] for n in result["notes"]]
    given = run_json(
        "engine",
        "qwen3.6-27b-nvfp4",
        "--engine",
        engine,
        "--gpu",
        "b200",
        "--weights-dtype",
        "bf16",
    )
    assert "quant-unread" not in [n["id"] for n in given["notes"]]


def test_simulate_says_it_once():
    result = run_json("simulate", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--num-prompts", "3")
    assert [n["id"] for n in result["notes"]].count("quant-unread") == 1
