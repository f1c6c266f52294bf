"""The checkpoint's own quantization files and KV cache as vLLM reads them, by release: the
--kv-cache-dtype spellings each release's CacheDType literal takes (vllm/config/cache.py),
hf_quant_config.json beside config.json (transformers_utils/config.py), the top-level
quantization_config alone for the KV cache (utils/torch_utils.py
resolve_kv_cache_dtype_string), and the size commands' word on what the engines take."""

from __future__ import annotations

import json
import os

import pytest

from kvplan.engines import EngineRequest
from kvplan.engines.vllm import vllm_allocation
from kvplan.errors import KvplanError
from kvplan.inputs.hardware import load_profile
from kvplan.inputs.sources import load_model

from helpers import one_line_error, run_cli, run_json


@pytest.mark.parametrize(
    ("kv_cache_dtype", "refused_by", "taken_by"),
    [
        ("bfloat16", "0.10.2", "0.11.0"),  # CacheDType gains bfloat16 in 0.11.0
        ("float16", "0.17.0", "0.18.0"),  # float16 in 0.18.0
        ("nvfp4", "0.19.0", "0.20.0"),  # nvfp4 and the per-token-head caches in 0.20.0
        ("int8_per_token_head", "0.19", "0.21"),
        ("fp8_per_token_head", "0.19", "0.21"),
    ],
)
def test_a_release_refuses_the_kv_cache_dtypes_its_literal_lacks(
    kv_cache_dtype, refused_by, taken_by
):
    spec, h100 = load_model("llama-3.1-8b"), load_profile("h100")
    taken = vllm_allocation(
        spec, h100, EngineRequest(kv_cache_dtype=kv_cache_dtype, vllm_version=taken_by)
    )
    assert taken.kv_cache_dtype == kv_cache_dtype
    with pytest.raises(KvplanError, match=f"vLLM {refused_by} does not take it"):
        vllm_allocation(
            spec, h100, EngineRequest(kv_cache_dtype=kv_cache_dtype, vllm_version=refused_by)
        )


def test_engine_and_simulate_refuse_it_in_one_line():
    code, _, err = run_cli(
        *("engine", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100"),
        *("--kv-cache-dtype", "nvfp4", "--vllm-version", "0.19"),
    )
    one_line_error(code, err, "vLLM 0.19 does not take it")
    code, _, err = run_cli(
        *("simulate", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h100", "--num-prompts", "4"),
        *("--kv-cache-dtype", "float16", "--engine-version", "0.17.1"),
    )
    one_line_error(code, err, "vLLM 0.17.1 does not take it")


def test_engine_agnostic_size_keeps_every_spelling():
    code, out, err = run_cli("size", "llama-3.1-8b", "--kv-dtype", "nvfp4")
    assert code == 0, err


# hf_quant_config.json as ModelOpt 0.29 and earlier write it (vLLM's
# _normalize_quantization_config reads the producer's nested form)
HF_QUANT_FP8 = {
    "producer": {"name": "modelopt", "version": "0.27.0"},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": []},
}


def _folder(tmp_path, quant=HF_QUANT_FP8, config_quant=None):
    from kvplan.inputs.sources import load_config

    config = dict(load_config("llama-3.1-8b")[0])
    config.pop("quantization_config", None)
    if config_quant is not None:
        config["quantization_config"] = config_quant
    folder = tmp_path / "Llama-3.1-8B-ModelOpt"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    return folder


def _ids(data: dict) -> set[str]:
    return {n["id"] for n in data["notes"]}


def test_hf_quant_config_beside_config_json_gives_weights_and_kv_cache(tmp_path):
    folder = _folder(tmp_path)
    spec = load_model(str(folder))
    assert spec.checkpoint_kv_cache == "fp8"
    plain = load_model(str(_folder(tmp_path / "plain", quant=None)))
    assert plain.checkpoint_kv_cache is None
    size = run_json("size", str(folder))
    bare = run_json("size", "llama-3.1-8b")
    assert "quant-hf-file" in _ids(size) and "quant-hf-file" not in _ids(bare)
    # fp8 weights: about half the bf16 bytes (embeddings and lm_head stay 16-bit)
    assert 0.5 < size["rows"][0]["weights_bytes"] / bare["rows"][0]["weights_bytes"] < 0.7
    engine = run_json("engine", str(folder), "--engine", "vllm", "--gpu", "h100")
    assert engine["kv_cache_dtype"] == "fp8_e4m3"
    assert {"quant-hf-file", "vllm-checkpoint-kv-cache"} <= _ids(engine)
    for argv in (
        ("capacity", str(folder), "--gpu", "h100"),
        ("simulate", str(folder), "--gpu", "h100", "--engine", "vllm", "--num-prompts", "4"),
        ("plan", str(folder), "--gpu", "h100", "--rate", "1", "--slo", "ttft_p99=10s"),
    ):
        assert "quant-hf-file" in _ids(run_json(*argv, expect=(0, 1))), argv


def test_config_json_own_quantization_config_wins(tmp_path):
    folder = _folder(tmp_path, config_quant={"quant_method": "fp8"})
    spec = load_model(str(folder))
    assert spec.checkpoint_kv_cache is None
    assert "quant-hf-file" not in {n.id for n in spec.notes}


@pytest.mark.parametrize("kind", ["folder", "fifo", "huge", "invalid", "array"])
def test_an_unreadable_hf_quant_config_is_a_one_line_error(tmp_path, kind):
    folder = _folder(tmp_path, quant=None)
    bad = folder / "hf_quant_config.json"
    if kind == "folder":
        bad.mkdir()
    elif kind == "fifo":
        os.mkfifo(bad)
    elif kind == "huge":
        with open(bad, "wb") as out:
            out.truncate(64 * 2**20)
    elif kind == "invalid":
        bad.write_text("{not json")
    else:
        bad.write_text("[1, 2]")
    code, _, err = run_cli("size", str(folder))
    one_line_error(code, err, "hf_quant_config.json")


def test_a_text_config_quantization_config_gives_weights_but_no_kv_cache(tmp_path):
    from kvplan.inputs.quantization import read_quantization

    qc = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    nested = read_quantization(
        {"text_config": {"quantization_config": qc}}, {"quantization_config": qc}, "m"
    )
    top = read_quantization({"quantization_config": qc}, {}, "m")
    assert nested.format == top.format == "fp8-tensor"
    assert top.kv_cache == "fp8" and nested.kv_cache is None


@pytest.mark.parametrize("command", ["size", "capacity", "whatif", "roofline"])
def test_size_commands_say_the_engines_take_the_checkpoints_cache(command):
    argv = (command, "gemma-4-31b-nvfp4", *(() if command == "size" else ("--gpu", "h100")))
    auto = run_json(*argv, expect=(0, 1))
    fp8 = run_json(*argv, "--kv-dtype", "fp8", expect=(0, 1))
    plain = run_json(command, "gemma-4-31b", *argv[2:], expect=(0, 1))
    assert "checkpoint-kv-cache-stated" in _ids(auto)
    assert "checkpoint-kv-cache-stated" not in _ids(fp8) | _ids(plain)


def test_block_size_backend_reads_the_checkpoints_resolved_cache():
    """Sparse MLA on Blackwell: vLLM's order puts FLASHINFER_MLA_SPARSE first for an fp8 cache;
    with a 32-token block FLASHMLA_SPARSE (64 only) is passed over for a 16-bit one."""
    from kvplan.engines.backends import Backends
    from kvplan.inputs.kernel_tables import tables_for
    from kvplan.simulate.setup import ServeOptions, backend_kernels

    b200 = load_profile("b200")
    spec = load_model("deepseek-v3.2")._replace(
        checkpoint_kv_cache="fp8", checkpoint_kv_method="modelopt-fp8"
    )

    def pick(kv_cache_dtype):
        options = ServeOptions(
            engine="vllm", block_size=32, kv_cache_dtype=kv_cache_dtype, backends=Backends()
        )
        return backend_kernels(spec, b200, options, tables_for(b200, "vllm"))

    assert pick("auto") == pick("fp8_e4m3")
    assert pick("bfloat16") != pick("fp8_e4m3")
